"""Reading a source file whole, checking it did not change since it was probed.

Reading into memory once gives the decoders a fast seekable buffer (pydicom
and Pillow seek a lot) and makes the size check free; memory stays bounded
by the largest file, which DESIGN.md allows.
"""
from __future__ import annotations

import io
import threading
from typing import BinaryIO, Callable, TypeVar

from apache_beam.io.filesystems import FileSystems

from transforms import reasons
from transforms.errors import ConversionError
from transforms.probe import open_checked
from transforms.records import SourceFile

T = TypeVar("T")


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


def with_timeout(fn: Callable[[], T], seconds: float, what: str) -> T:
    """Runs ``fn`` in a daemon thread; gives up (reason decode_timeout) after ``seconds``.

    A Python thread cannot be killed: a decoder stuck forever keeps its
    thread, but the shard moves on and the process can still exit.
    """
    if not seconds or seconds <= 0:
        return fn()
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="decode", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise ConversionError(reasons.DECODE_TIMEOUT, f"{what}: decoding took longer than {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
