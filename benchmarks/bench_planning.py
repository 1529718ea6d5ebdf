"""Shard planning at archive scale: metadata only, no pixel files.

Builds N synthetic ``ProbedRecord``s inside the pipeline (``beam.Create`` over
chunk starts, ``FlatMap`` each chunk into records), runs the real
``PlanShards`` transform (transforms.planning.steps) on Beam's FnApiRunner
in-process, and reports:

* wall time, CPU time of this process (robust when the machine is shared) and peak RSS of this process (``ru_maxrss``; the in-memory
  FnApiRunner runs the SDK harness in this same process, and it buffers every
  GroupByKey in memory, so RSS here is the *local runner's* footprint, not a
  Dataflow worker's),
* number of shards and min / median / max planned shard size,
* the largest group any step materialized, against N:
    - GroupHashBuckets: max records per (split, bucket) group, measured twice:
      (a) a parallel branch that keys the same records with the same
      ``bucket_key`` and the same layouts and counts per key, and
      (b) the Beam Distribution metric ``records_per_hash_bucket`` that the
      real AssignShards step records for every group it is given;
    - GroupShards: max records per (split, shard) group = max records per plan;
    - side inputs: layouts (one entry per split), bucket-size list and
      prefix-sum dict (one number per non-empty bucket), with encoded sizes,
* bytes per record through each shuffle, encoded with the coder Beam uses for
  these untyped PCollections (``registry.get_coder(object)`` =
  ``FastPrimitivesCoder``, whose fallback for dataclasses is pickle), and the
  exact per-record size of the ShardPlans that go through the Reshuffle.

Record mix (decided per record by a hash of its id, so reproducible):
  88 %  CT slice      1 x 512 x 512  int16   (512 KiB)
   6 %  MR slice      1 x 256 x 256  int16   (128 KiB)
   5 %  multi-frame   4..16 x 512 x 512 int16 (2-8 MiB)
   1 %  radiograph    1 x 2500 x 2048 uint16 (~9.8 MiB)
Splits: 80 % train, 10 % validation, 10 % test.

    CUDA_VISIBLE_DEVICES=-1 TF_CPP_MIN_LOG_LEVEL=2 \\
        .venv/bin/python -m benchmarks.bench_planning --records 1000000
    .venv/bin/python -m benchmarks.bench_planning --records 100000 --json out.json
    .venv/bin/python -m benchmarks.bench_planning --records 100000 --plain   # no instrumentation
    .venv/bin/python -m benchmarks.bench_planning --scale 1000000,2000000,4000000 --plain  # RSS vs N, 20 M
    .venv/bin/python -m benchmarks.bench_planning --smoke    # 2,000 records, seconds (tests/e2e/test_bench_smoke_b.py)

Run one record count per process: ``ru_maxrss`` is the lifetime peak of the process.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import resource
import statistics
import sys
import tempfile
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import apache_beam as beam                                                # noqa: E402
from apache_beam.coders import registry                                   # noqa: E402
from apache_beam.metrics.metric import MetricsFilter                      # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions          # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner     # noqa: E402

from dcm2tfrecord.pipeline.launch.fork_server import local_runner                   # noqa: E402

from dcm2tfrecord.transforms.counters import NAMESPACE                               # noqa: E402
from dcm2tfrecord.transforms.planning.shards import (PLANNING_BUCKETS, entry_planned_bytes,  # noqa: E402
                                                     entry_record, for_planning, planning_entry)
from dcm2tfrecord.transforms.planning.steps import BUCKET_RECORDS, PlanShards, bucket_key  # noqa: E402
from dcm2tfrecord.transforms.hashing import record_id                                  # noqa: E402
from dcm2tfrecord.transforms.record_model import (Identifiers, ImageSpec, ProbedRecord,   # noqa: E402
                               ShardPlan, SourceFile, to_bytes)
from dcm2tfrecord.dataset.results import ShardResult                                   # noqa: E402
from dcm2tfrecord.transforms.planning.shards import bucket_starts                           # noqa: E402
from dcm2tfrecord.transforms.settings import MB, ShardBounds                              # noqa: E402


CODER = registry.get_coder(object)          # FastPrimitivesCoder (pickle fallback)
ROOT = "gs://example-bucket/ct-archive/"
MTIME = 1_700_000_000.0
SMOKE_RECORDS = 2_000


# ---------------------------------------------------------------- synthetic records


def _rel_path(i: int) -> str:
    # ~200 images per series, 4 series per study, 1 study per patient
    return (f"patient{i // 800:07d}/study1/series{(i // 200) % 4}/"
            f"IM{i:09d}.dcm")


def make_record(i: int) -> ProbedRecord:
    rel = _rel_path(i)
    rid = record_id(rel)
    h = int(rid[:8], 16) % 100          # record kind
    s = int(rid[8:16], 16) % 10         # split
    if h < 88:
        spec = ImageSpec(1, 512, 512, 1, "int16")
    elif h < 94:
        spec = ImageSpec(1, 256, 256, 1, "int16")
    elif h < 99:
        spec = ImageSpec(4 + int(rid[16:20], 16) % 13, 512, 512, 1, "int16")
    else:
        spec = ImageSpec(1, 2500, 2048, 1, "uint16")
    split = "train" if s < 8 else ("validation" if s == 8 else "test")
    source = SourceFile(ROOT + rel, rel, spec.num_pixel_bytes + 2048 + i % 512,
                        MTIME + (i % 86_400))
    return ProbedRecord(source, record_id=rid, kind="dicom", spec=spec, split=split)


def make_chunk(start: int, chunk: int, total: int):
    for i in range(start, min(start + chunk, total)):
        yield make_record(i)


# ---------------------------------------------------------------- instrumentation




def _plan_stats(plan: ShardPlan, encode: bool = True):
    return (plan.split, plan.index, plan.num_shards, len(plan.records),
            sum(r.planned_bytes for r in plan.records),
            len(CODER.encode(plan)) if encode else 0)


class _BucketCountFn(beam.CombineFn):
    """(records, planned bytes) per bucket key, lifted like SumBucketBytes."""

    def create_accumulator(self):
        return 0, 0

    def add_input(self, acc, planned_bytes):
        return acc[0] + 1, acc[1] + planned_bytes

    def merge_accumulators(self, accs):
        accs = list(accs)
        return sum(a[0] for a in accs), sum(a[1] for a in accs)

    def extract_output(self, acc):
        return acc


def _bucket_summary(pairs):
    """pairs: [((split, bucket), (records, bytes))] -> what the side inputs and groups hold."""
    sizes = [(key, b) for key, (_, b) in pairs]
    starts = bucket_starts(sizes)
    counts = [n for _, (n, _) in pairs]
    return {
        "num_buckets": len(pairs),
        "max_bucket_records": max(counts),
        "min_bucket_records": min(counts),
        "median_bucket_records": statistics.median(counts),
        "max_bucket_mb": max(b for _, b in sizes) / MB,
        "bucket_sizes_side_input_bytes": len(CODER.encode(sizes)),
        "prefix_sums_side_input_bytes": len(CODER.encode(starts)),
    }


def _write_json(value, path: str) -> None:
    with open(path, "w") as f:
        json.dump(value, f)


# ---------------------------------------------------------------- per-record bytes


def with_ids(record: ProbedRecord, i: int) -> ProbedRecord:
    """The record as a real DICOM probe carries it: raw identifiers (UIDs of ~60 chars)
    and, where this version of ProbedRecord has it, the slice geometry."""
    root = "1.2.826.0.1.3680043.8.498."
    extra = {}
    if "slice_info" in {f.name for f in dataclasses.fields(ProbedRecord)}:
        from dcm2tfrecord.transforms.record_model import SliceInfo
        extra["slice_info"] = SliceInfo(orientation=(1.0, 0.0, 0.0, 0.0, 1.0, 0.0),
                                        position=(-249.51171875, -249.51171875, -0.625 * (i % 200)),
                                        instance=i % 200 + 1, pixel_spacing=(0.9765625, 0.9765625))
    return dataclasses.replace(record, ids=Identifiers(
        patient_id=f"PAT{i // 800:07d}",
        study_uid=f"{root}{10**30 + i // 800}",
        series_uid=f"{root}{10**31 + i // 200}.1",
        sop_uid=f"{root}{10**32 + i}.1.1"), **extra)


@dataclasses.dataclass(frozen=True)
class _PicklePlan:
    """ShardPlan as it crossed the Reshuffle before transforms.record_codec: pickled as a
    dataclass, each record by its own __reduce__ (the baseline of the byte counts)."""
    split: str
    index: int
    num_shards: int
    records: tuple


def _pickle_entry(split: str, entry: bytes) -> tuple:
    """A planning entry as it was before transforms.record_codec: a tuple (order key, record id,
    planned bytes, the record pickled whole, order key and record id included)."""
    record = entry_record(entry)
    return split, (record.order, record.record_id, record.planned_bytes, to_bytes(record))


def probed_ct_slice(i: int = 0) -> "ProbedRecord | None":
    """pydicom's CT_small.dcm as the probe gives it (raw identifiers, slice geometry, a source
    fingerprint and the native pixel layout with its packed dicom/* features), under a path of
    the benchmark's length; None where pydicom's test files are not installed."""
    try:
        from pydicom.data import get_testdata_file
        from dcm2tfrecord.transforms.records.probe import probe_file
        from dcm2tfrecord.transforms.settings import DecodeSettings
        path = get_testdata_file("CT_small.dcm")
        record = probe_file(SourceFile(path, "CT_small.dcm", os.path.getsize(path), MTIME),
                            settings=DecodeSettings())
    except Exception:   # noqa: BLE001 - a figure the benchmark can do without
        return None
    rel = _rel_path(i)
    source = dataclasses.replace(record.source, uri=ROOT + rel, rel_path=rel)
    return dataclasses.replace(record, source=source, record_id=record_id(rel))


def _kv_bytes(records) -> tuple[float, float]:
    """Mean encoded bytes of ((split, bucket), entry) per record: (before, now)."""
    entries = [planning_entry(r) for r in records]
    now = [len(CODER.encode(bucket_key(*e))) for e in entries]
    before = [len(CODER.encode((bucket_key(*e)[0], _pickle_entry(*e)[1]))) for e in entries]
    return sum(before) / len(before), sum(now) / len(now)


def _plan_bytes(records) -> tuple[float, float]:
    """Encoded bytes per record of one ShardPlan of ``records`` as planning makes them: (before, now)."""
    planned = tuple(for_planning(r) for r in records)
    now = len(CODER.encode(ShardPlan("train", 0, 1, planned)))
    before = len(CODER.encode(_PicklePlan("train", 0, 1, planned)))
    return before / len(planned), now / len(planned)


def per_record_bytes(sample: int = 2000) -> dict:
    """Encoded bytes per record of each PCollection that crosses a shuffle.

    The pipeline runs on records without ``ids`` (as the brief's synthetic
    archive); the ``*_with_ids`` figures are the same records carrying raw
    DICOM identifiers and slice geometry, as ``probe_file`` produces them for DICOM input,
    through the same steps (planning_entry drops both before planning); ``ct_native_*`` is a
    real probed CT slice that also carries its native pixel layout. Each planning figure has
    its ``*_baseline``: the same records in the encoding before transforms.record_codec
    (the record pickled whole), measured in this same run.
    """
    records = [make_record(i * 997) for i in range(sample)]
    full = [with_ids(r, i * 997) for i, r in enumerate(records)]

    def mean(values):
        return sum(values) / len(values)

    result = ShardResult("train", 7, 1954, "train-00007-of-01954.tfrecord", 480,
                         268_000_000, "0" * 64, 268_000_000, ("int16",),
                         ((1, 512, 512, 1),), 480, (("-1", 480),), ("dicom",), 1)
    out = {
        "source_file": mean([len(CODER.encode((r.source.uri, r.source))) for r in records]),
        "probed_record": mean([len(CODER.encode(r)) for r in records]),
        "probed_record_pickle": mean([len(pickle.dumps(r, pickle.HIGHEST_PROTOCOL))
                                      for r in records]),
        "group_shards_kv": mean([len(CODER.encode(((r.split, 1234), planning_entry(r)[1])))
                                 for r in records]),
        "split_bytes_kv": mean([len(CODER.encode((r.split, r.planned_bytes)))
                                for r in records]),
        "shard_result_per_shard": len(CODER.encode(result)),
        "probed_record_with_ids": mean([len(CODER.encode(r)) for r in full]),
    }
    out["group_hash_buckets_kv_baseline"], out["group_hash_buckets_kv"] = _kv_bytes(records)
    out["shard_plan_per_record_baseline"], out["shard_plan_per_record"] = _plan_bytes(records[:400])
    out["group_kv_with_ids_baseline"], out["group_kv_with_ids"] = _kv_bytes(full)
    out["shard_plan_per_record_with_ids_baseline"], out["shard_plan_per_record_with_ids"] = \
        _plan_bytes(full[:400])
    ct = [probed_ct_slice(i * 997) for i in range(min(sample, 400))]
    if ct[0] is not None:
        out["ct_native_group_kv_baseline"], out["ct_native_group_kv"] = _kv_bytes(ct)
        out["ct_native_plan_per_record_baseline"], out["ct_native_plan_per_record"] = _plan_bytes(ct)
    return out


# ---------------------------------------------------------------- pipeline


# --runner: the FnApiRunner a local conversion runs on (pipeline.launch.fork_server.local_runner:
# freed memory handed back between stages, pipeline.launch.heap), or Beam's own, the baseline
RUNNERS = ("local", "stock")


def run(num_records: int, chunk: int, bounds: ShardBounds, seed: int, workdir: str,
        measure: bool = True, runner: str = "local") -> dict:
    """measure=False: PlanShards plus per-plan counts only (no bucket branch, no
    in-step metric, no re-encoding of plans), to time planning without the
    benchmark's own instrumentation. ``runner``: one of RUNNERS."""
    plans_path = os.path.join(workdir, "plans.json")
    buckets_path = os.path.join(workdir, "buckets.json")
    layouts_path = os.path.join(workdir, "layouts.json")
    options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    pipeline = beam.Pipeline(runner=local_runner(None) if runner == "local" else FnApiRunner(),
                             options=options)
    records = (pipeline
               | "ChunkStarts" >> beam.Create(list(range(0, num_records, chunk)))
               | "MakeRecords" >> beam.FlatMap(make_chunk, chunk, num_records))
    plans, layouts = records | "PlanShards" >> PlanShards(bounds, seed)

    _ = (plans
         | "PlanStats" >> beam.Map(_plan_stats, measure)
         | "CollectPlanStats" >> beam.combiners.ToList()
         | "WritePlanStats" >> beam.Map(_write_json, plans_path))
    _ = (layouts
         | "LayoutRows" >> beam.MapTuple(lambda split, lay: (split, lay.num_shards, PLANNING_BUCKETS,
                                                             lay.num_records, lay.total_bytes))
         | "CollectLayouts" >> beam.combiners.ToList()
         | "WriteLayouts" >> beam.Map(_write_json, layouts_path))
    # Parallel branch: the same bucket key on the same records, counted per key.
    if measure:
        _ = (records
             | "BenchBucketKey" >> beam.Map(lambda r: bucket_key(*planning_entry(r, seed)))
             | "BenchPlannedBytes" >> beam.MapTuple(lambda key, e: (key, entry_planned_bytes(e)))
             | "BenchCountPerBucket" >> beam.CombinePerKey(_BucketCountFn())
             | "BenchCollectBuckets" >> beam.combiners.ToList()
             | "BenchSummarize" >> beam.Map(_bucket_summary)
             | "BenchWriteBuckets" >> beam.Map(_write_json, buckets_path))

    start, cpu_start = time.perf_counter(), time.process_time()
    result = pipeline.run()
    result.wait_until_finish()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start

    with open(plans_path) as f:
        plan_rows = json.load(f)
    buckets = None
    if measure:
        with open(buckets_path) as f:
            buckets = json.load(f)
    with open(layouts_path) as f:
        layout_rows = json.load(f)
    dist = None
    for d in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE)
                                    .with_name(BUCKET_RECORDS))["distributions"]:
        dist = d.committed or d.attempted
    shard_mb = sorted(row[4] / MB for row in plan_rows)
    shard_records = [row[3] for row in plan_rows]
    planned_records = sum(shard_records)
    plan_bytes = sum(row[5] for row in plan_rows)
    return {
        "records": num_records,
        "planned_records": planned_records,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "num_shards": len(plan_rows),
        "layouts": layout_rows,
        "shard_mb_min": shard_mb[0],
        "shard_mb_median": statistics.median(shard_mb),
        "shard_mb_max": shard_mb[-1],
        "shards_outside_bounds": sum(1 for row in plan_rows
                                     if not bounds.min_bytes <= row[4] <= bounds.max_bytes),
        "max_shard_group_records": max(shard_records),
        "median_shard_group_records": statistics.median(shard_records),
        "bucket_branch": buckets,
        "group_hash_buckets_metric": (None if dist is None else
                                      {"groups": dist.count, "records": dist.sum,
                                       "min": dist.min, "max": dist.max}),
        "measured": measure,
        "runner": runner,
        "reshuffle_bytes_per_record": plan_bytes / max(planned_records, 1),
        "reshuffle_total_mb": plan_bytes / MB,
        "max_plan_encoded_mb": max(row[5] for row in plan_rows) / MB,
    }


def print_report(rows: list[dict], per_record: dict) -> None:
    print()
    print("Planning (PlanShards, FnApiRunner in-process, 1 worker, metadata only)")
    header = (f"{'records':>10} {'wall s':>8} {'cpu s':>7} {'rec/s':>8} {'peak RSS MB':>11} {'shards':>7} "
              f"{'min MB':>7} {'median MB':>9} {'max MB':>7} {'out of bounds':>13}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['records']:>10,} {r['wall_s']:>8.1f} {r['cpu_s']:>7.1f} "
              f"{r['records'] / r['wall_s']:>8,.0f} "
              f"{r['peak_rss_mb']:>11,.0f} {r['num_shards']:>7,} {r['shard_mb_min']:>7.1f} "
              f"{r['shard_mb_median']:>9.1f} {r['shard_mb_max']:>7.1f} "
              f"{r['shards_outside_bounds']:>13}")
    print()
    print("Largest group any step materialized (records), against N")
    header = (f"{'records N':>10} {'GroupHashBuckets max':>20} {'(in-step metric)':>16} "
              f"{'GroupShards max':>15} {'max / N':>9} {'buckets':>8} "
              f"{'side inputs KB':>14} {'all planned?':>12}")
    print(header)
    print("-" * len(header))
    for r in rows:
        b = r["bucket_branch"]
        if b is None:
            print(f"{r['records']:>10,}  (--plain: not measured) GroupShards max "
                  f"{r['max_shard_group_records']:,}")
            continue
        metric = r["group_hash_buckets_metric"] or {}
        largest = max(b["max_bucket_records"], r["max_shard_group_records"])
        side_kb = (b["bucket_sizes_side_input_bytes"] + b["prefix_sums_side_input_bytes"]) / 1024
        print(f"{r['records']:>10,} {b['max_bucket_records']:>20,} {metric.get('max', 0):>16,} "
              f"{r['max_shard_group_records']:>15,} {largest / r['records']:>9.2e} "
              f"{b['num_buckets']:>8,} {side_kb:>14,.1f} "
              f"{str(r['planned_records'] == r['records']):>12}")
    print("  (side inputs = bucket-size list + prefix-sum dict, one number per bucket;"
          " layouts = one entry per split)")
    print()
    print("Bytes per record through each shuffle (FastPrimitivesCoder; pickle fallback)")
    rows_b = [
        ("match: (uri, SourceFile) into DropRepeatedMatches", per_record["source_file"]),
        ("ProbedRecord alone (pickled: before planning)", per_record["probed_record"]),
        ("  (plain pickle, protocol 5)", per_record["probed_record_pickle"]),
        ("plan: (split, bytes) into SumSplitBytes (lifted combine)", per_record["split_bytes_kv"]),
        ("plan: ((split, shard), entry) GroupShards", per_record["group_shards_kv"]),
    ]
    for r in rows:
        if not r["measured"]:
            continue
        rows_b.append((f"Reshuffle of ShardPlans, measured, N={r['records']:,}",
                       r["reshuffle_bytes_per_record"]))
    for label, value in rows_b:
        print(f"  {label:<60} {value:>8.1f} B")
    print(f"  {'results: ShardResult, per shard (not per record)':<60} "
          f"{per_record['shard_result_per_shard']:>8.1f} B")
    print(f"  {'ProbedRecord with ids (pickled: before planning)':<60} "
          f"{per_record['probed_record_with_ids']:>8.1f} B")
    print()
    print("Planning shuffles, per record: record pickled whole (before) -> transforms.record_codec (now)")
    for label, key in (
            ("benchmark records: GroupHashBuckets / GroupShards KV", "group_hash_buckets_kv"),
            ("benchmark records: Reshuffle, ShardPlan of 400", "shard_plan_per_record"),
            ("probed DICOM (patient id + 3 UIDs, slice geometry): KV", "group_kv_with_ids"),
            ("probed DICOM: Reshuffle, ShardPlan of 400", "shard_plan_per_record_with_ids"),
            ("probed CT slice + native layout (CT_small.dcm): KV", "ct_native_group_kv"),
            ("probed CT slice + native layout: Reshuffle, plan of 400", "ct_native_plan_per_record")):
        if key not in per_record:
            continue
        before, now = per_record[key + "_baseline"], per_record[key]
        print(f"  {label:<58} x{now / before:.2f} {before:>7.1f} B -> {now:>7.1f} B")


def scale_runs(counts: list[int], extra: list[str], target: int = 20_000_000,
               budget_gb: float = 24.0) -> dict:
    """One subprocess per record count (``ru_maxrss`` is a process's lifetime peak), then a
    least-squares line through (N, peak RSS) and (N, CPU): the local runner's bytes held per
    record (the slope), its fixed cost (the intercept), and both extrapolated to ``target``."""
    import subprocess
    rows = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="bench_planning_scale_") as workdir:
            out = os.path.join(workdir, "run.json")
            print(f"planning {n:,} records in a process of its own ...", flush=True)
            subprocess.run([sys.executable, "-m", "benchmarks.bench_planning", "--records", str(n),
                            "--json", out, *extra], check=True, stdout=subprocess.DEVNULL,
                           cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            with open(out) as f:
                run_ = json.load(f)["runs"][0]
        rows.append({key: run_[key] for key in ("records", "wall_s", "cpu_s", "peak_rss_mb",
                                                "num_shards", "shards_outside_bounds")})
        print(f"  {n:,}: {run_['cpu_s']:.1f} s CPU, peak RSS {run_['peak_rss_mb']:,.0f} MB", flush=True)

    def fit(key):
        xs, ys = [r["records"] for r in rows], [r[key] for r in rows]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                 / max(sum((x - mx) ** 2 for x in xs), 1))
        return slope, my - slope * mx

    rss_slope, rss_base = fit("peak_rss_mb")
    cpu_slope, cpu_base = fit("cpu_s")
    at_target = rss_base + rss_slope * target
    return {"rows": rows, "rss_bytes_per_record": rss_slope * 1024 * 1024, "rss_base_mb": rss_base,
            "cpu_us_per_record": cpu_slope * 1e6, "cpu_base_s": cpu_base, "target_records": target,
            "target_rss_gb": at_target / 1024, "target_cpu_s": cpu_base + cpu_slope * target,
            "budget_gb": budget_gb, "within_budget": at_target / 1024 <= budget_gb}


def print_scale(result: dict, runner: str = "local") -> None:
    print()
    which = ("the local conversion's FnApiRunner (freed memory handed back between stages)"
             if runner == "local" else "Beam's own FnApiRunner, the baseline")
    print(f"Local runner: {which}, in-process, one process per record count")
    header = f"{'records':>10} {'wall s':>8} {'cpu s':>7} {'peak RSS MB':>11} {'RSS B/record':>12} {'shards':>7}"
    print(header)
    print("-" * len(header))
    for r in result["rows"]:
        print(f"{r['records']:>10,} {r['wall_s']:>8.1f} {r['cpu_s']:>7.1f} {r['peak_rss_mb']:>11,.0f} "
              f"{r['peak_rss_mb'] * 1024 * 1024 / r['records']:>12,.0f} {r['num_shards']:>7,}")
    print(f"  fit: peak RSS = {result['rss_base_mb']:,.0f} MB + {result['rss_bytes_per_record']:,.0f} B "
          f"per record; CPU = {result['cpu_base_s']:.1f} s + {result['cpu_us_per_record']:.1f} us per record")
    print(f"  {result['target_records']:,} records: peak RSS ~{result['target_rss_gb']:.1f} GB "
          f"({'within' if result['within_budget'] else 'beyond'} {result['budget_gb']:.0f} GB), "
          f"~{result['target_cpu_s']:,.0f} s CPU")


def print_scale_ratio(results: dict) -> None:
    local, stock = results["local"], results["stock"]
    print(f"\nlocal / stock: {local['rss_bytes_per_record'] / max(stock['rss_bytes_per_record'], 1):.2f} of the "
          f"bytes held per record ({local['rss_bytes_per_record']:,.0f} against {stock['rss_bytes_per_record']:,.0f} B), "
          f"peak RSS at {local['rows'][-1]['records']:,} records "
          f"{local['rows'][-1]['peak_rss_mb'] / max(stock['rows'][-1]['peak_rss_mb'], 1):.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=lambda s: [int(x) for x in s.split(",")],
                        default=[1_000_000],
                        help="record count(s), comma separated (default 1000000); peak RSS "
                             "is the process's lifetime peak, so run one count per process "
                             "for a clean RSS figure")
    parser.add_argument("--chunk", type=int, default=10_000, help="records per Create element")
    parser.add_argument("--target-mb", type=float, default=256)
    parser.add_argument("--min-mb", type=float, default=100)
    parser.add_argument("--max-mb", type=float, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plain", action="store_true",
                        help="time PlanShards alone: skip the bucket-count branch, the "
                             "in-step metric and the re-encoding of every plan")
    parser.add_argument("--scale", type=lambda s: [int(x) for x in s.split(",")],
                        help="record counts (e.g. 1000000,2000000,4000000), each planned in a "
                             "process of its own; fits peak RSS and CPU against N and "
                             "extrapolates them to --scale-target records")
    parser.add_argument("--scale-target", type=int, default=20_000_000)
    parser.add_argument("--runner", choices=RUNNERS, default="local",
                        help="local: the FnApiRunner of a local conversion (the default); stock: Beam's own "
                             "FnApiRunner, the baseline (with --scale: both, one after the other)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs (2,000 records "
                             "in chunks of 500, 200 sampled for the bytes per record; the same code paths)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.records, args.chunk = [SMOKE_RECORDS], SMOKE_RECORDS // 4
    bounds = ShardBounds.from_mb(args.target_mb, args.min_mb, args.max_mb)
    if args.scale:
        extra = ["--chunk", str(args.chunk), "--target-mb", str(args.target_mb), "--min-mb",
                 str(args.min_mb), "--max-mb", str(args.max_mb), "--seed", str(args.seed)]
        extra += ["--plain"] if args.plain else []
        results = {}
        for runner in RUNNERS:
            results[runner] = scale_runs(args.scale, extra + ["--runner", runner], args.scale_target)
            print_scale(results[runner], runner)
        print_scale_ratio(results)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"scale": results}, f, indent=2)
        return 0
    per_record = per_record_bytes(200 if args.smoke else 2000)
    rows = []
    for n in args.records:
        with tempfile.TemporaryDirectory(prefix="bench_planning_") as workdir:
            print(f"planning {n:,} records ...", flush=True)
            rows.append(run(n, args.chunk, bounds, args.seed, workdir, not args.plain, args.runner))
            r = rows[-1]
            print(f"  done in {r['wall_s']:.1f} s, {r['num_shards']} shards, "
                  f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    print_report(rows, per_record)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"per_record_bytes": per_record, "runs": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
