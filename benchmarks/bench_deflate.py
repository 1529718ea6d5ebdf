"""Deflate implementations on CT slices (issue 36, item 1): zlib (what gzip shards and PNG
records use), python-isal (ISA-L's igzip) and zlib-ng, compressing and inflating the pixel
data of the same slices in this process; CPU per slice and the compressed ratio.

    .venv/bin/python -m benchmarks.bench_deflate --slices 60
    .venv/bin/python -m benchmarks.bench_deflate --smoke     # 2 slices, a second (tests/e2e/test_bench_smoke_a.py)
    (pip install isal zlib-ng first: neither is a dependency of the project)
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import zlib

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import ct_pixels                      # noqa: E402
from benchmarks.proc_monitor import machine_description        # noqa: E402


def _codecs() -> dict:
    out = {"zlib": (zlib.compress, zlib.decompress, (1, 3, 6, 9))}
    try:
        from isal import isal_zlib
        out["isal"] = (isal_zlib.compress, isal_zlib.decompress, (0, 1, 2, 3))
    except ImportError:
        print("isal not installed: pip install isal")
    try:
        from zlib_ng import zlib_ng
        out["zlib-ng"] = (zlib_ng.compress, zlib_ng.decompress, (1, 3, 6, 9))
    except ImportError:
        print("zlib-ng not installed: pip install zlib-ng")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=60)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.slices = 2
    slices = [ct_pixels(0, 0, float(z), z).astype("<i2").tobytes() for z in range(args.slices)]
    raw = sum(map(len, slices))
    print(machine_description())
    print(f"{args.slices} CT slices, 512x512 int16 ({raw:,} bytes)")
    print("| deflate | level | ratio | compress CPU ms/slice | x zlib 1 | inflate CPU ms/slice |")
    print("|---|---:|---:|---:|---:|---:|")
    base = None
    for name, (compress, decompress, levels) in _codecs().items():
        for level in levels:
            cpu = time.process_time()
            packed = [compress(s, level) for s in slices]
            cpu = (time.process_time() - cpu) / len(slices)
            inflate = time.process_time()
            assert all(decompress(p) == s for p, s in zip(packed, slices))
            inflate = (time.process_time() - inflate) / len(slices)
            base = base or cpu
            print(f"| {name} | {level} | {sum(map(len, packed)) / raw:.3f} | {1000 * cpu:.2f} | "
                  f"{cpu / base:.2f} | {1000 * inflate:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
