"""Byte-range reads of local files and ``gs://`` objects, without TensorFlow.

Local files are read with ``os.pread`` (no shared file position, so one open
file serves every thread) or mapped read-only (``RangeReader.view``); ``gs://`` objects with ranged GETs through
``google-cloud-storage`` (which honours ``STORAGE_EMULATOR_HOST``). Handles
are opened lazily and per process: an object holding them pickles without
them and reopens after a fork or in a spawned worker.
"""
from __future__ import annotations

import mmap
import os
import threading
from typing import Any, Optional

GS = "gs://"


def is_gcs(path: str) -> bool:
    return str(path).startswith(GS)


def _split_gcs(path: str) -> tuple[str, str]:
    bucket, _, name = str(path)[len(GS):].partition("/")
    return bucket, name


_clients: dict = {}
_clients_lock = threading.Lock()


def _gcs_bucket(bucket: str):
    """One storage client per process (clients are not fork-safe) and endpoint: a client keeps
    the ``STORAGE_EMULATOR_HOST`` it was made under, so one made for another is not reused."""
    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"), bucket)
    with _clients_lock:
        if key not in _clients:
            from google.cloud import storage
            _clients[key] = storage.Client().bucket(bucket)
        return _clients[key]


def exists(path: str) -> bool:
    if is_gcs(path):
        bucket, name = _split_gcs(path)
        return _gcs_bucket(bucket).blob(name).exists()
    return os.path.exists(path)


def read_bytes(path: str) -> bytes:
    if is_gcs(path):
        bucket, name = _split_gcs(path)
        return _gcs_bucket(bucket).blob(name).download_as_bytes()
    with open(path, "rb") as handle:
        return handle.read()


def size(path: str) -> int:
    """The size in bytes of a file or object."""
    if is_gcs(path):
        bucket, name = _split_gcs(path)
        blob = _gcs_bucket(bucket).blob(name)
        blob.reload()
        return int(blob.size)
    return os.path.getsize(path)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def pread_into(fd: int, offset: int, view: memoryview) -> int:
    """``os.preadv`` of ``len(view)`` bytes at ``offset`` into ``view`` (short reads retried); the
    bytes read."""
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], offset + done)
        if n <= 0:
            break
        done += n
    return done


class RangeReader:
    """``read(offset, size)`` on one file or object, opened on first use in each process."""

    def __init__(self, path: str):
        self.path = str(path)
        self._pid: int | None = None
        self._handle: Any = None    # an fd (int), or a google.cloud.storage Blob
        self._map: Optional[mmap.mmap] = None    # a local file mapped read-only (``view``)

    def __getstate__(self):
        return {"path": self.path}

    def __setstate__(self, state):
        RangeReader.__init__(self, state["path"])

    def _open(self):
        if is_gcs(self.path):
            bucket, name = _split_gcs(self.path)
            self._handle = _gcs_bucket(bucket).blob(name)
        else:
            self._handle = os.open(self.path, os.O_RDONLY)
        self._pid, self._map = os.getpid(), None     # a map inherited over fork stays valid; a fresh one per process

    def read(self, offset: int, size: int) -> bytes:
        if self._pid != os.getpid():
            self._open()
        if is_gcs(self.path):
            return self._handle.download_as_bytes(start=offset, end=offset + size - 1, checksum=None)
        data = os.pread(self._handle, size, offset)
        while len(data) < size:          # a short read: only at end of file, or a signal
            more = os.pread(self._handle, size - len(data), offset + len(data))
            if not more:
                break
            data += more
        return data

    def read_into(self, offset: int, buffer) -> int:
        """Reads ``len(buffer)`` bytes at ``offset`` into ``buffer`` (a writable buffer; no fresh
        bytes object, whose pages a large read would fault in anew each time); the bytes read
        (fewer only at end of file)."""
        view = memoryview(buffer).cast("B")
        if is_gcs(self.path):
            data = self.read(offset, len(view))
            view[:len(data)] = data
            return len(data)
        if self._pid != os.getpid():
            self._open()
        return pread_into(self._handle, offset, view)

    def view(self) -> Optional[memoryview]:
        """The whole local file mapped read-only (one map per file and process, kept until
        ``close``), for copying straight out of the page cache; None for a ``gs://`` object or an
        empty file."""
        if is_gcs(self.path):
            return None
        if self._pid != os.getpid():
            self._open()
        if self._map is None:
            length = os.fstat(self._handle).st_size
            if length == 0:
                return None
            self._map = mmap.mmap(self._handle, length, access=mmap.ACCESS_READ)
        return memoryview(self._map)

    def close(self):
        if self._pid == os.getpid():
            if self._map is not None:
                try:
                    self._map.close()
                except BufferError:      # a view of it still alive: the map closes when it goes
                    pass
            if isinstance(self._handle, int):
                os.close(self._handle)
        self._handle, self._pid, self._map = None, None, None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def read_dataset_json(dataset_dir: str, version=None) -> tuple[Any, str, str]:
    """dataset.json of ``dataset_dir`` (of ``version``, for a root written with ``--incremental``),
    read through this module: ``(its parsed JSON, its path, the directory holding it)``; what
    ``RandomAccess`` and ``load(..., local_cache=...)`` locate a dataset with."""
    from dcm2tfrecord.dataset import names
    from dcm2tfrecord.dataset.manifest import missing_manifest, parse_json
    from dcm2tfrecord.dataset.versions import locate_dataset

    def read_latest(root: str):
        path = names.join(root, names.LATEST_NAME)
        return names.parse_version(read_text(path)) if exists(path) else None

    directory = locate_dataset(dataset_dir, version, exists, read_latest, read_text=read_text)
    path = names.join(directory, names.MANIFEST_NAME)
    if not exists(path):
        raise missing_manifest(path, directory)
    return parse_json(read_bytes(path), path), path, directory
