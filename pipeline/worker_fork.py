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

The socket trusts no one (issue 35, item 3): its folder (0700) is made only under a parent
that others cannot rename it out of (not world-writable, or sticky: an unsafe ``TMPDIR`` is
passed over for /tmp, else the workers are spawned), bound through the folder's handle, and
checked again by each client (same device and inode, owner, mode) before it connects; each
end checks the other's credentials (``SO_PEERCRED``: the client that the listener is the fork
server, pid and uid; the server that the client is this user's) before a byte is sent; and a
client never sends ``$DCM2TFRECORD_ID_SALT`` (workers get the salt in their settings).

A worker, a client or the fork server that dies (SIGKILL, the out-of-memory killer) stops the
run in one line naming it (:class:`WorkersWatch`): Beam alone printed its threads' tracebacks
and ended with ``Empty``, or waited forever for a worker that died before it connected.
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import re
import select
import shlex
import signal
import socket
import stat
import struct
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from typing import Any, Callable, Iterator, Optional

from dcm2tfrecord.dataset.errors import Dcm2TfrecordError

SPAWN_ENV = "DCM2TFRECORD_SPAWN_WORKERS"
STOCK_COMMAND = f"{sys.executable} -m apache_beam.runners.worker.sdk_worker_main"
_SOCKET_NAME = "workers.sock"
# the loggers pipeline.convert.main quiets in the launcher
QUIETED_LOGGERS = ("apache_beam", "apache_beam.runners.portability.local_job_service")
_POLL_S = 0.5
_MAX_SOCKET_PATH = 100      # sockaddr_un's sun_path holds 108 bytes, the last a NUL

SALT_ENV = "DCM2TFRECORD_ID_SALT"   # never sent to a worker (pipeline/salt.py's; not imported: no cycle)

# How a client ends when it sends nothing: the exit statuses the launcher names (WorkersWatch);
# a worker killed by signal N ends its client with 128 + N, as a shell reports it
REFUSED_FOLDER = 211    # the socket's folder is not the one the launcher made (replaced, not 0700, not ours)
REFUSED_PEER = 212      # the process listening on the socket is not the fork server (SO_PEERCRED)
SERVER_GONE = 213       # no fork server answered, or it went before the worker's status


def peer_refusal(creds, uid, pid=None):
    """Why the process at the other end of a worker socket is not the one expected, or ""
    when it is. ``creds`` is SO_PEERCRED's (pid, uid, gid); ``uid`` the user it must run
    as; ``pid`` (the client's check of the fork server) the process it must be. Standard
    library only: the worker client runs this very source (see ``_client_source``)."""
    peer_pid, peer_uid = creds[0], creds[1]
    if peer_uid != uid:
        return "it runs as uid %d, not as uid %d" % (peer_uid, uid)
    if pid is not None and peer_pid != pid:
        return "it is process %d, not the fork server (process %d)" % (peer_pid, pid)
    return ""


# the worker command: no site-packages, no project import; only the standard library.
# argv: the socket's folder, its device and inode, the uid and pid of the fork server
_CLIENT_MAIN = """
signal.signal(signal.SIGINT,signal.SIG_IGN)
folder,dev,ino,uid,pid=sys.argv[1],*map(int,sys.argv[2:6])
try:
 fd=os.open(folder,os.O_RDONLY|os.O_DIRECTORY|os.O_NOFOLLOW)
 st=os.fstat(fd)
except OSError:
 sys.exit(%(folder)d)
if (st.st_dev,st.st_ino)!=(dev,ino) or st.st_uid!=uid or st.st_mode&0o077:
 sys.exit(%(folder)d)
via='/proc/self/fd/%%d'%%fd
s=socket.socket(socket.AF_UNIX)
try:
 s.connect(os.path.join(via if os.path.isdir(via) else folder,'%(name)s'))
 creds=struct.unpack('3i',s.getsockopt(socket.SOL_SOCKET,socket.SO_PEERCRED,12))
except OSError:
 sys.exit(%(gone)d)
if peer_refusal(creds,uid,pid):
 sys.exit(%(peer)d)
e=dict(os.environ)
e.pop('%(salt)s',None)
e=json.dumps(e).encode()
d=b''
try:
 s.sendall(len(e).to_bytes(8,'little')+e)
 while True:
  c=s.recv(64)
  if not c:break
  d+=c
except OSError:
 d=b''
sys.exit(int(d) if d.strip() else %(gone)d)
"""


def _client_source() -> str:
    """The worker client's program: ``peer_refusal``'s own source, then the client."""
    import inspect
    return ("import json,os,signal,socket,struct,sys\n" + textwrap.dedent(inspect.getsource(peer_refusal))
            + _CLIENT_MAIN % {"folder": REFUSED_FOLDER, "peer": REFUSED_PEER, "gone": SERVER_GONE,
                              "name": _SOCKET_NAME, "salt": SALT_ENV})


def can_fork() -> bool:
    """Whether workers may be forked here: Linux, not turned off, and the launcher single-threaded."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(socket, "AF_UNIX")
            and not os.environ.get(SPAWN_ENV) and threading.active_count() == 1)


class ForkServer:
    """The fork server process (see the module docstring); ``command`` is the worker command."""
    _control: Optional[int]     # the launcher's end of the control pipe, None once closed
    _dir_fd: Optional[int]      # the socket folder, held open from its making to its removal

    def __init__(self):
        self._dir = _socket_folder()     # 0700, under a parent no one else may rename it in
        try:
            self._dir_fd = _open_folder(self._dir)
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)
            raise
        self._control = None
        self._exit: Optional[int] = None  # the server's wait status once reaped
        self._closing = threading.Lock()  # the launcher and a WorkersWatch may both close it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(_through(self._dir_fd, self._dir))   # into the folder made, whatever its name holds now
            if _folder_id(os.lstat(self._dir)) != self._folder:
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
        self.command = (f"exec {shlex.quote(sys.executable)} -S -c {shlex.quote(_client_source())} "
                        f"{shlex.quote(self._dir)} {dev} {ino} {os.getuid()} {pid}")
        self.used = False   # whether a runner gave its workers this command (local_runner)

    @property
    def folder(self) -> str:
        return self._dir

    @property
    def _folder(self) -> tuple[int, int]:
        assert self._dir_fd is not None
        return _folder_id(os.fstat(self._dir_fd))

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
            os.unlink(_SOCKET_NAME, dir_fd=self._dir_fd)
        with contextlib.suppress(OSError):
            if _folder_id(os.lstat(self._dir)) == self._folder:
                os.rmdir(self._dir)


def _folder_id(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _open_folder(folder: str) -> int:
    """A handle on the socket folder just made: this user's, 0700, not a link."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        os.close(fd)
        raise OSError(f"the worker socket folder {folder} is not this user's own")
    return fd


def _through(fd: int, folder: str) -> str:
    """The socket's name through the folder's handle (/proc/self/fd), where Linux has it."""
    via = f"/proc/self/fd/{fd}"
    return os.path.join(via if os.path.isdir(via) else folder, _SOCKET_NAME)


def unsafe_parent(folder: str) -> str:
    """The first of ``folder`` and its parents where someone else could rename a folder of
    ours away and put their own in its place, or "": one that others (its group included)
    may write without the sticky bit, or that belongs to another user than root or us.
    """
    path = os.path.realpath(folder)
    me = os.getuid()
    while True:
        st = os.stat(path)
        if st.st_uid not in (0, me) or (st.st_mode & (stat.S_IWOTH | stat.S_IWGRP)
                                        and not st.st_mode & stat.S_ISVTX):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return ""
        path = parent


def _socket_folder() -> str:
    """A new private folder for the socket: under the temp folder, or /tmp where that is
    unsafe (:func:`unsafe_parent`) or its path too long for a Unix socket's name (about 107
    bytes on Linux). OSError (the workers are then spawned) where neither will do."""
    tried = []
    for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        tried.append(parent)
        try:
            if unsafe_parent(parent):
                continue
        except OSError:
            continue
        folder = tempfile.mkdtemp(prefix="dcm2tfrecord-workers-", dir=parent)
        if len(os.fsencode(os.path.join(folder, _SOCKET_NAME))) <= _MAX_SOCKET_PATH:
            return folder
        os.rmdir(folder)
    raise OSError(f"no temp folder safe and short enough for the workers' Unix socket (tried {', '.join(tried)})")


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
            _reap(workers)
            if control in readable or os.getppid() != launcher:
                return                              # the launcher closed its end, or died
            for pid in _gone_clients(readable, workers):
                _kill(pid)                          # its client is gone: so is its worker
            if listener in readable:
                conn, _ = listener.accept()
                env = _receive(conn) if _client_allowed(conn) else None
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


def _client_allowed(conn: socket.socket) -> bool:
    """Whether the client runs as this user (SO_PEERCRED; a 0700 folder should see to it)."""
    try:
        creds = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    except OSError:
        return False
    return not peer_refusal(creds, os.getuid())


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
            with contextlib.suppress(OSError):     # as a shell says it: 128 + the signal
                conn.sendall(str(code if 0 <= code < 128 else 128 - code if code < 0 else 1).encode())
            conn.close()
        if block:
            return


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


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

    return LocalRunner()


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
            _kill_spawned_workers()

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
            _kill_spawned_workers()
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


def _kill_spawned_workers() -> None:
    """SIGKILL to this process's spawned Beam workers (Linux: found in /proc)."""
    me = os.getpid()
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return
    parents = {}
    for name in names:
        try:
            with open(f"/proc/{name}/stat") as handle:
                parents[int(name)] = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    family, frontier = set(), [me]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in family:
                family.add(pid)
                frontier.append(pid)
    for pid in family:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                spawned = b"sdk_worker_main" in handle.read()
        except OSError:
            continue
        if spawned:
            _kill(pid)
