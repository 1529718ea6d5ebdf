"""benchmarks/bench_peers.py at a tiny size, so that it cannot rot: it runs as documented
(a subprocess, `python -m benchmarks.bench_peers`), every format it measures writes and reads
back every record, each read gives the arrays the archive decodes to (the benchmark checks
the first records' CRC32 itself), and the tables come out.

The fast test runs dcm2tfrecord's variants and ArrayRecord + Grain (the test extra installs
grain and array_record) on two CT slices; the slow one runs every format on both workloads
(WebDataset and Mosaic Streaming where installed: docs/BENCHMARKS.md gives the pip line;
a format whose package is missing is reported as not installed, and that is checked too).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _bench(tmp_path, *args) -> tuple[list, str]:
    env = dict(os.environ)
    paths = [p for p in (os.path.join(ROOT, ".pkgroot"), ROOT) if os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_peers", *args, "--work", str(tmp_path / "work"),
                           "--cache", str(tmp_path / "cache"), "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text()), proc.stdout


def _check_rows(result: dict, records: int) -> dict:
    rows = {row["format"]: row for row in result["rows"]}
    for name, row in rows.items():
        if "missing" in row:
            continue
        assert row["bytes"] > 0, name
        assert row["write"]["records"] == records, name
        assert row["reads"], name
        for read in row["reads"]:
            if read["sequential"] is not None:
                assert read["sequential"]["records"] == records, (name, read["how"])
            if read["random"] is not None:
                assert read["random"]["records"] == records, (name, read["how"])
    plain = {r["how"]: r for r in rows["dcm2tfrecord plain"]["reads"]}
    assert plain["reader.RandomAccess"]["random"] is not None
    assert plain["reader.load (tf.data)"]["random"] is None
    gzip = {r["how"]: r for r in rows["dcm2tfrecord gzip (--gzip_level 1)"]["reads"]}
    assert gzip["reader.RandomAccess"]["sequential"] is None and "gzip" in gzip["reader.RandomAccess"]["refused"]
    assert gzip["reader.load (tf.data)"]["sequential"]["records"] == records
    return rows


def test_bench_peers_ct_dcm2tfrecord_and_array_record(tmp_path):
    results, stdout = _bench(tmp_path, "--ct", "2", "--rgb", "0", "--only", "dcm2tfrecord,ArrayRecord")
    assert [r["workload"] for r in results] == ["2 CT slices, 512x512 int16"]
    rows = _check_rows(results[0], 2)
    assert [name for name in rows if name.startswith("ArrayRecord")] == [
        "ArrayRecord, default options", "ArrayRecord, zstd:1", "ArrayRecord, uncompressed"]
    assert all("missing" not in row for row in rows.values())
    assert rows["ArrayRecord, uncompressed"]["bytes"] > rows["ArrayRecord, default options"]["bytes"]
    assert "| dcm2tfrecord plain | reader.RandomAccess |" in stdout
    assert "| ArrayRecord, default options | grain.ArrayRecordDataSource |" in stdout


@pytest.mark.slow
def test_bench_peers_every_format_on_both_workloads(tmp_path):
    results, stdout = _bench(tmp_path, "--ct", "2", "--rgb", "3")
    assert [r["workload"] for r in results] == ["2 CT slices, 512x512 int16", "3 RGB images, 224x224 uint8"]
    for result, records in zip(results, (2, 3)):
        rows = _check_rows(result, records)
        assert {"WebDataset (tar, .npy)", "MDS (Mosaic Streaming)", "MDS, compression zstd"} <= set(rows)
        for name in ("WebDataset (tar, .npy)", "MDS (Mosaic Streaming)"):
            assert "missing" in rows[name] or rows[name]["reads"], name
    assert stdout.count("sources decoded") == 2
