"""Command-line options of ``convert`` and the checks that run before any work."""
from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Optional, Sequence

import secrets

from transforms.images.geometry import RESIZE_MODES, parse_resize
from transforms.labels.table import LABEL_KEYS
from transforms.settings import DecodeSettings
from transforms.dicom.voi import PRESETS, parse_window
from transforms.records.probe import DEFAULT_MAX_PIXELS
from transforms.settings import ConversionSettings
from transforms.planning.shards import ShardBounds
from transforms.splits.assign import SPLIT_BY, SplitSpecError, parse_splits


SALT_ENV = "DCM2TFRECORD_ID_SALT"
_RANDOM_SALT = secrets.token_hex(16)


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
    incremental: bool = False            # versions under --output; not in recorded()
    labels: Optional[str] = None
    label_key: str = "path"
    label_column: str = "label"
    multi_label: bool = False
    labels_from_dirs: bool = False
    missing_label: str = "skip"
    splits: str = "train=1.0"
    split_by: Optional[str] = None
    split_column: Optional[str] = None
    dicom_values: str = "modality"
    window: Optional[str] = None
    window_bits: int = 8
    resize: Optional[str] = None
    resize_mode: str = "stretch"
    channels: str = "keep"
    frames: str = "stack"
    id_salt: Optional[str] = None
    allow_random_salt: bool = False
    keep_tags: tuple[str, ...] = ()
    keep_source_path: bool = False
    allow_burned_in: bool = False
    unit: str = "file"
    max_failure_ratio: float = 0.05
    max_failures: Optional[int] = None
    decode_timeout_s: float = 300.0
    duplicates: str = "skip"
    summary_json: Optional[str] = None   # reporting only: not in recorded(), not in dataset.json
    progress: str = "auto"

    def salt(self) -> str:
        """--id_salt, else $DCM2TFRECORD_ID_SALT, else (with --allow_random_salt) a fresh one."""
        salt = self.id_salt or os.environ.get(SALT_ENV, "")
        if not salt and self.allow_random_salt:
            salt = _RANDOM_SALT
        return salt

    def decode_settings(self) -> DecodeSettings:
        return DecodeSettings(
            dicom_values=self.dicom_values, window=parse_window(self.window) if self.window else None,
            window_bits=self.window_bits, resize=parse_resize(self.resize) if self.resize else None,
            resize_mode=self.resize_mode, channels=self.channels, frames=self.frames,
            id_salt=self.salt(), keep_tags=tuple(self.keep_tags), keep_source_path=self.keep_source_path,
            allow_burned_in=self.allow_burned_in, decode_timeout_s=self.decode_timeout_s)

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
            splits=parse_splits(self.splits), split_by=self.split_by, split_column=self.split_column,
            decode=self.decode_settings(), unit=self.unit, max_failure_ratio=self.max_failure_ratio,
            max_failures=self.max_failures, duplicates=self.duplicates)

    def recorded(self) -> dict:
        """The options that shape the output, as stored in dataset.json."""
        return {
            "inputs": list(self.inputs),
            "target_shard_mb": self.target_shard_mb, "min_shard_mb": self.min_shard_mb,
            "max_shard_mb": self.max_shard_mb, "min_shards": self.min_shards,
            "compression": self.compression, "max_pixels": self.max_pixels, "seed": self.seed,
            "dicom_values": self.dicom_values, "window": self.window, "window_bits": self.window_bits,
            "resize": self.resize, "resize_mode": self.resize_mode, "channels": self.channels,
            "frames": self.frames, "unit": self.unit, "duplicates": self.duplicates, "keep_tags": list(self.keep_tags),
            "keep_source_path": self.keep_source_path, "allow_burned_in": self.allow_burned_in,
            "id_salt": "random (hashes differ every run)" if self.salt() == _RANDOM_SALT else "set (not recorded)",
            "labels": self.labels, "label_key": self.label_key, "label_column": self.label_column,
            "multi_label": self.multi_label, "labels_from_dirs": self.labels_from_dirs,
            "missing_label": self.missing_label,
            "splits": dict(parse_splits(self.splits)), "split_by": self.split_by,
            "split_column": self.split_column,
        }


def parse_flag(text: str) -> bool:
    """A switch that also takes a value (--incremental=true), as Flex Template launchers pass it."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


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
    io_group.add_argument("--incremental", nargs="?", const=True, default=False, type=parse_flag,
                          metavar="true|false",
                          help="write a new version OUT/versions/NNNN that converts only new and "
                               "changed files, reuses unchanged shards, then points OUT/LATEST at it")
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
    decode.add_argument("--dicom_values", choices=("modality", "stored", "window"), default="modality",
                        help="modality: modality LUT (HU for CT), exact dtype (default); stored: raw "
                             "stored values; window: VOI window to uint8/uint16")
    decode.add_argument("--window", default=None,
                        help=f"CENTER,WIDTH or a preset ({', '.join(PRESETS)}); default: the file's own")
    decode.add_argument("--window_bits", type=int, choices=(8, 16), default=8,
                        help="output bits of --dicom_values window (default 8)")
    decode.add_argument("--resize", default=None, metavar="HxW", help="e.g. 512x512")
    decode.add_argument("--resize_mode", choices=RESIZE_MODES, default="stretch",
                        help="stretch (default), pad (keep aspect, pad) or crop (keep aspect, centre crop)")
    decode.add_argument("--channels", choices=("keep", "1", "3"), default="keep",
                        help="keep (default), 1 (RGB -> luma) or 3 (gray repeated)")
    decode.add_argument("--frames", choices=("stack", "split"), default="stack",
                        help="multi-frame DICOM: one record with depth=frames (default) or one per frame")
    decode.add_argument("--unit", choices=("file", "series"), default="file",
                        help="file: one record per file (default); series: one volume per "
                             "SeriesInstanceUID, slices in anatomical order")
    decode.add_argument("--decode_timeout_s", type=float, default=300.0,
                        help="fail a file whose decoding takes longer (default 300; 0: no limit)")
    io_group.add_argument("--duplicates", choices=("skip", "keep"), default="skip",
                          help="files sharing a SOPInstanceUID: keep the first by sorted uri and skip "
                               "the rest (default), or keep all")
    failures = parser.add_argument_group("failures")
    failures.add_argument("--max_failure_ratio", type=float, default=0.05,
                          help="refuse to commit when more than this share of inputs failed (default 0.05)")
    failures.add_argument("--max_failures", type=int, default=None,
                          help="refuse to commit when more than this many inputs failed")
    safety = parser.add_argument_group("patient safety")
    safety.add_argument("--id_salt", default=None,
                        help=f"secret key for hashing identifiers (or ${SALT_ENV}); never written")
    safety.add_argument("--allow_random_salt", action="store_true",
                        help="run without a salt: a random one, so hashes differ on every run")
    safety.add_argument("--keep_tags", nargs="+", default=(), metavar="KEYWORD",
                        help="extra DICOM attributes to write under dicom/ (your responsibility)")
    safety.add_argument("--keep_source_path", action="store_true",
                        help="write each record's source uri as the feature source_path")
    safety.add_argument("--allow_burned_in", action="store_true",
                        help="convert images whose Burned In Annotation is YES")
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
    reporting = parser.add_argument_group("reporting")
    reporting.add_argument("--summary_json", default=None, metavar="PATH",
                           help="also write the end-of-run summary as JSON here (local or gs://)")
    reporting.add_argument("--progress", choices=("auto", "bar", "log", "none"), default="auto",
                           help="auto (default): a bar on a terminal, a line every 10 s otherwise")


def _check_label_csv(opts: ConvertOptions) -> None:
    from apache_beam.io.filesystems import FileSystems
    import io
    from transforms.labels.table import read_header
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
    if not 0 <= opts.max_failure_ratio <= 1:
        raise UsageError(f"--max_failure_ratio {opts.max_failure_ratio} must lie in [0, 1]")
    if opts.min_shards < 1:
        raise UsageError("--min_shards must be >= 1")
    try:
        parse_splits(opts.splits)
    except SplitSpecError as exc:
        raise UsageError(str(exc)) from None
    if opts.incremental and opts.overwrite:
        raise UsageError("--incremental and --overwrite exclude each other: --incremental adds a "
                         "version and keeps the earlier ones (roll back with 'dcm2tfrecord rollback')")
    if opts.incremental and opts.salt() == _RANDOM_SALT:
        raise UsageError("--incremental needs a fixed --id_salt (or $" + SALT_ENV + "): with "
                         "--allow_random_salt no record id repeats, so nothing could be reused")
    if opts.labels and opts.labels_from_dirs:
        raise UsageError("--labels and --labels_from_dirs exclude each other; choose one")
    if opts.split_column and not opts.labels:
        raise UsageError("--split_column needs --labels (the CSV that holds the column)")
    if opts.multi_label and not (opts.labels or opts.labels_from_dirs):
        raise UsageError("--multi_label needs --labels")
    if opts.labels:
        _check_label_csv(opts)
    if opts.window:
        try:
            parse_window(opts.window)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if opts.resize:
        try:
            parse_resize(opts.resize)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    if opts.unit == "series" and opts.frames == "split":
        raise UsageError("--unit series and --frames split exclude each other")
    if opts.window and opts.dicom_values != "window":
        raise UsageError("--window needs --dicom_values window")
    if not opts.salt():
        raise UsageError(f"no identifier salt: set --id_salt or ${SALT_ENV} to a secret kept the same "
                         "across runs (stable hashes, stable splits), or pass --allow_random_salt")


def unknown_beam_args(beam_args: Sequence[str]) -> list[str]:
    """Arguments that neither convert nor any Beam PipelineOptions class knows.

    Beam only warns about these and drops them; a typo like --max_shard_mbb
    would then silently run with the default, so we refuse instead.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser
    parser = _BeamArgumentParser(allow_abbrev=False)
    seen = {}
    for cls in PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(list(beam_args))
    return [a for a in unknown if a.startswith("-")] or unknown


def check_inputs_exist(patterns: Sequence[str]) -> None:
    """Each --input must match at least one file (one listing call, first match only)."""
    from apache_beam.io.filesystems import FileSystems
    for pattern in patterns:
        path = _absolute(pattern)
        candidates = [path] if any(c in path for c in "*?[") else \
            [FileSystems.join(path.rstrip("/"), "**"), path]
        found = False
        for candidate in candidates:
            try:
                if FileSystems.match([candidate], limits=[1])[0].metadata_list:
                    found = True
                    break
            except Exception:
                continue
        if not found:
            raise UsageError(f"--input {pattern} matches no file; check the path or glob "
                             "(directories are walked recursively)")


def parse_convert(argv: Sequence[str]) -> tuple[ConvertOptions, list[str]]:
    """(our options, the remaining Beam pipeline options)."""
    parser = argparse.ArgumentParser(prog="dcm2tfrecord convert", allow_abbrev=False)
    add_convert_arguments(parser)
    known, beam_args = parser.parse_known_args(list(argv))
    fields = {f.name for f in dataclasses.fields(ConvertOptions)}
    values = {k: v for k, v in vars(known).items() if k in fields}
    values["inputs"] = tuple(known.input)
    values["keep_tags"] = tuple(known.keep_tags or ())
    values["output"] = known.output.rstrip("/") or "/"
    opts = ConvertOptions(**values)
    unknown = unknown_beam_args(beam_args)
    if unknown:
        raise UsageError(f"unknown option {unknown[0]}: neither a convert option nor a Beam pipeline "
                         "option; see 'dcm2tfrecord convert --help'")
    validate(opts)
    check_inputs_exist(opts.inputs)
    return opts, beam_args
