"""Runs ``verify``: re-reads a committed dataset and prints a one-line verdict.

Exit status 0 when every check passes, 1 when anything is wrong (the verdict
names the first problem: shard, record number, byte offset; the rest follow on
stderr), 2 for a usage error.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.dataset.manifest import NewerFormatError
from dcm2tfrecord.dataset.names import MANIFEST_NAME, SHARD_GLOB
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.dataset.versions import DamagedLatest, resolve_dataset_dir


def parse_verify(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord verify",
        description="Re-read every shard of a dataset and check it against dataset.json: TFRecord "
                    "framing and CRC32Cs, record counts, sizes and sha256, every record against the "
                    "schema (pixel byte counts included), and the .idx index files.")
    parser.add_argument("dataset", metavar="DIR", help="the dataset directory, local or gs://")
    parser.add_argument("--key", metavar="KEY_URI", default=None,
                        help="an encrypted dataset (convert --encrypt): the key URI to decrypt it with "
                             "(default: the one dataset.json names)")
    parser.add_argument("--no_decrypt", action="store_true",
                        help="an encrypted dataset: check framing, CRC32Cs (they cover the ciphertext), "
                             "sizes, sha256 and indexes without the key; records are not decrypted")
    parser.add_argument("--max_problems", type=int, default=20, metavar="N",
                        help="problems listed on stderr after the verdict (default 20)")
    return parser.parse_args(list(argv))


def _has_shards(folder: str) -> bool:
    """Shard files without a dataset.json are a damaged dataset (CORRUPT), not "no dataset"."""
    try:
        return bool(FileSystems.match([FileSystems.join(folder, SHARD_GLOB)], limits=[1])[0].metadata_list)
    except Exception:  # noqa: BLE001 - a folder that does not exist holds none
        return False


def main(argv: Sequence[str]) -> int:
    args = parse_verify(argv)
    started = time.time()
    target = args.dataset.rstrip("/") or "/"
    try:
        dataset_dir = resolve_dataset_dir(target)
    except DamagedLatest as exc:
        print(f"dcm2tfrecord verify: error: {exc}", file=sys.stderr)
        return 2
    if not FileSystems.exists(FileSystems.join(dataset_dir, MANIFEST_NAME)) and not _has_shards(dataset_dir):
        print(f"dcm2tfrecord verify: error: {target} is not a dataset (no {MANIFEST_NAME}: nothing was "
              "committed there); give the --output of a finished conversion", file=sys.stderr)
        return 2
    try:
        report = verify_dataset(dataset_dir, args.key, not args.no_decrypt)   # resolved once: LATEST read once
    except NewerFormatError as exc:
        print(f"dcm2tfrecord verify: error: {exc}", file=sys.stderr)
        return 2
    print(f"{report.verdict()} [{time.time() - started:.1f} s]")
    for problem in report.problems[:args.max_problems]:
        print(f"  {problem}", file=sys.stderr)
    if len(report.problems) > args.max_problems:
        print(f"  ... {len(report.problems) - args.max_problems} more", file=sys.stderr)
    for note in report.notes:
        print(f"  note: {note}", file=sys.stderr)
    return 0 if report.ok else 1
