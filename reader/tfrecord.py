"""TFRecord framing and DALI-format ``.idx`` files, without TensorFlow.

A record on disk is ``uint64 length | uint32 masked_crc32c(length) | data |
uint32 masked_crc32c(data)``, little-endian (the format TensorFlow's
``RecordWriter`` and Beam's TFRecord sink write). Every shard has an ``.idx``
next to it: one ``offset size`` line per record, where ``size`` includes the
16 framing bytes, which is what makes record ``i`` one read of ``size`` bytes
at ``offset``.
"""
from __future__ import annotations

import struct
from typing import Optional

import numpy as np

from reader.names import INDEX_SUFFIX

HEADER_BYTES = 12
FRAMING_BYTES = 16
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")

try:
    import google_crc32c as _crc_lib

    def crc32c(data) -> int:
        """CRC-32C (Castagnoli) of ``data``."""
        return _crc_lib.value(bytes(data) if isinstance(data, memoryview) else data)
except ImportError:      # pragma: no cover - google-crc32c is a dependency; kept for odd installs
    _crc_lib = None

    def crc32c(data) -> int:
        return crc32c_python(data)


def _table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _table()


def crc32c_python(data) -> int:
    """CRC-32C in pure Python (RFC 3720 B.4): slow, the fallback without google-crc32c."""
    crc = 0xFFFFFFFF
    for byte in bytes(data):
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data) -> int:
    """The masked CRC TFRecord stores (a rotation and an offset, so CRCs of CRCs differ)."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class CorruptRecordError(ValueError):
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
    view = memoryview(record)
    data = view[HEADER_BYTES:HEADER_BYTES + length]
    if verify:
        if masked_crc(view[:8]) != length_crc:
            raise CorruptRecordError(f"{shard}: record {index}: length checksum mismatch")
        (data_crc,) = _FOOTER.unpack_from(record, HEADER_BYTES + length)
        if masked_crc(data) != data_crc:
            raise CorruptRecordError(f"{shard}: record {index}: data checksum mismatch "
                                     "(the record is corrupt)")
    return data


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
            return CorruptIndexError(f"{where}: line {number} is {shown!r}, not 'offset size' "
                                     "(two whole numbers)")
        if any(len(f) > 19 or int(f) >= 1 << 63 for f in fields):
            return CorruptIndexError(f"{where}: line {number} is {shown!r}: a number too large "
                                     "for any file")
    return CorruptIndexError(f"{where}: not a list of 'offset size' lines")


def _line_of(text: str, pair: int) -> int:
    """The line number of the ``pair``-th (0-based) non-blank line."""
    seen = -1
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            seen += 1
            if seen == pair:
                return number
    return pair + 1


def parse_index(text: str, shard: str = "", shard_bytes: Optional[int] = None,
                where: str = "") -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` (int64) from the text of a DALI ``.idx`` file.

    The lines must describe the shard as written: the first record at offset 0, each
    next one where the one before ends (so lines out of order are found, not read as
    the wrong record), every size at least the 16 framing bytes and, given
    ``shard_bytes``, the last record ending at the shard's end (so no size reaches past
    the file). Anything else is a CorruptIndexError naming the file (``where``, else
    ``{shard}.idx``) and the line.
    """
    where = where or shard + INDEX_SUFFIX
    try:
        values = np.array(text.split(), dtype=np.int64)
    except (ValueError, OverflowError):
        raise _bad_line(text, where) from None
    if values.size % 2 or (values.size and values.min() < 0):
        raise _bad_line(text, where)
    pairs = values.reshape(-1, 2)
    offsets, sizes = pairs[:, 0].copy(), pairs[:, 1].copy()
    if not len(offsets):
        if shard_bytes:
            raise CorruptIndexError(f"{where}: lists no record, the shard holds {shard_bytes} bytes")
        return offsets, sizes
    limit = shard_bytes if shard_bytes is not None else 1 << 60
    small = sizes < FRAMING_BYTES
    large = sizes > limit
    ends = np.cumsum(np.minimum(sizes, limit))
    expected = np.concatenate(([0], ends[:-1]))
    bad = np.nonzero(small | large | (offsets != expected))[0]
    if bad.size:
        i = int(bad[0])
        line = _line_of(text, i)
        if small[i]:
            why = f"size {sizes[i]} is less than a record's {FRAMING_BYTES} framing bytes"
        elif large[i]:
            why = f"size {sizes[i]} is larger than the shard ({shard_bytes} bytes)"
        elif i == 0:
            why = f"the first record is at offset {offsets[0]}, not 0"
        else:
            why = (f"offset {offsets[i]} is not where the record of line {_line_of(text, i - 1)} "
                   f"ends ({expected[i]}): lines out of order, missing or damaged")
        raise CorruptIndexError(f"{where}: line {line}: {why}")
    if shard_bytes is not None and int(ends[-1]) != shard_bytes:
        raise CorruptIndexError(f"{where}: its records end at byte {int(ends[-1])}, the shard holds "
                                f"{shard_bytes} bytes")
    return offsets, sizes


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
