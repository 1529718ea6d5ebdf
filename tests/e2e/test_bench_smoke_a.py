"""Benchmarks at their --smoke size, so that they cannot rot: bench_beam_records, bench_convert,
bench_deflate, bench_enhanced, bench_gzip, bench_gzip_read, bench_labels, bench_loaders and
bench_cluster each run as documented (``python -m benchmarks.<name> --smoke``, a subprocess),
through the same code as a full run on tiny inputs, and what they print or write with --json
must hold the rows and columns a full run reports, with the counts the inputs imply. A change
to the product that breaks a benchmark fails here, not the next time someone measures.

The figures themselves (ratios, CPU per record, images/s) are the benchmarks' to report, at full
size, in docs/BENCHMARKS.md: nothing here asserts how fast anything is. Each run gets its own
archive cache (DCM2TFRECORD_BENCH_CACHE, benchmarks/archives.py) in tmp_path: runs in parallel
share nothing, and no conversion cached by older code is reused.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _smoke(tmp_path, name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m benchmarks.<name> --smoke *args`` from the repository root; exit status 0."""
    env = dict(os.environ, PYTHONPATH=ROOT, DCM2TFRECORD_BENCH_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{name} --smoke: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return proc


def _table(stdout: str, first_header: str) -> list[dict[str, str]]:
    """The rows of the Markdown table whose header starts with ``| first_header |``, each
    column -> cell (a column named twice, such as "x plain", holds the last one's cell)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    assert lines[start + 1].startswith("|---"), lines[start + 1]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(header), (header, line)
        rows.append(dict(zip(header, cells)))
    return rows


def _named(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Rows by their first cell."""
    return {next(iter(row.values())): row for row in rows}


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def test_bench_deflate(tmp_path):
    proc = _smoke(tmp_path, "bench_deflate")
    assert "2 CT slices, 512x512 int16 (1,048,576 bytes)" in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| deflate")]
    rows = {(cells[0], int(cells[1])): cells for cells in ([c.strip() for c in line.strip("|").split("|")]
                                                           for line in lines)}
    expected = {("zlib", level) for level in (1, 3, 6, 9)}
    # the peers where this venv has them (neither is a dependency): the script says which it lacks
    expected |= {("isal", level) for level in (0, 1, 2, 3)} if _installed("isal") else set()
    expected |= {("zlib-ng", level) for level in (1, 3, 6, 9)} if _installed("zlib_ng") else set()
    assert set(rows) == expected, sorted(rows)
    assert ("isal not installed" in proc.stdout) != _installed("isal")
    for name, level in rows:
        ratio, compress, x_zlib, inflate = (float(c) for c in rows[(name, level)][2:6])
        assert 0 < ratio < 1, rows[(name, level)]            # CT pixels compress, losslessly (checked there)
        assert compress > 0 and x_zlib > 0 and inflate > 0, rows[(name, level)]
    assert float(rows[("zlib", 1)][4]) == 1.0


def test_bench_enhanced(tmp_path):
    proc = _smoke(tmp_path, "bench_enhanced")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    by = {(row["case"], row["frames"]): row for row in rows}
    assert set(by) == {(case, frames) for case in ("stack", "split", "plain", "temporal") for frames in (8, 16)}
    for (case, frames), row in by.items():
        # one record per stack: the whole file, each frame, each temporal pair of frames
        assert row["records"] == {"stack": 1, "split": frames, "plain": frames, "temporal": frames // 2}[case], row
        assert row["file_bytes"] > frames * 4 * 4 * 2, row                  # frames of 4 x 4 uint16
        assert row["cpu_ms_per_frame"] > 0 and row["ratio_to_smallest"] > 0, row
    assert all(by[(case, 8)]["ratio_to_smallest"] == 1.0 for case in ("stack", "split", "plain", "temporal"))


def test_bench_beam_records(tmp_path):
    out = tmp_path / "beam_records.json"
    proc = _smoke(tmp_path, "bench_beam_records", "--json", str(out))
    figures = json.loads(out.read_text())
    assert (figures["records"], figures["small"], len(figures["runs"])) == (1000, 200, 1), figures
    run = figures["runs"][0]
    assert run["small_cpu_s"] > 0 and run["large_cpu_s"] > 0, run
    # no sign asserted: at this size the difference of two CPU times is noise
    assert figures["best_ms"] == run["ms_per_record"]
    assert re.search(r"^200 records [\d.]+ s, 1000 records [\d.]+ s CPU: -?[\d.]+ ms per record$", proc.stdout, re.M)


def test_bench_gzip(tmp_path):
    proc = _smoke(tmp_path, "bench_gzip")
    rows = _named(_table(proc.stdout, "shards"))
    assert list(rows) == ["plain", "gzip, --gzip_level 1", "gzip, --gzip_level 9"]
    for row in rows.values():
        assert _number(row["CPU ms/record"]) > 0 and _number(row["wall ms/record"]) > 0, row
    plain, level1, level9 = (_number(row["bytes on disk"]) for row in rows.values())
    assert plain > 2 * 512 * 512 * 2                                      # 2 slices, uncompressed
    assert level9 <= level1 < plain / 2, (plain, level1, level9)          # CT compresses to ~0.4
    # the last "x plain" column: bytes on disk against plain's
    assert [_number(row["x plain"]) for row in rows.values()] == [1.0, round(level1 / plain, 3),
                                                                  round(level9 / plain, 3)]


def test_bench_gzip_read(tmp_path):
    proc = _smoke(tmp_path, "bench_gzip_read")
    rows = _named(_table(proc.stdout, "method"))
    assert list(rows) == ["plain", "gzip1", "gzip1_serial", "gzip9", "pyinflate"]
    for row in rows.values():
        assert _number(row["images/s best"]) > 0 and _number(row["median"]) > 0, row
        assert _number(row["CPU ms/image"]) >= 0, row
    images = int(re.search(r"; (\d+) images$", proc.stdout, re.M).group(1))
    assert images == 31, proc.stdout[-2000:]            # every method read them all (the script checks)
    assert len(re.findall(r"^zlib inflate alone, level [19] shards: [\d.]+ ms CPU/image", proc.stdout, re.M)) == 2


def test_bench_labels(tmp_path):
    out = tmp_path / "labels.json"
    _smoke(tmp_path, "bench_labels", "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert [row["rows"] for row in rows] == [1000, 5000]
    for row in rows:
        assert row["written"] == 3, row                                   # every file matched
        assert row["label_rows_rejected"] == {"unmatched_label_row": row["rows"] - 3}, row
        assert row["errors_jsonl_bytes"] > 0 and row["peak_largest_mib"] > 0, row
    assert rows[1]["unmatched_rows_bytes"] > rows[0]["unmatched_rows_bytes"] > 0, rows


def test_bench_loaders(tmp_path):
    proc = _smoke(tmp_path, "bench_loaders")
    methods = ["torch_0w", "torch_0w_1thread", "recipe_0w", "torch_2w", "recipe_2w", "grain_0w", "recipe_grain_0w"]
    for title, records in (("224x224x3 uint8", 20), ("512x512 int16 CT", 3)):
        assert re.search(rf"^{re.escape(title)}: .* \({records} records\)$", proc.stdout, re.M), proc.stdout[-3000:]
        rows = _named(_table(proc.stdout, title))
        assert list(rows) == methods
        for row in rows.values():
            assert _number(row["records/s"]) > 0 and _number(row["CPU ms/record"]) >= 0, row


def _check_convert(rows: list, kinds: tuple) -> None:
    by = {(row["kind"], row["method"]): row for row in rows}
    assert set(by) == {(kind, method) for kind in kinds for method in ("baseline", "decode", "pipeline")}, sorted(by)
    for (kind, method), row in by.items():
        assert row["files"] == 3, row
        assert row["wall_s"] > 0 and row["pixel_mb_per_s"] >= 0 and row["peak_largest_mib"] > 0, row   # MiB/s: 0.1s
        assert row["fixed_s"] is not None and row["fixed_s"] > 0, row       # the 2-file run too
        if method == "decode":
            assert row["output_mib"] == 0, row                              # decode-only writes nothing
        else:
            assert row["output_mib"] > 0, row
        if method == "pipeline":
            assert row["fixed_workers_s"] > 0, row                         # the 2-file run on worker processes
            assert row["c_over_a"] > 0 and row["c_over_b"] > 0, row


def test_bench_convert(tmp_path):
    out = tmp_path / "convert.json"
    proc = _smoke(tmp_path, "bench_convert", "--kinds", "ct", "--json", str(out))
    result = json.loads(out.read_text())
    assert result["smoke"] is True
    _check_convert(result["rows"], ("ct",))
    table = _table(proc.stdout, "archive")
    assert [(row["archive"], row["method"]) for row in table] == [
        ("ct", "a. single loop"), ("ct", "b. decode-only"), ("ct", "c. convert")]
    assert all(int(row["files"]) == 3 for row in table), table


@pytest.mark.slow
def test_bench_convert_every_other_kind(tmp_path):
    """The kinds the test above leaves out: a vendor header, images, multi-frame volumes (8 frames
    at --smoke), uncompressed and RLE: ~5 minutes here."""
    out = tmp_path / "convert.json"
    kinds = ("ct_vendor", "jpeg", "png", "mf", "mf_rle")
    _smoke(tmp_path, "bench_convert", "--kinds", ",".join(kinds), "--json", str(out), timeout=1500)
    _check_convert(json.loads(out.read_text())["rows"], kinds)


def test_bench_cluster_local(tmp_path):
    """Without --engines the smoke run is the local run alone: nothing fetched, no cluster."""
    out = tmp_path / "cluster.json"
    proc = _smoke(tmp_path, "bench_cluster", "--json", str(out))
    figures = json.loads(out.read_text())
    assert list(figures) == ["local"]
    assert figures["local"]["records"] == 2 and figures["local"]["cpu_s"] > 0, figures
    assert re.search(r"^local +2 +[\d.]+ +[\d.]+ +[\d.]+ +1\.00 +1\.00 +0\.0 +True$", proc.stdout, re.M), proc.stdout


def _cluster_unavailable() -> str | None:
    spec = importlib.util.spec_from_file_location("local_cluster", os.path.join(ROOT, "scripts", "local_cluster.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fetchable()


@pytest.mark.slow
def test_bench_cluster_on_both_engines(tmp_path):
    """--smoke --engines spark flink: each cluster started, the 2 slices converted on it and the
    cluster stopped, as a full run does; exit 0 means the shards equal the local run's. The
    first run fetches ~0.9 GB (tests/e2e/test_cluster.py shares the cache); skipped, saying
    why, without java/mvn or offline."""
    why = _cluster_unavailable()
    if why:
        pytest.skip(f"cluster benchmark: {why}")
    out = tmp_path / "cluster.json"
    _smoke(tmp_path, "bench_cluster", "--engines", "spark", "flink", "--json", str(out), timeout=2400)
    figures = json.loads(out.read_text())
    assert list(figures) == ["local", "spark", "flink"]
    for name, row in figures.items():
        assert row["records"] == 2 and row["cpu_s"] > 0 and row["wall_s"] > 0, (name, row)
    assert figures["spark"]["setup_s"] > 0 and figures["flink"]["setup_s"] > 0, figures
