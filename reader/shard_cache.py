"""A bounded local copy of a remote dataset's shards (``local_cache=`` of ``load`` and ``RandomAccess``).

``ShardCache(directory, limit_bytes)`` keeps whole shard files of a ``gs://`` dataset (or
any path ``reader.storage`` reads) in one local directory, at most ``limit_bytes`` of
them at any time, in-flight downloads counted at their full size:

- ``acquire(uri, sha256, size)`` returns a :class:`Pinned` local copy (its path and an open
  descriptor), downloading it first when absent; ``release`` unpins it. A pinned file is
  never evicted, by this process or another one sharing the directory.
- A download goes to ``<name>.<pid>.<n>.part`` in the same directory, created at its full
  size before the first byte (so the directory's bytes count it), is checked against the
  manifest's ``size`` and ``sha256`` and only then renamed to its final name
  (``os.replace``): a process killed mid-download leaves a ``.part`` file only, removed by
  the next cache that finds it unlocked. A final-named file whose size or sha256 does not
  match (damaged on disk, or left by something else) is found when first used in this
  process, removed and fetched again; once checked, a file is trusted for as long as its
  inode, size and mtime are unchanged.
- Room is made before a download by evicting unpinned files: the one whose next use in
  the known order (``plan``) is furthest, never-needed ones first (Belady's choice), else
  the least recently used. A shard larger than the limit is a ValueError naming
  ``local_cache_bytes``; while every file is pinned, a download waits for room (at most
  ``wait_s`` seconds, then a RuntimeError).
- ``plan(entries)`` also starts prefetching: a background thread downloads the next
  ``ahead`` shards of the order while the current ones are read, as far as the limit
  allows without evicting anything needed sooner.

Processes (PyTorch ``DataLoader`` workers, several runs) may share one directory: every
change to it happens under an exclusive ``fcntl.flock`` of ``<directory>/.lock``, pins
are shared flocks on the cached file itself, a download in progress an exclusive flock
on its ``.part`` file. Counters (``downloads``, ``hits``, ``evictions``, ``refetches``,
``bytes_downloaded``) are this object's own. Imports neither TensorFlow nor Beam.
"""
from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import itertools
import os
import threading
import time
from typing import Iterable, Optional

from dcm2tfrecord.dataset import names
from dcm2tfrecord.reader import storage

LOCK_NAME = names.LOCK_NAME      # the cache directory's lock file (one name for every lock file)
PART_SUFFIX = ".part"
CHUNK_BYTES = 8 << 20
WAIT_S = 600.0
OPTION = "local_cache_bytes"


@dataclasses.dataclass(frozen=True)
class Shard:
    """One remote shard as the manifest describes it (``sha256`` None: size checked only)."""
    uri: str
    sha256: Optional[str]
    size: int


@dataclasses.dataclass
class Pinned:
    """A local copy held against eviction: read ``path`` (or ``fd``) until ``release``."""
    path: str
    fd: int


def local_name(shard: Shard) -> str:
    """The cached file's name: a hash of the uri and content hash, then the shard's own name."""
    key = hashlib.sha256(f"{shard.uri}\0{shard.sha256 or ''}".encode()).hexdigest()[:20]
    return f"{key}-{os.path.basename(shard.uri.rstrip('/'))}"


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise


class ShardCache:
    """A local directory holding at most ``limit_bytes`` of shard copies (see the module)."""

    def __init__(self, directory: str, limit_bytes: int, *, ahead: int = 2, chunk_bytes: int = CHUNK_BYTES,
                 wait_s: float = WAIT_S):
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
            raise ValueError(f"{OPTION} must be a whole number of bytes >= 1, not {limit_bytes!r}")
        self.directory = os.path.abspath(os.fspath(directory))
        self.limit_bytes = int(limit_bytes)
        self.ahead, self.chunk_bytes, self.wait_s = int(ahead), int(chunk_bytes), float(wait_s)
        os.makedirs(self.directory, exist_ok=True)
        self._lock_path = os.path.join(self.directory, LOCK_NAME)
        self._mutex = threading.RLock()          # this process's threads; the flock is per open file
        self._room = threading.Condition(threading.Lock())
        self._pins: dict[str, list] = {}         # path -> [fd, count]
        self._verified: set = set()              # (path, inode, size, mtime_ns) checked here
        self._order: list[str] = []              # local names, in the order of use
        self._shards: dict[str, Shard] = {}      # local name -> Shard, of the order
        self._position = 0
        self._parts = itertools.count()
        self._prefetcher: Optional[threading.Thread] = None
        self._wake = threading.Event()
        self.downloads = self.hits = self.evictions = self.refetches = self.bytes_downloaded = 0
        self.peak_bytes = 0
        with self._locked():
            self._clean_parts()

    def __repr__(self) -> str:
        return f"ShardCache({self.directory!r}, {self.limit_bytes})"

    # --- the directory lock and what it guards --------------------------------------------

    class _Held:
        def __init__(self, cache: "ShardCache"):
            self.cache = cache

        def __enter__(self):
            self.cache._mutex.acquire()
            try:
                self.fd = os.open(self.cache._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except BaseException:
                self.cache._mutex.release()
                raise
            return self

        def __exit__(self, *exc):
            os.close(self.fd)                    # releases the flock
            self.cache._mutex.release()

    def _locked(self) -> "ShardCache._Held":
        return ShardCache._Held(self)

    def _entries(self) -> list[os.DirEntry]:
        return [e for e in os.scandir(self.directory) if e.name != LOCK_NAME and e.is_file()]

    def usage(self) -> int:
        """Bytes in the directory now: cached files and downloads in progress (at full size)."""
        return sum(e.stat().st_size for e in self._entries())

    def _clean_parts(self) -> None:
        """Removes ``.part`` files no process is writing (left by a killed download)."""
        for entry in self._entries():
            if entry.name.endswith(PART_SUFFIX):
                try:
                    fd = os.open(entry.path, os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    if _try_lock(fd, fcntl.LOCK_EX):
                        os.unlink(entry.path)
                finally:
                    os.close(fd)

    def _pinned_elsewhere(self, path: str) -> bool:
        """Whether any descriptor (this process's pins included) holds a shared lock on ``path``."""
        if path in self._pins:
            return True
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            return not _try_lock(fd, fcntl.LOCK_EX)
        finally:
            os.close(fd)

    def _next_use(self, name: str) -> float:
        try:
            return float(self._order.index(name, self._position))
        except ValueError:
            return float("inf")

    def _victims(self, before: float = float("inf")) -> list[os.DirEntry]:
        """Evictable cached files, the best victim first: furthest next use (never: first), then
        least recently used; with ``before``, only those whose next use is after it."""
        ranked = []
        for entry in self._entries():
            if entry.name.endswith(PART_SUFFIX):
                continue
            use = self._next_use(entry.name)
            if use > before or before == float("inf"):       # without a bound: any unpinned file
                ranked.append((-use, entry.stat().st_atime_ns, entry))
        ranked.sort(key=lambda item: (item[0], item[1]))
        return [entry for _, _, entry in ranked]

    def _make_room(self, size: int, before: float = float("inf")) -> bool:
        """Evicts until ``size`` more bytes fit; False (nothing evicted beyond need) when they can't."""
        used = self.usage()
        if used + size <= self.limit_bytes:
            return True
        free = [e for e in self._victims(before) if not self._pinned_elsewhere(e.path)]
        if used + size - sum(e.stat().st_size for e in free) > self.limit_bytes:
            return False
        for entry in free:
            if used + size <= self.limit_bytes:
                break
            with contextlib_suppress_missing():
                stat = entry.stat()
                os.unlink(entry.path)
                used -= stat.st_size
                self.evictions += 1
                self._verified = {v for v in self._verified if v[0] != entry.path}
        return used + size <= self.limit_bytes

    # --- getting a shard ------------------------------------------------------------------

    def _check_size(self, shard: Shard) -> None:
        if shard.size > self.limit_bytes:
            raise ValueError(f"shard {shard.uri} is {shard.size} bytes, more than {OPTION}="
                             f"{self.limit_bytes} holds: raise {OPTION} to at least {shard.size}")

    def _pin(self, path: str) -> Optional[Pinned]:
        """Pins ``path`` (under the directory lock); None when it is not there."""
        held = self._pins.get(path)
        if held is not None:
            held[1] += 1
            return Pinned(path, held[0])
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        fcntl.flock(fd, fcntl.LOCK_SH)
        self._pins[path] = [fd, 1]
        return Pinned(path, fd)

    def _adopt(self, path: str, fd: int) -> Pinned:
        """Pins ``path`` with ``fd``, already open on it and holding a shared lock (under the
        directory lock); where ``path`` is pinned already, that pin is counted and ``fd`` closed."""
        held = self._pins.get(path)
        if held is not None:
            os.close(fd)
            held[1] += 1
            return Pinned(path, held[0])
        self._pins[path] = [fd, 1]
        return Pinned(path, fd)

    def release(self, pinned: Pinned | str) -> None:
        """Unpins a copy ``acquire`` returned (one release per acquire)."""
        path = pinned.path if isinstance(pinned, Pinned) else os.fspath(pinned)
        with self._mutex:
            held = self._pins.get(path)
            if held is None:
                return
            held[1] -= 1
            if held[1] <= 0:
                del self._pins[path]
                os.close(held[0])
        with self._room:
            self._room.notify_all()

    def _verify(self, shard: Shard, pinned: Pinned) -> bool:
        stat = os.fstat(pinned.fd)
        key = (pinned.path, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key in self._verified:
            return True
        if stat.st_size != shard.size:
            return False
        if shard.sha256:
            digest = hashlib.sha256()
            offset = 0
            while True:
                data = os.pread(pinned.fd, CHUNK_BYTES, offset)
                if not data:
                    break
                digest.update(data)
                offset += len(data)
            if digest.hexdigest() != shard.sha256:
                return False
        self._verified.add(key)
        return True

    def _discard(self, pinned: Pinned) -> None:
        """Removes a damaged copy this process holds (the only pin on it, or none)."""
        with self._locked():
            held = self._pins.pop(pinned.path, None)
            if held is not None:
                os.close(held[0])
            with contextlib_suppress_missing():
                os.unlink(pinned.path)
            self.refetches += 1

    def acquire(self, uri: str, sha256: Optional[str], size: int) -> Pinned:
        """The local copy of ``uri``, pinned: downloaded (and checked) first where needed."""
        shard = Shard(str(uri), sha256 or None, int(size))
        self._check_size(shard)
        name = local_name(shard)
        path = os.path.join(self.directory, name)
        deadline = time.monotonic() + self.wait_s
        while True:
            part = None
            with self._locked():
                pinned = self._pin(path)
                if pinned is None and not self._downloading(name):
                    if self._make_room(shard.size):
                        part = self._start_part(name, shard.size)
            if pinned is not None:
                self._advance(name)
                if self._verify(shard, pinned):
                    self.hits += 1
                    os.utime(path, ns=(time.time_ns(), os.fstat(pinned.fd).st_mtime_ns))
                    return pinned
                self._discard(pinned)
                continue
            if part is not None:
                self._advance(name)
                return self._download(shard, path, part)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self}: no room for {uri} ({shard.size} bytes) after {self.wait_s:.0f} s: "
                                   f"every cached file is in use; raise {OPTION} (it must hold every shard "
                                   "read at once: twice cycle_length of them for reader.load)")
            with self._room:
                self._room.wait(0.05)

    def get(self, uri: str, sha256: Optional[str], size: int) -> str:
        """The local path of ``uri``, downloaded where needed, not pinned (a copy may be evicted
        by the next download; ``acquire`` for a file to read)."""
        pinned = self.acquire(uri, sha256, size)
        self.release(pinned)
        return pinned.path

    def _downloading(self, name: str) -> bool:
        """Whether a live download of ``name`` is in progress (stale ones are removed)."""
        busy = False
        for entry in self._entries():
            if entry.name.startswith(name + ".") and entry.name.endswith(PART_SUFFIX):
                fd = os.open(entry.path, os.O_RDONLY)
                try:
                    if _try_lock(fd, fcntl.LOCK_EX):
                        os.unlink(entry.path)
                    else:
                        busy = True
                finally:
                    os.close(fd)
        return busy

    def _start_part(self, name: str, size: int) -> tuple[str, int]:
        part = os.path.join(self.directory, f"{name}.{os.getpid()}.{next(self._parts)}{PART_SUFFIX}")
        fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, size)                   # counted at full size from now on
        self.peak_bytes = max(self.peak_bytes, self.usage())
        return part, fd

    def _download(self, shard: Shard, path: str, part: tuple[str, int]) -> Pinned:
        part_path, fd = part
        try:
            source = storage.RangeReader(shard.uri)
            digest = hashlib.sha256()
            offset = 0
            while offset < shard.size:
                data = source.read(offset, min(self.chunk_bytes, shard.size - offset))
                if not data:
                    break
                os.pwrite(fd, data, offset)
                digest.update(data)
                offset += len(data)
            source.close()
            if offset != shard.size or (shard.sha256 and digest.hexdigest() != shard.sha256):
                got = f"{offset} bytes" if offset != shard.size else f"sha256 {digest.hexdigest()}"
                raise ValueError(f"{shard.uri}: {got}, the manifest says {shard.size} bytes, sha256 "
                                 f"{shard.sha256}: the remote shard differs from dataset.json")
            with self._locked():
                # the .part's exclusive lock becomes the copy's pin (a shared lock on the same
                # descriptor): a second descriptor's shared lock would wait on our own exclusive
                # one (flock locks of one process's descriptors conflict), and under the
                # directory lock no cleaner sees the .part unlocked in between
                fcntl.flock(fd, fcntl.LOCK_SH)
                os.replace(part_path, path)
                pinned = self._adopt(path, fd)
            fd = -1                               # the pin holds it now
            stat = os.fstat(pinned.fd)
            self._verified.add((path, stat.st_ino, stat.st_size, stat.st_mtime_ns))
            self.downloads += 1
            self.bytes_downloaded += offset
            return pinned
        except BaseException:
            with contextlib_suppress_missing():
                os.unlink(part_path)
            raise
        finally:
            if fd >= 0:
                os.close(fd)                      # the .part's lock, where no pin took it over
            with self._room:
                self._room.notify_all()

    # --- the known order: Belady's eviction and prefetching ---------------------------------

    def plan(self, shards: Iterable[Shard]) -> None:
        """The shards about to be read, in order: eviction keeps those needed soonest, and a
        background thread fetches the next ``ahead`` of them."""
        shards = list(shards)
        with self._mutex:
            self._order = [local_name(s) for s in shards]
            self._shards = dict(zip(self._order, shards))
            self._position = 0
        self._wake.set()
        if self.ahead > 0 and (self._prefetcher is None or not self._prefetcher.is_alive()):
            self._prefetcher = threading.Thread(target=self._prefetch_loop, name="shard-cache-prefetch",
                                                daemon=True)
            self._prefetcher.start()

    def _advance(self, name: str) -> None:
        with self._mutex:
            if name not in self._shards:
                return
            try:
                self._position = self._order.index(name, self._position) + 1
            except ValueError:            # read again from the start (the same order each epoch)
                self._position = self._order.index(name) + 1
        self._wake.set()

    def _prefetch_loop(self) -> None:
        while True:
            self._wake.wait(1.0)
            self._wake.clear()
            with self._mutex:
                position, upcoming = self._position, self._order[self._position:self._position + self.ahead]
            for offset, name in enumerate(upcoming):
                shard = self._shards[name]
                path = os.path.join(self.directory, name)
                part = None
                with self._locked():
                    if shard.size > self.limit_bytes or os.path.exists(path) or self._downloading(name):
                        continue
                    # room only by evicting what is needed after this shard (or never)
                    if self._make_room(shard.size, before=float(position + offset)):
                        part = self._start_part(name, shard.size)
                if part is None:
                    break
                try:
                    self.release(self._download(shard, path, part))
                except Exception:
                    break                # acquire will fetch it again, and raise what is wrong


class contextlib_suppress_missing:
    """``contextlib.suppress(FileNotFoundError)``: another process removed it first."""

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        return kind is not None and issubclass(kind, FileNotFoundError)


def check_options(directory, limit_bytes) -> None:
    """``local_cache`` and ``local_cache_bytes`` come together; the limit is a whole number >= 1."""
    if directory is None and limit_bytes is None:
        return
    if directory is None:
        raise ValueError(f"{OPTION} needs local_cache (the directory of the local copies)")
    if limit_bytes is None:
        raise ValueError(f"local_cache needs {OPTION} (the most bytes of shard copies it may hold)")
    if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
        raise ValueError(f"{OPTION} must be a whole number of bytes >= 1, not {limit_bytes!r}")


_caches: dict = {}
_caches_lock = threading.Lock()


def shared(directory: str, limit_bytes: int) -> ShardCache:
    """One ``ShardCache`` per directory and limit in each process (pins and checks shared)."""
    key = (os.getpid(), os.path.abspath(os.fspath(directory)), limit_bytes)
    with _caches_lock:
        if key not in _caches:
            _caches[key] = ShardCache(directory, limit_bytes)
        return _caches[key]
