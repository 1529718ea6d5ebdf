"""A record's pixels as one PNG image (``--pixel_encoding png``): compressed, and still one
record a reader enters at its ``.idx`` offset (docs/ARCHITECTURE.md, "Record format").

The image of a record of shape ``[d, h, w, c]`` is ``d * h`` rows of ``w`` pixels: the
frames one under another, so a volume is one PNG too. ``c`` is 1 (gray), 2 (gray and
alpha), 3 (RGB) or 4 (RGBA); the samples are 8 or 16 bits. Signed samples (``int8``,
``int16``: CT's Hounsfield units) are stored as their two's-complement bits, the unsigned
sample of the same width, and the record's ``dtype`` names the signed type the reader
restores (``tf.io.decode_png`` then ``tf.bitcast``; :func:`decode` here). Any PNG decoder
(tf.io.decode_png, Pillow, DALI's image decoder, torchvision) reads the image.

Every row carries PNG's filter 2 ("Up": the byte above subtracted): photo-like images then
take 0.68 of their raw bytes against gzip's 0.88, CT slices what gzip takes
(docs/BENCHMARKS.md, "17. Pixels compressed per record"); and it is undone in NumPy by one
running sum down the rows, so :func:`decode` needs neither Pillow nor TensorFlow (the
reader's light install). The deflate level is :data:`LEVEL`: the same bytes from the same
pixels, as the zlib of the run (the same rule as gzip shards, dataset/file_adapters.py).
"""
from __future__ import annotations

import struct
import zlib

import numpy as np

from dcm2tfrecord.dataset.errors import FormatError, InputError

LEVEL = 1           # deflate level: the fastest, as --gzip_level's default (dataset/file_adapters.py)
SIGNATURE = b"\x89PNG\r\n\x1a\n"
_COLOR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}            # channels -> PNG colour type
_CHANNELS = {v: k for k, v in _COLOR_TYPES.items()}
_UNSIGNED = {"uint8": "uint8", "int8": "uint8", "uint16": "uint16", "int16": "uint16"}
DTYPES = tuple(_UNSIGNED)                          # what a PNG record can hold
_UP = 2


class NotEncodable(InputError, ValueError):
    """The pixels are not a PNG image: their dtype or channel count."""


class ForeignPng(FormatError, ValueError):
    """A valid PNG that :func:`decode` leaves to an image library: rows filtered otherwise
    than by :func:`encode` (Sub, Average, Paeth), or interlaced; another tool wrote it."""


def refusal(dtype: np.dtype, channels: int) -> str:
    """Why pixels of ``dtype`` with ``channels`` cannot be one PNG image ("" when they can)."""
    name = np.dtype(dtype).name
    if name not in _UNSIGNED:
        return (f"its pixels are {name}, and a PNG holds 8- or 16-bit integers "
                f"({', '.join(DTYPES)})")
    if channels not in _COLOR_TYPES:
        return f"it has {channels} channels, and a PNG holds 1 to 4"
    return ""


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def encode(pixels: np.ndarray) -> bytes:
    """The PNG of a ``[d, h, w, c]`` array of one of :data:`DTYPES` (:class:`NotEncodable` else)."""
    depth, height, width, channels = pixels.shape
    why = refusal(pixels.dtype, channels)
    if why:
        raise NotEncodable(why)
    unsigned = np.dtype(_UNSIGNED[pixels.dtype.name])
    native = np.ascontiguousarray(pixels, dtype=pixels.dtype.newbyteorder("="))
    big = native.view(unsigned).astype(unsigned.newbyteorder(">"), copy=False)   # PNG's samples are big-endian
    rows = big.view(np.uint8)
    rows = rows.reshape(depth * height, width * channels * unsigned.itemsize)
    filtered = np.empty((rows.shape[0], rows.shape[1] + 1), np.uint8)
    filtered[:, 0] = _UP
    filtered[0, 1:] = rows[0]
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])           # uint8: modulo 256, as PNG's
    header = struct.pack(">IIBBBBB", width, depth * height, 8 * unsigned.itemsize,
                         _COLOR_TYPES[channels], 0, 0, 0)
    return b"".join((SIGNATURE, _chunk(b"IHDR", header),
                     _chunk(b"IDAT", zlib.compress(filtered.data, LEVEL)), _chunk(b"IEND", b"")))


def _chunks(data: bytes):
    if data[:8] != SIGNATURE:
        raise ValueError("not a PNG image (no PNG signature)")
    at = 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if len(body) != length or len(data) < at + 12 + length:
            raise ValueError(f"PNG chunk {kind!r} cut short")
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"PNG chunk {kind!r} fails its CRC")
        yield kind, body
        at += 12 + length
        if kind == b"IEND":
            return
    raise ValueError("PNG image cut short (no IEND chunk)")


def decode(data: bytes, shape, dtype: str) -> np.ndarray:
    """The ``[d, h, w, c]`` array of ``dtype`` that :func:`encode` stored in ``data``
    (ValueError naming what does not match). Rows filtered otherwise than by :func:`encode`
    (another writer's PNG) or interlaced raise :class:`ForeignPng`: an image library reads those."""
    depth, height, width, channels = (int(n) for n in shape)
    if dtype not in _UNSIGNED:
        raise ValueError(f"a PNG record's dtype is one of {', '.join(DTYPES)}, not {dtype!r}")
    header, idat = None, []
    for kind, body in _chunks(data):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
    if header is None:
        raise ValueError("PNG image without an IHDR chunk")
    unsigned = np.dtype(_UNSIGNED[dtype])
    got_width, got_height, bits, color, _, _, interlace = header
    want = (width, depth * height, 8 * unsigned.itemsize, channels)
    if (got_width, got_height, bits, _CHANNELS.get(color)) != want:
        raise ValueError(f"PNG image of {got_width}x{got_height}, {bits}-bit, colour type {color}: "
                         f"the record says {width}x{depth * height}, {want[2]}-bit, {channels} channels")
    stride = width * channels * unsigned.itemsize
    if interlace:
        raise ForeignPng("an interlaced PNG image")
    raw = zlib.decompress(b"".join(idat))
    if len(raw) != (stride + 1) * depth * height:
        raise ValueError(f"PNG image data of {len(raw)} bytes, not {(stride + 1) * depth * height}")
    rows = np.frombuffer(raw, np.uint8).reshape(depth * height, stride + 1)
    filters = rows[:, 0]
    if np.all(filters == _UP):
        plain = _undo_up(rows[:, 1:])
    elif np.all(filters == 0):
        plain = rows[:, 1:]
    else:
        raise ForeignPng(f"a PNG image with row filters {sorted(set(filters.tolist()))} (this writer uses 2, Up)")
    samples = plain.reshape(-1).view(unsigned.newbyteorder(">")).astype(unsigned)
    return samples.view(np.dtype(dtype)).reshape(depth, height, width, channels)


def _undo_up(filtered: np.ndarray) -> np.ndarray:
    """Each row plus the one above, modulo 256: a row at a time (np.cumsum down the rows,
    the obvious form, took 5x the CPU on CT slices here)."""
    plain = np.empty(filtered.shape, np.uint8)
    plain[0] = filtered[0]
    for row in range(1, len(plain)):
        np.add(plain[row - 1], filtered[row], out=plain[row])
    return plain
