"""--incremental: which records the base version already holds in shards worth keeping.

Every current record (probed, labelled, split) gets a fingerprint; every
shard of the base version lists the fingerprints of the records it holds.
A CoGroupByKey on fingerprints (metadata only) places each current record
in the base shard that already holds it, if any. A base shard is reused
when all of its records are placed (none of its sources changed or went
away, no label or split moved); its records are then not written again.
Everything else goes to the ordinary planner, which cuts it into new
size-bounded shards. Small shards are compacted once they add up (see
``transforms.versions.choose_reused``).
"""
from __future__ import annotations

from typing import Iterable, Mapping

import apache_beam as beam
from apache_beam.pvalue import AsDict, AsSingleton

from transforms.records import ProbedRecord
from transforms.shard_plan import ShardBounds
from transforms.versions import (BaseVersion, PreviousShard, choose_reused, read_records_file,
                                 record_fingerprint, shard_result_from_json)

RESULTS = "results"


def _read_base_shard(shard: PreviousShard):
    """(fingerprint, shard file) per record of a base shard; its ShardResult on ``results``."""
    content = read_records_file(shard.records_uri)
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
