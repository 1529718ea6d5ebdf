"""Opening a source, and reading it whole, checking it did not change since it was probed.

Reading into memory once gives the decoders a fast seekable buffer (pydicom
and Pillow seek a lot) and makes the size check free; memory stays bounded
by the largest file (docs/ARCHITECTURE.md, "Bounded memory"): never more
than the size the file had when it was probed is read, plus one byte.

Every source is opened here (``open_source``): a local one only once it is
known to be a regular file, so a FIFO, a device or a socket (or a link to one)
that an input turned into is never read. The probe records a fingerprint of
each file's head (``fingerprint``), which ``read_unchanged`` checks at write:
a file replaced with another of the same size and modification time (``rsync
-a``, ``cp -p``) is changed_during_run, never a record.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import queue
import stat
import threading
import time
from typing import Any, BinaryIO, Callable, Optional, TypeVar

from apache_beam.io.filesystems import CompressionTypes, FileSystems

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.tfrecord import crc32c
from dcm2tfrecord.transforms.errors import ConversionError, StorageOutage
from dcm2tfrecord.transforms.record_model import SourceFile

T = TypeVar("T")


_SPECIAL_FILES = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) is when it is a FIFO, a device or a socket; ""
    for a regular file or a directory."""
    return next((what for test, what in _SPECIAL_FILES if test(mode)), "")


def not_regular(kind: str) -> ConversionError:
    return ConversionError(reasons.NOT_A_REGULAR_FILE, f"{kind}, not a regular file: not read")


def _open_local(path: str) -> BinaryIO:
    """A local file opened for reading only if it is a regular file (links followed, as
    matching follows them): stat'ed first, so a device is never opened, then opened without
    blocking (a FIFO put there since would wait for a writer) and fstat'ed, so what was opened
    is what is read."""
    mode = os.stat(path).st_mode
    if special_kind(mode):
        raise not_regular(special_kind(mode))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if special_kind(mode):
            raise not_regular(special_kind(mode))
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def open_source(uri: str) -> BinaryIO:
    """Opens a source as raw bytes: a ``.gz`` DICOM is not ours to decompress. A local path
    that is no regular file is ConversionError(not_a_regular_file), never opened or read."""
    if "://" not in uri:
        return _open_local(uri)
    return FileSystems.open(uri, mime_type="application/octet-stream",
                            compression_type=CompressionTypes.UNCOMPRESSED)


# What the probe fingerprints of a file (at least; see fingerprint_length): the head a DICOM
# probe parses from (transforms.dicom.head_parse), which holds its header and its SOP Instance UID
FINGERPRINT_BYTES = 64 << 10


def fingerprint_length(size: int, cover: int = 0) -> int:
    """How many bytes a file of ``size`` is fingerprinted by: the first FINGERPRINT_BYTES, or
    as far as ``cover`` (the end of an element the fingerprint must hold), at most the file."""
    return min(size, max(FINGERPRINT_BYTES, cover))


def fingerprint(data: bytes, length: int) -> bytes:
    """The fingerprint of a file whose bytes start with ``data``: ``length`` (8 bytes, big
    endian) and the CRC-32C of the first ``length`` bytes (4 bytes). A check against files
    replaced by accident (a CRC in hardware: 4 us for 64 KiB, where a cryptographic digest
    took a seventh of a probe), not against a forger, who could as well have written the
    file before it was probed."""
    return length.to_bytes(8, "big") + crc32c(data[:length]).to_bytes(4, "big")


def fingerprint_mismatch(source: SourceFile, data) -> str:
    """Why ``data``, the file's bytes now, is not what ``source`` was probed from ("" if it
    is, or nothing was fingerprinted)."""
    if not source.fingerprint:
        return ""
    length = int.from_bytes(source.fingerprint[:8], "big")
    if len(data) >= length and fingerprint(data, length) == source.fingerprint:
        return ""
    return (f"its first {length} bytes (the header) are not those it was probed from, although its size "
            f"and modification time are: the file was replaced during the run; convert again")


@functools.lru_cache(maxsize=None)
def outage_types() -> tuple[type[BaseException], ...]:
    """What the storage clients raise when the storage itself does not answer (after their
    retries): an outage, as opposed to a file that is missing or forbidden. Each client's
    types where it is installed (google-cloud-storage comes with Beam's gcp extra)."""
    # the builtins: ConnectionRefusedError, ConnectionResetError, http.client's
    # RemoteDisconnected; socket.timeout is TimeoutError
    found: list[type[BaseException]] = [ConnectionError, TimeoutError]
    with contextlib.suppress(ImportError):
        from google.api_core import exceptions as api_core
        found += [api_core.RetryError, api_core.ServiceUnavailable, api_core.InternalServerError,
                  api_core.BadGateway, api_core.GatewayTimeout, api_core.TooManyRequests]
    with contextlib.suppress(ImportError):
        from requests import exceptions as requests_exceptions   # ConnectTimeout, ReadTimeout too
        found += [requests_exceptions.ConnectionError, requests_exceptions.Timeout]
    with contextlib.suppress(ImportError):
        from urllib3 import exceptions as urllib3_exceptions     # its TimeoutError is not the builtin
        found += [urllib3_exceptions.ProtocolError, urllib3_exceptions.MaxRetryError,
                  urllib3_exceptions.NewConnectionError, urllib3_exceptions.TimeoutError]
    return tuple(found)


def is_outage(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) says the storage did not answer."""
    seen = set()
    types = outage_types()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, types):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def unreadable(what: str, exc: BaseException) -> ConversionError:
    detail = str(exc) or type(exc).__name__    # MemoryError() says nothing of itself
    if isinstance(exc, MemoryError):
        detail = "out of memory (MemoryError)"
    return ConversionError(reasons.UNREADABLE, f"{what}: {detail}", outage=is_outage(exc))


# Not the storage's failure but the parser's (nesting too deep, memory): never an I/O error.
_PARSER_ERRORS = (RecursionError, MemoryError)
_LARGE_READ = 1 << 24


class TrackedReader:
    """A source file object that remembers the first read error, so that a parser which
    turns every exception into "does not parse" cannot hide an I/O failure.

    With ``size`` (the file's), a read of more than 16 MiB asks for no more than is
    left: a header declaring a 4 GB element costs what the file holds, not a 4 GB
    buffer (the parser then finds the file too short).
    """

    def __init__(self, raw: BinaryIO, size: int | None = None):
        self._raw = raw
        self.size = size
        self.error: BaseException | None = None

    def _note(self, exc: BaseException) -> None:
        if not isinstance(exc, _PARSER_ERRORS):
            self.error = self.error or exc

    def _call(self, name, *args):
        try:
            return getattr(self._raw, name)(*args)
        except Exception as exc:
            self._note(exc)
            raise

    # read, seek and tell spelled out rather than through _call: pydicom calls them a few
    # hundred times per header, and the extra frame was a tenth of a probe's CPU
    def read(self, *args):
        try:
            if args and self.size is not None and args[0] is not None and args[0] > _LARGE_READ:
                args = (max(0, min(args[0], self.size - self._raw.tell())),)
            return self._raw.read(*args)
        except Exception as exc:
            self._note(exc)
            raise

    def readinto(self, *args):
        return self._call("readinto", *args)

    def seek(self, *args):
        try:
            return self._raw.seek(*args)
        except Exception as exc:
            self._note(exc)
            raise

    def tell(self):
        try:
            return self._raw.tell()
        except Exception as exc:
            self._note(exc)
            raise

    def __getattr__(self, name):
        return getattr(self._raw, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._raw.close()

    def checked(self, exc: ConversionError) -> ConversionError:
        """``exc``, unless reading failed underneath it: then that, as unreadable."""
        return unreadable("read failed", self.error) if self.error is not None else exc


def open_checked(uri: str, opener: Callable[[str], BinaryIO], size: int | None = None) -> TrackedReader:
    """``opener(uri)``, with any failure (permissions, vanished file) as reason unreadable;
    ``size``: the file's, to bound what one read asks for (TrackedReader)."""
    try:
        return TrackedReader(opener(uri), size)
    except ConversionError:
        raise
    except Exception as exc:
        raise unreadable("cannot open", exc) from exc


class OutageBreaker:
    """Whether storage answers this process: one per process (``process_breaker``), shared by
    every step that reads sources or writes shards, across bundles and threads.

    Each storage request's result is noted. The breaker trips (StorageOutage) on an outage
    failure when nothing in this process got an answer from storage for at least half the
    retry budget (``budget_s``, --gcs_retry_s): the failing request was retried that long
    and no other request was answered meanwhile. So an outage stops the run one retry
    budget after it began, however many bundles are in flight. It also trips after
    ``limit`` outage failures in a row while other requests are still answered (a partial
    outage). Once tripped, ``check`` fails every later request at once, without waiting
    for its own budget. An isolated failure among answered requests trips nothing.
    """

    def __init__(self, limit: int, budget_s: float = 0.0, clock: Callable[[], float] = time.monotonic):
        self.limit, self.budget_s, self.clock = limit, budget_s, clock
        self.in_a_row = 0
        self.last_answer = clock()       # starting counts as an answer: nothing failed before
        self.tripped = ""
        self._lock = threading.Lock()

    def check(self) -> None:
        """StorageOutage at once if the breaker has tripped: later requests fail fast."""
        if self.tripped:
            raise StorageOutage(self.tripped)

    def _trip_if_silent(self, uri: str, message: str) -> bool:
        silent = self.clock() - self.last_answer
        if self.budget_s and silent >= self.budget_s / 2:
            self.tripped = self.tripped or (
                f"storage is not answering: no request answered for {silent:.0f} s (the retry "
                f"budget, --gcs_retry_s, is {self.budget_s:g} s; last {uri}: {message})")
        return bool(self.tripped)

    def note_failure(self, uri: str, message: str, probe: Optional[Callable[[], Any]] = None) -> None:
        """A request failed in a way storage clients do not name (e.g. Beam's batch copy
        answering None once its retries ran out): an outage if storage has been silent for
        half the budget, or if ``probe`` (one cheap request to the same storage, retried as
        any other) then fails as an outage does. The silence alone can miss it: a client's
        retry gives up before its deadline when its next wait would pass it."""
        with self._lock:
            if self._trip_if_silent(uri, message) or probe is None:
                probe = None
        if probe is not None:
            try:
                probe()
            except Exception as exc:   # noqa: BLE001 -- only an outage's types are acted on
                if is_outage(exc):
                    with self._lock:
                        self.tripped = self.tripped or (
                            f"storage is not answering: {uri}: {message}; a request to check the "
                            f"storage then failed too ({type(exc).__name__}: {exc})")
            else:
                with self._lock:
                    self.in_a_row, self.last_answer = 0, self.clock()
        self.check()

    def note(self, outage: bool, uri: str, message: str) -> None:
        """The result of reading one input (or writing one shard): answered, or an outage."""
        with self._lock:
            if not outage:
                self.in_a_row, self.last_answer = 0, self.clock()
                return
            self.in_a_row += 1
            if not self._trip_if_silent(uri, message) and self.limit and self.in_a_row >= self.limit:
                self.tripped = (f"storage is not answering: {self.in_a_row} inputs in a row could not "
                                f"be read (last {uri}: {message})")
        self.check()


_process_breakers: dict = {}
_process_lock = threading.Lock()


def process_breaker(run: str, limit: int, budget_s: float) -> OutageBreaker:
    """This process's breaker for run ``run`` (one per worker process and run, shared by the
    run's DoFn instances and threads there; a later run in the same process starts afresh)."""
    key = (os.getpid(), run, limit, float(budget_s))
    with _process_lock:
        if key not in _process_breakers:
            _process_breakers[key] = OutageBreaker(limit, budget_s)
        return _process_breakers[key]


def configure_storage_retry(seconds: float) -> None:
    """How long one gs:// request is retried before it fails (Beam's default is 120 s).

    The storage client's retry policies are shared objects, bound as default
    arguments deep inside google-cloud-storage and Beam's gcsio (a blob's
    reload, a read, a listing); replacing a module attribute would miss those,
    so this process's policy objects get the budget in place.
    """
    if not seconds:
        return
    from apache_beam.io.gcp import gcsio_retry
    from google.cloud.storage import retry as storage_retry
    for policy in {id(p): p for p in (gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER,
                                       gcsio_retry.DEFAULT_RETRY, storage_retry.DEFAULT_RETRY)}.values():
        for attribute in ("_timeout", "_deadline"):
            if hasattr(policy, attribute):
                setattr(policy, attribute, float(seconds))


def _is_a_directory(exc: BaseException | None) -> bool:
    """Whether opening or reading failed because the path is a directory (EISDIR), at any
    depth of the exception's causes."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, IsADirectoryError) or getattr(exc, "errno", None) == errno.EISDIR:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def read_unchanged(source: SourceFile, opener: Callable[[str], BinaryIO]) -> io.BytesIO:
    """The file's bytes; ConversionError(changed_during_run) if its size, mtime or
    fingerprint (its head, the probe's) moved, or if it is a directory now (a file when
    probed). Reads at most one byte more than it had."""
    try:
        with open_checked(source.uri, opener) as handle:
            try:
                data = handle.read(source.size + 1)
            except Exception as exc:
                raise unreadable("read failed", exc) from exc
    except ConversionError as exc:
        if _is_a_directory(exc):
            raise ConversionError(reasons.CHANGED_DURING_RUN,
                                  "a file when probed, a directory now: the file was replaced during the run; "
                                  "convert again") from exc
        raise
    if len(data) != source.size:
        now = f"more than {source.size}" if len(data) > source.size else str(len(data))
        raise ConversionError(reasons.CHANGED_DURING_RUN,
                              f"size was {source.size} bytes when probed, now {now}")
    if "://" not in source.uri and source.mtime:
        try:
            mtime = FileSystems.last_updated(source.uri)
        except Exception:
            mtime = source.mtime
        if abs(mtime - source.mtime) > 1e-6:
            raise ConversionError(reasons.CHANGED_DURING_RUN,
                                  f"modified after it was probed (mtime {source.mtime} -> {mtime})")
    replaced = fingerprint_mismatch(source, data)
    if replaced:
        raise ConversionError(reasons.CHANGED_DURING_RUN, replaced)
    return io.BytesIO(data)


class _DecodeThread:
    """A daemon thread that runs one call at a time; reused while calls finish in time."""

    def __init__(self):
        self.calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="decode", daemon=True).start()

    def _serve(self) -> None:
        while True:
            fn, box, done = self.calls.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # handed to the caller's thread
                box["error"] = exc
            done.set()


_idle_threads: list[_DecodeThread] = []
_idle_lock = threading.Lock()


def with_timeout(fn: Callable[[], T], seconds: float, what: str) -> T:
    """Runs ``fn`` in a daemon thread; gives up (reason decode_timeout) after ``seconds``.

    A Python thread cannot be killed: a decoder stuck forever keeps its
    thread, but the shard moves on and the process can still exit. Threads
    whose call finished in time are reused (starting one per record cost
    more than decoding a small image).
    """
    if not seconds or seconds <= 0:
        return fn()
    with _idle_lock:
        worker = _idle_threads.pop() if _idle_threads else None
    if worker is None:
        worker = _DecodeThread()
    box: dict = {}
    done = threading.Event()
    worker.calls.put((fn, box, done))
    if not done.wait(seconds):
        # the stuck thread is abandoned, never reused
        raise ConversionError(reasons.DECODE_TIMEOUT, f"{what}: decoding took longer than {seconds:g} s")
    with _idle_lock:
        _idle_threads.append(worker)
    if "error" in box:
        raise box["error"]
    return box["value"]
