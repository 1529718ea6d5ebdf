"""Peak memory of `dcm2tfrecord convert` versus archive size.

Converts CT archives of several sizes (default 500 MiB and 2000 MiB of
uncompressed 512x512 int16 slices, see benchmarks/archives.py) with
``python -m dcm2tfrecord.pipeline convert`` as a subprocess on all cores, and measures:

* wall time and MB/s of output (TFRecord bytes written / wall),
* peak RSS of the largest single process of the tree (launcher or Beam SDK
  worker), from /proc/<pid>/status VmHWM polled every 0.2 s,
* peak of the summed RSS of the whole tree,
* the ratio of both peaks to those of the first (smallest) run.

The property to show: peak RSS does not grow with archive size.

    .venv/bin/python -m benchmarks.bench_memory --sizes 500,2000
    .venv/bin/python -m benchmarks.bench_memory --sizes 50,200      # quick
    .venv/bin/python -m benchmarks.bench_memory --smoke             # 2 and 4 MiB, seconds

Extra arguments after ``--`` go to the convert command (e.g. shard bounds or
Beam options such as --direct_num_workers=1).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import CACHE_DIR, MIB, ct_archive          # noqa: E402
from benchmarks.proc_monitor import (bench_env, machine_description, run_monitored,  # noqa: E402
                                     tfrecord_bytes, wait_until_quiet)
from benchmarks import snapshot                                           # noqa: E402
from dcm2tfrecord.dataset.names import MANIFEST_NAME  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMOKE_SIZES_MIB = (2, 4)


def convert_command(input_dir: str, output_dir: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", input_dir,
            "--output", output_dir, "--overwrite", *extra]


def shard_count(output_dir: str) -> int:
    try:
        with open(os.path.join(output_dir, MANIFEST_NAME)) as f:
            manifest = json.load(f)
        return sum(len(s["shards"]) for s in manifest["splits"].values())
    except (OSError, ValueError, KeyError):
        return -1


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,2000", help="CT archive sizes in MiB, comma-separated")
    parser.add_argument("--interval", type=float, default=0.2, help="/proc polling interval, s")
    parser.add_argument("--keep-output", action="store_true", help="keep the converted datasets")
    parser.add_argument("--quiet-wait", type=float, default=600.0,
                        help="longest wait for a quiet machine before each run, s (default 600)")
    parser.add_argument("--code", default="worktree",
                        help="pipeline code to run: worktree (default) or a commit, e.g. HEAD")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs "
                             "(archives of 2 and 4 MiB, no wait for a quiet machine)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if args.smoke:
        args.sizes, args.quiet_wait = ",".join(f"{mb:g}" for mb in SMOKE_SIZES_MIB), 0.0
    sizes = [float(s) for s in args.sizes.split(",") if s]
    code_dir, code_label = snapshot.resolve(args.code)
    if code_label == "worktree":
        code_label = f"worktree ({snapshot.worktree_state()})"

    print(f"machine: {machine_description()}\npipeline code: {code_label}", flush=True)
    rows = []
    for size in sizes:
        archive = ct_archive(size)
        output = os.path.join(CACHE_DIR, "out", f"mem_ct_{size:g}MB")
        shutil.rmtree(output, ignore_errors=True)
        cmd = convert_command(archive.path, output, extra)
        print(f"\n$ {' '.join(cmd)}", flush=True)
        wait_until_quiet(args.quiet_wait)
        env = snapshot.pipeline_env(bench_env(), code_dir)
        # convert refuses to run without a salt (a random one only when told); ids play no part in memory
        env.setdefault("DCM2TFRECORD_ID_SALT", "bench_memory")
        result = run_monitored(cmd, env=env, cwd=code_dir,
                               interval=args.interval,
                               log_prefix=os.path.join(CACHE_DIR, "logs", f"mem_ct_{size:g}MB"))
        if result.returncode != 0:
            print(f"convert FAILED (exit {result.returncode}):\n{result.tail()}", flush=True)
            return 1
        out_bytes = tfrecord_bytes(output)
        row = {
            "archive_mib": round(archive.source_mb, 1), "files": archive.files,
            "output_mib": round(out_bytes / MIB, 1), "shards": shard_count(output),
            "wall_s": round(result.wall_s, 2), "mb_per_s": round(out_bytes / MIB / result.wall_s, 1),
            "peak_largest_mib": round(result.peak_largest_mib, 1),
            "peak_largest_proc": result.peak_largest_name,
            "peak_sum_mib": round(result.peak_sum_mib, 1), "ru_maxrss_mib": round(result.ru_maxrss_mib, 1),
            "cpu_s": round(result.cpu_s, 1), "foreign_cpu_s": round(result.foreign_cpu_s, 1),
            "processes": [(p.name, round(p.hwm_kib / 1024, 1)) for p in result.processes],
        }
        rows.append(row)
        for name, mib in row["processes"]:
            print(f"    peak {mib:8.1f} MiB  {name}")
        print(f"    wall {row['wall_s']} s, {row['output_mib']} MiB in {row['shards']} shards, "
              f"wait4 ru_maxrss {row['ru_maxrss_mib']} MiB, CPU {row['cpu_s']} s, other processes "
              f"{row['foreign_cpu_s']} s CPU" + ("  <-- NOISY" if row["foreign_cpu_s"] > 0.1 * row["wall_s"] else ""),
              flush=True)
        if not args.keep_output:
            shutil.rmtree(output, ignore_errors=True)

    base = rows[0]
    print("\n| archive MiB | files | output MiB | shards | wall s | MB/s | peak RSS largest proc MiB "
          "| peak RSS sum of tree MiB | largest vs first | sum vs first |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        r["ratio_largest"] = round(r["peak_largest_mib"] / base["peak_largest_mib"], 2)
        r["ratio_sum"] = round(r["peak_sum_mib"] / base["peak_sum_mib"], 2)
        print(f"| {r['archive_mib']:.0f} | {r['files']} | {r['output_mib']:.0f} | {r['shards']} "
              f"| {r['wall_s']:.1f} | {r['mb_per_s']:.1f} | {r['peak_largest_mib']:.0f} "
              f"| {r['peak_sum_mib']:.0f} | {r['ratio_largest']:.2f} | {r['ratio_sum']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_description(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "code": code_label, "extra_args": extra, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
