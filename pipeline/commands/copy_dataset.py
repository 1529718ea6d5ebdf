"""``dcm2tfrecord copy SRC DST [--version V]``: a dataset copied between stores (local,
``gs://``, any scheme Beam knows), every byte checked at the destination, resumable after a
kill, ``dataset.json`` written last (``dataset.transfer``).

Exit status 0 when the copy is whole (or was already), 1 when a file could not be copied whole
(a damaged source, a destination that lost bytes: the line names the file), 2 for a usage error
or a destination it must not write into.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from dcm2tfrecord.dataset.errors import FormatError
from dcm2tfrecord.dataset.manifest import ManifestError
from dcm2tfrecord.dataset.transfer import CopyFailed, CopyRefused, copy_dataset
from dcm2tfrecord.dataset.versions import DamagedLatest


def parse_copy(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord copy",
        description="Copy a committed dataset (or one version of a root written with --incremental) "
                    "to another folder or bucket: every shard checked against dataset.json's sha256 "
                    "and every file read back at the destination; run it again after an interruption "
                    "to finish (files already copied are verified, not copied again). dataset.json "
                    "(and LATEST) are written last.")
    parser.add_argument("source", metavar="SRC", help="a dataset directory or versioned root, local or gs://")
    parser.add_argument("destination", metavar="DST", help="an empty folder (or an earlier copy of SRC)")
    parser.add_argument("--version", metavar="V", default=None,
                        help="the version of a versioned root to copy (default: the one LATEST names)")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    args = parse_copy(argv)
    try:
        report = copy_dataset(args.source, args.destination, args.version,
                              progress=lambda line: print(f"  {line}", file=sys.stderr))
    except (CopyRefused, DamagedLatest, ManifestError, ValueError) as exc:
        print(f"dcm2tfrecord copy: error: {exc}", file=sys.stderr)
        return 2
    except (CopyFailed, FormatError, OSError) as exc:
        print(f"dcm2tfrecord copy: failed: {exc}", file=sys.stderr)
        return 1
    print(report.line())
    return 0
