"""benchmarks/bench_masks_hostile.py at its --smoke size, so that it cannot rot: it runs as
documented (a subprocess), draws the same mask under both units (the benchmark checks it), reports
--unit file's CPU against --unit series' and holds a SEG of many segments to bounded memory under
either unit. The CPU ratios are the benchmark's to report (docs/BENCHMARKS.md section 21), not a
timed assertion here: what makes --unit file cheap, each slice reading only its own contours and
a SEG's frames read once per worker, is held by counting in tests/transforms/masks/test_rtstruct.py
and test_seg.py. With --pipeline, that SEG through a whole conversion in bounded memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_smoke_run_holds_the_targets(tmp_path):
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_masks_hostile", "--smoke", "--json", str(out)],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {(row["workload"], row["unit"]): row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(w, u) for w in ("seg_segments", "rt_contours", "rt_long_series") for u in ("series", "file")}
    assert "peak RSS MB" in proc.stdout and "file/series cpu" in proc.stdout
    for workload in ("rt_contours", "rt_long_series"):
        assert rows[(workload, "file")]["cpu_ratio"] > 0, rows[(workload, "file")]
    for unit in ("series", "file"):
        assert rows[("seg_segments", unit)]["peak_rss_mb"] <= 1024, rows[("seg_segments", unit)]


def test_the_pipeline_smoke_run_converts_the_seg_within_the_target(tmp_path):
    """--pipeline: the SEG through a real convert under each unit, in one process and with 2
    worker processes: every record written, none failed, and the peak RSS within 1 GB."""
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_masks_hostile", "--pipeline", "--smoke", "--json",
                           str(out)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {(row["workload"], row["unit"]): row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(w, u) for w in ("seg_pipeline_w1", "seg_pipeline_w2") for u in ("series", "file")}
    for (workload, unit), row in rows.items():
        assert row["failed"] == {} and row["written"] == 4, row              # 3 slices and the SEG
        assert row["records"] == (1 if unit == "series" else 3), row
        assert row["processes"] > (1 if workload == "seg_pipeline_w2" else 0), row    # the workers measured too
        assert 0 < row["largest_process_mb"] <= row["peak_rss_mb"], row
        # one process (what a folder this small gets by default): the whole run within 1 GB; with
        # 2 worker processes each process within it (their sum is ~950 MB before any SEG: six
        # interpreters with Beam and TensorFlow, docs/BENCHMARKS.md section 21)
        assert (row["peak_rss_mb"] if workload == "seg_pipeline_w1" else row["largest_process_mb"]) <= 1024, row
