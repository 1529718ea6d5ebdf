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

import numpy as np

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


def parse_index(text: str, shard: str = "") -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, sizes)`` (int64) from the text of a DALI ``.idx`` file."""
    values = np.array(text.split(), dtype=np.int64)
    if values.size % 2:
        raise ValueError(f"{shard}.idx: an odd number of values; expected 'offset size' lines")
    pairs = values.reshape(-1, 2)
    return pairs[:, 0].copy(), pairs[:, 1].copy()


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
