"""AssignSplits and CountGroups: each record's split, and how many groups each split holds."""
from __future__ import annotations

import apache_beam as beam

from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.record_model import ProbedRecord, replaced
from dcm2tfrecord.transforms.settings import ConversionSettings
from dcm2tfrecord.transforms.splits import assign


def group_of(record: ProbedRecord, settings: ConversionSettings) -> str:
    """The raw group key (patient, study, series or record) a record's split follows; the
    volumes of a 4-D NIfTI (no identifiers: split by record) follow their file, together."""
    if record.kind == RecordKind.NIFTI and record.frame is not None:
        return f"file:{record.source.rel_path}"
    return assign.group_key(settings.split_by_for(record.kind), record.ids, record.record_id)


def with_split(record: ProbedRecord, settings: ConversionSettings) -> ProbedRecord:
    return replaced(record, split=assign.assign_split(group_of(record, settings), settings.splits))


class SplitsOfGroup(beam.CombineFn):
    """split names -> the sorted distinct splits of one group.

    The accumulator is the set of splits seen, merged by union: Beam combines
    partial results again (per bundle, per worker, after a shuffle), so a count
    of distinct values per partial result would undercount a group split across
    bundles (len({2}) == 1).
    """

    def create_accumulator(self):
        return set()

    def add_input(self, accumulator, split):
        accumulator.add(split)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = set()
        for accumulator in accumulators:
            merged |= accumulator
        return merged

    def extract_output(self, accumulator):
        return tuple(sorted(accumulator))


class LeakSummary(beam.CombineFn):
    """(group, its splits) of groups in more than one split -> (how many, the splits involved)."""

    def create_accumulator(self):
        return 0, set()

    def add_input(self, accumulator, group_splits):
        groups, splits = accumulator
        splits.update(group_splits[1])
        return groups + 1, splits

    def merge_accumulators(self, accumulators):
        groups, splits = 0, set()
        for count, names in accumulators:
            groups += count
            splits |= names
        return groups, splits

    def extract_output(self, accumulator):
        groups, splits = accumulator
        return groups, tuple(sorted(splits))


class CountGroups(beam.PTransform):
    """ProbedRecord -> ({split: distinct groups},
    (groups found in more than one split, the splits those groups are in)).

    ``slice_splits``: (split, group) pairs the labels CSV gives the slices of a --unit
    series volume other than its first (transforms.labels.steps.AttachLabels): the volume
    goes to its first slice's split, so another split there is a group in two splits,
    counted as a file's would be (not in the groups per split: no record is there)."""

    def __init__(self, settings: ConversionSettings, slice_splits=None):
        super().__init__()
        self.settings, self.slice_splits = settings, slice_splits

    def expand(self, records):
        settings = self.settings
        pairs = (records
                 | "SplitAndGroup" >> beam.Map(lambda r: (r.split, group_of(r, settings)))
                 | "DistinctSplitGroups" >> beam.Distinct())
        # (split, group key): raw identifiers, counted, never written
        per_split = pairs | "CountGroupsPerSplit" >> beam.combiners.Count.PerKey()
        claimed = pairs
        if self.slice_splits is not None:
            claimed = (pairs, self.slice_splits) | "WithSliceSplits" >> beam.Flatten()
        leaking = (claimed
                   | "GroupFirst" >> beam.KvSwap()
                   | "SplitsPerGroup" >> beam.CombinePerKey(SplitsOfGroup())
                   | "GroupsInSeveralSplits" >> beam.Filter(lambda kv: len(kv[1]) > 1)
                   | "CountLeakingGroups" >> beam.CombineGlobally(LeakSummary()))
        return per_split, leaking
