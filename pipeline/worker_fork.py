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
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import select
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
import traceback
from typing import Iterator, Optional

SPAWN_ENV = "DCM2TFRECORD_SPAWN_WORKERS"
STOCK_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
_SOCKET_NAME = "workers.sock"
# the loggers pipeline.convert.main quiets in the launcher
QUIETED_LOGGERS = ("apache_beam", "apache_beam.runners.portability.local_job_service")
_POLL_S = 0.5
_MAX_SOCKET_PATH = 100      # sockaddr_un's sun_path holds 108 bytes, the last a NUL

# the worker command: no site-packages, no project import; only the standard library
_CLIENT = (
    "import json,os,signal,socket,sys\n"
    "signal.signal(signal.SIGINT,signal.SIG_IGN)\n"
    "s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1])\n"
    "e=json.dumps(dict(os.environ)).encode()\n"
    "s.sendall(len(e).to_bytes(8,'little')+e)\n"
    "d=b''\n"
    "while True:\n"
    " c=s.recv(64)\n"
    " if not c:break\n"
    " d+=c\n"
    "sys.exit(int(d) if d.strip() else 1)\n")


def can_fork() -> bool:
    """Whether workers may be forked here: Linux, not turned off, and the launcher single-threaded."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "AF_UNIX")
            and not os.environ.get(SPAWN_ENV) and threading.active_count() == 1)


class ForkServer:
    """The fork server process (see the module docstring); ``command`` is the worker command."""
    _control: Optional[int]     # the launcher's end of the control pipe, None once closed

    def __init__(self):
        self._dir = _socket_folder()     # 0700: this user's processes only may connect
        path = os.path.join(self._dir, _SOCKET_NAME)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(64)
        except OSError:
            listener.close()
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        control_read, self._control = os.pipe()   # the launcher's end: closing it stops the server
        launcher = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:   # the fork server
            code = 0
            try:
                os.close(self._control)
                _serve(listener, control_read, launcher)
                shutil.rmtree(self._dir, ignore_errors=True)   # also when the launcher was killed
            except BaseException:   # noqa: BLE001 - a server that fails stops; its workers with it
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(control_read)
        listener.close()
        self.pid = pid
        self.command = f"{shlex.quote(sys.executable)} -S -c {shlex.quote(_CLIENT)} {shlex.quote(path)}"
        self.used = False   # whether a runner gave its workers this command (forking_runner)

    def close(self) -> None:
        """Stops the server (and any worker still running) and removes its socket."""
        if self._control is not None:
            os.close(self._control)
            self._control = None
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass
        shutil.rmtree(self._dir, ignore_errors=True)


def _socket_folder() -> str:
    """A new private folder for the socket: under the temp folder, or /tmp where that path
    would be too long for a Unix socket's name (about 107 bytes on Linux)."""
    for parent in (tempfile.gettempdir(), "/tmp"):
        folder = tempfile.mkdtemp(prefix="dcm2tfrecord-workers-", dir=parent)
        if len(os.fsencode(os.path.join(folder, _SOCKET_NAME))) <= _MAX_SOCKET_PATH:
            return folder
        os.rmdir(folder)
    raise OSError(f"no temp folder short enough for a Unix socket (tried {tempfile.gettempdir()}, /tmp)")


def _serve(listener: socket.socket, control: int, launcher: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the launcher decides when the server stops
    # what every worker imports, once here (on another core than the launcher's) not per worker
    from apache_beam.runners.worker import sdk_worker_main  # noqa: F401
    # what exists now is shared with every worker: the collector leaves it alone, so a
    # worker's collections do not copy those pages (CPython's advice for pre-fork servers)
    gc.freeze()
    workers: dict[int, socket.socket] = {}         # worker pid -> its client's connection
    try:
        while True:
            waiting: list[socket.socket | int] = [listener, control, *workers.values()]
            readable, _, _ = select.select(waiting, [], [], _POLL_S)
            _reap(workers)
            if control in readable or os.getppid() != launcher:
                return                              # the launcher closed its end, or died
            for pid in _gone_clients(readable, workers):
                _kill(pid)                          # its client is gone: so is its worker
            if listener in readable:
                conn, _ = listener.accept()
                env = _receive(conn)
                if env is None:                     # it sent nothing whole in time: no worker
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    _run_worker(env, [listener, conn, *workers.values()], control)
                workers[pid] = conn
    finally:
        for pid in list(workers):
            _kill(pid)
        while workers:
            _reap(workers, block=True)


def _gone_clients(readable: list, workers: dict) -> list[int]:
    """The pids of workers whose client's connection, readable in this pass, has closed. A
    connection ``_reap`` closed in the same pass (its worker had died) is no longer one of
    ``workers``: it is skipped, never read (reading it stopped the server: EBADF)."""
    gone = []
    for pid, conn in list(workers.items()):
        if not any(conn is r for r in readable):
            continue
        try:
            closed = not conn.recv(1, socket.MSG_PEEK)
        except OSError:
            closed = True
        if closed:
            gone.append(pid)
    return gone


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


def _reap(workers: dict, block: bool = False) -> None:
    while workers:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            workers.clear()
            return
        if pid == 0:
            return
        conn = workers.pop(pid, None)
        if conn is not None:
            code = os.waitstatus_to_exitcode(status)   # negative: killed by that signal
            with contextlib.suppress(OSError):
                conn.sendall(str(code if 0 <= code < 256 else 1).encode())
            conn.close()
        if block:
            return


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _run_worker(env: dict, inherited: list, control: int) -> None:
    """In the forked worker: Beam's SDK harness with the client's environment; never returns."""
    code = 0
    try:
        for sock in inherited:
            sock.close()
        os.close(control)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _fresh_logging()   # as in a new interpreter: the launcher's handlers and levels are its own
        os.environ.clear()
        os.environ.update(env)
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


def forking_runner(server: ForkServer):
    """Beam's FnApiRunner whose subprocess workers come from ``server``."""
    from apache_beam.portability import python_urns
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    class ForkedWorkersRunner(FnApiRunner):
        def run_via_runner_api(self, pipeline_proto, options):
            for environment in pipeline_proto.components.environments.values():
                # the payload of a subprocess environment is its command line, as bytes
                if (environment.urn == python_urns.SUBPROCESS_SDK
                        and environment.payload == STOCK_COMMAND.encode()):
                    environment.payload = server.command.encode()
                    server.used = True
            return super().run_via_runner_api(pipeline_proto, options)

    return ForkedWorkersRunner()
