"""A ``tf.train.Example``'s map entries found by small ranged reads: the wire-format walker.

A record written by dataset/example.py is ``Example.features`` (field 1) holding one map
entry per feature, keys sorted; each entry is ``0x0a varint(len)`` then its key (``0x0a
varint(len) key``) and its Feature (``0x12 varint(len)``), whose list is ``0x0a`` (BytesList),
``0x12`` (FloatList) or ``0x1a`` (Int64List) ``varint(len)`` then the list's payload.

:func:`walk_example` reads an Example through ``read(offset, size)`` (offsets within the
Example) a window at a time, walking the entries: the payload of an entry named in ``skip``
(a large one, such as a volume's bricks) is never read, only where it lies is noted; every
other entry is kept, whole, as it was written. So a record's small features and where its
large ones lie cost a few small reads, wherever in the record they are. Pure: no I/O of its
own, used by the reader (reader/random_access.py) and by verify.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Collection

from dcm2tfrecord.dataset.errors import CorruptDataError
from dcm2tfrecord.dataset.example import varint

WINDOW = 4096          # bytes a read asks for beyond what is needed, to cover the next entries


class WireError(CorruptDataError, ValueError):
    """Bytes that are not an Example as dataset/example.py writes one."""


@dataclasses.dataclass(frozen=True)
class Span:
    """Where a skipped entry's list payload lies in the Example: ``offset`` of its first byte
    (for a BytesList, the first value's tag ``0x0a``), ``size`` in bytes."""
    offset: int
    size: int


@dataclasses.dataclass(frozen=True)
class Walk:
    """What :func:`walk_example` found: ``small``, a serialized Example of every entry not
    skipped (``dataset.example.decode_example`` reads it); ``spans``, each skipped entry's list
    payload; ``bytes_read``, what the reads cost."""
    small: bytes
    spans: dict
    bytes_read: int


def read_varint(data, pos: int) -> tuple[int, int]:
    """(value, position after it) of the base-128 varint at ``data[pos]``."""
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError("a varint runs past its bytes")
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            return value, pos
        shift += 7


def varint_size(value: int) -> int:
    """Bytes of ``value``'s varint (value >= 0)."""
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


class _Window:
    """The bytes ``[start, start + len(data))`` of the Example, read on demand."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, window: int):
        self.read, self.size, self.window = read, size, window
        self.start, self.data, self.bytes_read = 0, b"", 0

    def get(self, offset: int, need: int) -> bytes:
        """At least ``need`` bytes from ``offset`` (fewer only at the Example's end)."""
        end = min(offset + need, self.size)
        if not (self.start <= offset and end <= self.start + len(self.data)):
            size = min(max(need, self.window), self.size - offset)
            data = bytes(self.read(offset, size))
            if len(data) != size:
                raise WireError(f"a read of {size} bytes at {offset} gave {len(data)}")
            self.start, self.data = offset, data
            self.bytes_read += size
        return self.data[offset - self.start:end - self.start]


_HEAD = 40          # enough for any entry's head: tags, varints and a key of up to 20 bytes


def walk_example(read: Callable[[int, int], bytes], size: int, skip: Collection[str] = (),
                 window: int = WINDOW) -> Walk:
    """The entries of the ``size``-byte Example that ``read(offset, size)`` returns bytes of:
    see the module docstring. WireError where the bytes are not such an Example."""
    buf = _Window(read, size, window)
    head = buf.get(0, 11)
    if not head:
        return Walk(b"", {}, buf.bytes_read)
    if head[0] != 0x0A:
        raise WireError(f"starts with tag {head[0]:#04x}, not Example.features")
    total, pos = read_varint(head, 1)
    end = pos + total
    if end != size:
        raise WireError(f"Example.features holds {total} bytes, the record {size - pos}")
    kept: list = []
    try:
        _entries(buf, pos, end, skip, kept)
    except IndexError:
        raise WireError("an entry's head runs past the record") from None
    entries = [e for e in kept if isinstance(e, bytes)]
    spans = {e[0]: e[1] for e in kept if isinstance(e, tuple)}
    body = b"".join(entries)
    small = b"\x0a" + varint(len(body)) + body if entries else b""
    return Walk(small, spans, buf.bytes_read)


def _entries(buf: _Window, pos: int, end: int, skip: Collection[str], kept: list) -> None:
    while pos < end:
        chunk = buf.get(pos, _HEAD)
        if chunk[0] != 0x0A:
            raise WireError(f"entry at {pos} has tag {chunk[0]:#04x}")
        entry_len, at = read_varint(chunk, 1)
        entry_end = pos + at + entry_len
        if entry_end > end:
            raise WireError(f"entry at {pos} runs past the record")
        if chunk[at] != 0x0A:
            raise WireError(f"entry at {pos} has no key first")
        key_len, k = read_varint(chunk, at + 1)
        if k + key_len + 22 > len(chunk):
            chunk = buf.get(pos, k + key_len + 22)
        key = bytes(chunk[k:k + key_len]).decode("utf-8")
        if key in skip:
            v = k + key_len
            if chunk[v] != 0x12:
                raise WireError(f"feature {key!r} has no value after its key")
            _, f = read_varint(chunk, v + 1)
            list_len, p = read_varint(chunk, f + 1)
            if pos + p + list_len != entry_end:
                raise WireError(f"feature {key!r}'s list does not fill its entry")
            kept.append((key, Span(pos + p, list_len)))
        else:
            kept.append(bytes(buf.get(pos, entry_end - pos)))
        pos = entry_end


def bytes_values(payload_offset: int, sizes) -> list[tuple[int, int]]:
    """(offset, size) of each value of a BytesList whose payload starts at ``payload_offset``
    and whose values are ``sizes`` bytes long: each value is ``0x0a varint(size)`` then its bytes."""
    out, at = [], int(payload_offset)
    for size in sizes:
        size = int(size)
        at += 1 + varint_size(size)
        out.append((at, size))
        at += size
    return out
