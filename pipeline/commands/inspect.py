"""``dcm2tfrecord inspect DIR``: what a dataset holds, from dataset.json and the reader.

Without ``--record``: schema, options used, the training view (--spacing, --crop,
--intensity and any fingerprint facts, when used), splits, shards, class balance per
split and counts per reason, all from dataset.json (no shard is opened).
With ``--record N``: the features of record N of ``--split``, read through
``reader.load`` (N counts in the reader's unshuffled order), the image
summarized as shape, dtype, min/max/mean.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Mapping, Optional, Sequence

from dcm2tfrecord.dataset.encryption import EncryptionError
from dcm2tfrecord.dataset.features import DTYPE, LABEL
from dcm2tfrecord.dataset.manifest import Manifest, NewerFormatError, SplitEntry
from dcm2tfrecord.dataset.names import ERRORS_NAME
from dcm2tfrecord.pipeline.options.usage import UsageError

MB = 1 << 20
SHARDS_LISTED = 20
SHAPES_LISTED = 4
VALUES_LISTED = 8


def parse_inspect(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord inspect",
        description="Show a dataset's schema, options, splits, shards, class balance and "
                    "skip/failure counts; with --record N, one record's features.")
    parser.add_argument("dataset", metavar="DIR", help="the dataset directory, local or gs://")
    parser.add_argument("--record", type=int, default=None, metavar="N",
                        help="print record N (0-based, the reader's unshuffled order) of --split")
    parser.add_argument("--split", default=None,
                        help="split of --record (default: train, else the first split)")
    parser.add_argument("--version", default=None, metavar="V",
                        help="of a root written with --incremental: the version (a number or a tag) "
                             "to show (default: the one LATEST names)")
    parser.add_argument("--all_shards", action="store_true",
                        help=f"list every shard (default: the first {SHARDS_LISTED} per split)")
    return parser.parse_args(list(argv))


def printable(text: str) -> str:
    """``text`` safe for a terminal: control characters (an ESC in a class name could retitle
    the window or hide lines) shown as escapes; line breaks kept."""
    import unicodedata
    return "".join(ch if ch == "\n" or not unicodedata.category(ch).startswith("C")
                   else ch.encode("unicode_escape").decode("ascii") for ch in text)


def load_info(dataset_dir: str, version=None):
    """reader.info, with a missing dataset.json as a usage error (exit code 2)."""
    from dcm2tfrecord import reader
    try:
        return reader.info(dataset_dir, version)
    except FileNotFoundError as exc:
        import tensorflow as tf
        from dcm2tfrecord.dataset.names import LATEST_NAME
        hint = ""
        if tf.io.gfile.exists(tf.io.gfile.join(dataset_dir, LATEST_NAME)):
            hint = (f"; its {LATEST_NAME} names a version that is not committed: repair it with "
                    "'dcm2tfrecord rollback ROOT N'")
        raise UsageError(f"{exc}{hint}") from None
    except NewerFormatError as exc:
        raise UsageError(str(exc)) from None
    except ValueError as exc:     # e.g. a damaged LATEST in a versioned root
        raise UsageError(f"{dataset_dir}: {exc}; a damaged LATEST is repaired with "
                         "'dcm2tfrecord rollback ROOT N'") from None


def default_split(manifest: Manifest, split: Optional[str]) -> str:
    names = manifest.split_names
    if split is None:
        if not names:
            raise UsageError("the dataset holds no records (no splits in dataset.json)")
        return "train" if "train" in names else names[0]
    if split not in names:
        raise UsageError(f"--split {split!r} is not in the dataset; its splits: {', '.join(names)}")
    return split


def class_name(manifest: Manifest, key: str) -> str:
    """A label_counts key ("0", "unlabeled", ...) as a readable class."""
    names = manifest.class_names
    if key in ("-1", "unlabeled"):
        return "unlabeled"
    if key.isdigit() and int(key) < len(names):
        return f"{names[int(key)]} ({key})"
    return key


# ---------------------------------------------------------------- dataset


def _section(title: str) -> list[str]:
    return ["", title]


def format_overview(manifest: Manifest, dataset_dir: str) -> list[str]:
    counts = manifest.counts or {}
    splits = manifest.splits
    tool = manifest.tool or {}
    records = sum(s.num_records for s in splits.values())
    shards = sum(len(s.shards) for s in splits.values())
    size = sum(s.num_bytes or 0 for s in splits.values())
    return [f"Dataset: {dataset_dir}",
            f"  format_version {manifest.format_version}, written by "
            f"{tool.get('name', '?')} {tool.get('version', '?')}",
            f"  {records} records in {shards} shards, {size / MB:.2f} MB; files: "
            f"{counts.get('matched', 0)} matched, {counts.get('written', 0)} written, "
            f"{sum(counts.get('skipped', {}).values())} skipped, "
            f"{sum(counts.get('failed', {}).values())} failed"] + _encryption_lines(manifest) \
        + _version_lines(manifest) + _chunk_lines(manifest)


def _encryption_lines(manifest: Manifest) -> list[str]:
    """convert --encrypt's scheme and key URI (dataset.json holds no key: this reads without one)."""
    if manifest.encryption is None:
        return []
    return [f"  encrypted ({manifest.encryption.get('scheme')}), data keys wrapped by {manifest.key_uri}; "
            "reading records needs that key"]


def _chunk_lines(manifest: Manifest) -> list[str]:
    """--volume_chunks: how the records' pixels are stored (dataset.json's volume_chunks)."""
    try:
        chunks = manifest.volume_chunks
    except ValueError as exc:
        return [f"  volume_chunks: unreadable ({exc})"]
    if chunks is None:
        return []
    return [f"  pixels in bricks of {chunks.edge}^3 voxels, codec {chunks.codec} (--volume_chunks): "
            "RandomAccess.region reads a patch's bricks only"]


def _version_lines(manifest: Manifest) -> list[str]:
    """For a version of an --incremental root: what it built on and reused."""
    info = manifest.incremental
    if not info:
        return []
    base = info.get("base_version")
    line = (f"  incremental version: wrote {info['written_shards']} shard(s), reused "
            f"{info['reused_shards']} ({info['reused_records']} records)"
            + (f" from version {base}" if base else " (first version)"))
    return [line] + ([f"  rebuilt: {info['rebuild_reason']}"] if info.get("rebuild_reason") else [])


def format_schema(manifest: Manifest) -> list[str]:
    lines = _section("Schema (features of each record)")
    lines.append(f"  {'feature':<34}{'dtype':<8}{'shape':<10}notes")
    for name, spec in sorted(manifest.features.items()):
        notes = "; ".join(str(x) for x in (
            f"encoding {spec['encoding']}" if "encoding" in spec else None,
            spec.get("description")) if x)
        lines.append(f"  {name:<34}{spec.get('dtype', '?'):<8}{str(spec.get('shape', [])):<10}{notes}")
    return lines


def format_options(manifest: Manifest) -> list[str]:
    lines = _section("Options used")
    for key, value in sorted((manifest.options or {}).items()):
        lines.append(f"  {key} = {value}")
    labels = manifest.labels or {}
    if labels.get("source"):
        names = manifest.class_names
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
        lines.append(f"  labels: {labels.get('kind')} from {labels['source']}"
                     + (f"; classes: {shown}" if names else ""))
    return lines


# --crop and --intensity values that change nothing
_VIEW_OFF = (None, "", "off", "none")
# dataset.json keys (top level) or options that may hold the facts a dataset fingerprint or an
# automatic --spacing adds: shown when present, whatever they hold, never required
_VIEW_NOTES = {
    "crop": {"nonzero": "the box of the image's non-zero voxels",
             "foreground": "the box of the mask's non-zero voxels"},
    "intensity": {"zscore": "per image and channel, (x - mean) / std over the non-zero voxels, float32",
                  "ct": "clipped to the train split's foreground 0.5/99.5 percentiles, then (x - mean) / std "
                        "with their mean and std (the fingerprint below), float32"},
}
_INTENSITY_KEPT = {"zscore": "intensity/mean and intensity/std kept per channel",
                   "ct": "intensity/clip_low, clip_high, mean and std kept per channel"}


def _fact_text(value) -> str:
    """A fact of dataset.json, short: numbers as %.6g, lists of up to VALUES_LISTED, objects by their keys."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(_fact_text(v) for v in value[:VALUES_LISTED])
        return f"[{shown}" + (f", ... ({len(value)} values)]" if len(value) > VALUES_LISTED else "]")
    if isinstance(value, dict):
        return "{" + ", ".join(str(k) for k in list(value)[:VALUES_LISTED]) + (", ...}" if len(value) > VALUES_LISTED
                                                                               else "}")
    return str(value)


def _listed(value) -> list:
    return value if isinstance(value, list) else []


def _spacing_facts(manifest: Manifest) -> list[str]:
    """--spacing auto's facts (dataset.json's auto_spacing): the target it chose, by which rule,
    from how many records, and its median where the coarse axis was brought below it."""
    chosen = manifest.auto_spacing or {}
    target = _listed(chosen.get("target_mm"))
    if not target:
        return []
    line = (f"    spacing chosen: {','.join(_fact_text(v) for v in target)} mm (X,Y,Z) by {chosen.get('rule', '')} "
            f"over {chosen.get('records')} {'slice ' if chosen.get('from_slices') else ''}records")
    if chosen.get("anisotropic"):
        line += (f"; anisotropic: the coarse axis at its 10th percentile (median "
                 f"{','.join(_fact_text(v) for v in _listed(chosen.get('median_mm')))})")
    return [line]


def _view_facts(manifest: Manifest) -> list[str]:
    """The training view's facts dataset.json holds: --spacing auto's target (_spacing_facts) and
    --intensity ct's fingerprint, a line per channel (its clip bounds, mean and std, and how many
    voxels of which split gave them)."""
    spaced = _spacing_facts(manifest)
    found = manifest.fingerprint
    if not isinstance(found, Mapping):
        return spaced
    lines = spaced + [f"    fingerprint of split {found.get('split')!r}: {found.get('rule', '')}"]
    columns = [_listed(found.get(k)) for k in ("percentile_00_5", "percentile_99_5", "mean", "std", "voxels")]
    for channel, (low, high, mean, std, voxels) in enumerate(zip(*columns)):
        lines.append(f"    channel {channel}: clip {_fact_text(low)} .. {_fact_text(high)}, mean {_fact_text(mean)}, "
                     f"std {_fact_text(std)} ({voxels} voxels)")
    return lines


def format_training_view(manifest: Manifest) -> list[str]:
    """What --spacing, --crop and --intensity made of the records, and any fingerprint or
    automatic spacing facts dataset.json holds; nothing when none of the three was used."""
    options = manifest.options or {}
    spacing, crop, intensity = (options.get(key) for key in ("spacing", "crop", "intensity"))
    if spacing in _VIEW_OFF and crop in _VIEW_OFF and intensity in _VIEW_OFF:
        return []
    lines = _section("Training view (--spacing, --crop, --intensity)")
    if spacing in _VIEW_OFF:
        lines.append("  target spacing: none (the source's)")
    elif re.fullmatch(r"[^,]+,[^,]+,[^,]+", str(spacing)):
        lines.append(f"  target spacing: {spacing} mm (X,Y,Z: column, row, slice step; a slice record in-plane "
                     "only); the source's kept as dicom/original_*")
    else:
        lines.append(f"  target spacing: {spacing} (chosen by the conversion; dataset facts below where "
                     "dataset.json records them); the source's kept as dicom/original_*")
    for name, value, kept in (("crop", crop, "the box kept as dicom/crop_box"),
                              ("intensity", intensity, _INTENSITY_KEPT.get(str(intensity), ""))):
        if value in _VIEW_OFF:
            lines.append(f"  {name}: {value or 'none'}")
            continue
        note = _VIEW_NOTES[name].get(str(value))
        lines.append(f"  {name}: {value}" + (f" ({note})" if note else "") + (f"; {kept}" if kept else ""))
    facts = _view_facts(manifest)
    if facts:
        lines += ["  dataset facts:"] + facts
    return lines


def _shapes(entry: SplitEntry) -> str:
    shapes = entry.shapes
    listed = " ".join("x".join(str(d) for d in s) for s in shapes[:SHAPES_LISTED])
    more = f" +{len(shapes) - SHAPES_LISTED} more" if len(shapes) > SHAPES_LISTED else ""
    return f"{listed}{more}"


def format_splits(manifest: Manifest) -> list[str]:
    lines = _section("Splits")
    lines.append(f"  {'split':<12}{'records':>9}{'shards':>8}{'MB':>10}{'groups':>8}  dtypes")
    for name, entry in sorted(manifest.splits.items()):
        lines.append(f"  {name:<12}{entry.num_records:>9}{len(entry.shards):>8}"
                     f"{(entry.num_bytes or 0) / MB:>10.2f}{entry.num_groups or 0:>8}  "
                     f"{', '.join(entry.dtypes)}")
        lines.append(f"  {'':<12}shapes [depth x height x width x channels]: {_shapes(entry)}"
                     + (f"; volumes up to {entry.max_depth} slices" if entry.max_depth > 1 else ""))
    return lines


def format_shards(manifest: Manifest, all_shards: bool = False) -> list[str]:
    lines = _section("Shards")
    for name, entry in sorted(manifest.splits.items()):
        shards = entry.shards
        shown = shards if all_shards else shards[:SHARDS_LISTED]
        for shard in shown:
            lines.append(f"  {shard.file:<40}{shard.num_records:>8} records"
                         f"{(shard.num_bytes or 0) / MB:>10.2f} MB  sha256 {(shard.sha256 or '?')[:16]}")
        if len(shards) > len(shown):
            lines.append(f"  ... {len(shards) - len(shown)} more {name} shards "
                         "(--all_shards lists them)")
    return lines


def format_class_balance(manifest: Manifest) -> list[str]:
    lines = _section("Class balance")
    for name, entry in sorted(manifest.splits.items()):
        counts = entry.label_counts or {}
        if not counts:
            lines.append(f"  {name}: no class labels (numeric or absent)")
            continue
        records = max(entry.num_records, 1)
        lines.append(f"  {name}:")
        for key, n in sorted(counts.items(), key=_class_order):
            lines.append(f"    {class_name(manifest, key):<32}{n:>9}{100.0 * n / records:>8.1f}%")
    return lines


def _class_order(item: tuple[str, int]) -> tuple:
    key = item[0]
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def format_reasons(manifest: Manifest, dataset_dir: str) -> list[str]:
    counts = manifest.counts or {}
    lines = _section("Inputs not written, per reason")
    rows = [(status, reason, n) for status in ("skipped", "failed")
            for reason, n in sorted(counts.get(status, {}).items())]
    if not rows:
        lines.append("  none: every matched input was written")
    for status, reason, n in rows:
        lines.append(f"  {status:<9}{reason:<36}{n:>8}")
    if counts.get("unaccounted"):
        lines.append(f"  UNACCOUNTED {counts['unaccounted']} (matched - written - skipped - failed)")
    if rows:
        errors = manifest.errors_file or ERRORS_NAME
        lines.append(f"  which files and why: {dataset_dir.rstrip('/')}/{errors}")
    return lines


def format_dataset(manifest: Manifest, dataset_dir: str, all_shards: bool = False) -> str:
    return "\n".join(format_overview(manifest, dataset_dir) + format_schema(manifest)
                     + format_options(manifest) + format_training_view(manifest) + format_splits(manifest)
                     + format_shards(manifest, all_shards) + format_class_balance(manifest)
                     + format_reasons(manifest, dataset_dir))


# ---------------------------------------------------------------- one record


def read_record(dataset_dir: str, split: str, index: int) -> dict:
    """Record ``index`` of ``split`` as {feature: numpy value}, the image under ``image``."""
    from dcm2tfrecord import reader
    exact = reader.info(dataset_dir).layout(split).dtype      # stored values, shown as they are
    ds = reader.load(dataset_dir, split=split, batch_size=1, shuffle=False, output="dict", pad=True,
                     dtype=exact)
    for batch in ds.skip(index).take(1):
        return {name: _first(value) for name, value in batch.items()}
    raise UsageError(f"--record {index}: split {split!r} has fewer records")


def _first(value):
    """The single record of a batch of one, as numpy (ragged features as a list)."""
    if hasattr(value, "to_list"):
        return value.to_list()[0]
    return value.numpy()[0]


def image_summary(image) -> str:
    import numpy as np
    values = np.asarray(image)
    if values.size == 0:
        return f"shape {list(values.shape)}, dtype {values.dtype}, empty"
    as_float = values.astype(np.float64)
    return (f"shape {list(values.shape)}, dtype {values.dtype}, min {as_float.min():.6g}, "
            f"max {as_float.max():.6g}, mean {as_float.mean():.6g}")


def _value_text(value) -> str:
    import numpy as np
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace") or "(empty)"
    if isinstance(value, (np.ndarray, list)):
        items = np.asarray(value).ravel().tolist()
        shown = ", ".join(_value_text(v) for v in items[:VALUES_LISTED])
        more = f", ... ({len(items)} values)" if len(items) > VALUES_LISTED else ""
        return f"[{shown}{more}]"
    if isinstance(value, (np.floating, float)):
        return f"{float(value):.6g}"
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def format_record(manifest: Manifest, split: str, index: int, features: Mapping) -> str:
    lines = [f"Record {index} of split {split!r} (reader order, unshuffled)"]
    for name in sorted(features):
        if name == "image":
            stored = _value_text(features.get(DTYPE, b""))
            read_as = str(getattr(features["image"], "dtype", stored))
            note = f" (stored as {stored}; the split's common dtype)" if stored != read_as else ""
            lines.append(f"  {'image':<34}{image_summary(features['image'])}{note}")
            continue
        text = _value_text(features[name])
        if name == LABEL:
            names = manifest.class_names
            value = features[name]
            if getattr(value, "ndim", 0) == 0 and 0 <= int(value) < len(names):
                text = f"{text} ({names[int(value)]})"
        lines.append(f"  {name:<34}{text}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    args = parse_inspect(argv)
    info = load_info(args.dataset.rstrip("/") or "/", args.version)
    dataset_dir = info.dataset_dir     # a versioned root: the version LATEST names
    manifest = info.manifest
    if args.record is None:
        if args.split is not None:
            default_split(manifest, args.split)
        print(printable(format_dataset(manifest, dataset_dir, args.all_shards)))
        return 0
    split = default_split(manifest, args.split)
    records = manifest.splits[split].num_records
    if not 0 <= args.record < records:
        raise UsageError(f"--record {args.record}: split {split!r} holds records 0..{records - 1}")
    try:
        features = read_record(dataset_dir, split, args.record)
    except EncryptionError as exc:     # an encrypted dataset's key out of reach: one line
        print(f"dcm2tfrecord inspect: error: {exc}", file=sys.stderr)
        return 1
    print(printable(format_record(manifest, split, args.record, features)))
    return 0
