"""TFRecord framing and DALI-format ``.idx`` files: the one codec of the format, both directions.

A record on disk is ``uint64 length | uint32 masked_crc32c(length) | data |
uint32 masked_crc32c(data)``, little-endian: the format TensorFlow's
``RecordWriter`` writes and ``tf.data.TFRecordDataset`` and Beam's
``ReadFromTFRecord`` read (tests/dataset/test_shard_writer.py has both read our
shards). CRC-32C comes from ``google-crc32c``. Every shard has an ``.idx``
next to it: one ``offset size`` line per record, where ``size`` includes the
16 framing bytes, which is what makes record ``i`` one read of ``size`` bytes
at ``offset``.

The shard writer frames with :func:`framed_segments` (a record given as parts,
its pixels uncopied; :func:`frame` is the same for one buffer), ``verify`` follows a whole
stream with :func:`read_records`, ``reader.RandomAccess`` unframes one record
read at its index offset with :func:`unframe`.
"""
from __future__ import annotations

import dataclasses
import struct
from typing import Iterator, Protocol, Sequence

import google_crc32c
import numpy as np

from dcm2tfrecord.dataset.errors import CorruptDataError

HEADER_BYTES = 12           # uint64 length + masked CRC32C of it
FOOTER_BYTES = 4            # masked CRC32C of the data
FRAMING_BYTES = HEADER_BYTES + FOOTER_BYTES
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")
_FOOTER = struct.Struct("<I")
_READ_CHUNK = 16 << 20      # a corrupt length never makes us allocate more than this at once


def crc32c(data) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    return google_crc32c.value(bytes(data) if isinstance(data, memoryview) else data)


def masked_crc(data) -> int:
    """The masked CRC TFRecord stores (a rotation and an offset, so CRCs of CRCs differ)."""
    return _mask(crc32c(data))


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------- writing


def frame(data) -> tuple[bytes, bytes]:
    """The bytes before and after ``data`` in its framed record (``data`` itself is not copied)."""
    return _header(len(data)), _FOOTER.pack(masked_crc(data))


def _header(length: int) -> bytes:
    length_bytes = _LENGTH.pack(length)
    return length_bytes + _FOOTER.pack(masked_crc(length_bytes))


_SMALL_PART = 64 << 10      # parts up to this size are joined into their neighbours' segment


def framed_segments(parts: Sequence) -> list[bytes]:
    """One framed record, of data given as ``parts`` in order (bytes or memoryviews), as a
    few byte strings whose concatenation is ``frame``'s record: small parts are joined,
    a large one is its own segment (a memoryview is copied once, to bytes, which
    google-crc32c needs), so a pixel buffer is never copied into a joined string."""
    segments: list = []
    small: list = []
    crc, length = 0, 0
    for part in parts:
        size = part.nbytes if isinstance(part, memoryview) else len(part)
        if size <= _SMALL_PART:
            small.append(part)
        else:
            if small:
                segments.append(b"".join(small))
                small = []
            segments.append(bytes(part) if isinstance(part, memoryview) else part)
        length += size
    if small:
        segments.append(b"".join(small))
    for segment in segments:
        crc = google_crc32c.extend(crc, segment)
    head, tail = _header(length), _FOOTER.pack(_mask(crc))
    if segments and len(segments[0]) <= _SMALL_PART:
        segments[0] = head + segments[0]
    else:
        segments.insert(0, head)
    if len(segments[-1]) <= _SMALL_PART:
        segments[-1] = segments[-1] + tail
    else:
        segments.append(tail)
    return segments


def index_lines(offsets) -> bytes:
    """The ``.idx`` text of a shard: "offset size" per ``(offset, size)`` record, in stream order."""
    return "".join(f"{offset} {size}\n" for offset, size in offsets).encode("ascii")


# ---------------------------------------------------------------- reading


class CorruptRecordError(CorruptDataError, ValueError):
    """A record whose framing or checksum does not match; names the shard and record."""


def unframe(record: bytes, shard: str, index: int, verify: bool = True) -> memoryview:
    """The data of one framed record (as read from ``offset``, ``size`` bytes)."""
    if len(record) < FRAMING_BYTES:
        raise CorruptRecordError(f"{shard}: record {index} is truncated "
                                 f"({len(record)} bytes, a record has at least {FRAMING_BYTES})")
    length, length_crc = _HEADER.unpack_from(record, 0)
    if length != len(record) - FRAMING_BYTES:
        raise CorruptRecordError(f"{shard}: record {index}: length field says {length} bytes, "
                                 f"the .idx says {len(record) - FRAMING_BYTES}")
    # a uint8 array (a reader's reused buffer) is sliced as one: google-crc32c reads its slices
    # in place, where a memoryview's would be copied
    view = record if isinstance(record, np.ndarray) else memoryview(record)
    data = view[HEADER_BYTES:HEADER_BYTES + length]
    if verify:
        if masked_crc(view[:8]) != length_crc:
            raise CorruptRecordError(f"{shard}: record {index}: length checksum mismatch")
        (data_crc,) = _FOOTER.unpack_from(record, HEADER_BYTES + length)
        if masked_crc(data) != data_crc:
            raise CorruptRecordError(f"{shard}: record {index}: data checksum mismatch "
                                     "(the record is corrupt)")
    return data


class FramingError(CorruptDataError):
    """The record stream cannot be followed past this point (bad length, truncation)."""

    def __init__(self, message: str, record: int, offset: int):
        super().__init__(message)
        self.record, self.offset = record, offset


@dataclasses.dataclass(frozen=True)
class FramedRecord:
    index: int
    offset: int          # of the record's first byte, in the (uncompressed) record stream
    data: bytes
    data_crc_ok: bool

    @property
    def size(self) -> int:
        return FRAMING_BYTES + len(self.data)


class Readable(Protocol):
    """What read_records reads from: a binary file, or anything with its read()."""
    def read(self, n: int, /) -> bytes: ...


def _read_exact(stream: Readable, n: int) -> bytes:
    """Up to ``n`` bytes (fewer only at end of stream), read in bounded chunks."""
    parts, got = [], 0
    while got < n:
        chunk = stream.read(min(n - got, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def read_records(stream: Readable) -> Iterator[FramedRecord]:
    """Yields each record of a whole stream with its offset, checking both masked CRC32Cs.

    A data CRC mismatch is reported on the record (the length was intact, so
    the next record can still be found); a bad length CRC or a truncated
    record raises FramingError, since nothing after it can be located.
    """
    index = offset = 0
    while True:
        header = _read_exact(stream, HEADER_BYTES)
        if not header:
            return
        if len(header) < HEADER_BYTES:
            raise FramingError(f"truncated: {len(header)} trailing bytes where a {HEADER_BYTES}-byte "
                               "record header should be", index, offset)
        length, length_crc = _HEADER.unpack(header)
        if masked_crc(header[:8]) != length_crc:
            raise FramingError(f"length CRC32C mismatch (length field reads {length})", index, offset)
        data = _read_exact(stream, length)
        footer = _read_exact(stream, FOOTER_BYTES)
        if len(data) < length or len(footer) < FOOTER_BYTES:
            raise FramingError(f"truncated: record of {length} bytes, only {len(data)} data bytes "
                               f"and {len(footer)} of its {FOOTER_BYTES} CRC bytes left", index, offset)
        (data_crc,) = _FOOTER.unpack(footer)
        yield FramedRecord(index, offset, data, masked_crc(data) == data_crc)
        index += 1
        offset += FRAMING_BYTES + length


class CorruptIndexError(CorruptRecordError):
    """A ``.idx`` file that does not describe its shard; names the file and the line."""


def _bad_line(text: str, where: str) -> CorruptIndexError:
    """The first line of ``text`` that is not ``offset size`` (two whole numbers >= 0)."""
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields:
            continue
        shown = line if len(line) <= 60 else line[:60] + "..."
        if len(fields) != 2 or not all(f.isascii() and f.isdigit() for f in fields):
            return CorruptIndexError(f"{where}line {number} is {shown!r}, not 'offset size' "
                                     "(two whole numbers)")
        if any(len(f) > 19 or int(f) >= 1 << 63 for f in fields):
            return CorruptIndexError(f"{where}line {number} is {shown!r}: a number too large "
                                     "for any file")
    return CorruptIndexError(f"{where}not 'offset size' lines")


def _line_of(text: str, pair: int) -> int:
    """The line number of the ``pair``-th (0-based) non-blank line."""
    seen = -1
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            seen += 1
            if seen == pair:
                return number
    return pair + 1


def parse_index(text: str, shard: str = "") -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` (int64) from the text of a DALI ``.idx`` file.

    CorruptIndexError (a ValueError) naming the first line that is not "offset size"
    (two whole numbers that fit in 64 bits). What the lines say is not checked against
    the shard: ``verify`` compares them with the records it walks, ``checked_index``
    checks them on their own.
    """
    where = f"{shard}.idx: " if shard else ""
    values = text.split()
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        pairs = np.array(values, dtype=np.int64).reshape(-1, 2) if len(values) == 2 * len(lines) else None
    except (ValueError, OverflowError):
        pairs = None
    if pairs is None or (pairs.size and pairs.min() < 0):
        raise _bad_line(text, where)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


def checked_index(text: str, where: str, shard_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """``parse_index``, and the lines must describe a shard of ``shard_bytes`` bytes as
    written: the first record at offset 0, each next one where the one before ends (so
    lines out of order are found, not read as the wrong record), every size at least the
    16 framing bytes and the last record ending at the shard's end (so no size reaches past
    the file). Anything else is a CorruptIndexError naming ``where`` (the .idx) and the line.
    """
    offsets, sizes = _parse_named(text, where)
    if not len(offsets):
        if shard_bytes:
            raise CorruptIndexError(f"{where}: lists no record, the shard holds {shard_bytes} bytes")
        return offsets, sizes
    small, large = sizes < FRAMING_BYTES, sizes > shard_bytes
    ends = np.cumsum(np.minimum(sizes, shard_bytes))
    expected = np.concatenate(([0], ends[:-1]))
    bad = np.nonzero(small | large | (offsets != expected))[0]
    if bad.size:
        i = int(bad[0])
        if small[i]:
            why = f"size {sizes[i]} is less than a record's {FRAMING_BYTES} framing bytes"
        elif large[i]:
            why = f"size {sizes[i]} is larger than the shard ({shard_bytes} bytes)"
        elif i == 0:
            why = f"the first record is at offset {offsets[0]}, not 0"
        else:
            why = (f"offset {offsets[i]} is not where the record of line {_line_of(text, i - 1)} "
                   f"ends ({expected[i]}): lines out of order, missing or damaged")
        raise CorruptIndexError(f"{where}: line {_line_of(text, i)}: {why}")
    if int(ends[-1]) != shard_bytes:
        raise CorruptIndexError(f"{where}: its records end at byte {int(ends[-1])}, the shard holds "
                                f"{shard_bytes} bytes")
    return offsets, sizes


def _parse_named(text: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        return parse_index(text)
    except CorruptIndexError as error:
        raise CorruptIndexError(f"{where}: {error}") from None


def scan_index(reader) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` by walking the length headers (one 12-byte read per record).

    For shards without an ``.idx`` (written by hand to the dataset.json
    contract); ``reader`` has ``read(offset, size)``.
    """
    offsets, sizes, offset = [], [], 0
    while True:
        header = reader.read(offset, HEADER_BYTES)
        if len(header) < HEADER_BYTES:
            break
        length, _ = _HEADER.unpack(header)
        offsets.append(offset)
        sizes.append(length + FRAMING_BYTES)
        offset += length + FRAMING_BYTES
    return np.array(offsets, np.int64), np.array(sizes, np.int64)
