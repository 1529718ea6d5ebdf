"""The job graph of ``convert``: ConvertArchive, the named composite transforms of transforms/ wired
in order::

    MatchInputs -> ProbeHeaders -> [DropDuplicates] -> [PairMasks] -> [BuildVolumes | AttachSliceMasks]
    -> [SettleUnmasked] -> [[ChooseSpacing] -> PlanSpacing] -> [AttachLabels]
    -> AssignSplits -> CountGroups -> [DrawFingerprint -> PoolFingerprint] -> [ReuseShards]
    -> PlanShards -> DistributeShards
    -> WriteShards -> CommitDataset (dataset.json last)
"""
from __future__ import annotations

import uuid
from typing import Optional

import apache_beam as beam
from apache_beam.pvalue import AsDict, AsList, AsSingleton

from dcm2tfrecord.dataset.names import version_tag
from dcm2tfrecord.dataset.results import Outcome, ShardResult
from dcm2tfrecord.dataset.versions import BaseVersion
from dcm2tfrecord.pipeline import tool_version
from dcm2tfrecord.pipeline.options.table import ConvertOptions
from dcm2tfrecord.transforms.counters import OUTCOMES
from dcm2tfrecord.transforms.labels.steps import AttachLabels
from dcm2tfrecord.transforms.masks.pair_steps import PairMasks
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.masks.slice_steps import AttachSliceMasks, SettleUnmasked
from dcm2tfrecord.transforms.output.commit import CommitInputs
from dcm2tfrecord.transforms.output.steps import WriteShardFn, commit_step, record_plan
from dcm2tfrecord.transforms.output.write import shard_target
from dcm2tfrecord.transforms.planning.shards import for_planning
from dcm2tfrecord.transforms.planning.steps import PlanShards, ReuseShards
from dcm2tfrecord.transforms.images.fingerprint import TRAINING_SPLIT
from dcm2tfrecord.transforms.images.intensity import Intensity
from dcm2tfrecord.transforms.images.spacing import AUTO
from dcm2tfrecord.transforms.records.steps import (ChooseSpacing, DrawFingerprintFn, DropDuplicates,
                                                   PlanSpacingFn, PoolFingerprint, ProbeHeadersFn)
from dcm2tfrecord.transforms.series.steps import BuildVolumes
from dcm2tfrecord.transforms.settings import ConversionSettings
from dcm2tfrecord.transforms.sources.steps import MatchInputs
from dcm2tfrecord.transforms.splits.steps import CountGroups, with_split


class ConvertArchive(beam.PTransform):
    """The whole job: match -> probe -> labels -> splits -> plan -> reshuffle -> write -> commit."""

    def __init__(self, settings: ConversionSettings, options: dict, version: str,
                 base: Optional[BaseVersion] = None, version_name: str = "", mark_workers: bool = False):
        super().__init__()
        self.settings, self.options, self.version = settings, options, version
        self.mark_workers = mark_workers   # each SDK worker marks its start (pipeline.launch.worker_start)
        self.base = base   # --incremental: the version to build on (no shards for the first)
        self.version_tag = version_tag(version_name)
        self.run = uuid.uuid4().hex     # the steps of this run share one outage breaker per process

    def expand(self, pbegin):
        settings = self.settings
        sources, broken = pbegin | "MatchInputs" >> MatchInputs(list(settings.patterns),
                                                                settings.storage_retry_s,
                                                                settings.output_dir if self.mark_workers else "")
        # SourceFile; Outcome per broken link
        probed = (sources
                  | "ProbeHeaders" >> beam.ParDo(ProbeHeadersFn(settings.max_pixels,
                                                                settings.bounds.max_bytes,
                                                                settings.decode, settings.storage_retry_s,
                                                                run=self.run))
                  .with_outputs(OUTCOMES, main="records"))
        # records: ProbedRecord; outcomes: Outcome
        records = probed.records
        outcome_parts = [broken, probed[OUTCOMES]]
        if settings.duplicates == "skip":
            records, duplicates = records | "DropDuplicates" >> DropDuplicates()
            outcome_parts.append(duplicates)
        masks = settings.masks
        if masks is not None and masks.pairs_files:
            records, mask_outcomes = records | "PairMasks" >> PairMasks(settings)
            outcome_parts.append(mask_outcomes)
        if settings.unit == "series":
            records, series_outcomes = records | "BuildVolumes" >> BuildVolumes(settings.decode)
            outcome_parts.append(series_outcomes)
        elif masks is not None:
            records, mask_outcomes = records | "AttachSliceMasks" >> AttachSliceMasks(
                settings.decode, settings.storage_retry_s, run=self.run)
            outcome_parts.append(mask_outcomes)
        if masks is not None:
            records, unmasked = records | "SettleUnmasked" >> SettleUnmasked(masks)
            outcome_parts.append(unmasked)
        chosen = None       # --spacing auto: the target the run chose (spacing.AutoSpacing), one value
        if settings.decode.spacing is not None:
            # --spacing: each record's resampled shape, planned before the shards are (and after its
            # masks were placed on the source's rows and columns); a record it makes too large fails
            if settings.decode.spacing == AUTO:
                # nnU-Net's rule over every record's spacing as probed (all splits: they are not
                # assigned yet, and a spacing says nothing of a label); planning, writing and
                # dataset.json read the one answer
                chosen = records | "ChooseSpacing" >> ChooseSpacing()
            records, too_large = records | "PlanSpacing" >> beam.ParDo(
                PlanSpacingFn(settings.decode, settings.bounds.max_bytes),
                **_chosen(chosen)).with_outputs(OUTCOMES, main="records")
            outcome_parts.append(too_large)
        space = unmatched = slice_splits = None
        if settings.labels_csv or settings.labels_from_dirs:
            records, label_outcomes, space, unmatched, slice_splits = (
                records | "AttachLabels" >> AttachLabels(settings))
            outcome_parts.append(label_outcomes)
        if not settings.split_column:
            records = records | "AssignSplits" >> beam.Map(with_split, settings)
        # ProbedRecord with label and split
        group_counts, leaking = records | "CountGroups" >> CountGroups(settings, slice_splits)
        # from here on: no raw identifiers, the order key computed once
        to_write = records | "KeepWhatPlanningNeeds" >> beam.Map(for_planning, settings.seed)
        fingerprint = self._fingerprint(pbegin, to_write)
        if self.base is not None:
            to_write, reused = to_write | "ReuseShards" >> ReuseShards(self.base, settings.bounds)
            # to_write: ProbedRecord not held by a reused shard; reused: ShardResult
        plans, layouts = to_write | "PlanShards" >> PlanShards(settings.bounds, settings.seed,
                                                               settings.min_shards)
        plan_recorded = (pbegin
                         | "ProgressOnce" >> beam.Create([None])
                         | "RecordPlanForProgress" >> beam.Map(record_plan, AsDict(layouts),
                                                               settings.output_dir))
                         # "plan.json", written under {output}/.progress/
        written = (plans
                   | "DistributeShards" >> beam.Reshuffle()
                   | "WriteShards" >> beam.ParDo(WriteShardFn(shard_target(settings, self.version_tag),
                                                              settings.decode,
                                                              records_files=self.base is not None,
                                                              storage_retry_s=settings.storage_retry_s,
                                                              run=self.run),
                                                 AsSingleton(plan_recorded), fingerprint=AsSingleton(fingerprint),
                                                 **_chosen(chosen)))
        # ShardResult and Outcome on one output, split by type here: no side input reads off a
        # step with several outputs (runners differ in how they keep those apart:
        # BundleBasedDirectRunner mixes every output of such a step into the view of its first)
        shards = written | "ShardResults" >> beam.Filter(lambda item: isinstance(item, ShardResult))
        if self.base is not None:
            shards = (shards, reused) | "WrittenAndReused" >> beam.Flatten()
        outcome_parts.append(written | "WriteOutcomes" >> beam.Filter(lambda item: isinstance(item, Outcome)))
        outcomes = tuple(outcome_parts) | "CollectOutcomes" >> beam.Flatten()
        # one count over both: each global combine is two more stages for the runner to run
        matched = ((sources | "OneFile" >> beam.Map(lambda _: 1),
                    broken | "OneBrokenLink" >> beam.Map(lambda _: 1))
                   | "FilesAndLinks" >> beam.Flatten()
                   | "CountMatched" >> beam.CombineGlobally(sum))
        space_side = (AsSingleton(space) if space is not None
                      else AsSingleton(pbegin | "NoLabels" >> beam.Create([None])))
        if unmatched is None:
            unmatched = pbegin | "NoLabelRows" >> beam.Create([])
        return (pbegin
                | "CommitOnce" >> beam.Create([None])
                | "CommitDataset" >> beam.Map(
                    commit_step, CommitInputs(settings, self.options, self.version, self.base),
                    # what the run produced, each a side input named by its CommitInputs field
                    results=AsList(shards), outcomes=AsList(outcomes), matched=AsSingleton(matched),
                    space=space_side, group_counts=AsDict(group_counts), leaking=AsSingleton(leaking),
                    layouts=AsDict(layouts), unmatched=AsList(unmatched),
                    fingerprint=AsSingleton(fingerprint),
                    **({} if chosen is None else {"spacing": AsSingleton(chosen)})))

    def _fingerprint(self, pbegin, to_write):
        """--intensity ct: the dataset's fingerprint (transforms.images.fingerprint), from the
        training split's records, or the base version's when --incremental reuses its shards; one
        None otherwise (and when no training record has foreground)."""
        settings = self.settings
        if settings.decode.intensity != Intensity.CT:
            return pbegin | "NoFingerprint" >> beam.Create([None])
        if self.base is not None and self.base.shards and self.base.fingerprint is not None:
            return pbegin | "BaseFingerprint" >> beam.Create([dict(self.base.fingerprint)])
        return (to_write
                | "TrainingRecords" >> beam.Filter(lambda record: record.split == TRAINING_SPLIT)
                | "DrawFingerprint" >> beam.ParDo(DrawFingerprintFn(settings.decode, settings.storage_retry_s,
                                                                     run=self.run))
                | "PoolFingerprint" >> beam.CombineGlobally(PoolFingerprint()))


def _chosen(chosen) -> dict:
    """--spacing auto: the side input ``chosen`` of PlanSpacingFn and WriteShardFn (none otherwise)."""
    return {} if chosen is None else {"chosen": AsSingleton(chosen)}


def build(pipeline: beam.Pipeline, opts: ConvertOptions,
          base: Optional[BaseVersion] = None, version_name: str = "", mark_workers: bool = False,
          masks: Optional[MaskSettings] = None) -> None:
    """The job's graph on ``pipeline``; ``masks``: the mask settings the run read before any work
    (convert.read_masks), else read here."""
    _ = pipeline | "ConvertArchive" >> ConvertArchive(
        opts.settings(masks), options=opts.recorded(), version=tool_version(), base=base,
        version_name=version_name, mark_workers=mark_workers)
