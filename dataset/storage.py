"""The file system the format package reads and writes through.

The format package is a leaf both the converter and the reader stand on, so it
imports nothing heavier than numpy, protobuf and crc32c, and never Beam. Its
modules make their file calls through :data:`FileSystems` here, which
forwards them to the installed backend:

- the converter installs Beam's FileSystems by one explicit call
  (``transforms/beam_files.py`` ``install_beam_storage``: at launch and in each
  worker's steps), so local paths, ``gs://`` and every scheme Beam knows behave
  as they do for the rest of the job, the salt file and the class map included;
- without one (the reader's own distribution, a script) :class:`LocalFiles`
  serves local paths with ``os``, and refuses a URL with a message saying what
  is missing.

Files are always opened and created as raw bytes: a shard's gzip stream is
written and read by the format's own code, never decompressed on the way.
"""
from __future__ import annotations

import glob
import os
import shutil
from typing import BinaryIO, Optional, Protocol, Sequence

from dcm2tfrecord.dataset.errors import Dcm2TfrecordError


class StoreChecksumMismatch(Dcm2TfrecordError):
    """The store's CRC-32C of an object differs from that of the bytes sent or received
    (raised by a backend's ``upload`` / ``download``; ``copy`` fails the file with CopyFailed)."""


class Backend(Protocol):
    def join(self, base: str, *parts: str) -> str: ...
    def exists(self, path: str) -> bool: ...
    def open(self, path: str) -> BinaryIO: ...
    def create(self, path: str, mime_type: str) -> BinaryIO: ...
    def rename(self, sources: Sequence[str], destinations: Sequence[str]) -> None: ...
    def delete(self, paths: Sequence[str]) -> None: ...
    def match(self, pattern: str) -> list[str]: ...
    def stored_crc32c(self, path: str) -> Optional[int]: ...


class LocalFiles:
    """Local paths through ``os``, with the semantics of Beam's LocalFileSystem: parents are
    created on write, a directory is deleted with everything in it."""

    @staticmethod
    def _local(path: str) -> str:
        if "://" in path:
            scheme = path.split("://", 1)[0]
            raise OSError(f"{path}: no file system for {scheme}:// is installed here; the converter "
                          "installs Beam's (transforms.beam_files.install_beam_storage), the reader "
                          "reads through its own")
        return path

    def join(self, base: str, *parts: str) -> str:
        if "://" in base:
            return "/".join([base.rstrip("/")] + [p.strip("/") for p in parts])
        return os.path.join(base, *parts)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._local(path))

    def open(self, path: str) -> BinaryIO:
        return open(self._local(path), "rb")

    def create(self, path: str, mime_type: str) -> BinaryIO:
        folder = os.path.dirname(self._local(path))
        if folder:
            os.makedirs(folder, exist_ok=True)
        return open(path, "wb")

    def rename(self, sources: Sequence[str], destinations: Sequence[str]) -> None:
        for source, destination in zip(sources, destinations, strict=True):
            os.rename(self._local(source), self._local(destination))

    def delete(self, paths: Sequence[str]) -> None:
        for path in paths:
            if os.path.isdir(self._local(path)):
                shutil.rmtree(path)
            else:
                os.remove(path)

    def match(self, pattern: str) -> list[str]:
        return sorted(glob.glob(self._local(pattern), recursive=True))

    def stored_crc32c(self, path: str) -> Optional[int]:
        return None                 # a local file keeps no checksum of its own


_backend: Backend = LocalFiles()


def install(backend: Backend) -> None:
    """Routes every file call of the format package to ``backend`` from now on (per process)."""
    global _backend
    _backend = backend


def installed() -> Backend:
    return _backend


class FileSystems:
    """The file calls of the format package, forwarded to the installed backend (named after
    Beam's FileSystems, whose subset it is, so the converter's backend is a pass-through)."""

    @staticmethod
    def join(base: str, *parts: str) -> str:
        return _backend.join(base, *parts)

    @staticmethod
    def exists(path: str) -> bool:
        return _backend.exists(path)

    @staticmethod
    def open(path: str) -> BinaryIO:
        return _backend.open(path)

    @staticmethod
    def create(path: str, mime_type: str = "application/octet-stream") -> BinaryIO:
        return _backend.create(path, mime_type)

    @staticmethod
    def rename(sources: Sequence[str], destinations: Sequence[str]) -> None:
        _backend.rename(sources, destinations)

    @staticmethod
    def delete(paths: Sequence[str]) -> None:
        _backend.delete(paths)

    @staticmethod
    def match(pattern: str) -> list[str]:
        """Paths matching ``pattern`` (``*``, ``**``), sorted; [] when nothing matches."""
        return _backend.match(pattern)

    @staticmethod
    def stored_crc32c(path: str) -> Optional[int]:
        """The CRC-32C the store itself keeps of the object at ``path`` (GCS computes one for
        every object as it receives it), read from its metadata without reading the object;
        None where the store keeps none (local files, other schemes, a backend without it)."""
        lookup = getattr(_backend, "stored_crc32c", None)
        return None if lookup is None else lookup(path)

    @staticmethod
    def direct_transfer(path: str) -> bool:
        """Whether the backend moves whole files to and from ``path``'s store itself
        (:meth:`upload`, :meth:`download`: the converter's, for gs://, with the store's
        client); else a copy streams through :meth:`open` and :meth:`create`."""
        direct = getattr(_backend, "direct_transfer", None)
        return direct is not None and bool(direct(path))

    @staticmethod
    def upload(reader: BinaryIO, path: str, size: int) -> Optional[int]:
        """The ``size`` bytes of ``reader`` written to ``path`` (where :meth:`direct_transfer`);
        returns the CRC-32C the store computed of the object as it received them (None if its
        answer gave none). StoreChecksumMismatch where the store's differs from the bytes read."""
        return _backend.upload(reader, path, size)           # type: ignore[attr-defined]

    @staticmethod
    def download(path: str, writer: BinaryIO) -> Optional[int]:
        """The object at ``path`` written to ``writer``; returns the CRC-32C the store keeps of
        it (None if its answer gave none). StoreChecksumMismatch where the bytes received differ
        from it."""
        return _backend.download(path, writer)                # type: ignore[attr-defined]
