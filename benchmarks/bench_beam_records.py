"""Beam's per-record CPU between ProbeHeaders and WriteShards, without probe or write.

The convert graph's middle on the in-process FnApiRunner (one process): records made
from one probed vendor CT slice (a different uri, record id and SOP Instance UID each,
four patients) -> DropDuplicates -> AssignSplits -> CountGroups ->
KeepWhatPlanningNeeds -> PlanShards -> DistributeShards (the Reshuffle) -> the ShardPlans
unpickled and counted where WriteShards would take them. No file is read after the
template's probe and nothing is written, so the figure holds no I/O and no sys time:
the CPU of a run of N records minus that of a run of ``--small`` records, per record,
is the graph's own cost per record (coders, shuffles, DoFn calls, the runner's grouping).

Run it against another checkout's code with PYTHONPATH (the steps it builds exist since
session 5)::

    PYTHONPATH=. python -m benchmarks.bench_beam_records --records 4000 --repeats 3
    PYTHONPATH=/tmp/before python benchmarks/bench_beam_records.py --records 4000 --repeats 3
    PYTHONPATH=. python -m benchmarks.bench_beam_records --smoke    # seconds: tests/e2e/test_bench_smoke_a.py

``--smoke``: 1000 records against 200, once, made from the one slice of a ``ct_vendor_archive(0.5)``
(benchmarks/archives.py, built when missing) unless ``--slice`` names a file.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from dcm2tfrecord.transforms.planning.shards import for_planning
from dcm2tfrecord.transforms.planning.steps import PlanShards
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.records.steps import DropDuplicates
from dcm2tfrecord.transforms.settings import ConversionSettings, DecodeSettings, ShardBounds
from dcm2tfrecord.transforms.splits.steps import CountGroups, with_split
from dcm2tfrecord.transforms.record_model import SourceFile

DEFAULT_SLICE = "benchmarks/.cache/ct_vendor_2000MB_s0_v1/patient_000/series_000/slice_00000.dcm"


def template(path: str):
    size = os.path.getsize(path)
    source = SourceFile(os.path.abspath(path), os.path.basename(path), size, os.path.getmtime(path))
    return probe_file(source, settings=DecodeSettings(id_salt="bench"))


def make_records(chunk: tuple, base):
    """``chunk[1]`` records like ``base``, each its own file and instance (four patients)."""
    start, count = chunk
    root = base.source.uri[:-len(base.source.rel_path)]
    for i in range(start, start + count):
        rel = f"patient_{i % 4:03d}/slice_{i:06d}.dcm"
        ids = dataclasses.replace(base.ids, patient_id=f"P{i % 4}", sop_uid=f"1.2.3.{i}")
        yield dataclasses.replace(base, source=dataclasses.replace(base.source, uri=root + rel, rel_path=rel),
                                  record_id=f"{i:032x}", ids=ids)


def run(base, records: int, chunk: int = 500) -> float:
    """Process CPU seconds of one pipeline run over ``records`` records."""
    settings = ConversionSettings(patterns=("bench",), output_dir="/nonexistent",
                                  bounds=ShardBounds.from_mb(64, 16, 128),
                                  splits=(("train", 0.8), ("validation", 0.1), ("test", 0.1)))
    options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    pipeline = beam.Pipeline(runner=FnApiRunner(), options=options)
    made = (pipeline
            | "Chunks" >> beam.Create([(s, min(chunk, records - s)) for s in range(0, records, chunk)])
            | "MakeRecords" >> beam.FlatMap(make_records, base))
    kept, _ = made | "DropDuplicates" >> DropDuplicates()
    split = kept | "AssignSplits" >> beam.Map(with_split, settings)
    _ = split | "CountGroups" >> CountGroups(settings)
    planned = split | "KeepWhatPlanningNeeds" >> beam.Map(for_planning, settings.seed)
    plans, _ = planned | "PlanShards" >> PlanShards(settings.bounds, settings.seed, settings.min_shards)
    _ = (plans
         | "DistributeShards" >> beam.Reshuffle()
         | "RecordsPerPlan" >> beam.Map(lambda plan: len(plan.records))
         | "Total" >> beam.CombineGlobally(sum)
         | "Check" >> beam.Map(_check, records))
    start = time.process_time()
    pipeline.run().wait_until_finish()
    return time.process_time() - start


def _check(total: int, expected: int) -> None:
    if total != expected:
        raise AssertionError(f"{total} records planned, {expected} made")


def _smoke_slice() -> str:
    """The one slice of the smallest vendor CT archive (built when missing)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if root not in sys.path:            # run as a file: the benchmarks package is the checkout's
        sys.path.append(root)
    from benchmarks.archives import ct_vendor_archive
    return ct_vendor_archive(0.5).file_paths()[0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", default=DEFAULT_SLICE, help="the DICOM file records are made from")
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--small", type=int, default=500, help="the run whose CPU is subtracted")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.records, args.small, args.repeats = 1000, 200, 1
        if args.slice == DEFAULT_SLICE:
            args.slice = _smoke_slice()
    paths = glob.glob(args.slice)
    if not paths:
        print(f"bench_beam_records: --slice {args.slice}: no such file (build the archive with "
              "benchmarks.bench_convert, or name any DICOM file)", file=sys.stderr)
        return 2
    base = template(paths[0])
    run(base, args.small)                     # warm: imports, first-run set-up
    rows = []
    for _ in range(args.repeats):
        small, large = run(base, args.small), run(base, args.records)
        rows.append({"small_cpu_s": small, "large_cpu_s": large,
                     "ms_per_record": (large - small) / (args.records - args.small) * 1e3})
        print(f"{args.small} records {small:.2f} s, {args.records} records {large:.2f} s CPU: "
              f"{rows[-1]['ms_per_record']:.3f} ms per record", flush=True)
    best = min(r["ms_per_record"] for r in rows)
    print(f"best: {best:.3f} ms per record")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"records": args.records, "small": args.small, "runs": rows, "best_ms": best},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
