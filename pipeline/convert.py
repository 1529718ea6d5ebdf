"""``convert``: the run. ``main(argv)`` parses the options (pipeline.options), takes the lock on
the output and prepares it (pipeline.output_dir), chooses the runner (pipeline.launch.runner),
builds the job graph (pipeline.graph) and runs it while showing progress, reports a Dataflow
job not run here (pipeline.launch.not_run_here), then reads back what was committed and prints
the summary; a failure is one line naming its root cause (pipeline.root_cause), and
--summary_json says how the run ended whatever the end (pipeline.run_end).
"""
from __future__ import annotations

import gc
import logging
import os
import sys
import time
from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PortableOptions, StandardOptions

from dcm2tfrecord.dataset import versions
from dcm2tfrecord.dataset.errors import OptionError
from dcm2tfrecord.dataset.lock import LockUnavailable, OutputBusy, OutputLock
from dcm2tfrecord.dataset.manifest import read_failed_run, read_manifest
from dcm2tfrecord.dataset.names import ERRORS_NAME
from dcm2tfrecord.dataset.progress import remove_progress
from dcm2tfrecord.pipeline.graph import build
from dcm2tfrecord.pipeline.launch.beam_args import check_runner
from dcm2tfrecord.pipeline.launch.fork_server import QUIETED_LOGGERS, ForkServer, fork_server
from dcm2tfrecord.pipeline.launch.not_run_here import job_not_run_here, report_job_not_run
from dcm2tfrecord.pipeline.launch.runner import forks_workers, local_execution, make_pipeline_options, make_runner
from dcm2tfrecord.pipeline.launch.worker_start import (WorkersNeverStarted, no_worker_message,
                                                      wait_for_first_worker, watches_worker_start,
                                                      worker_start_timeout_s)
from dcm2tfrecord.pipeline.options.arguments import check_convert, read_convert
from dcm2tfrecord.pipeline.options.input_checks import check_distinct_relative_paths
from dcm2tfrecord.pipeline.options.label_csv_checks import scan_label_csv
from dcm2tfrecord.pipeline.options.locations import absolute
from dcm2tfrecord.pipeline.options.rules import check_options
from dcm2tfrecord.pipeline.options.table import ConvertOptions
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.pipeline.output_dir import check_writable, prepare_output, prepare_version, remove_stale_files
from dcm2tfrecord.pipeline.progress import ProgressMonitor
from dcm2tfrecord.pipeline.root_cause import root_cause
from dcm2tfrecord.pipeline.run_end import (DEBUG_ENV, ConversionFailed, FailureReason, SummaryReport,
                                          reporting)
from dcm2tfrecord.pipeline.summary import print_summary, summarize
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.sources.read import configure_storage_retry


# how long a gs:// request made while tidying up after a failed run is retried
CLEANUP_RETRY_S = 5.0


def read_masks(opts: ConvertOptions) -> Optional[MaskSettings]:
    """The mask settings, the --class_map file read and parsed with them: before any work, so that a
    class map that cannot be used is refused in one line (UsageError, exit code 2) before the
    output is touched, locked or a worker forked. None without --class_map."""
    try:
        return opts.mask_settings()
    except OptionError as exc:      # MappingError, PatternError: each one line naming the option
        raise UsageError(str(exc)) from None


def _report(opts: ConvertOptions) -> SummaryReport:
    return SummaryReport(opts.summary_json, absolute(opts.output) if opts.output else None)


def run(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool = False) -> dict:
    """Checks the options (pipeline.options.rules), then converts; returns the run summary
    (see pipeline.summary). A failure raises, written to --summary_json first (pipeline.run_end)."""
    with reporting(_report(opts)) as report:
        install_beam_storage()      # the checks read the salt file and the class map through it
        check_runner(beam_args)
        check_options(opts, beam_args)
        return _run_checked(opts, beam_args, quiet, report)


def run_checked(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool = False) -> dict:
    """:func:`run` for options already checked: those ``parse_convert`` returns."""
    with reporting(_report(opts)) as report:
        return _run_checked(opts, beam_args, quiet, report)


def _run_checked(opts: ConvertOptions, beam_args: Sequence[str], quiet: bool, report: SummaryReport) -> dict:
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
        return _run(opts, options, launch_only, quiet, report, masks=masks)
    check_distinct_relative_paths(opts.inputs)
    check_writable(opts.output)
    failed = False
    try:
        # forked before the lock's heartbeat or any other thread starts
        with fork_server(forks_workers(options)) as server, OutputLock(opts.output):
            try:
                return _run(opts, options, launch_only, quiet, report, server, masks)
            except BaseException:
                # tidying up after a failed run (the lock's release) never waits a whole retry
                # budget: in an outage that would add one more --gcs_retry_s to the run's end
                failed = True
                configure_storage_retry(min(opts.gcs_retry_s, CLEANUP_RETRY_S))
                raise
    except (OutputBusy, LockUnavailable) as exc:      # its cause: the summary's reason (run_end)
        raise UsageError(str(exc)) from exc
    finally:
        if failed:
            configure_storage_retry(opts.gcs_retry_s)


def _run(opts: ConvertOptions, options, launch_only: str, quiet: bool, report: SummaryReport,
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
        if on_cluster:     # a job whose SDK workers never start ends (pipeline.launch.worker_start)
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
            f"{counts['failed']}; the list is in {FileSystems.join(opts.output, ERRORS_NAME)}", counts)
    manifest = read_manifest(opts.output)
    if version is not None:
        versions.set_latest(root, version)   # only now do readers of the root see it
    committed = committed_what(manifest, opts.output, version)
    report.commit(committed)
    # Committed: what follows can only warn (exit code 0), never say the run failed.
    warnings = []
    try:
        remove_stale_files(opts.output, manifest)
    except Exception as exc:  # noqa: BLE001 - the dataset is committed: say so, and why the tidy-up stopped
        # what it met (a link planted in the output) is left alone: never followed, never deleted
        warnings.append(f"dcm2tfrecord convert: warning: {committed}; tidying the output afterwards "
                        f"stopped and left what it could not tidy alone (the dataset needs no rerun): "
                        f"{root_cause(exc)}")
    summary = summarize(manifest, opts.output, wall)
    summary["execution"] = local_execution(options, server is not None and server.used)
    if version is not None:
        summary["version"] = {"root": root, "name": version, **(manifest.incremental or {})}
    try:
        report.write_committed(summary, warnings)
    except Exception as exc:  # noqa: BLE001 - the dataset is committed: the summary file is a report of it
        warnings.append(f"dcm2tfrecord convert: warning: {committed}; --summary_json {opts.summary_json} "
                        f"could not be written: {root_cause(exc)}")
        summary.update(message=warnings[-1], warnings=list(warnings))
    if not quiet:
        print_summary(summary)
    for line in warnings:
        print(line, file=sys.stderr, flush=True)
    return summary


def committed_what(manifest, output: str, version: Optional[str]) -> str:
    """What a run committed, for a message about a failure after the commit."""
    records = sum(split.num_records for split in manifest.splits.values())
    shards = sum(len(split.shards) for split in manifest.splits.values())
    where = f"version {version} ({output}), now LATEST," if version else output
    return (f"the dataset was committed: {where} holds dataset.json with {records} records in "
            f"{shards} shard{'' if shards == 1 else 's'}, whole and readable")


def main(argv: Sequence[str]) -> int:
    # Beam, numpy, pydicom and this project are imported by now and live as long as the run:
    # the collector need not scan them again in every full collection (~0.1 s of CPU)
    gc.freeze()
    install_beam_storage()      # parse_convert's checks read the salt file and the class map
    opts, beam_args = read_convert(argv)    # a flag unknown or missing: exit 2, no summary yet
    debug = bool(os.environ.get(DEBUG_ENV))
    if not debug:   # a failed step is reported below in one line, not as Beam's ERROR traceback
        # (nor as the tracebacks local worker processes relay through the job service)
        for name in QUIETED_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
    report = _report(opts)
    try:
        with reporting(report):
            check_convert(opts, beam_args)
            _run_checked(opts, beam_args, False, report)
    except (UsageError, KeyboardInterrupt):
        raise       # cli prints a UsageError's line (the summary's message), Python an interrupt
    except Exception as exc:  # noqa: BLE001 - any failure of the run: one line, not Beam's traceback
        failure = report.failed(exc)      # its --summary_json is written (pipeline.run_end)
        if debug and failure.reason in (FailureReason.STEP_FAILED, FailureReason.STORAGE_OUTAGE):
            logging.getLogger(__name__).error("run failed", exc_info=True)
        print(failure.message, file=sys.stderr)
        if isinstance(exc, WorkersNeverStarted):
            sys.stdout.flush()
            sys.stderr.flush()
            # the lock is released and nothing was committed; what still waits for a worker (an
            # in-process job service's thread, a gRPC stream) would keep the process alive
            os._exit(failure.exit_code)
        return failure.exit_code
    return 0
