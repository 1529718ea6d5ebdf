"""Reaping and stopping worker processes: the fork server's workers (each one's status sent to
its client), and the spawned Beam workers of a local run a death stopped (:mod:`.worker_watch`)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket

def reap(workers: dict, block: bool = False) -> None:
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


def gone_clients(readable: list, workers: dict) -> list[int]:
    """The pids of workers whose client's connection, readable in this pass, has closed. A
    connection ``reap`` closed in the same pass (its worker had died) is no longer one of
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


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def kill_spawned_workers() -> None:
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
            kill(pid)
