"""``dcm2tfrecord preview DIR``: a contact sheet of random records, read through ``reader``.

Records come from ``reader.load(..., shuffle=True, seed=--seed)``, so a sheet
shows what training sees and the same seed gives the same sheet. Each
thumbnail is captioned with the class name and a few metadata values.
Volumes show their middle slice. Values that are not display-ready (DICOM
modality or stored values, 16-bit and float images) are shown through an
automatic window from the 1st to the 99th percentile of the image, so a CT in
Hounsfield units is visible; MONOCHROME1 is inverted for display (PS3.3
C.7.6.3.1.2), unless the converter windowed it already.

A dataset converted with ``--class_map`` has each class's mask outlined on the
slice shown (scaled with the image by nearest neighbour), in a fixed colour
per class, and a legend under the grid names the classes (``mask_classes``:
the class map's names, never a segment's or ROI's); ``--no_outlines`` shows
the images alone.
"""
from __future__ import annotations

import argparse
import io
import math
from typing import Mapping, NamedTuple, Optional, Sequence

import numpy as np

from dcm2tfrecord.dataset.features import FORMAT, LABEL, SHAPE_FEATURES, RecordKind
from dcm2tfrecord.pipeline.commands.inspect import default_split, load_info
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.transforms.images.display import display_image, text as _text
from dcm2tfrecord.transforms.images.outlines import class_colour, class_regions, draw_outlines

MARGIN = 4                 # around each thumbnail
CAPTION_LINES = 3
LINE_PX = 13
CAPTION_PX = CAPTION_LINES * LINE_PX + 2
FONT_PX = 11
BACKGROUND = (24, 24, 24)
TEXT = (230, 230, 230)
SWATCH_PX = 9              # a legend entry: a square of the class colour, then its name
SWATCH_GAP = 4
LEGEND_GAP = 12            # between legend entries


class Tile(NamedTuple):
    rgb: np.ndarray                           # [h, w, 3] uint8, the image as shown
    lines: list[str]                          # the caption
    regions: Optional[np.ndarray] = None      # [classes, h, w] bool: the mask classes to outline


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
    parser.add_argument("--no_outlines", action="store_true",
                        help="a dataset converted with --class_map: do not outline its mask classes "
                             "(nor draw their legend)")
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
    """(width, height) of the grid of thumbnails (a legend of mask classes goes below it)."""
    (tile_w, tile_h), (columns, rows) = tile_size(thumb), grid(count, cols)
    return columns * tile_w, rows * tile_h


def legend_rows(names: Sequence[str], width: int, measure) -> list[list[tuple[int, str]]]:
    """The legend's lines for a sheet ``width`` wide: (class index, name as it fits) left to
    right, a new line where the next entry would pass the edge. ``measure(text)``: its width."""
    room = width - 2 * MARGIN
    rows: list[list[tuple[int, str]]] = []
    used = room
    for index, name in enumerate(names):
        text = _fit_to(name, measure, room - SWATCH_PX - SWATCH_GAP)
        need = SWATCH_PX + SWATCH_GAP + measure(text)
        if rows and used + LEGEND_GAP + need <= room:
            rows[-1].append((index, text))
            used += LEGEND_GAP + need
        else:
            rows.append([(index, text)])
            used = need
    return rows


def legend_height(rows: Sequence) -> int:
    return len(rows) * LINE_PX + 2 * MARGIN if rows else 0


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
    elif kind == RecordKind.DICOM:
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
    return _fit_to(text, lambda t: draw.textlength(t, font=font), width)


def _fit_to(text: str, measure, width: int) -> str:
    if measure(text) <= width:
        return text
    while text and measure(text + "...") > width:
        text = text[:-1]
    return text + "..."


def thumbnail(rgb: np.ndarray, thumb: int):
    """Scaled to fit ``thumb`` x ``thumb``: nearest when enlarging (pixels stay crisp)."""
    from PIL import Image
    image = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    scale = thumb / max(image.width, image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    return image.resize(size, Image.Resampling.NEAREST if scale >= 1 else Image.Resampling.LANCZOS)


def draw_sheet(tiles: Sequence[Tile], thumb: int, cols: Optional[int] = None,
               legend: Sequence[str] = ()):
    """The contact sheet: a grid of captioned thumbnails, row by row, each tile's mask regions
    outlined on its thumbnail; ``legend`` (the mask class names) in a strip below the grid."""
    from PIL import Image, ImageDraw
    font = _font()
    width, height = sheet_size(len(tiles), thumb, cols)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    rows = legend_rows(legend, width, lambda text: measure.textlength(text, font=font))
    sheet = Image.new("RGB", (width, height + legend_height(rows)), BACKGROUND)
    draw = ImageDraw.Draw(sheet)
    (tile_w, tile_h), (columns, _) = tile_size(thumb), grid(len(tiles), cols)
    for i, tile in enumerate(tiles):
        left, top = (i % columns) * tile_w, (i // columns) * tile_h
        small = thumbnail(tile.rgb, thumb)
        if tile.regions is not None:
            small = Image.fromarray(draw_outlines(np.asarray(small), tile.regions))
        sheet.paste(small, (left + MARGIN + (thumb - small.width) // 2,
                            top + MARGIN + (thumb - small.height) // 2))
        for j, line in enumerate(tile.lines[:CAPTION_LINES]):
            draw.text((left + MARGIN, top + 2 * MARGIN + thumb + j * LINE_PX),
                      _fit(draw, line, font, thumb), fill=TEXT, font=font)
    for r, row in enumerate(rows):
        x, y = MARGIN, height + MARGIN + r * LINE_PX
        for index, name in row:
            top = y + (LINE_PX - SWATCH_PX) // 2
            draw.rectangle((x, top, x + SWATCH_PX - 1, top + SWATCH_PX - 1), fill=class_colour(index))
            x += SWATCH_PX + SWATCH_GAP
            draw.text((x, y), name, fill=TEXT, font=font)
            x += round(draw.textlength(name, font=font)) + LEGEND_GAP
    return sheet


# ---------------------------------------------------------------- records


def sample_records(dataset_dir: str, split: str, count: int, seed: int, masks: bool = False) -> list[dict]:
    """``count`` records of ``split`` in ``reader.load``'s seeded shuffled order (with
    ``masks``, each with its ``mask``); of a ``--volume_chunks`` dataset, through
    ``RandomAccess`` in a seeded permutation."""
    from dcm2tfrecord import reader
    info = reader.info(dataset_dir)
    if info.manifest.volume_chunks is not None:    # --volume_chunks: tf.data does not put bricks together
        records_ = reader.RandomAccess(dataset_dir, split)
        order = np.random.default_rng(seed).permutation(len(records_))[:count]
        return [{k: v for k, v in records_[int(i)].items() if masks or k != "mask"} for i in order]
    exact = info.layout(split).dtype      # stored values, shown as they are
    ds = reader.load(dataset_dir, split=split, batch_size=1, shuffle=True, seed=seed,
                     output="dict", pad=True, dtype=exact, masks=masks)
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
           thumb: int = 160, cols: Optional[int] = None, outlines: bool = True):
    """(PIL image of the sheet, split, records shown). ``outlines``: a --class_map dataset's
    mask classes outlined, with their legend."""
    info = load_info(dataset_dir)
    manifest = info.manifest
    split = default_split(manifest, split)
    if manifest.splits[split].num_records == 0:
        raise UsageError(f"split {split!r} holds no records")
    class_names = manifest.class_names
    mask_classes = info.mask_classes if outlines and info.has_masks else []
    windowed = (manifest.options or {}).get("dicom_values") == "window"
    records = sample_records(dataset_dir, split, count, seed, masks=bool(mask_classes))
    tiles = [Tile(display_image(r["image"], r, windowed and _text(r.get(FORMAT, b"")) == RecordKind.DICOM),
                  caption(r, class_names),
                  class_regions(r["mask"], r, len(mask_classes)) if mask_classes else None)
             for r in records]
    return draw_sheet(tiles, thumb, cols, mask_classes), split, len(records)


def main(argv: Sequence[str]) -> int:
    args = parse_preview(argv)
    dataset_dir = args.dataset.rstrip("/") or "/"
    sheet, split, shown = render(dataset_dir, args.split, args.num, args.seed, args.thumb, args.cols,
                                 outlines=not args.no_outlines)
    _save(sheet, args.out)
    print(f"{args.out}: {shown} records of split {split!r} (seed {args.seed}), "
          f"{sheet.width}x{sheet.height} pixels")
    return 0
