"""``convert``: the job graph (ConvertArchive) and the run around it.

``main(argv)`` parses the options, prepares the output directory
(pipeline.output_dir), builds the graph from the named composite transforms
of transforms/, runs it on the chosen runner while showing progress, then
reads back what was committed and prints the summary. The graph::

    MatchInputs -> ProbeHeaders -> [DropDuplicates] -> [PairMasks] -> [BuildVolumes | AttachSliceMasks]
    -> [SettleUnmasked] -> [AttachLabels]
    -> AssignSplits -> CountGroups -> [ReuseShards] -> PlanShards -> DistributeShards
    -> WriteShards -> CommitDataset (dataset.json last)
"""
from __future__ import annotations

import gc
import logging
import os
import re
import sys
import time
import uuid
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, PortableOptions, StandardOptions

from apache_beam.pvalue import AsDict, AsList, AsSingleton

from dcm2tfrecord.pipeline import tool_version
from dcm2tfrecord.dataset.errors import Dcm2TfrecordError, OptionError, StorageError
from dcm2tfrecord.dataset.lock import LockUnavailable, OutputBusy, OutputLock
from dcm2tfrecord.pipeline.arguments import parse_convert
from dcm2tfrecord.pipeline.beam_args import LOCAL_RUNNERS, check_runner
from dcm2tfrecord.pipeline.input_checks import check_distinct_relative_paths
from dcm2tfrecord.pipeline.label_csv_checks import scan_label_csv
from dcm2tfrecord.pipeline.locations import absolute
from dcm2tfrecord.pipeline.option_rules import check_options
from dcm2tfrecord.pipeline.option_table import ConvertOptions
from dcm2tfrecord.pipeline.usage import UsageError
from dcm2tfrecord.pipeline.worker_fork import QUIETED_LOGGERS, ForkServer, WorkersDied, fork_server, local_runner
from dcm2tfrecord.pipeline.worker_start import (WorkersNeverStarted, no_worker_message, wait_for_first_worker,
                                                 watches_worker_start, worker_start_timeout_s)

from dcm2tfrecord.dataset import versions
from dcm2tfrecord.dataset.manifest import read_failed_run, read_manifest
from dcm2tfrecord.dataset.names import ERRORS_NAME, version_tag
from dcm2tfrecord.dataset.progress import remove_progress
from dcm2tfrecord.dataset.versions import BaseVersion
from dcm2tfrecord.pipeline.output_dir import check_writable, prepare_output, prepare_version, remove_stale_files
from dcm2tfrecord.pipeline.progress import ProgressMonitor
from dcm2tfrecord.pipeline.summary import print_summary, summarize, write_summary_json
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.settings import ConversionSettings
from dcm2tfrecord.transforms.sources.read import configure_storage_retry
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
from dcm2tfrecord.transforms.records.steps import DropDuplicates, ProbeHeadersFn
from dcm2tfrecord.dataset.results import Outcome, ShardResult
from dcm2tfrecord.transforms.series.steps import BuildVolumes
from dcm2tfrecord.transforms.sources.match import survey_local
from dcm2tfrecord.transforms.sources.steps import MatchInputs
from dcm2tfrecord.transforms.splits.steps import CountGroups, with_split



def _given(beam_args: Sequence[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in beam_args)


class ConversionFailed(Dcm2TfrecordError):
    """The run finished but refused to commit (too many failures): exit code 1."""


# Local runs of at most this many input files and bytes run in one process: starting a
# worker process per core costs ~3 s of CPU each (imports, Beam set-up) before its
# first element, more than small archives take to convert (docs/BENCHMARKS.md §2).
IN_PROCESS_MAX_FILES = 256
IN_PROCESS_MAX_BYTES = 256 << 20


# how long a gs:// request made while tidying up after a failed run is retried
CLEANUP_RETRY_S = 5.0


class ViewCachingOptions(PipelineOptions):
    """PipelineOptions whose ``view_as`` builds each view once.

    Beam's ``view_as`` builds an argparse parser of every registered option (~0.4 ms)
    on each call, and building, translating and fusing this graph calls it ~830 times:
    0.4 s of the launcher's CPU before the first record (docs/BENCHMARKS.md §8.4). A view
    shares its values with the options it came from (Beam's own contract: a change
    through one view shows in all), so handing out the same view again is the same.
    Adds no options of its own."""

    def __init__(self, flags=None, **kwargs):
        super().__init__(flags, **kwargs)
        object.__setattr__(self, "_views", {})

    def view_as(self, cls):
        view = self.__dict__["_views"].get(cls)
        if view is None:
            view = self.__dict__["_views"][cls] = super().view_as(cls)
        return view


def make_pipeline_options(beam_args: Sequence[str], patterns: Sequence[str] = ()) -> PipelineOptions:
    """Beam options. Local runs default to one worker process per core, or to one process
    (in_memory) when the local inputs are small (``local_execution`` says which)."""
    options = ViewCachingOptions(list(beam_args))
    if options.view_as(StandardOptions).runner in LOCAL_RUNNERS:
        direct = options.view_as(DirectOptions)
        workers_given = _given(beam_args, "--direct_num_workers")
        if not workers_given and not _given(beam_args, "--direct_running_mode"):
            small = survey_local(patterns, IN_PROCESS_MAX_FILES, IN_PROCESS_MAX_BYTES) if patterns else None
            direct.direct_num_workers = 1 if small is not None else (os.cpu_count() or 1)
        elif not workers_given:
            direct.direct_num_workers = os.cpu_count() or 1
        if not _given(beam_args, "--direct_running_mode"):
            direct.direct_running_mode = "multi_processing" if direct.direct_num_workers != 1 else "in_memory"
    return options


def local_execution(options: PipelineOptions, forked: bool = False) -> str:
    """How a local run executes, for the summary ("" on other runners); ``forked``: its
    worker processes were forked from the launcher (pipeline.worker_fork)."""
    if options.view_as(StandardOptions).runner not in LOCAL_RUNNERS:
        return ""
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "in_memory" or direct.direct_num_workers == 1:
        return "one process"
    kind = "threads" if direct.direct_running_mode == "multi_threading" else "processes"
    how = ", forked" if forked else ""
    return f"{direct.direct_num_workers} worker {kind} ({direct.direct_running_mode}{how})"


def forks_workers(options: PipelineOptions) -> bool:
    """Whether a local run's worker processes are forked from the launcher (pipeline.worker_fork)."""
    return (options.view_as(StandardOptions).runner in LOCAL_RUNNERS
            and options.view_as(DirectOptions).direct_running_mode == "multi_processing")


def make_runner(options: PipelineOptions, server: Optional[ForkServer] = None):
    """The in-process FnApiRunner for local runs, its worker processes forked by ``server``
    when there is one.

    Beam's DirectRunner first tries to download and start its Prism runner;
    offline that waits on the network before falling back to this same
    FnApiRunner, so local runs go straight to it.
    """
    runner = options.view_as(StandardOptions).runner
    if runner in LOCAL_RUNNERS:
        return local_runner(server)
    return None   # Beam resolves --runner itself (DataflowRunner, ...)


def job_not_run_here(options: PipelineOptions) -> str:
    """"dry_run": Beam's --dry_run (DataflowRunner builds the job, submits nothing);
    "template": --template_location (the job is written there to run later; a Flex
    Template launcher submits this way); "": the job runs now and we wait for it."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, TestOptions
    how = ("dry_run" if options.view_as(TestOptions).dry_run
           else "template" if options.view_as(GoogleCloudOptions).template_location else "")
    runner = str(options.view_as(StandardOptions).runner or "")
    if how and "dataflow" not in runner.lower():   # local runners ignore both and would run
        raise UsageError(f"--{'dry_run' if how == 'dry_run' else 'template_location'} needs "
                         "--runner=DataflowRunner (see run_dataflow.sh)")
    return how


def report_job_not_run(result, options: PipelineOptions, how: str, quiet: bool) -> dict:
    """No dataset.json to read yet. A dry run writes the job it built to --dataflow_job_file
    (Beam itself writes that file only on submission): the portable pipeline Runner v2
    executes, with its worker environment, and the pipeline options."""
    import json
    from apache_beam.options.pipeline_options import DebugOptions, GoogleCloudOptions
    from google.protobuf import json_format
    job = getattr(result, "job", None)     # the dry run's apiclient.Job
    summary = {"submitted": False, "mode": how,
               "job_name": job.proto.name if job else options.view_as(GoogleCloudOptions).job_name}
    job_file = options.view_as(DebugOptions).dataflow_job_file
    if how == "dry_run" and job is not None and job_file:
        description = {"name": job.proto.name, "type": job.proto.type_.name,
                       "pipeline": json_format.MessageToDict(job.proto_pipeline),
                       "options": options.get_all_options(drop_default=True)}
        with FileSystems.create(job_file, mime_type="application/json") as handle:
            handle.write(json.dumps(description, indent=1, sort_keys=True, default=str).encode())
        summary["job_file"] = job_file
    if not quiet:
        where = f"; job written to {job_file}" if summary.get("job_file") else ""
        print(f"dcm2tfrecord convert: {how}: Dataflow job {summary['job_name']} built, "
              f"not run here{where}", file=sys.stderr)
    return summary


class ConvertArchive(beam.PTransform):
    """The whole job: match -> probe -> labels -> splits -> plan -> reshuffle -> write -> commit."""

    def __init__(self, settings: ConversionSettings, options: dict, version: str,
                 base: Optional[BaseVersion] = None, version_name: str = "", mark_workers: bool = False):
        super().__init__()
        self.settings, self.options, self.version = settings, options, version
        self.mark_workers = mark_workers   # each SDK worker marks its start (pipeline.worker_start)
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
                                                 AsSingleton(plan_recorded)))
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
                    layouts=AsDict(layouts), unmatched=AsList(unmatched)))
                # path of dataset.json


def build(pipeline: beam.Pipeline, opts: ConvertOptions,
          base: Optional[BaseVersion] = None, version_name: str = "", mark_workers: bool = False,
          masks: Optional[MaskSettings] = None) -> None:
    """The job's graph on ``pipeline``; ``masks``: the mask settings the run read before any work
    (read_masks), else read here."""
    _ = pipeline | "ConvertArchive" >> ConvertArchive(
        opts.settings(masks), options=opts.recorded(), version=tool_version(), base=base,
        version_name=version_name, mark_workers=mark_workers)


def read_masks(opts: ConvertOptions) -> Optional[MaskSettings]:
    """The mask settings, the --class_map file read and parsed with them: before any work, so that a
    class map that cannot be used is refused in one line (UsageError, exit code 2) before the
    output is touched, locked or a worker forked. None without --class_map."""
    try:
        return opts.mask_settings()
    except OptionError as exc:      # MappingError, PatternError: each one line naming the option
        raise UsageError(str(exc)) from None


def run(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool = False) -> dict:
    """Checks the options (pipeline.option_rules), then converts; returns the run summary
    (see pipeline.summary)."""
    install_beam_storage()      # the checks read the salt file and the class map through it
    check_runner(beam_args)
    check_options(opts, beam_args)
    return run_checked(opts, beam_args, quiet)


def run_checked(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool = False) -> dict:
    """:func:`run` for options already checked: those ``parse_convert`` returns."""
    install_beam_storage()      # the launcher's dataset files: lock, output, dataset.json
    assert opts.output is not None      # check_options refuses options without one
    masks = read_masks(opts)
    opts = opts.replace(output=absolute(opts.output))
    assert opts.output is not None
    options = make_pipeline_options(beam_args, opts.inputs)
    configure_storage_retry(opts.gcs_retry_s)     # the launcher's own gs:// calls too
    launch_only = job_not_run_here(options)
    if opts.labels:
        scan_label_csv(opts.labels)
    if launch_only == "dry_run":   # a dry run touches no output: no lock either
        return _run(opts, options, launch_only, quiet, masks=masks)
    check_distinct_relative_paths(opts.inputs)
    check_writable(opts.output)
    failed = False
    try:
        # forked before the lock's heartbeat or any other thread starts
        with fork_server(forks_workers(options)) as server, OutputLock(opts.output):
            try:
                return _run(opts, options, launch_only, quiet, server, masks)
            except BaseException:
                # tidying up after a failed run (the lock's release) never waits a whole retry
                # budget: in an outage that would add one more --gcs_retry_s to the run's end
                failed = True
                configure_storage_retry(min(opts.gcs_retry_s, CLEANUP_RETRY_S))
                raise
    except (OutputBusy, LockUnavailable) as exc:
        raise UsageError(str(exc)) from None
    finally:
        if failed:
            configure_storage_retry(opts.gcs_retry_s)


def _run(opts: ConvertOptions, options, launch_only: str, quiet: bool,
         server: Optional[ForkServer] = None, masks: Optional[MaskSettings] = None) -> dict:
    assert opts.output is not None      # run refuses options without one
    root, version, base = opts.output, None, None
    if opts.incremental:
        version, target, base = prepare_version(opts, launch_only == "dry_run")
        opts = opts.replace(output=target)
    assert opts.output is not None
    if launch_only != "dry_run":   # a dry run leaves --output untouched
        prepare_output(opts)
        remove_progress(opts.output)   # left by an interrupted run
    started = time.time()
    pipeline = beam.Pipeline(runner=make_runner(options, server), options=options)
    runner = str(options.view_as(StandardOptions).runner or "")
    on_cluster = not launch_only and watches_worker_start(runner)
    start_bound = worker_start_timeout_s() if on_cluster else 0.0
    build(pipeline, opts, base, version or "", mark_workers=on_cluster, masks=masks)
    if launch_only:
        return report_job_not_run(pipeline.run(), options, launch_only, quiet)
    # quiet (library callers, tests): no progress unless --progress asks for it
    with ProgressMonitor(opts.output, "none" if quiet and opts.progress == "auto" else opts.progress):
        result = pipeline.run()
        if on_cluster:     # a job whose SDK workers never start ends (pipeline.worker_start)
            portable = options.view_as(PortableOptions)
            output = opts.output
            wait_for_first_worker(output, lambda: result.state, result.cancel, start_bound,
                                  no_worker_message(start_bound, portable.environment_type or "",
                                                    portable.environment_config or ""))
        result.wait_until_finish()
    wall = time.time() - started
    failed_run = read_failed_run(opts.output)
    if failed_run is not None:
        counts = failed_run["counts"]
        raise ConversionFailed(
            f"{failed_run['reason']}; dataset.json NOT committed. Failures by reason: "
            f"{counts['failed']}; the list is in {FileSystems.join(opts.output, ERRORS_NAME)}")
    manifest = read_manifest(opts.output)
    if version is not None:
        versions.set_latest(root, version)   # only now do readers of the root see it
    try:
        remove_stale_files(opts.output, manifest)
    except Exception as exc:  # noqa: BLE001 - the dataset is committed: say so, and why the tidy-up stopped
        raise ConversionFailed(f"{committed_what(manifest, opts.output, version)}, but tidying the output "
                               f"afterwards failed: {root_cause(exc)}") from None
    summary = summarize(manifest, opts.output, wall)
    summary["execution"] = local_execution(options, server is not None and server.used)
    if version is not None:
        summary["version"] = {"root": root, "name": version, **(manifest.incremental or {})}
    if opts.summary_json:
        write_summary_json(summary, opts.summary_json)
    if not quiet:
        print_summary(summary)
    return summary


def committed_what(manifest, output: str, version: Optional[str]) -> str:
    """What a run committed, for a message about a failure after the commit."""
    records = sum(split.num_records for split in manifest.splits.values())
    shards = sum(len(split.shards) for split in manifest.splits.values())
    where = f"version {version} ({output}), now LATEST," if version else output
    return (f"the dataset was committed: {where} holds dataset.json with {records} records in "
            f"{shards} shard{'' if shards == 1 else 's'}, whole and readable")


def root_cause(exc: BaseException) -> str:
    """One line naming why a run failed, out of Beam's wrapped multi-line errors:
    the innermost ``SomeError: message`` and the step it happened in."""
    chain = list(_chain(exc))
    text = "\n".join(str(e) for e in chain)
    errors = re.findall(r"^\s*((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Conflict|Busy|Exit)\b"
                        r"(?::[^\n]*)?)$", text, flags=re.M)
    step = re.findall(r"\[while running '([^']+)'\]", text)
    # By type where the exception is this process's (StorageOutage is a StorageError); by text
    # where a worker process raised it: Beam relays a failed step to the launcher as an
    # exception holding the worker's traceback as text, and no type survives that.
    if any(isinstance(e, StorageError) for e in chain) or \
            re.search(r"RetryError|Connection refused|ServiceUnavailable|StorageOutage", text):
        prefix = "storage did not answer within the retry budget (--gcs_retry_s): "
    else:
        prefix = ""
    inner = chain[-1]
    cause = re.sub(r"\s*\[while running '[^']+'\]", "", errors[-1]) if errors else (
        f"{type(inner).__name__}: {(str(inner).strip().splitlines() or [''])[0]}")
    return prefix + cause.strip()[:400] + (f" (in step {step[-1]})" if step else "")


def _chain(exc: Optional[BaseException]):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        # "raise ... from None" says the context is not the cause: it is not followed
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)


DEBUG_ENV = "DCM2TFRECORD_DEBUG"


def main(argv: Sequence[str]) -> int:
    # Beam, numpy, pydicom and this project are imported by now and live as long as the run:
    # the collector need not scan them again in every full collection (~0.1 s of CPU)
    gc.freeze()
    install_beam_storage()      # parse_convert's checks read the salt file and the class map
    opts, beam_args = parse_convert(argv)
    debug = bool(os.environ.get(DEBUG_ENV))
    if not debug:   # a failed step is reported below in one line, not as Beam's ERROR traceback
        # (nor as the tracebacks local worker processes relay through the job service)
        for name in QUIETED_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        run_checked(opts, beam_args)       # parse_convert checked them
    except WorkersNeverStarted as exc:
        print(f"dcm2tfrecord convert: {exc}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # the lock is released and nothing was committed; what still waits for a worker (an
        # in-process job service's thread, a gRPC stream) would keep the process alive
        os._exit(1)
    except (ConversionFailed, WorkersDied) as exc:   # a dead worker: one line naming it (worker_fork)
        print(f"dcm2tfrecord convert: {exc}", file=sys.stderr)
        return 1
    except (UsageError, KeyboardInterrupt):
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the run: one line, not Beam's traceback
        if debug:
            logging.getLogger(__name__).error("run failed", exc_info=True)
        print(f"dcm2tfrecord convert: the run failed and committed nothing new: {root_cause(exc)} "
              f"({DEBUG_ENV}=1 shows the full trace)", file=sys.stderr)
        return 1
    return 0
