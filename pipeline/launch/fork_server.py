"""Local worker processes forked from the launcher instead of started as new interpreters.

With ``--direct_running_mode=multi_processing`` Beam's FnApiRunner starts every SDK
worker as ``python -m apache_beam.runners.worker.sdk_worker_main``: a fresh
interpreter that imports Beam, numpy, pydicom and this project again, about 1.7 s of
CPU per worker on the benchmark machine (docs/BENCHMARKS.md §8.4), paid before the
first record on every core. Here the launcher forks one *fork server* as soon as it
has imported what the workers run (before any thread or gRPC channel exists, so the
fork copies a single-threaded process); the runner's worker command becomes a tiny
client (the interpreter without site-packages, ~20 ms) that hands its environment
(the control and logging addresses, the pipeline options) to the fork server over a
Unix socket, which forks a worker that runs Beam's own ``sdk_worker_main.main`` with
that environment. The client waits and exits with the worker's status, so Beam sees a
subprocess exactly as before; the worker dies with its client (the socket closing) and
every worker and the server die with the launcher.

The workers run the same code on the same inputs: shards are byte-identical to spawned
workers' (tests/e2e/test_runners.py compares both with an in-memory run). Linux only (fork
after import is the POSIX behaviour this needs; elsewhere, or where the launcher
already runs threads, workers are spawned as Beam does). ``DCM2TFRECORD_SPAWN_WORKERS=1``
spawns them as Beam does anywhere.

The socket and its checks are :mod:`.peer_checks`; a worker, a client or the fork server
that dies stops the run in one line naming it (:mod:`.worker_watch`); the workers are
reaped by :mod:`.reaping`.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import select
import shlex
import signal
import socket
import sys
import threading
import traceback
from typing import Iterator, Optional

from dcm2tfrecord.pipeline.launch.heap import release_free_memory
from dcm2tfrecord.pipeline.launch.peer_checks import (SALT_ENV, SERVER_GONE, SOCKET_NAME, client_allowed,
                                                      client_source, folder_id, open_folder, socket_folder,
                                                      through)
from dcm2tfrecord.pipeline.launch.reaping import gone_clients, kill, reap
from dcm2tfrecord.pipeline.launch.worker_watch import DEBUG_ENV, WorkersWatch

SPAWN_ENV = "DCM2TFRECORD_SPAWN_WORKERS"
STOCK_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
# the loggers pipeline.convert.main quiets in the launcher
QUIETED_LOGGERS = ("apache_beam", "apache_beam.runners.portability.local_job_service")
_POLL_S = 0.5


def can_fork() -> bool:
    """Whether workers may be forked here: Linux, not turned off, and the launcher single-threaded."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "AF_UNIX")
            and not os.environ.get(SPAWN_ENV) and threading.active_count() == 1)


class ForkServer:
    """The fork server process (see the module docstring); ``command`` is the worker command."""
    _control: Optional[int]     # the launcher's end of the control pipe, None once closed
    _dir_fd: Optional[int]      # the socket folder, held open from its making to its removal

    def __init__(self):
        self._dir = socket_folder()     # 0700, under a parent no one else may rename it in
        try:
            self._dir_fd = open_folder(self._dir)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)
            raise
        self._control = None
        self._exit: Optional[int] = None  # the server's wait status once reaped
        self._closing = threading.Lock()  # the launcher and a WorkersWatch may both close it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(through(self._dir_fd, self._dir))   # into the folder made, whatever its name holds now
            if folder_id(os.lstat(self._dir)) != self._folder:
                raise OSError(f"the worker socket folder {self._dir} was replaced")
        except OSError:
            listener.close()
            self._remove_folder()
            os.close(self._dir_fd)
            raise
        control_read, self._control = os.pipe()   # the launcher's end: closing it stops the server
        ready_read, ready_write = os.pipe()       # the server listens (so SO_PEERCRED names it), then says so
        launcher = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:   # the fork server
            code = 0
            try:
                os.close(self._control)
                os.close(ready_read)
                listener.listen(64)
                os.write(ready_write, b"1")
                os.close(ready_write)
                _serve(listener, control_read, launcher)
                self._remove_folder()   # also when the launcher was killed
            except BaseException:   # noqa: BLE001 - a server that fails stops; its workers with it
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(control_read)
        os.close(ready_write)
        listener.close()
        self.pid = pid
        try:
            ready = os.read(ready_read, 1)
        finally:
            os.close(ready_read)
        if ready != b"1":
            self.close()
            raise OSError("the fork server did not start")
        dev, ino = self._folder
        # exec: the client is Beam's subprocess itself, not a shell waiting on it
        self.command = (f"exec {shlex.quote(sys.executable)} -S -c {shlex.quote(client_source())} "
                        f"{shlex.quote(self._dir)} {dev} {ino} {os.getuid()} {pid}")
        self.used = False   # whether a runner gave its workers this command (local_runner)

    @property
    def folder(self) -> str:
        return self._dir

    @property
    def _folder(self) -> tuple[int, int]:
        assert self._dir_fd is not None
        return folder_id(os.fstat(self._dir_fd))

    def exit_status(self) -> Optional[int]:
        """The server's wait status if it has ended (reaped here), else None."""
        if self._exit is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return None
            if pid:
                self._exit = status
        return self._exit

    def close(self) -> None:
        """Stops the server (and any worker still running) and removes its socket."""
        with self._closing:
            if self._control is not None:
                os.close(self._control)
                self._control = None
                if self._exit is None:
                    try:
                        self._exit = os.waitpid(self.pid, 0)[1]
                    except ChildProcessError:
                        pass
            if self._dir_fd is not None:
                self._remove_folder()
                os.close(self._dir_fd)
                self._dir_fd = None

    def _remove_folder(self) -> None:
        """The socket, through the folder's handle, and the folder while its name is still it:
        never a folder someone put in its place."""
        if self._dir_fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(SOCKET_NAME, dir_fd=self._dir_fd)
        with contextlib.suppress(OSError):
            if folder_id(os.lstat(self._dir)) == self._folder:
                os.rmdir(self._dir)


def _serve(listener: socket.socket, control: int, launcher: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the launcher decides when the server stops
    # what every worker imports, once here (on another core than the launcher's) not per worker
    from apache_beam.runners.worker import sdk_worker_main  # noqa: F401
    import ctypes  # noqa: F401 - each worker asks prctl to die with the server (_die_with)
    # what exists now is shared with every worker: the collector leaves it alone, so a
    # worker's collections do not copy those pages (CPython's advice for pre-fork servers)
    gc.freeze()
    server = os.getpid()
    workers: dict[int, socket.socket] = {}         # worker pid -> its client's connection
    try:
        while True:
            waiting: list[socket.socket | int] = [listener, control, *workers.values()]
            readable, _, _ = select.select(waiting, [], [], _POLL_S)
            reap(workers)
            if control in readable or os.getppid() != launcher:
                return                              # the launcher closed its end, or died
            for pid in gone_clients(readable, workers):
                kill(pid)                          # its client is gone: so is its worker
            if listener in readable:
                conn, _ = listener.accept()
                env = _receive(conn) if client_allowed(conn) else None
                if env is None:                     # it sent nothing whole in time: no worker
                    conn.close()
                    continue
                env.pop(SALT_ENV, None)              # never into a worker's environment, whoever sent it
                pid = os.fork()
                if pid == 0:
                    _run_worker(env, [listener, conn, *workers.values()], control, server)
                workers[pid] = conn
    finally:
        for pid in list(workers):
            kill(pid)
        while workers:
            reap(workers, block=True)


_RECEIVE_TIMEOUT_S = 5.0      # a client sends its environment at once: one that sends nothing is dropped


def _receive(conn: socket.socket) -> Optional[dict]:
    data = b""
    conn.settimeout(_RECEIVE_TIMEOUT_S)
    try:
        while len(data) < 8 or len(data) < 8 + int.from_bytes(data[:8], "little"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                return None
            data += chunk
        return json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    except (OSError, ValueError):       # timed out, reset, or not our client's JSON
        return None
    finally:
        with contextlib.suppress(OSError):
            conn.settimeout(None)


def _run_worker(env: dict, inherited: list, control: int, server: int) -> None:
    """In the forked worker: Beam's SDK harness with the client's environment; never returns."""
    code = 0
    try:
        _die_with(server)
        for sock in inherited:
            sock.close()
        os.close(control)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _fresh_logging()   # as in a new interpreter: the launcher's handlers and levels are its own
        os.environ.clear()
        os.environ.update(env)
        if not env.get(DEBUG_ENV):
            sys.stderr = _WithoutBrokenLogStream(sys.stderr)
        from apache_beam.runners.worker import sdk_worker_main
        sdk_worker_main.main([])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:   # noqa: BLE001 - reported as a worker that failed, as Beam's own would be
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class _WithoutBrokenLogStream:
    """A forked worker's stderr without Beam's "Logging client failed: ... resetting".

    Beam stops a worker's logging server as soon as the worker command (here the client)
    ends, before the fork server has killed the worker behind it: the worker then prints
    gRPC's cancellation under the run's one line (measured in CI when a client was killed).
    The stream breaks only when the run is ending; $DCM2TFRECORD_DEBUG shows it."""
    _BEAM_SAYS = "Logging client failed:"

    def __init__(self, stream):
        self._stream = stream
        self._dropped = False     # the line's end, which print() writes on its own, goes too

    def write(self, text: str) -> int:
        if text.startswith(self._BEAM_SAYS):
            self._dropped = True
            return len(text)
        if self._dropped and text == "\n":
            self._dropped = False
            return len(text)
        self._dropped = False
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _die_with(server: int) -> None:
    """The kernel kills this worker when the fork server dies (PR_SET_PDEATHSIG): a server
    killed outright leaves no worker running on without it."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):   # no prctl: the server's own kill, when it can
        pass
    if os.getppid() != server:           # it died before prctl took effect
        os._exit(SERVER_GONE)


def _fresh_logging() -> None:
    """Logging as a new interpreter has it: the launcher's root handlers and the levels its
    ``main`` gave Beam's loggers stay the launcher's (worker logs reach it through Beam)."""
    logging.root.handlers.clear()
    for name in QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)


@contextlib.contextmanager
def fork_server(wanted: bool) -> Iterator[Optional[ForkServer]]:
    """A ForkServer for the run when ``wanted`` and forking is possible here, else None."""
    server = None
    if wanted and can_fork():
        try:
            server = ForkServer()
        except OSError:   # no socket here: the workers are spawned, as Beam does
            server = None
    try:
        yield server
    finally:
        if server is not None:
            server.close()


def local_runner(server: Optional[ForkServer]):
    """Beam's FnApiRunner for a local run: its subprocess workers come from ``server`` when
    there is one, spawned workers do not inherit ``$DCM2TFRECORD_ID_SALT``, and a worker
    process that dies stops the run in one line (:class:`WorkersWatch`)."""
    from apache_beam.portability import python_urns
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    class LocalRunner(FnApiRunner):
        def run_via_runner_api(self, pipeline_proto, options):
            for environment in pipeline_proto.components.environments.values():
                # the payload of a subprocess environment is its command line, as bytes
                if (environment.urn == python_urns.SUBPROCESS_SDK
                        and environment.payload == STOCK_COMMAND.encode()):
                    if server is not None:
                        environment.payload = server.command.encode()
                        server.used = True
                    elif os.name == "posix":
                        environment.payload = f"exec env -u {SALT_ENV} {STOCK_COMMAND}".encode()
            with WorkersWatch(server) as watch:
                return watch.run(lambda: super(LocalRunner, self).run_via_runner_api(pipeline_proto, options))

        def _execute_bundle(self, *args, **kwargs):
            # what earlier stages freed goes back to the system before this one's peak (.heap)
            release_free_memory()
            return super()._execute_bundle(*args, **kwargs)

    return LocalRunner()
