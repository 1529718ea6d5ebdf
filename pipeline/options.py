"""Command-line options of ``convert`` and the checks that run before any work."""
from __future__ import annotations

import argparse
import dataclasses
from typing import Sequence

from transforms.probe import DEFAULT_MAX_PIXELS
from transforms.shard_plan import ShardBounds


class UsageError(Exception):
    """A bad option: reported in one line, exit code 2, nothing written."""


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    inputs: tuple[str, ...]
    output: str
    target_shard_mb: float = 256.0
    min_shard_mb: float = 100.0
    max_shard_mb: float = 500.0
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0
    overwrite: bool = False

    @property
    def bounds(self) -> ShardBounds:
        return ShardBounds.from_mb(self.target_shard_mb, self.min_shard_mb, self.max_shard_mb)

    def recorded(self) -> dict:
        """The options that shape the output, as stored in dataset.json."""
        return {
            "inputs": list(self.inputs),
            "target_shard_mb": self.target_shard_mb,
            "min_shard_mb": self.min_shard_mb,
            "max_shard_mb": self.max_shard_mb,
            "max_pixels": self.max_pixels,
            "seed": self.seed,
            "dicom_values": "modality",
            "splits": {"train": 1.0},
        }


def add_convert_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", action="append", required=True, metavar="PATTERN",
                        help="directory (recursive), file or glob, local or gs://; repeatable")
    parser.add_argument("--output", required=True, metavar="DIR",
                        help="dataset directory, local or gs://")
    parser.add_argument("--target_shard_mb", type=float, default=256.0,
                        help="aimed-for shard size (default 256)")
    parser.add_argument("--min_shard_mb", type=float, default=100.0,
                        help="smallest shard, unless a split is smaller (default 100)")
    parser.add_argument("--max_shard_mb", type=float, default=500.0,
                        help="largest shard (default 500)")
    parser.add_argument("--max_pixels", type=int, default=DEFAULT_MAX_PIXELS,
                        help="reject images whose header claims more pixels (default 2^28)")
    parser.add_argument("--seed", type=int, default=0,
                        help="record order seed; same seed, same shards (default 0)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a dataset already committed in --output")


def validate(opts: ConvertOptions) -> None:
    if not (0 < opts.min_shard_mb <= opts.max_shard_mb):
        raise UsageError(f"--min_shard_mb {opts.min_shard_mb} must be > 0 and <= "
                         f"--max_shard_mb {opts.max_shard_mb}")
    if not (opts.min_shard_mb <= opts.target_shard_mb <= opts.max_shard_mb):
        raise UsageError(f"--target_shard_mb {opts.target_shard_mb} must lie between "
                         f"--min_shard_mb and --max_shard_mb")
    if opts.max_pixels <= 0:
        raise UsageError("--max_pixels must be positive")


def parse_convert(argv: Sequence[str]) -> tuple[ConvertOptions, list[str]]:
    """(our options, the remaining Beam pipeline options)."""
    parser = argparse.ArgumentParser(prog="dcm2tfrecord convert", allow_abbrev=False)
    add_convert_arguments(parser)
    known, beam_args = parser.parse_known_args(list(argv))
    opts = ConvertOptions(inputs=tuple(known.input), output=known.output.rstrip("/") or "/",
                          target_shard_mb=known.target_shard_mb, min_shard_mb=known.min_shard_mb,
                          max_shard_mb=known.max_shard_mb, max_pixels=known.max_pixels,
                          seed=known.seed, overwrite=known.overwrite)
    validate(opts)
    return opts, beam_args
