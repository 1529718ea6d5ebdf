"""How a conversion ended, the same for the terminal and for schedulers: its status, exit code,
one line and reason (:func:`failure_of`), and ``--summary_json`` written whatever the end
(:func:`reporting`: the summary of a committed run, else the failure; never a failure over a
committed run's summary).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from typing import Iterator, Optional

from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.errors import Dcm2TfrecordError
from dcm2tfrecord.dataset.lock import LockUnavailable, OutputBusy
from dcm2tfrecord.dataset.names import ERRORS_NAME, FAILED_RUN_NAME
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.pipeline.launch.worker_start import WorkersNeverStarted
from dcm2tfrecord.pipeline.launch.worker_watch import WorkersDied
from dcm2tfrecord.pipeline.options.usage import UsageError, usage_line
from dcm2tfrecord.pipeline.root_cause import root_cause, storage_outage
from dcm2tfrecord.pipeline.summary import write_summary_json

PROG = "dcm2tfrecord convert"
DEBUG_ENV = "DCM2TFRECORD_DEBUG"
INTERRUPTED_EXIT = 130     # a shell's code for a process ended by SIGINT (Ctrl-C)
# the counts of run_failed.json a failure's summary repeats, under the keys a committed one has
FAILED_RUN_COUNTS = ("matched", "written", "records", "skipped", "failed", "unaccounted", "label_rows_rejected")


class ConversionFailed(Dcm2TfrecordError):
    """The run finished but refused to commit (too many failures, counts that do not add up):
    exit code 1. ``counts``: those of its run_failed.json."""

    def __init__(self, message: str, counts: Optional[dict] = None):
        super().__init__(message)
        self.counts = counts


class RunStatus(StrEnum):
    """``status`` of ``--summary_json``."""
    COMMITTED = "committed"     # dataset.json committed (under --incremental: LATEST moved): exit 0
    FAILED = "failed"           # the run started and committed nothing new: exit 1 (130: interrupted)
    NOT_RUN = "not_run"         # refused before any work, nothing written in --output: exit 2


class FailureReason(StrEnum):
    """``reason`` of a failed or refused run's ``--summary_json``: what kind of failure."""
    CONVERSION_FAILED = "conversion_failed"         # the run refused to commit (run_failed.json)
    STEP_FAILED = "step_failed"                     # a step of the job raised (the message names it)
    STORAGE_OUTAGE = "storage_outage"               # storage did not answer within --gcs_retry_s
    WORKERS_DIED = "workers_died"                   # a local worker process or the fork server died
    WORKERS_NEVER_STARTED = "workers_never_started"  # a cluster's SDK workers never started
    OUTPUT_BUSY = "output_busy"                     # another run holds the output's lock
    LOCK_UNAVAILABLE = "lock_unavailable"           # the output's lock cannot be taken (a link, a FIFO...)
    USAGE_ERROR = "usage_error"                     # an option refused before any work
    INTERRUPTED = "interrupted"                     # Ctrl-C (KeyboardInterrupt)


@dataclasses.dataclass(frozen=True)
class Failure:
    """How a run that raised ``exc`` ends: what the terminal shows and the process returns."""
    status: RunStatus
    exit_code: int
    reason: FailureReason
    message: str                        # the one line printed on stderr
    counts: Optional[dict] = None       # run_failed.json's counts, where the run got that far


def failure_of(exc: BaseException) -> Failure:
    """The status, exit code, one line and reason of a run that raised ``exc``."""
    if isinstance(exc, UsageError):
        cause = exc.__cause__
        reason = (FailureReason.OUTPUT_BUSY if isinstance(cause, OutputBusy)
                  else FailureReason.LOCK_UNAVAILABLE if isinstance(cause, LockUnavailable)
                  else FailureReason.USAGE_ERROR)
        return Failure(RunStatus.NOT_RUN, 2, reason, usage_line("convert", exc))
    if isinstance(exc, ConversionFailed):
        return Failure(RunStatus.FAILED, 1, FailureReason.CONVERSION_FAILED, f"{PROG}: {exc}", exc.counts)
    if isinstance(exc, WorkersDied):
        return Failure(RunStatus.FAILED, 1, FailureReason.WORKERS_DIED, f"{PROG}: {exc}")
    if isinstance(exc, WorkersNeverStarted):
        return Failure(RunStatus.FAILED, 1, FailureReason.WORKERS_NEVER_STARTED, f"{PROG}: {exc}")
    if isinstance(exc, KeyboardInterrupt):
        return Failure(RunStatus.FAILED, INTERRUPTED_EXIT, FailureReason.INTERRUPTED,
                       f"{PROG}: interrupted (KeyboardInterrupt); nothing new committed")
    reason = FailureReason.STORAGE_OUTAGE if storage_outage(exc) else FailureReason.STEP_FAILED
    return Failure(RunStatus.FAILED, 1, reason,
                   f"{PROG}: the run failed and committed nothing new: {root_cause(exc)} "
                   f"({DEBUG_ENV}=1 shows the full trace)")


class SummaryReport:
    """The ``--summary_json`` of one run (``path`` None: none asked for) and whether the run
    has committed: once it has, no failure is written over its summary, and a failure after it
    ends the run with exit code 0 and a warning (:meth:`failed`)."""

    def __init__(self, path: Optional[str], output: Optional[str]):
        self.path, self.output = path, output
        self.started = time.time()
        self.committed: Optional[str] = None      # what was committed, in words, once it is
        self._ended: Optional[tuple[BaseException, Failure]] = None

    def commit(self, what: str) -> None:
        """The dataset is committed (``what``: in words, for a later warning)."""
        self.committed = what

    def write_committed(self, summary: dict, warnings: list[str]) -> dict:
        """``summary`` (summary.summarize's) with the status keys; written to --summary_json."""
        summary.update(status=RunStatus.COMMITTED.value, exit_code=0, reason=None,
                       message=warnings[-1] if warnings else None, warnings=list(warnings))
        if self.path:
            write_summary_json(summary, self.path)
        return summary

    def failed(self, exc: BaseException) -> Failure:
        """How the run ends, ``exc`` raised; written to --summary_json unless committed (once
        per exception: the run's wrapper and the command line both ask)."""
        if self._ended is not None and self._ended[0] is exc:
            return self._ended[1]
        if self.committed is not None:
            cause = "interrupted (KeyboardInterrupt)" if isinstance(exc, KeyboardInterrupt) else root_cause(exc)
            failure = Failure(RunStatus.COMMITTED, 0, FailureReason.STEP_FAILED,
                              f"{PROG}: warning: {self.committed}; after that: {cause}")
            self._ended = (exc, failure)
            return failure
        failure = failure_of(exc)
        self._ended = (exc, failure)
        if self.path:
            try:
                write_summary_json(self.failure_summary(failure), self.path)
            except Exception as error:  # noqa: BLE001 - the run's own failure is the one to report
                logging.getLogger(__name__).warning("--summary_json %s not written: %s", self.path,
                                                    root_cause(error))
        return failure

    def failure_summary(self, failure: Failure) -> dict:
        summary: dict = {"status": failure.status.value, "exit_code": failure.exit_code,
                         "reason": failure.reason.value, "message": failure.message, "warnings": [],
                         "output": self.output, "wall_seconds": round(time.time() - self.started, 3)}
        if failure.counts is not None and self.output:
            summary.update({key: failure.counts[key] for key in FAILED_RUN_COUNTS if key in failure.counts})
            summary["errors_file"] = FileSystems.join(self.output, ERRORS_NAME)
            summary["run_failed_file"] = FileSystems.join(self.output, FAILED_RUN_NAME)
        return summary


@contextlib.contextmanager
def reporting(report: SummaryReport) -> Iterator[SummaryReport]:
    """``with reporting(SummaryReport(opts.summary_json, output)) as report:`` around a run:
    whatever it raises is written to --summary_json (unless the run committed) and raised on."""
    try:
        yield report
    except BaseException as exc:
        report.failed(exc)
        raise
