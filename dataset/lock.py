"""One writer per output: a run holds ``OUT/.lock`` from its first write to its commit.

A second run on the same ``--output`` (plain or ``--incremental``, where the
lock is on the root that holds the versions) refuses at once, before it
writes anything, naming the run that holds the lock (host, process, start
time, and its command line with the salt blanked). What it would otherwise
do: both runs exit 0, the last to finish wins, and an ``--incremental`` pair
both claim the same version.

- Local outputs: ``fcntl.flock`` on ``OUT/.lock``. The kernel releases it
  when the holder dies (even by SIGKILL), so a crash never leaves a stale
  lock; the file is removed when the run ends.
- ``gs://`` outputs (no file locks on an object store): ``OUT/.lock`` is an
  object holding the holder's token and a heartbeat the holder renews every
  ``HEARTBEAT_S``. A run refuses a lock whose heartbeat is younger than
  ``STALE_S``; it takes over an older one (its holder died). After writing
  its own lock a run waits ``SETTLE_S`` and reads it back: of two runs that
  wrote at once, only the one whose token is there goes on.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
import uuid
from typing import Optional

from dataset.storage import FileSystems

from dataset.names import LOCK_NAME

HEARTBEAT_S = 60.0
STALE_S = 300.0
SETTLE_S = 2.0


class OutputBusy(Exception):
    """Another run holds the output's lock."""


def _holder(token: str) -> dict:
    argv = list(sys.argv)
    for i, arg in enumerate(argv):          # never write the salt anywhere
        if arg.startswith("--id_salt="):
            argv[i] = "--id_salt=***"
        elif arg == "--id_salt" and i + 1 < len(argv):
            argv[i + 1] = "***"
    return {"token": token, "host": socket.gethostname(), "pid": os.getpid(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "heartbeat": time.time(),
            "command": " ".join(argv)[:500]}


def describe(holder: dict) -> str:
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}: {holder.get('command', '?')}")


def _busy(output: str, holder: Optional[dict]) -> OutputBusy:
    who = describe(holder) if holder else "another run"
    return OutputBusy(f"--output {output} is being written by {who}; wait for it to finish, or choose "
                      f"another --output (if that run is dead, remove {FileSystems.join(output, LOCK_NAME)})")


class OutputLock:
    """``with OutputLock(output):`` the run's exclusive hold on ``output``; OutputBusy if taken."""

    def __init__(self, output: str):
        self.output = output.rstrip("/") or "/"
        self.path = FileSystems.join(self.output, LOCK_NAME)
        self.token = uuid.uuid4().hex
        self._fd: Optional[int] = None
        self._stop = threading.Event()

    def __enter__(self) -> "OutputLock":
        if "://" in self.output:
            self._acquire_remote()
        else:
            self._acquire_local()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # ------------------------------------------------------------ local

    def _acquire_local(self) -> None:
        import fcntl
        os.makedirs(self.output, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_local(fd)
                os.close(fd)
                raise _busy(self.output, holder) from None
            try:   # the holder before us may have removed the file after we opened it
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(_holder(self.token)).encode("utf-8"))
        self._fd = fd

    # ------------------------------------------------------------ gs://

    def _read_remote(self) -> Optional[dict]:
        try:
            with FileSystems.open(self.path) as handle:
                return json.loads(handle.read().decode("utf-8"))
        except Exception:  # noqa: BLE001 - absent or unreadable: no holder
            return None

    def _write_remote(self) -> None:
        with FileSystems.create(self.path, mime_type="application/json") as handle:
            handle.write(json.dumps(_holder(self.token)).encode("utf-8"))

    def _acquire_remote(self) -> None:
        holder = self._read_remote()
        if holder and time.time() - float(holder.get("heartbeat", 0)) < STALE_S:
            raise _busy(self.output, holder)
        self._write_remote()
        time.sleep(SETTLE_S)
        holder = self._read_remote()
        if not holder or holder.get("token") != self.token:
            raise _busy(self.output, holder)
        threading.Thread(target=self._heartbeat, name="dcm2tfrecord-lock", daemon=True).start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with contextlib.suppress(Exception):
                self._write_remote()

    # ------------------------------------------------------------ release

    def release(self) -> None:
        self._stop.set()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
            os.close(self._fd)      # closing releases the flock
            self._fd = None
        elif "://" in self.output:
            holder = self._read_remote()
            if holder and holder.get("token") == self.token:
                with contextlib.suppress(Exception):
                    FileSystems.delete([self.path])


def _read_local(fd: int) -> Optional[dict]:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        return json.loads(os.read(fd, 1 << 16).decode("utf-8"))
    except (OSError, ValueError):
        return None
