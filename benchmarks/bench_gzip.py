"""Gzip shards at the codec's speed (issue 36, item 1): CPU of a conversion of the same CT
slices written plain and as gzip at several --gzip_level values, in one run.

Each configuration converts the archive in this process on Beam's in-memory runner (one
worker, so the process's CPU time is the conversion's), ``--repeats`` times, alternating;
the median CPU and wall per record are reported with the ratio to the plain write measured
in the same run, and the bytes on disk.

    .venv/bin/python -m benchmarks.bench_gzip --mb 100 --levels 1,3,6,9 --repeats 3
    .venv/bin/python -m benchmarks.bench_gzip --smoke    # 2 slices, levels 1 and 9, once (tests/e2e/test_bench_smoke_a.py)

Level 9 is what every gzip shard was written with before --gzip_level.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.archives import ct_archive                              # noqa: E402
from benchmarks.proc_monitor import machine_description, tfrecord_bytes  # noqa: E402
from dcm2tfrecord.pipeline import convert                               # noqa: E402
from dcm2tfrecord.pipeline.options.table import ConvertOptions           # noqa: E402

IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def one_run(inputs: str, out: str, compression: str, level: int) -> tuple[float, float, int, int]:
    """(CPU s, wall s, records, shard bytes) of one conversion."""
    shutil.rmtree(out, ignore_errors=True)
    extra = {"gzip_level": level} if compression == "gzip" else {}
    opts = ConvertOptions(inputs=(inputs,), output=out, id_salt="bench-gzip", compression=compression,
                          progress="none", **extra)
    cpu, wall = time.process_time(), time.perf_counter()
    summary = convert.run(opts, IN_MEMORY, quiet=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return cpu, wall, int(summary["records"]), tfrecord_bytes(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=100.0, help="archive size (512x512 int16 CT slices)")
    parser.add_argument("--levels", default="1,3,6,9")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.mb, args.levels, args.repeats = 1.0, "1,9", 1
    archive = ct_archive(args.mb)
    configs = [("none", 0)] + [("gzip", int(level)) for level in args.levels.split(",")]
    runs: dict = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for config in configs:
                runs[config].append(one_run(archive.path, os.path.join(tmp, "out"), *config))
    print(machine_description())
    print(f"archive: {archive.path} ({args.mb:g} MB of CT slices); median of {args.repeats}")
    plain_cpu = statistics.median(r[0] / r[2] for r in runs[("none", 0)])
    plain_wall = statistics.median(r[1] / r[2] for r in runs[("none", 0)])
    plain_bytes = runs[("none", 0)][0][3]
    print("| shards | CPU ms/record | x plain | wall ms/record | x plain | bytes on disk | x plain |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for config, results in runs.items():
        cpu = statistics.median(r[0] / r[2] for r in results)
        wall = statistics.median(r[1] / r[2] for r in results)
        name = "plain" if config[0] == "none" else f"gzip, --gzip_level {config[1]}"
        print(f"| {name} | {1000 * cpu:.1f} | {cpu / plain_cpu:.2f} | {1000 * wall:.1f} | "
              f"{wall / plain_wall:.2f} | {results[0][3]:,} | {results[0][3] / plain_bytes:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
