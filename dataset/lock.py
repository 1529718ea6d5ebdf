"""One writer per output: a run holds ``OUT/.lock`` from its first write to its commit.

A second run on the same ``--output`` (plain or ``--incremental``, where the
lock is on the root that holds the versions) refuses at once, before it
writes anything, naming the run that holds the lock (host, process, start
time). What it would otherwise do: both runs exit 0, the last to finish
wins, and an ``--incremental`` pair both claim the same version.

The lock holds only what judging its holder's liveness needs: host, process
id, start time, a random token and a heartbeat. No command line and no path:
``--input`` folders are often named after patients.

A lock that cannot be taken at all (``.lock`` is a directory, a symbolic link,
a hard link (a file with other names), not a regular file, or cannot be opened)
is LockUnavailable: one line naming it and the fix. The lock file is opened
with ``O_NOFOLLOW``, an existing one read-only: a run's holder goes into a new
file created exclusively, locked, and renamed over ``.lock``, so no byte of a
file that was there is ever written, wherever its other names lead.

- Local outputs: ``fcntl.flock`` on ``OUT/.lock``. The kernel releases it
  when the holder dies (even by SIGKILL): a lock file whose flock is free
  belongs to a process that is no longer running, so the next run takes it
  over (rewrites it with its own holder) and removes it when it ends. A dead
  run's lock is thus harmless (nothing identifying in it) and cleaned up by
  the next run on that output.
- ``gs://`` outputs (no file locks on an object store): ``OUT/.lock`` is an
  object holding the holder's token and a heartbeat the holder renews every
  ``HEARTBEAT_S``. A run refuses a lock whose heartbeat is younger than
  ``STALE_S``; it takes over an older one (its holder died). After writing
  its own lock a run waits ``SETTLE_S`` and reads it back: of two runs that
  wrote at once, only the one whose token is there goes on. A holder that finds
  another token in the lock (it paused past ``STALE_S`` and was taken over) stops
  renewing it, and does not remove it when it ends.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import threading
import time
import uuid
from typing import Optional

from dcm2tfrecord.dataset.errors import OutputError
from dcm2tfrecord.dataset.storage import FileSystems

from dcm2tfrecord.dataset.names import LOCK_NAME

HEARTBEAT_S = 60.0
STALE_S = 300.0
SETTLE_S = 2.0


class OutputBusy(OutputError):
    """Another run holds the output's lock."""


class LockUnavailable(OutputError):
    """The output's lock cannot be taken at all (a directory, a link, unwritable)."""


def _holder(token: str, started: str) -> dict:
    """What the lock holds: enough to judge the holder's liveness, nothing identifying."""
    return {"token": token, "host": socket.gethostname(), "pid": os.getpid(),
            "started": started, "heartbeat": time.time()}


def describe(holder: dict) -> str:
    return (f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, started "
            f"{holder.get('started', '?')}")


def _busy(output: str, holder: Optional[dict]) -> OutputBusy:
    who = describe(holder) if holder else "another run"
    dead = ("a local lock is released by the kernel when its holder dies" if "://" not in output else
            f"a dead run's lock is taken over once its heartbeat is {STALE_S:.0f} s old")
    return OutputBusy(f"--output {output} is being written by {who}; wait for it to finish, or choose "
                      f"another --output ({dead})")


class OutputLock:
    """``with OutputLock(output):`` the run's exclusive hold on ``output``; OutputBusy if taken."""

    def __init__(self, output: str):
        self.output = output.rstrip("/") or "/"
        self.path = FileSystems.join(self.output, LOCK_NAME)
        self.token = uuid.uuid4().hex
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
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

    def _unavailable(self, why: str) -> LockUnavailable:
        return LockUnavailable(f"--output {self.output}: the lock {self.path} {why}; remove it (no "
                               "run of dcm2tfrecord makes it so) and rerun")

    def _open_local(self) -> int:
        """``OUT/.lock`` opened read-only (an existing lock is never written: replaced by rename),
        or created exclusively when absent; never through a link, never a file with other
        names (a hard link to a file outside the output would be that file)."""
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            try:
                fd = os.open(self.path, os.O_RDONLY | flags)
            except FileNotFoundError:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | flags, 0o644)
        except FileExistsError:
            return self._open_local()                    # made by another run meanwhile: look again
        except IsADirectoryError:
            raise self._unavailable("is a directory") from None
        except OSError as exc:
            if os.path.islink(self.path):
                raise self._unavailable("is a symbolic link, which is never followed") from None
            raise self._unavailable(f"cannot be opened ({exc.strerror or exc})") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise self._unavailable("is a directory" if stat.S_ISDIR(info.st_mode) else "is not a regular file")
        if info.st_nlink > 1:
            os.close(fd)
            raise self._unavailable(f"has {info.st_nlink} names (a hard link: the same file as one elsewhere, "
                                    "which a run would overwrite)")
        return fd

    def _acquire_local(self) -> None:
        import fcntl
        os.makedirs(self.output, exist_ok=True)
        while True:
            fd = self._open_local()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_local(fd)
                os.close(fd)
                raise _busy(self.output, holder) from None
            except OSError as exc:    # a file system without flock
                os.close(fd)
                raise self._unavailable(f"cannot be locked ({exc.strerror or exc})") from None
            try:   # the holder before us may have removed or replaced the file after we opened it
                same = os.fstat(fd).st_ino == os.lstat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        # the flock was free: whoever wrote this file (if anyone) is no longer running. Our holder
        # goes into a new file, locked before it replaces the old one by rename: no byte of an
        # existing file is written
        fresh = f"{self.path}.{self.token}"
        new = os.open(fresh, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(new, json.dumps(_holder(self.token, self.started)).encode("utf-8"))
            os.rename(fresh, self.path)
        except BaseException:
            os.close(new)
            with contextlib.suppress(OSError):
                os.unlink(fresh)
            os.close(fd)
            raise
        os.close(fd)
        self._fd = new

    # ------------------------------------------------------------ gs://

    def _read_remote(self) -> Optional[dict]:
        try:
            with FileSystems.open(self.path) as handle:
                return json.loads(handle.read().decode("utf-8"))
        except Exception:  # noqa: BLE001 - absent or unreadable: no holder
            return None

    def _write_remote(self) -> None:
        with FileSystems.create(self.path, mime_type="application/json") as handle:
            handle.write(json.dumps(_holder(self.token, self.started)).encode("utf-8"))

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
            holder = self._read_remote()
            if holder is not None and holder.get("token") != self.token:
                return   # taken over (this run was thought dead): never write over the new holder
            with contextlib.suppress(Exception):
                self._write_remote()

    # ------------------------------------------------------------ release

    def release(self) -> None:
        self._stop.set()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                if os.lstat(self.path).st_ino == os.fstat(self._fd).st_ino:
                    os.unlink(self.path)        # ours still: never a file another run put there
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
