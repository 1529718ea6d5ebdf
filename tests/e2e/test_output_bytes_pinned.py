"""Output bytes are a contract: shard sha256s of a mixed archive, pinned.

The same input and options must give the same shards on any runner and any
version of the code (CHANGELOG.md lists every deliberate change). The
archive mixes pydicom's real test files (single- and multi-frame, compressed
and native, big-endian), generated CT slices of two patients, PNG and JPEG;
the option sets cover labels, splits, gzip, windowing, resizing, series
volumes and split frames. A change that moves a single byte of a shard fails
here; if it must, update PINNED in tests/support/pinned.py (run this file with
DCM2TFRECORD_PRINT_PINNED=1) and record why in CHANGELOG.md.
"""
from __future__ import annotations

import json
import os

import pytest

from tests.support.pinned import OPTION_SETS, PINNED, archive, convert  # noqa: F401  (archive: a fixture)


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_shard_bytes_are_pinned(archive, tmp_path, name):
    got = convert(archive, tmp_path, name)
    if os.environ.get("DCM2TFRECORD_PRINT_PINNED"):
        print(f"\n    {name!r}: {json.dumps(got, indent=8, sort_keys=True)},")
    assert got == PINNED[name]
