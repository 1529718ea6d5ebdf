"""Thin Beam shells around the pure functions: the boxes of DESIGN.md's picture.

Only metadata crosses a GroupByKey or Reshuffle here (SourceFile,
ProbedRecord, ShardPlan, ShardResult, Outcome); pixels are read, decoded and
written inside WriteShards, one shard per DoFn call.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsDict, AsList, AsSingleton, TaggedOutput

from transforms import manifest as manifest_lib
from transforms import reasons
from transforms.errors import ConversionError
from transforms.probe import DEFAULT_MAX_PIXELS, probe_file
from transforms.records import Outcome, ProbedRecord, ShardPlan, ShardResult, SourceFile
from transforms.shard_plan import ShardBounds, assign_shards, bucket_of, bucket_starts, layout
from transforms.shard_writer import write_shard
from transforms.sources import expand_pattern

NAMESPACE = "dcm2tfrecord"
OUTCOMES = "outcomes"


def count(name: str, n: int = 1) -> None:
    """Beam counters with stable names: the Dataflow UI shows the same numbers."""
    Metrics.counter(NAMESPACE, name).inc(n)


def _count_outcome(outcome: Outcome) -> None:
    count(f"{outcome.status}_{outcome.reason}")


# ---------------------------------------------------------------- match


def _expand_counted(pattern: str) -> Iterable[SourceFile]:
    for source in expand_pattern(pattern):
        count("files_matched")
        yield source


def _first_by_rel_path(sources: Iterable[SourceFile]) -> SourceFile:
    return min(sources, key=lambda s: s.rel_path)


class MatchSources(beam.PTransform):
    """--input patterns -> every matched file, once, spread over workers."""

    def __init__(self, patterns: list[str]):
        super().__init__()
        self.patterns = sorted(set(patterns))

    def expand(self, pbegin):
        return (pbegin
                | "ListInputPatterns" >> beam.Create(self.patterns)
                | "ExpandPatterns" >> beam.FlatMap(_expand_counted)
                # SourceFile
                | "KeyByUri" >> beam.Map(lambda s: (s.uri, s))
                | "DropRepeatedMatches" >> beam.CombinePerKey(_first_by_rel_path)
                | "DropUriKey" >> beam.Values())
                # SourceFile, each uri once


# ---------------------------------------------------------------- probe


class ProbeFn(beam.DoFn):
    """SourceFile -> ProbedRecord, or an Outcome on the ``outcomes`` tag."""

    def __init__(self, max_pixels: int = DEFAULT_MAX_PIXELS, max_record_bytes: Optional[int] = None):
        super().__init__()
        self.max_pixels, self.max_record_bytes = max_pixels, max_record_bytes

    def process(self, source: SourceFile):
        try:
            record = probe_file(source, self.max_pixels, self.max_record_bytes)
        except ConversionError as exc:
            status = reasons.SKIPPED if exc.skipped else reasons.FAILED
            outcome = Outcome(source.uri, status, "probe", exc.reason, str(exc))
        except Exception as exc:  # never let one file take the run down
            outcome = Outcome(source.uri, reasons.FAILED, "probe", reasons.UNEXPECTED,
                              f"{type(exc).__name__}: {exc}")
        else:
            count("files_probed")
            yield record
            return
        count("files_probed")
        _count_outcome(outcome)
        yield TaggedOutput(OUTCOMES, outcome)


# ---------------------------------------------------------------- plan


class SplitTotalsFn(beam.CombineFn):
    """(planned bytes) -> (total bytes, records, largest record) per split."""

    def create_accumulator(self):
        return 0, 0, 0

    def add_input(self, acc, planned_bytes):
        return acc[0] + planned_bytes, acc[1] + 1, max(acc[2], planned_bytes)

    def merge_accumulators(self, accs):
        accs = list(accs)
        return (sum(a[0] for a in accs), sum(a[1] for a in accs), max(a[2] for a in accs))

    def extract_output(self, acc):
        return acc


def _bucket_key(record: ProbedRecord, layouts: Mapping, seed: int):
    return (record.split, bucket_of(record, layouts[record.split].num_buckets, seed)), record


def _shards_of_bucket(keyed, starts: Mapping, layouts: Mapping, seed: int):
    (split, bucket), records = keyed
    for index, record in assign_shards(records, starts[(split, bucket)], layouts[split], seed):
        yield (split, index), record


def _to_plan(keyed, layouts: Mapping, seed: int) -> ShardPlan:
    from transforms.shard_plan import sort_key
    (split, index), records = keyed
    ordered = tuple(sorted(records, key=lambda r: sort_key(r, seed)))
    return ShardPlan(split=split, index=index, num_shards=layouts[split].num_shards, records=ordered)


class PlanShards(beam.PTransform):
    """ProbedRecord -> ShardPlan, from header metadata only (see transforms.shard_plan)."""

    def __init__(self, bounds: ShardBounds, seed: int = 0):
        super().__init__()
        self.bounds, self.seed = bounds, seed

    def expand(self, records):
        bounds, seed = self.bounds, self.seed
        layouts = (records
                   | "KeyPlannedBytesBySplit" >> beam.Map(lambda r: (r.split, r.planned_bytes))
                   | "SumSplitBytes" >> beam.CombinePerKey(SplitTotalsFn())
                   # (split, (bytes, records, largest record))
                   | "ChooseShardCounts" >> beam.MapTuple(
                       lambda split, t: (split, layout(t[0], t[1], t[2], bounds))))
                   # (split, SplitLayout)
        layouts_by_split = AsDict(layouts)
        bucketed = (records
                    | "AssignHashBucket" >> beam.Map(_bucket_key, layouts_by_split, seed))
                    # ((split, bucket), ProbedRecord)
        starts = (bucketed
                  | "BucketPlannedBytes" >> beam.MapTuple(lambda key, r: (key, r.planned_bytes))
                  | "SumBucketBytes" >> beam.CombinePerKey(sum)
                  | "CollectBucketSizes" >> beam.combiners.ToList()
                  | "PrefixSumBuckets" >> beam.Map(bucket_starts))
                  # {(split, bucket): start offset}
        return (bucketed
                | "GroupHashBuckets" >> beam.GroupByKey()
                # ((split, bucket), [ProbedRecord]): smaller than a shard
                | "AssignShards" >> beam.FlatMap(_shards_of_bucket, AsSingleton(starts),
                                                 layouts_by_split, seed)
                # ((split, shard index), ProbedRecord)
                | "GroupShards" >> beam.GroupByKey()
                | "OrderShardRecords" >> beam.Map(_to_plan, layouts_by_split, seed))
                # ShardPlan


# ---------------------------------------------------------------- write


class WriteShardFn(beam.DoFn):
    """ShardPlan -> ShardResult, plus an Outcome per record that did not convert."""

    def __init__(self, output_dir: str):
        super().__init__()
        self.output_dir = output_dir

    def process(self, plan: ShardPlan):
        result, outcomes = write_shard(plan, self.output_dir)
        count("records_written", result.num_records)
        count("bytes_written", result.num_bytes)
        count("shards_written")
        yield result
        for outcome in outcomes:
            _count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)


# ---------------------------------------------------------------- commit


def _commit(_, results: list[ShardResult], outcomes: list[Outcome], matched: int,
            output_dir: str, options: dict, version: str) -> str:
    has_dicom = any("dicom" in r.kinds for r in results)
    manifest = manifest_lib.build_manifest(results, outcomes, matched, options, version, has_dicom)
    return manifest_lib.commit(output_dir, manifest, outcomes)


class ConvertArchive(beam.PTransform):
    """The whole job: match -> probe -> plan -> reshuffle -> write -> commit."""

    def __init__(self, patterns: list[str], output_dir: str, bounds: ShardBounds,
                 options: dict, version: str, max_pixels: int = DEFAULT_MAX_PIXELS, seed: int = 0):
        super().__init__()
        self.patterns, self.output_dir, self.bounds = patterns, output_dir, bounds
        self.options, self.version, self.max_pixels, self.seed = options, version, max_pixels, seed

    def expand(self, pbegin):
        sources = pbegin | "MatchInputs" >> MatchSources(self.patterns)
        # SourceFile
        probed = (sources
                  | "ProbeHeaders" >> beam.ParDo(ProbeFn(self.max_pixels, self.bounds.max_bytes)).with_outputs(
                      OUTCOMES, main="records"))
        # records: ProbedRecord; outcomes: Outcome
        written = (probed.records
                   | "PlanShards" >> PlanShards(self.bounds, self.seed)
                   # ShardPlan (metadata only)
                   | "DistributeShards" >> beam.Reshuffle()
                   | "WriteShards" >> beam.ParDo(WriteShardFn(self.output_dir)).with_outputs(
                       OUTCOMES, main="shards"))
        # shards: ShardResult; outcomes: Outcome
        outcomes = ((probed[OUTCOMES], written[OUTCOMES])
                    | "CollectOutcomes" >> beam.Flatten())
        matched = sources | "CountMatched" >> beam.combiners.Count.Globally()
        return (pbegin
                | "CommitOnce" >> beam.Create([None])
                | "CommitDataset" >> beam.Map(
                    _commit, AsList(written.shards), AsList(outcomes), AsSingleton(matched),
                    self.output_dir, self.options, self.version))
                # path of dataset.json
