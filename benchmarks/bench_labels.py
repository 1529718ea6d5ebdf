"""A huge labels CSV against a tiny archive (issue 35, item 9).

Writes a tiny PNG archive (``--files`` images, default 3) and a labels CSV of ``--rows``
rows (default 1,000,000) of which only the archive's files match, converts it with
``python -m dcm2tfrecord.pipeline convert --labels ...`` as a subprocess (the command
line's defaults: all cores), and reports wall time, the peak RSS of the largest process
and of the whole tree (benchmarks/proc_monitor.py), the unmatched-row count of
``dataset.json`` and the sizes of ``errors.jsonl`` and of the unmatched-rows file.

The property to show: time linear and memory flat in the row count.

    .venv/bin/python -m benchmarks.bench_labels --rows 1000000
    .venv/bin/python -m benchmarks.bench_labels --rows 100000,1000000   # memory flat?
    .venv/bin/python -m benchmarks.bench_labels --smoke    # 1,000 and 5,000 rows, seconds (tests/e2e/test_bench_smoke_a.py)

Extra arguments after ``--`` go to the convert command (e.g. --direct_num_workers=1).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np                                                    # noqa: E402
from PIL import Image                                                 # noqa: E402

from benchmarks.archives import CACHE_DIR                             # noqa: E402
from benchmarks.proc_monitor import bench_env, machine_description, run_monitored   # noqa: E402
from dcm2tfrecord.dataset.names import ERRORS_NAME, MANIFEST_NAME, UNMATCHED_ROWS_NAME   # noqa: E402


def write_inputs(root: str, files: int, rows: int) -> tuple[str, str]:
    """The archive folder and the labels CSV (reused when already there)."""
    archive = os.path.join(root, f"labels_archive_{files}")
    csv_path = os.path.join(root, f"labels_{rows}_{files}.csv")
    if not os.path.isdir(archive):
        os.makedirs(archive + ".tmp", exist_ok=True)
        rng = np.random.default_rng(0)
        for i in range(files):
            Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(
                os.path.join(archive + ".tmp", f"img_{i:04d}.png"))
        os.rename(archive + ".tmp", archive)
    if not os.path.exists(csv_path):
        with open(csv_path + ".tmp", "w") as handle:
            handle.write("path,label\n")
            step = max(1, rows // max(files, 1))
            for i in range(rows):
                if i % step == 0 and i // step < files:
                    handle.write(f"img_{i // step:04d}.png,{'ab'[i % 2]}\n")
                else:
                    handle.write(f"elsewhere/{i:08d}.png,{'cd'[i % 2]}\n")
        os.rename(csv_path + ".tmp", csv_path)
    return archive, csv_path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000000", help="CSV row counts, comma-separated")
    parser.add_argument("--files", type=int, default=3, help="files in the archive (each matched)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args, extra = parser.parse_known_args(argv)
    if args.smoke:
        args.rows = "1000,5000"
    extra = [a for a in extra if a != "--"]
    root = os.path.join(CACHE_DIR, "labels")
    os.makedirs(root, exist_ok=True)
    print(f"machine: {machine_description()}", flush=True)
    results = []
    for rows in [int(r) for r in args.rows.split(",") if r]:
        archive, csv_path = write_inputs(root, args.files, rows)
        output = os.path.join(root, f"out_{rows}")
        shutil.rmtree(output, ignore_errors=True)
        cmd = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive,
               "--output", output, "--labels", csv_path, "--id_salt", "bench-labels", *extra]
        print(f"\n$ {' '.join(cmd)}", flush=True)
        run = run_monitored(cmd, env=bench_env(), log_prefix=os.path.join(root, f"log_{rows}"))
        if run.returncode != 0:
            print(f"convert FAILED (exit {run.returncode}):\n{run.tail()}", flush=True)
            return 1
        with open(os.path.join(output, MANIFEST_NAME)) as handle:
            counts = json.load(handle)["counts"]

        def size(name: str) -> int:
            path = os.path.join(output, name)
            return os.path.getsize(path) if os.path.exists(path) else 0
        row = {"rows": rows, "files": args.files, "wall_s": round(run.wall_s, 1),
               "cpu_s": round(run.cpu_s, 1), "peak_largest_mib": round(run.peak_largest_mib),
               "peak_sum_mib": round(run.peak_sum_mib), "written": counts["written"],
               "label_rows_rejected": counts.get("label_rows_rejected", {}),
               "errors_jsonl_bytes": size(ERRORS_NAME), "unmatched_rows_bytes": size(UNMATCHED_ROWS_NAME)}
        results.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(output, ignore_errors=True)
    print("\n| CSV rows | wall s | CPU s | peak RSS largest process MiB | peak RSS tree MiB "
          "| errors.jsonl bytes | unmatched rows file bytes |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['rows']:,} | {r['wall_s']} | {r['cpu_s']} | {r['peak_largest_mib']} "
              f"| {r['peak_sum_mib']} | {r['errors_jsonl_bytes']:,} | {r['unmatched_rows_bytes']:,} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"machine": machine_description(), "rows": results}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
