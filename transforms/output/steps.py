"""WriteShards (a ShardPlan -> a shard on disk) and CommitDataset (dataset.json, or a refusal)."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from dcm2tfrecord.dataset import progress, versions
from dcm2tfrecord.dataset.manifest import commit, refuse_commit
from dcm2tfrecord.dataset.shard_target import ShardTarget
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.counters import count, count_outcome
from dcm2tfrecord.transforms.images import spacing
from dcm2tfrecord.transforms.labels.unmatched import commit_unmatched, with_unmatched
from dcm2tfrecord.transforms.output.commit import (CommitInputs, accounting_verdict, empty_verdict,
                                                  failure_verdict, leak_verdict, one_outcome_per_input,
                                                  run_manifest)
from dcm2tfrecord.transforms.output.write import record_fingerprint, write_shard
from dcm2tfrecord.transforms.record_model import ShardPlan
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.errors import StorageOutage
from dcm2tfrecord.transforms.images.fingerprint import bounds
from dcm2tfrecord.transforms.sources.read import is_outage, open_source
from dcm2tfrecord.transforms.sources.steps import ReadsSourcesFn


def record_plan(_, layouts: Mapping, output_dir: str) -> str:
    """{output}/.progress/plan.json, for the launcher's progress display."""
    install_beam_storage()      # a worker's step: the plan file through Beam's FileSystems
    return progress.write_plan(output_dir, layouts)


def plan_uri(output_dir: str, plan: ShardPlan) -> str:
    """Which shard a message is about: ``output/split-shard i``."""
    return f"{output_dir.rstrip('/')}/{plan.split} shard {plan.index}"


class WriteShardFn(ReadsSourcesFn):
    """ShardPlan -> its ShardResult, then an Outcome per record that did not convert, both on
    the one output (the graph splits them by type: no side input reads off a step with
    several outputs, which runners keep apart differently)."""

    def __init__(self, target: ShardTarget, settings: DecodeSettings = DecodeSettings(),
                 records_files: bool = False, storage_retry_s: float = 0.0, run: str = ""):
        super().__init__(settings, storage_retry_s, run)
        self.target = target                 # the run's one: directory, version tag, container, level
        self.output_dir = target.output_dir
        self.records_files = records_files   # --incremental: <shard>.records.json beside each shard

    def process(self, plan: ShardPlan, plan_recorded: Optional[str] = None, fingerprint: Optional[dict] = None,
                chosen=None):
        # plan_recorded: a side input that only orders this step after record_plan; fingerprint:
        # --intensity ct's (transforms.images.fingerprint), None otherwise; chosen: with --spacing
        # auto, the target the run chose (transforms.records.steps.ChooseSpacing), the one
        # PlanSpacingFn planned the records with
        settings = spacing.with_target(self.settings, chosen)
        if fingerprint is not None:
            settings = dataclasses.replace(settings, ct_fingerprint=bounds(fingerprint))
        written: list = []

        def on_written(record):
            written.append(record)
            self.breaker.note(False, record.source.uri, "")

        def on_error(record, exc):
            self.breaker.note(getattr(exc, "outage", False), record.source.uri, str(exc))

        def opener(uri):
            self.breaker.check()    # storage stopped answering this process: fail fast
            return open_source(uri)

        self.breaker.check()
        try:
            result, outcomes = write_shard(plan, self.target, opener=opener, settings=settings,
                                           on_written=on_written, on_error=on_error)
            if self.records_files:
                versions.write_records_file(self.output_dir, result,
                                            [record_fingerprint(r) for r in written])
        except StorageOutage:
            raise
        except Exception as exc:     # the shard could not be written
            where, what = plan_uri(self.output_dir, plan), f"{type(exc).__name__}: {exc}"
            if is_outage(exc):
                self.breaker.note(True, where, what)
            else:    # unnamed (Beam's batch copy answering None): does storage answer at all?
                self.breaker.note_failure(where, what, probe=lambda: FileSystems.exists(self.output_dir))
            raise
        self.breaker.note(False, "", "")          # the shard was written: storage answers
        failed = progress.write_done(self.output_dir, result, len(plan.records))
        if failed:     # best effort, but a progress file storage did not take says something
            self.breaker.note_failure(plan_uri(self.output_dir, plan), failed)
        count("records_written", result.num_records)
        count("bytes_written", result.num_bytes)
        count("shards_written")
        yield result
        for outcome in outcomes:
            count_outcome(outcome)
            yield outcome


def commit_step(_: Any, run: CommitInputs, **produced: Any) -> str:
    """CommitDataset's function: ``run`` holds the run's constants, ``produced`` the step's
    side inputs by name (CommitInputs.PRODUCED); together they are the one CommitInputs."""
    install_beam_storage()      # a worker's step: dataset.json and the rest through Beam's FileSystems
    return commit_dataset(dataclasses.replace(run, **produced))


def commit_dataset(inputs: CommitInputs) -> str:
    """Writes errors.jsonl and dataset.json (last), or run_failed.json when the run must not
    commit (inputs lost, too many failed, nothing converted, a group in several splits)."""
    settings, matched, leaking = inputs.settings, inputs.matched, inputs.leaking
    # the labels CSV's rows that label nothing: all in their own file, the first in errors.jsonl
    unmatched_rows, sample = commit_unmatched(inputs.unmatched, settings)
    outcomes, written_also_failed = one_outcome_per_input([*inputs.outcomes, *sample])
    manifest = run_manifest(inputs, outcomes, written_also_failed)
    if settings.labels_csv:
        manifest = with_unmatched(manifest, unmatched_rows, len(sample))
    counts = manifest.counts or {}
    failed = sum(counts["failed"].values())
    refusal = (accounting_verdict(counts)
               or failure_verdict(failed, matched, settings.max_failure_ratio, settings.max_failures)
               or empty_verdict(counts, settings.allow_empty)
               or leak_verdict(leaking, (manifest.groups or {})["split_by"], settings.allow_split_leak))
    if refusal:
        return refuse_commit(settings.output_dir, manifest, outcomes, refusal)
    return commit(settings.output_dir, manifest, outcomes)
