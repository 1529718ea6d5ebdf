"""Reading a source file whole, checking it did not change since it was probed.

Reading into memory once gives the decoders a fast seekable buffer (pydicom
and Pillow seek a lot) and makes the size check free; memory stays bounded
by the largest file, which DESIGN.md allows.
"""
from __future__ import annotations

import io
import queue
import threading
from typing import BinaryIO, Callable, TypeVar

from apache_beam.io.filesystems import CompressionTypes, FileSystems

from transforms import reasons
from transforms.errors import ConversionError
from transforms.records.values import SourceFile

T = TypeVar("T")


def open_source(uri: str) -> BinaryIO:
    """Opens a source as raw bytes: a ``.gz`` DICOM is not ours to decompress."""
    return FileSystems.open(uri, mime_type="application/octet-stream",
                            compression_type=CompressionTypes.UNCOMPRESSED)


def open_checked(uri: str, opener: Callable[[str], BinaryIO]) -> BinaryIO:
    """``opener(uri)``, with any failure (permissions, vanished file) as reason unreadable."""
    try:
        return opener(uri)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(reasons.UNREADABLE, f"cannot open: {exc}") from exc


def read_unchanged(source: SourceFile, opener: Callable[[str], BinaryIO]) -> io.BytesIO:
    """The file's bytes; ConversionError(changed_during_run) if size or mtime moved."""
    with open_checked(source.uri, opener) as handle:
        try:
            data = handle.read()
        except Exception as exc:
            raise ConversionError(reasons.UNREADABLE, f"read failed: {exc}") from exc
    if len(data) != source.size:
        raise ConversionError(reasons.CHANGED_DURING_RUN,
                              f"size was {source.size} bytes when probed, now {len(data)}")
    if "://" not in source.uri and source.mtime:
        try:
            mtime = FileSystems.last_updated(source.uri)
        except Exception:
            mtime = source.mtime
        if abs(mtime - source.mtime) > 1e-6:
            raise ConversionError(reasons.CHANGED_DURING_RUN,
                                  f"modified after it was probed (mtime {source.mtime} -> {mtime})")
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
