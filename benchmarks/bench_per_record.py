"""CPU per record without Beam: ``probe_file`` and ``build_record`` in a loop (docs/BENCHMARKS.md §3).

Over the first ``--records`` slices of the generated CT archive (benchmarks/archives.py;
``--kind ct_vendor``: the vendor-header one),
files in the page cache, one process: process CPU time per record for the probe
(header parse, spec, identifiers), the write (``build_record``: read, decode, map
values, encode the Example) and, within it, the Example encoding alone
(``serialize_record`` on the same decoded pixels).

    .venv/bin/python -m benchmarks.bench_per_record --ct-mb 500 --records 300 > per_record.json
    .venv/bin/python -m benchmarks.bench_per_record --kind ct_vendor --ct-mb 500 --records 300
    .venv/bin/python -m benchmarks.bench_per_record --smoke     # 4 MiB, 6 slices, seconds
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import ct_archive, ct_vendor_archive  # noqa: E402
from dcm2tfrecord.transforms.records.build import build_record, decode_record  # noqa: E402
from dcm2tfrecord.dataset.features import serialize_record  # noqa: E402
from dcm2tfrecord.transforms.records.probe import probe_file  # noqa: E402
from dcm2tfrecord.transforms.record_model import SourceFile  # noqa: E402
from dcm2tfrecord.transforms.settings import DecodeSettings  # noqa: E402


def _cpu_ms(fn):
    started = time.process_time()
    result = fn()
    return result, (time.process_time() - started) * 1000.0


def measure(root: str, records: int) -> dict:
    paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(root)
                   for name in names if name.endswith(".dcm"))[:records]
    settings = DecodeSettings(id_salt="bench")
    probe, write, encode = [], [], []
    for path in paths:
        with open(path, "rb") as handle:   # page cache
            handle.read()
        st = os.stat(path)
        source = SourceFile(path, os.path.relpath(path, root), st.st_size, st.st_mtime)
        record, ms = _cpu_ms(lambda: probe_file(source, settings=settings))
        probe.append(ms)
        write.append(_cpu_ms(lambda: build_record(record, settings=settings))[1])
        with open(path, "rb") as handle:
            pixels, metadata = decode_record(record, handle, settings)
        encode.append(_cpu_ms(lambda: serialize_record(pixels, record.record_id, record.kind,
                                                       record.label, metadata))[1])
    summary = lambda values: {"mean_ms": round(statistics.fmean(values), 3),  # noqa: E731
                              "median_ms": round(statistics.median(values), 3)}
    return {"records": len(paths), "probe": summary(probe), "probe_after_first": summary(probe[1:]),
            "write": summary(write), "encode_example": summary(encode)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ct-mb", type=float, default=500.0, help="CT archive size (MiB on disk)")
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--kind", choices=("ct", "ct_vendor"), default="ct",
                        help="ct: tidy headers; ct_vendor: the same slices under CT_small.dcm's vendor header")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs "
                             "(a 4 MiB archive, 6 records)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.ct_mb, args.records = 4.0, 6
    build = ct_vendor_archive if args.kind == "ct_vendor" else ct_archive
    print(json.dumps(measure(build(args.ct_mb, log=lambda _: None).path, args.records), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
