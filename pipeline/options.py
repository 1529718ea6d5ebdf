"""Command-line options of ``convert`` and the checks that run before any work."""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Optional, Sequence

from transforms.labels import LABEL_KEYS
from transforms.probe import DEFAULT_MAX_PIXELS
from transforms.settings import ConversionSettings
from transforms.shard_plan import ShardBounds
from transforms.splits import SPLIT_BY, SplitSpecError, parse_splits


class UsageError(Exception):
    """A bad option: reported in one line, exit code 2, nothing written."""


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    inputs: tuple[str, ...]
    output: str
    target_shard_mb: float = 256.0
    min_shard_mb: float = 100.0
    max_shard_mb: float = 500.0
    min_shards: int = 1
    compression: str = "none"
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0
    overwrite: bool = False
    labels: Optional[str] = None
    label_key: str = "path"
    label_column: str = "label"
    multi_label: bool = False
    labels_from_dirs: bool = False
    missing_label: str = "skip"
    splits: str = "train=1.0"
    split_by: Optional[str] = None
    split_column: Optional[str] = None

    @property
    def bounds(self) -> ShardBounds:
        return ShardBounds.from_mb(self.target_shard_mb, self.min_shard_mb, self.max_shard_mb)

    def settings(self) -> ConversionSettings:
        return ConversionSettings(
            patterns=tuple(_absolute(p) for p in self.inputs), output_dir=_absolute(self.output),
            bounds=self.bounds, max_pixels=self.max_pixels, seed=self.seed,
            compression=self.compression, min_shards=self.min_shards,
            labels_csv=_absolute(self.labels) if self.labels else None, label_key=self.label_key,
            label_column=self.label_column, multi_label=self.multi_label,
            labels_from_dirs=self.labels_from_dirs, missing_label=self.missing_label,
            splits=parse_splits(self.splits), split_by=self.split_by, split_column=self.split_column)

    def recorded(self) -> dict:
        """The options that shape the output, as stored in dataset.json."""
        return {
            "inputs": list(self.inputs),
            "target_shard_mb": self.target_shard_mb, "min_shard_mb": self.min_shard_mb,
            "max_shard_mb": self.max_shard_mb, "min_shards": self.min_shards,
            "compression": self.compression, "max_pixels": self.max_pixels, "seed": self.seed,
            "dicom_values": "modality",
            "labels": self.labels, "label_key": self.label_key, "label_column": self.label_column,
            "multi_label": self.multi_label, "labels_from_dirs": self.labels_from_dirs,
            "missing_label": self.missing_label,
            "splits": dict(parse_splits(self.splits)), "split_by": self.split_by,
            "split_column": self.split_column,
        }


def _absolute(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    io_group = parser.add_argument_group("input and output")
    io_group.add_argument("--input", action="append", required=True, metavar="PATTERN",
                          help="directory (recursive), file or glob, local or gs://; repeatable")
    io_group.add_argument("--output", required=True, metavar="DIR",
                          help="dataset directory, local or gs://")
    io_group.add_argument("--overwrite", action="store_true",
                          help="replace a dataset already committed in --output")
    shards = parser.add_argument_group("shards")
    shards.add_argument("--target_shard_mb", type=float, default=256.0, help="default 256")
    shards.add_argument("--min_shard_mb", type=float, default=100.0,
                        help="smallest shard unless a split is smaller (default 100)")
    shards.add_argument("--max_shard_mb", type=float, default=500.0,
                        help="largest shard; a bigger record fails as record_too_large (default 500)")
    shards.add_argument("--min_shards", type=int, default=1,
                        help="at least this many shards per split while shards stay >= --min_shard_mb")
    shards.add_argument("--compression", choices=("none", "gzip"), default="none",
                        help="gzip writes .tfrecord.gz (default none)")
    shards.add_argument("--seed", type=int, default=0, help="record order seed (default 0)")
    decode = parser.add_argument_group("decoding")
    decode.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help="reject images whose header claims more pixels (default 2^28)")
    labels = parser.add_argument_group("labels and splits")
    labels.add_argument("--labels", metavar="CSV", help="labels CSV, local or gs://")
    labels.add_argument("--label_key", choices=LABEL_KEYS, default="path",
                        help="CSV column joined to records (path: relative to the --input root)")
    labels.add_argument("--label_column", default="label", help="CSV column holding the label")
    labels.add_argument("--multi_label", action="store_true", help="labels like a|b|c -> multi-hot")
    labels.add_argument("--labels_from_dirs", action="store_true",
                        help="class = parent folder name (ImageNet layout)")
    labels.add_argument("--missing_label", choices=("skip", "error", "unlabeled"), default="skip",
                        help="records without a label: skip (default), error, or keep as -1")
    labels.add_argument("--splits", default="train=1.0",
                        help="e.g. train=0.8,validation=0.1,test=0.1 (default train=1.0)")
    labels.add_argument("--split_by", choices=SPLIT_BY, default=None,
                        help="group kept in one split (default: patient for DICOM, record otherwise)")
    labels.add_argument("--split_column", default=None,
                        help="take each record's split from this labels CSV column instead")


def _check_label_csv(opts: ConvertOptions) -> None:
    from apache_beam.io.filesystems import FileSystems
    import io
    from transforms.labels import read_header
    path = _absolute(opts.labels)
    if not FileSystems.exists(path):
        raise UsageError(f"--labels {opts.labels}: file not found")
    with FileSystems.open(path) as raw:
        header = read_header(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""))
    wanted = [opts.label_key, opts.label_column] + ([opts.split_column] if opts.split_column else [])
    missing = [c for c in wanted if c not in header]
    if missing:
        raise UsageError(f"--labels {opts.labels}: column(s) {', '.join(missing)} not in its header "
                         f"{header}; set --label_key/--label_column/--split_column to existing columns")


def validate(opts: ConvertOptions) -> None:
    if not (0 < opts.min_shard_mb <= opts.max_shard_mb):
        raise UsageError(f"--min_shard_mb {opts.min_shard_mb} must be > 0 and <= "
                         f"--max_shard_mb {opts.max_shard_mb}")
    if not (opts.min_shard_mb <= opts.target_shard_mb <= opts.max_shard_mb):
        raise UsageError(f"--target_shard_mb {opts.target_shard_mb} must lie between "
                         f"--min_shard_mb and --max_shard_mb")
    if opts.max_pixels <= 0:
        raise UsageError("--max_pixels must be positive")
    if opts.min_shards < 1:
        raise UsageError("--min_shards must be >= 1")
    try:
        parse_splits(opts.splits)
    except SplitSpecError as exc:
        raise UsageError(str(exc)) from None
    if opts.labels and opts.labels_from_dirs:
        raise UsageError("--labels and --labels_from_dirs exclude each other; choose one")
    if opts.split_column and not opts.labels:
        raise UsageError("--split_column needs --labels (the CSV that holds the column)")
    if opts.multi_label and not (opts.labels or opts.labels_from_dirs):
        raise UsageError("--multi_label needs --labels")
    if opts.labels:
        _check_label_csv(opts)


def parse_convert(argv: Sequence[str]) -> tuple[ConvertOptions, list[str]]:
    """(our options, the remaining Beam pipeline options)."""
    parser = argparse.ArgumentParser(prog="dcm2tfrecord convert", allow_abbrev=False)
    add_convert_arguments(parser)
    known, beam_args = parser.parse_known_args(list(argv))
    fields = {f.name for f in dataclasses.fields(ConvertOptions)}
    values = {k: v for k, v in vars(known).items() if k in fields}
    values["inputs"] = tuple(known.input)
    values["output"] = known.output.rstrip("/") or "/"
    opts = ConvertOptions(**values)
    validate(opts)
    return opts, beam_args
