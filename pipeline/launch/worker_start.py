"""A job on a cluster whose Python SDK workers never start ends, in one line.

On Flink or Spark, a worker environment that cannot start (an EXTERNAL worker pool whose
`python` has no Beam or cannot import this project, a DOCKER image that does not run, a
PROCESS command that fails) leaves the job waiting forever: the job server waits for a
worker to connect, the launcher prints nothing, and only the worker's own log says why.

Each SDK worker process that runs this job's first step leaves a mark,
``{output}/.progress/{host}-{pid}.worker`` (dataset.progress.write_worker_started). The
launcher of a job on a cluster (a runner that is neither local nor Dataflow, which reports
workers that fail to start itself) waits at most WORKER_START_TIMEOUT_S
(``$DCM2TFRECORD_WORKER_START_TIMEOUT_S``, 600 s by default) for the first mark; if the job
is still running without one, it cancels the job and fails in one line
(:func:`no_worker_message`) naming the likely cause and where the worker log is. Nothing is
committed: dataset.json is written at the end of the job.
"""
from __future__ import annotations

import os
import time
from typing import Callable, Optional

from dcm2tfrecord.dataset.errors import Dcm2TfrecordError
from dcm2tfrecord.dataset.progress import any_worker_started

WORKER_START_TIMEOUT_ENV = "DCM2TFRECORD_WORKER_START_TIMEOUT_S"
WORKER_START_TIMEOUT_S = 600.0
POLL_S = 1.0
TERMINAL = ("DONE", "FAILED", "CANCELLED", "DRAINED", "UPDATED", "STOPPED")


class WorkersNeverStarted(Dcm2TfrecordError):
    """No SDK worker ran this job's first step within the bound."""


def worker_start_timeout_s(environ: Optional[dict] = None) -> float:
    """The bound, from $DCM2TFRECORD_WORKER_START_TIMEOUT_S (seconds, > 0) or the default."""
    raw = (os.environ if environ is None else environ).get(WORKER_START_TIMEOUT_ENV, "")
    if not raw.strip():
        return WORKER_START_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        from dcm2tfrecord.pipeline.options.usage import UsageError
        raise UsageError(f"${WORKER_START_TIMEOUT_ENV}={raw!r}: give a number of seconds above 0")
    return value


def watches_worker_start(runner: str) -> bool:
    """Runners whose workers live on a cluster this launcher cannot see: the portable runner
    (Flink, Spark, any job server) and Beam's Flink and Spark runners."""
    name = runner.lower().rsplit(".", 1)[-1]
    return name in ("portablerunner", "flinkrunner", "sparkrunner")


def no_worker_message(timeout_s: float, environment_type: str, environment_config: str) -> str:
    """The one line: what happened, the likely cause, where the worker log is."""
    kind = (environment_type or "DOCKER").upper()
    if kind == "EXTERNAL":
        cause = (f"the worker pool at {environment_config or 'localhost:50000'} starts each worker with "
                 "the `python` first on its PATH, and that Python cannot start Beam's SDK harness or "
                 "import dcm2tfrecord (start the pool from the environment that has this project "
                 "installed, with the Beam version of the job server); the reason is in the worker "
                 "pool's log: its standard output and error, beside each task manager / executor")
    elif kind == "PROCESS":
        cause = ("the PROCESS command cannot start a Python SDK worker with dcm2tfrecord installed; "
                 "the reason is in the task manager's / executor's log")
    elif kind == "DOCKER":
        cause = (f"the SDK container {environment_config or '(Beam default image)'} does not start or lacks "
                 "dcm2tfrecord; the reason is in that container's log on the worker node (docker logs)")
    else:
        cause = f"the {kind} environment does not start Python SDK workers; see the workers' logs"
    return (f"no Python SDK worker started within {timeout_s:.0f} s (${WORKER_START_TIMEOUT_ENV}); the job "
            f"was cancelled and nothing committed. Likely cause: {cause}")


def wait_for_first_worker(output: str, state: Callable[[], str], cancel: Callable[[], None],
                          timeout_s: float, message: str, poll_s: float = POLL_S,
                          clock: Callable[[], float] = time.monotonic) -> None:
    """Returns once a worker left its mark in ``output`` or the job ended (its result says how);
    past ``timeout_s`` without either, cancels the job and raises WorkersNeverStarted(message)."""
    deadline = clock() + timeout_s
    while True:
        if any_worker_started(output):
            return
        current = str(state() or "").upper().rsplit(".", 1)[-1]
        if current in TERMINAL:
            return
        if clock() >= deadline:
            try:
                cancel()
            except Exception:  # noqa: BLE001 - the message matters, not whether the cancel went through
                pass
            raise WorkersNeverStarted(message)
        time.sleep(poll_s)
