"""End to end: records large against --max_shard_mb never share a shard above the maximum.

A PNG archive of a few 64x64 images (~4.5 KB records) among many 16x16 ones
(~0.7 KB), converted under a 6000-byte maximum: the largest record passes
max/2, where the shard count capped at T/largest made shards of several
records above the maximum (issue 23). Every shard of two or more records must
now fit the maximum, the names must stay contiguous (-of-n, no gap), and every
record must be read back.
"""
from __future__ import annotations

import os

from dcm2tfrecord import reader
from tests.support import run_convert, write_png_archive

MAX_BYTES = 6000


def test_every_multi_record_shard_within_max_with_large_records(tmp_path):
    root = tmp_path / "in"
    write_png_archive(root / "large", 3, 64, 64, seed=1)
    write_png_archive(root / "small", 12, 16, 16, seed=2)
    out = tmp_path / "out"
    run_convert(root, out, target_shard_mb=3000 / (1 << 20), min_shard_mb=1000 / (1 << 20),
                max_shard_mb=MAX_BYTES / (1 << 20))
    split = reader.info(str(out))["splits"]["train"]
    shards = split["shards"]
    n = len(shards)
    assert [s["file"] for s in shards] == [f"train-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]
    assert split["num_records"] == 15 == sum(s["num_records"] for s in shards)
    sizes = {s["file"]: (os.path.getsize(out / s["file"]), s["num_records"]) for s in shards}
    assert max(size for size, _ in sizes.values()) > MAX_BYTES / 2, sizes   # large records
    shared = {f: v for f, v in sizes.items() if v[1] > 1}
    assert shared, f"no shard holds two or more records: {sizes}"
    for file, (size, count) in shared.items():
        assert size <= MAX_BYTES, f"{file}: {size} bytes in {count} records > max {MAX_BYTES}"
    records = reader.RandomAccess(str(out), "train")
    assert sorted(records[i]["image"].shape[1] for i in range(len(records))) == [16] * 12 + [64] * 3
