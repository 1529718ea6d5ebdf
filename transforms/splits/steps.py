"""AssignSplits and CountGroups: each record's split, and how many groups each split holds."""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from transforms.values import ProbedRecord
from transforms.settings import ConversionSettings
from transforms.splits import assign


def group_of(record: ProbedRecord, settings: ConversionSettings) -> str:
    """The raw group key (patient, study, series or record) a record's split follows."""
    return assign.group_key(settings.split_by_for(record.kind), record.ids, record.record_id)


def with_split(record: ProbedRecord, settings: ConversionSettings) -> ProbedRecord:
    return dataclasses.replace(record, split=assign.assign_split(group_of(record, settings),
                                                                 settings.splits))


def _splits_of_group(groups):
    return len(set(groups))


class CountGroups(beam.PTransform):
    """ProbedRecord -> ({split: distinct groups}, groups found in more than one split)."""

    def __init__(self, settings: ConversionSettings):
        super().__init__()
        self.settings = settings

    def expand(self, records):
        settings = self.settings
        pairs = (records
                 | "SplitAndGroup" >> beam.Map(lambda r: (r.split, group_of(r, settings)))
                 | "DistinctSplitGroups" >> beam.Distinct())
        # (split, group key): raw identifiers, counted, never written
        per_split = pairs | "CountGroupsPerSplit" >> beam.combiners.Count.PerKey()
        leaking = (pairs
                   | "GroupFirst" >> beam.KvSwap()
                   | "SplitsPerGroup" >> beam.CombinePerKey(_splits_of_group)
                   | "GroupsInSeveralSplits" >> beam.Filter(lambda kv: kv[1] > 1)
                   | "CountLeakingGroups" >> beam.combiners.Count.Globally())
        return per_split, leaking
