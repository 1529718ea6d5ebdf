"""PlanShards (records -> ShardPlans, from header metadata) and, for --incremental,
ReuseShards (which records the base version already holds in shards worth keeping).

ReuseShards:
Every current record (probed, labelled, split) gets a fingerprint; every
shard of the base version lists the fingerprints of the records it holds.
A CoGroupByKey on fingerprints (metadata only) places each current record
in the base shard that already holds it, if any. A base shard is reused
when all of its records are placed (none of its sources changed or went
away, no label or split moved); its records are then not written again.
Everything else goes to the ordinary planner, which cuts it into new
size-bounded shards. Small shards are compacted once they add up (see
``dataset.versions.choose_reused``).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import apache_beam as beam
from apache_beam.pvalue import AsDict, AsSingleton

from dcm2tfrecord.dataset.versions import (FINGERPRINTS_VERSION, BaseVersion, PreviousShard, choose_reused,
                                           fingerprints_version, read_records_file, shard_result_from_json)
from dcm2tfrecord.transforms.output.write import record_fingerprint
from dcm2tfrecord.transforms.counters import distribution
from dcm2tfrecord.transforms.planning.shards import (PLANNING_BUCKETS, assign_entries, bucket_of_order,
                                        bucket_starts, dense_index, entry_order, entry_planned_bytes,
                                        entry_record, entry_sort_key, layout, occupied_cuts, over_max,
                                        planning_entry)
from dcm2tfrecord.transforms.settings import ShardBounds
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.record_model import ProbedRecord, ShardPlan

RESULTS = "results"
BUCKET_RECORDS = "records_per_hash_bucket"   # a Beam distribution: records in each planning group


def _read_base_shard(shard: PreviousShard):
    """(fingerprint, shard file) per record of a base shard; its ShardResult on ``results``. A
    records file of fingerprints made otherwise (an earlier FINGERPRINTS_VERSION) holds none
    a current record matches: none are yielded, and the shard is not reused."""
    install_beam_storage()      # a worker's step: the records file through Beam's FileSystems
    content = read_records_file(shard.records_uri)
    if fingerprints_version(content) == FINGERPRINTS_VERSION:
        for fingerprint in content["fingerprints"]:
            yield fingerprint, shard.file
    yield beam.pvalue.TaggedOutput(RESULTS, shard_result_from_json(content["shard"], shard.file))


def _place(keyed) -> Iterable[tuple[str, ProbedRecord]]:
    """(base shard file or "", record): a record goes where an equal record already is."""
    _, grouped = keyed
    holders = sorted(grouped["base"])
    for i, record in enumerate(sorted(grouped["current"], key=lambda r: r.source.uri)):
        yield (holders[i] if i < len(holders) else ""), record


def _fully_held(_, held: Mapping[str, int], shards: tuple[PreviousShard, ...]) -> list[PreviousShard]:
    return [s for s in shards if held.get(s.file, 0) == s.num_records]


def _not_in(placed, files: set) -> bool:
    return placed[0] not in files


class ReuseShards(beam.PTransform):
    """ProbedRecord -> (records still to write, ShardResults of reused base shards)."""

    def __init__(self, base: BaseVersion, bounds: ShardBounds):
        super().__init__()
        self.base, self.bounds = base, bounds

    def expand(self, records):
        base, bounds = self.base, self.bounds
        pipeline = records.pipeline
        read = (pipeline
                | "ListBaseShards" >> beam.Create(list(base.shards))
                | "ReadRecordFiles" >> beam.FlatMap(_read_base_shard).with_outputs(RESULTS, main="held"))
        # held: (fingerprint, base shard file); results: ShardResult per base shard
        placed = ({"current": records | "Fingerprint" >> beam.Map(lambda r: (record_fingerprint(r), r)),
                   "base": read.held}
                  | "MatchFingerprints" >> beam.CoGroupByKey()
                  # (fingerprint, {"current": [ProbedRecord], "base": [shard file]}): metadata only
                  | "PlaceInBaseShards" >> beam.FlatMap(_place))
                  # (base shard file or "", ProbedRecord)
        held = (placed
                | "HeldRecords" >> beam.Filter(lambda kv: bool(kv[0]))
                | "OnePerHeldRecord" >> beam.MapTuple(lambda file, _: (file, 1))
                | "CountPerBaseShard" >> beam.CombinePerKey(sum))
        once = pipeline | "DecideOnce" >> beam.Create([None])
        full = once | "FullyHeldShards" >> beam.Map(_fully_held, AsDict(held), base.shards)
        full_files = full | "FullShardFiles" >> beam.Map(lambda shards: {s.file for s in shards})
        delta = (placed
                 | "NotInFullShards" >> beam.Filter(_not_in, AsSingleton(full_files))
                 | "DeltaBytes" >> beam.MapTuple(lambda _, r: (r.split, r.planned_bytes))
                 | "SumDeltaBySplit" >> beam.CombinePerKey(sum))
        reused = once | "ChooseReused" >> beam.Map(
            lambda _, shards, delta_bytes: choose_reused(shards, delta_bytes, bounds.min_bytes,
                                                         bounds.target_bytes),
            AsSingleton(full), AsDict(delta))
        to_write = (placed
                    | "NotReused" >> beam.Filter(_not_in, AsSingleton(reused))
                    | "RecordsToWrite" >> beam.Values())
        results = (read[RESULTS]
                   | "ReusedShards" >> beam.Filter(lambda r, files: r.file in files, AsSingleton(reused)))
        return to_write, results


# ---------------------------------------------------------------- plan


class SplitTotalsFn(beam.CombineFn):
    """(planned bytes) -> (total bytes, records, largest record, smallest record) per split
    (smallest 0 while no record is seen)."""

    def create_accumulator(self):
        return 0, 0, 0, 0

    def add_input(self, acc, planned_bytes):
        smallest = min(acc[3], planned_bytes) if acc[1] else planned_bytes
        return acc[0] + planned_bytes, acc[1] + 1, max(acc[2], planned_bytes), smallest

    def merge_accumulators(self, accs):
        seen = [a for a in accs if a[1]]
        if not seen:
            return self.create_accumulator()
        return (sum(a[0] for a in seen), sum(a[1] for a in seen), max(a[2] for a in seen),
                min(a[3] for a in seen))

    def extract_output(self, acc):
        return acc


def bucket_key(split: str, entry: bytes, buckets: int = PLANNING_BUCKETS):
    """((split, hash bucket), entry): the key GroupHashBuckets groups by."""
    return (split, bucket_of_order(entry_order(entry), buckets)), entry


def _shards_of_bucket(keyed, starts: Mapping, layouts: Mapping):
    (split, bucket), entries = keyed
    entries = list(entries)
    distribution(BUCKET_RECORDS, len(entries))   # the largest group planning holds
    start, lay = starts[(split, bucket)], layouts[split]
    for (index, entry), (fine, _) in zip(assign_entries(entries, start, lay),
                                         assign_entries(entries, start, lay.fine())):
        yield (split, index), (fine, entry)


def _planned_shard_size(keyed):
    (split, index), (_, entry) = keyed
    return (split, index), (entry_planned_bytes(entry), 1)


def _choose_cut(keyed, over: frozenset):
    """((split, cut), entry): the capped count's shard, or the fine cut where that split has a
    shard of two or more records above the maximum (see planning.shards)."""
    (split, index), (fine, entry) = keyed
    return (split, fine if split in over else index), entry


def _sum_pairs(pairs):
    pairs = list(pairs)
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


def _with_occupied(split_layout, occupied: Mapping):
    split, lay = split_layout
    return split, lay.with_occupied(occupied[split])


def _to_plan(keyed, occupied: Mapping) -> ShardPlan:
    (split, cut), entries = keyed
    ordered = sorted(entries, key=entry_sort_key)
    cuts = occupied[split]
    return ShardPlan(split=split, index=dense_index(cut, cuts), num_shards=len(cuts),
                     records=tuple(entry_record(e) for e in ordered))


class PlanShards(beam.PTransform):
    """ProbedRecord -> (ShardPlan, (split, SplitLayout)), from header metadata only.

    See transforms.planning.shards for why this keeps shards within bounds without
    any step holding a whole split. ``buckets``: hash buckets per split (the shards are the
    same for any count; tests give a few, so that each holds many records).
    """

    def __init__(self, bounds: ShardBounds, seed: int = 0, min_shards: int = 1,
                 buckets: int = PLANNING_BUCKETS):
        super().__init__()
        if not (isinstance(buckets, int) and buckets >= 1):
            raise ValueError(f"buckets must be a whole number >= 1, not {buckets!r}")
        self.bounds, self.seed, self.min_shards, self.buckets = bounds, seed, min_shards, buckets

    def expand(self, records):
        bounds, seed, min_shards = self.bounds, self.seed, self.min_shards
        entries = records | "PlanningEntries" >> beam.Map(planning_entry, seed)
        # (split, entry): order key, planned bytes, record id and the record as bytes, see planning.shards
        layouts = (entries
                   | "KeyPlannedBytesBySplit" >> beam.MapTuple(lambda split, e: (split, entry_planned_bytes(e)))
                   | "SumSplitBytes" >> beam.CombinePerKey(SplitTotalsFn())
                   # (split, (bytes, records, largest record, smallest record))
                   | "ChooseShardCounts" >> beam.MapTuple(
                       lambda split, t: (split, layout(t[0], t[1], t[2], bounds, min_shards, t[3]))))
                   # (split, SplitLayout): shards of the capped count, fine cuts
        layouts_by_split = AsDict(layouts)
        bucketed = entries | "AssignHashBucket" >> beam.MapTuple(bucket_key, self.buckets)
                   # ((split, bucket), entry)
        starts = (bucketed
                  | "BucketPlannedBytes" >> beam.MapTuple(lambda key, e: (key, entry_planned_bytes(e)))
                  | "SumBucketBytes" >> beam.CombinePerKey(sum)
                  | "CollectBucketSizes" >> beam.combiners.ToList()
                  | "PrefixSumBuckets" >> beam.Map(bucket_starts))
                  # {(split, bucket): start offset}
        assigned = (bucketed
                    | "GroupHashBuckets" >> beam.GroupByKey()
                    # ((split, bucket), [entry]): a contiguous range of the order
                    | "AssignShards" >> beam.FlatMap(_shards_of_bucket, AsSingleton(starts),
                                                     layouts_by_split))
                    # ((split, shard of the capped count), (fine cut, entry))
        over = (assigned
                | "PlannedShardSizes" >> beam.Map(_planned_shard_size)
                | "SumPlannedShards" >> beam.CombinePerKey(_sum_pairs)
                # ((split, shard), (planned bytes, records)): one per shard
                | "CollectShardSizes" >> beam.combiners.ToList()
                | "SplitsOverMax" >> beam.Map(over_max, bounds))
                # frozenset of splits to cut finely
        plans = (assigned
                 | "ChooseCuts" >> beam.Map(_choose_cut, AsSingleton(over))
                 # ((split, cut), entry)
                 | "GroupShards" >> beam.GroupByKey())
                 # ((split, cut), [entry]): one shard
        occupied = (plans
                    | "ShardCuts" >> beam.Keys()
                    | "CollectShardCuts" >> beam.combiners.ToList()
                    | "OccupiedCuts" >> beam.Map(occupied_cuts))
                    # {split: sorted occupied cuts}: at most one number per shard
        plans = plans | "OrderShardRecords" >> beam.Map(_to_plan, AsSingleton(occupied))
                 # ShardPlan, numbered densely over the occupied cuts
        layouts = layouts | "CountOccupiedCuts" >> beam.Map(_with_occupied, AsSingleton(occupied))
                 # (split, SplitLayout): num_shards as written
        return plans, layouts
