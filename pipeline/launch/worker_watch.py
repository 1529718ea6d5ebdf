"""A local run's worker process, its client or the fork server that dies stops the run in one line
naming it (:class:`WorkersWatch`): Beam alone printed its threads' tracebacks and ended with
``Empty``, or waited forever for a worker that died before it connected."""
from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional

from dcm2tfrecord.dataset.errors import Dcm2TfrecordError
from dcm2tfrecord.pipeline.launch.peer_checks import REFUSED_FOLDER, REFUSED_PEER, SERVER_GONE
from dcm2tfrecord.pipeline.launch.reaping import kill_spawned_workers

if TYPE_CHECKING:
    from dcm2tfrecord.pipeline.launch.fork_server import ForkServer


class WorkersDied(Dcm2TfrecordError):
    """A local run's worker process, its client or the fork server died or refused the
    socket: the run stopped (its message is the one line to print)."""


_EXITED = re.compile(r"Worker subprocess exited with return code (-?\d+)")
_STOP_SIGNAL = signal.SIGUSR2
_STOPPED_WAIT_S = 10.0     # for Beam's threads of the workers stopped after a death
_REAP_EVERY_S = 0.1        # spawned workers started after a death are stopped this often
DEBUG_ENV = "DCM2TFRECORD_DEBUG"    # pipeline.convert's: Beam's tracebacks shown as they come


class WorkersWatch:
    """While a local run goes: Beam's thread that waits on a worker process ends with
    "Worker subprocess exited with return code N" when the process dies, and Beam itself
    may wait forever (a worker that died before it connected) or fail with ``Empty``. The
    watch takes that death (and the tracebacks of Beam's threads whose streams broke with
    it, unless $DCM2TFRECORD_DEBUG), stops every other worker, and interrupts the run's
    thread, which then raises :class:`WorkersDied` naming what died and what to do."""

    def __init__(self, server: Optional[ForkServer]):
        self.server = server
        self.first = ""              # the one line for the first death, once there is one
        self._lock = threading.Lock()
        self._running = False
        self._main: Optional[int] = None
        self._previous_hook: Callable = threading.excepthook
        self._previous_signal: Any = None
        self._ended = threading.Event()   # the watch is over: the reaper of spawned workers stops

    def __enter__(self) -> "WorkersWatch":
        self._previous_hook = threading.excepthook
        threading.excepthook = self._hook
        if threading.current_thread() is threading.main_thread():
            self._main = threading.get_ident()
            self._previous_signal = signal.signal(_STOP_SIGNAL, self._interrupted)
        self._running = True
        return self

    def __exit__(self, *exc) -> None:
        self._running = False
        if self.first:   # the others were stopped: Beam's threads waiting on them end now, quietly
            deadline = time.monotonic() + _STOPPED_WAIT_S
            for thread in threading.enumerate():
                if thread.name == "run_worker" and thread is not threading.current_thread():
                    thread.join(max(0.0, deadline - time.monotonic()))
        self._ended.set()
        threading.excepthook = self._previous_hook
        if self._main is not None:
            signal.signal(_STOP_SIGNAL, self._previous_signal)

    def _reap(self) -> None:
        while not self._ended.wait(_REAP_EVERY_S):
            kill_spawned_workers()

    def run(self, job: Callable):
        """``job()``, as :class:`WorkersDied` where a worker died while it ran."""
        try:
            result = job()
            self._running = False
            return result
        except BaseException as exc:
            self._running = False
            if self.first:
                raise WorkersDied(self.first) from exc
            raise

    def _interrupted(self, signum, frame) -> None:
        if self._running and self.first:
            self._running = False
            # as Ctrl-C would: no ``except Exception`` of Beam's swallows it; run() names the death
            raise KeyboardInterrupt

    def _hook(self, args) -> None:
        exc = args.exc_value
        match = _EXITED.search(str(exc)) if isinstance(exc, RuntimeError) else None
        if match is not None:
            self.died(int(match.group(1)))
        elif not _broken_stream(exc):
            self._previous_hook(args)
            return
        if os.environ.get(DEBUG_ENV):
            self._previous_hook(args)

    def died(self, code: int) -> None:
        """A worker command ended with ``code`` (Beam's return code) while the run went."""
        with self._lock:
            if self.first or not self._running:
                return
            self.first = death_line(code, self.server)
        # the others stop too: Beam's tidy-up then waits on none of them
        if self.server is not None:
            self.server.close()     # a client started after this finds no server and ends
        else:
            # a worker Beam starts after this scan (measured: its second, under load) would
            # keep Beam's tidy-up waiting on it forever: every new one is stopped until the end
            kill_spawned_workers()
            threading.Thread(target=self._reap, name="dcm2tfrecord-reaper", daemon=True).start()
        if self._main is not None:
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(self._main, _STOP_SIGNAL)


def _broken_stream(exc: BaseException) -> bool:
    """gRPC's RpcError: what Beam's stream threads end with when a worker's connection breaks."""
    return any(c.__name__ == "RpcError" and c.__module__.startswith("grpc") for c in type(exc).__mro__)


_RERUN = "nothing was committed; rerun the same command (the rerun writes the same bytes)"


def death_line(code: int, server: Optional[ForkServer]) -> str:
    """The one line for a worker command that ended with ``code`` (Beam's return code:
    negative or 128 + N for signal N) in a run whose fork server is ``server``."""
    if code in (REFUSED_FOLDER, REFUSED_PEER):
        what = ("its folder is not the one this run made (replaced, or no longer 0700 and its own)"
                if code == REFUSED_FOLDER else "the process listening on it is not the fork server")
        where = server.folder if server is not None else "the temp folder"
        return (f"a worker refused the fork server's socket in {where}: {what}; another user may "
                "write the folder above it. Nothing was sent and nothing was committed; set TMPDIR "
                "to a folder only you can write (or DCM2TFRECORD_SPAWN_WORKERS=1) and rerun")
    status = server.exit_status() if server is not None else None
    if status is not None or (server is not None and code == SERVER_GONE):
        ended = (_signal_words(os.WTERMSIG(status)) if status is not None and os.WIFSIGNALED(status)
                 else f"exited with status {os.waitstatus_to_exitcode(status)}" if status is not None
                 else "stopped answering")
        return (f"the fork server (process {server.pid if server else '?'}), which starts this run's "
                f"worker processes, {ended}; {_RERUN}")
    signum = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else 0
    if signum:
        memory = ", with fewer --direct_num_workers if memory ran out" if signum == signal.SIGKILL else ""
        return f"a worker process {_signal_words(signum)}; {_RERUN}{memory}"
    return (f"a worker process exited with status {code} before the run ended (its error is above; "
            f"{DEBUG_ENV}=1 shows Beam's); {_RERUN}")


def _signal_words(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    why = (" (the out-of-memory killer sends it when memory runs out; so does kill -9)"
           if signum == signal.SIGKILL else "")
    return f"was killed by {name}{why}"
