"""``dcm2tfrecord preview DIR``: a contact sheet of random records, read through ``reader``.

Records come from ``reader.load(..., shuffle=True, seed=--seed)``, so a sheet
shows what training sees and the same seed gives the same sheet. Each
thumbnail is captioned with the class name and a few metadata values.
Volumes show their middle slice. Values that are not display-ready (DICOM
modality or stored values, 16-bit and float images) are shown through an
automatic window from the 1st to the 99th percentile of the image, so a CT in
Hounsfield units is visible; MONOCHROME1 is inverted for display (PS3.3
C.7.6.3.1.2), unless the converter windowed it already.
"""
from __future__ import annotations

import argparse
import io
import math
from typing import Mapping, Optional, Sequence

import numpy as np

from dcm2tfrecord.dataset.features import FORMAT, LABEL, SHAPE_FEATURES
from dcm2tfrecord.pipeline.inspect_cmd import default_split, load_info
from dcm2tfrecord.pipeline.usage import UsageError
from dcm2tfrecord.transforms.images.display import display_image, text as _text

MARGIN = 4                 # around each thumbnail
CAPTION_LINES = 3
LINE_PX = 13
CAPTION_PX = CAPTION_LINES * LINE_PX + 2
FONT_PX = 11
BACKGROUND = (24, 24, 24)
TEXT = (230, 230, 230)


def parse_preview(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord preview",
        description="Write a contact sheet (PNG) of random records of one split.")
    parser.add_argument("dataset", metavar="DIR", help="the dataset directory, local or gs://")
    parser.add_argument("--split", default=None, help="default: train, else the first split")
    parser.add_argument("-n", "--num", type=int, default=16, help="records shown (default 16)")
    parser.add_argument("--out", default="preview.png", help="PNG to write (default preview.png)")
    parser.add_argument("--seed", type=int, default=0,
                        help="which records: the same seed gives the same sheet (default 0)")
    parser.add_argument("--thumb", type=int, default=160, help="thumbnail size in pixels (default 160)")
    parser.add_argument("--cols", type=int, default=None,
                        help="thumbnails per row (default: a square grid)")
    args = parser.parse_args(list(argv))
    if args.num < 1:
        raise UsageError(f"-n {args.num}: show at least one record (-n 16)")
    if args.thumb < 16:
        raise UsageError(f"--thumb {args.thumb}: use at least 16 pixels (--thumb 160)")
    if args.cols is not None and args.cols < 1:
        raise UsageError(f"--cols {args.cols}: use at least 1")
    return args


# ---------------------------------------------------------------- geometry


def tile_size(thumb: int) -> tuple[int, int]:
    """(width, height) of one captioned thumbnail."""
    return thumb + 2 * MARGIN, thumb + 2 * MARGIN + CAPTION_PX


def grid(count: int, cols: Optional[int] = None) -> tuple[int, int]:
    """(columns, rows) for ``count`` thumbnails: square unless ``cols`` is given."""
    cols = min(cols or math.ceil(math.sqrt(count)), count)
    return cols, math.ceil(count / cols)


def sheet_size(count: int, thumb: int, cols: Optional[int] = None) -> tuple[int, int]:
    (tile_w, tile_h), (columns, rows) = tile_size(thumb), grid(count, cols)
    return columns * tile_w, rows * tile_h


# ---------------------------------------------------------------- display values


def caption(record: Mapping, class_names: Sequence[str]) -> list[str]:
    """Label (class name), then format/modality, shape and dtype, then one more detail."""
    label = np.asarray(record.get(LABEL, -1))
    if label.ndim:
        hot = [class_names[i] if i < len(class_names) else str(i) for i in np.flatnonzero(label == 1).tolist()]
        first = ", ".join(hot) or "no class"
    elif label.dtype.kind == "f":
        first = "unlabeled" if np.isnan(label) else f"label {float(label):.4g}"
    else:
        index = int(label)
        first = ("unlabeled" if index < 0
                 else class_names[index] if index < len(class_names) else f"label {index}")
    depth, height, width, channels = (int(record.get(k, 0)) for k in SHAPE_FEATURES)
    kind = _text(record.get(FORMAT, b"")) or "?"
    modality = _text(record.get("dicom/modality", b""))
    shape = f"{height}x{width}x{channels}" if depth <= 1 else f"{depth}x{height}x{width}x{channels}"
    second = f"{modality or kind} {shape} {_text(record.get('dtype', b''))}"
    if depth > 1:
        third = f"slice {depth // 2} of {depth}"
    elif kind == "dicom":
        spacing = np.asarray(record.get("dicom/pixel_spacing", [])).ravel()
        photometric = _text(record.get("dicom/photometric_interpretation", b""))
        third = photometric + (f" {spacing[0]:.3g}mm" if spacing.size and spacing[0] > 0 else "")
    else:
        third = f"id {_text(record.get('id', b''))[:12]}"
    return [first, second, third]


# ---------------------------------------------------------------- drawing


def _font():
    from PIL import ImageFont
    try:
        return ImageFont.load_default(size=FONT_PX)
    except TypeError:                          # Pillow < 10.1: the fixed bitmap font
        return ImageFont.load_default()


def _fit(draw, text: str, font, width: int) -> str:
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def thumbnail(rgb: np.ndarray, thumb: int):
    """Scaled to fit ``thumb`` x ``thumb``: nearest when enlarging (pixels stay crisp)."""
    from PIL import Image
    image = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    scale = thumb / max(image.width, image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.LANCZOS)


def draw_sheet(tiles: Sequence[tuple[np.ndarray, list[str]]], thumb: int, cols: Optional[int] = None):
    """The contact sheet: a grid of captioned thumbnails, row by row."""
    from PIL import Image, ImageDraw
    sheet = Image.new("RGB", sheet_size(len(tiles), thumb, cols), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    font = _font()
    (tile_w, tile_h), (columns, _) = tile_size(thumb), grid(len(tiles), cols)
    for i, (rgb, lines) in enumerate(tiles):
        left, top = (i % columns) * tile_w, (i // columns) * tile_h
        small = thumbnail(rgb, thumb)
        sheet.paste(small, (left + MARGIN + (thumb - small.width) // 2,
                            top + MARGIN + (thumb - small.height) // 2))
        for j, line in enumerate(lines[:CAPTION_LINES]):
            draw.text((left + MARGIN, top + 2 * MARGIN + thumb + j * LINE_PX),
                      _fit(draw, line, font, thumb), fill=TEXT, font=font)
    return sheet


# ---------------------------------------------------------------- records


def sample_records(dataset_dir: str, split: str, count: int, seed: int) -> list[dict]:
    """``count`` records of ``split`` in ``reader.load``'s seeded shuffled order."""
    from dcm2tfrecord import reader
    exact = reader.info(dataset_dir).layout(split).dtype      # stored values, shown as they are
    ds = reader.load(dataset_dir, split=split, batch_size=1, shuffle=True, seed=seed,
                     output="dict", pad=True, dtype=exact)
    records = []
    for batch in ds.take(count):
        records.append({name: (value.to_list()[0] if hasattr(value, "to_list") else value.numpy()[0])
                        for name, value in batch.items()})
    return records


def _save(sheet, path: str) -> None:
    buffer = io.BytesIO()
    sheet.save(buffer, format="PNG")
    if "://" in path:
        from apache_beam.io.filesystems import FileSystems
        with FileSystems.create(path, mime_type="image/png") as handle:
            handle.write(buffer.getvalue())
        return
    with open(path, "wb") as handle:
        handle.write(buffer.getvalue())


def render(dataset_dir: str, split: Optional[str] = None, count: int = 16, seed: int = 0,
           thumb: int = 160, cols: Optional[int] = None):
    """(PIL image of the sheet, split, records shown)."""
    manifest = load_info(dataset_dir).manifest
    split = default_split(manifest, split)
    if manifest.splits[split].num_records == 0:
        raise UsageError(f"split {split!r} holds no records")
    class_names = manifest.class_names
    windowed = (manifest.options or {}).get("dicom_values") == "window"
    records = sample_records(dataset_dir, split, count, seed)
    tiles = [(display_image(r["image"], r, windowed and _text(r.get(FORMAT, b"")) == "dicom"),
              caption(r, class_names)) for r in records]
    return draw_sheet(tiles, thumb, cols), split, len(records)


def main(argv: Sequence[str]) -> int:
    args = parse_preview(argv)
    dataset_dir = args.dataset.rstrip("/") or "/"
    sheet, split, shown = render(dataset_dir, args.split, args.num, args.seed, args.thumb, args.cols)
    _save(sheet, args.out)
    print(f"{args.out}: {shown} records of split {split!r} (seed {args.seed}), "
          f"{sheet.width}x{sheet.height} pixels")
    return 0
