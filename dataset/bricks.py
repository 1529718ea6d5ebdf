"""Volumes stored as bricks (``convert --volume_chunks N``), so a patch is read without the rest.

A chunked record holds its image not as one ``image_raw`` value but as bricks of ``N x N x
N`` voxels (all channels; the last brick along an axis is what is left), in C order of brick
index ``(kd, kh, kw)``: ``image_bricks``, a BytesList of one value per brick, each the brick's
``[bd, bh, bw, c]`` pixels, little-endian, row-major, compressed by the codec
(``--volume_codec``: ``none``, or ``zstd`` at level :data:`ZSTD_LEVEL`, one zstd frame); and
``image_brick_sizes``, an Int64List of each value's size in bytes. A mask is stored the same
way (``mask_bricks``, ``mask_brick_sizes``, ``[bd, bh, bw, mask_channels]`` of ``mask_dtype``).
dataset.json's ``volume_chunks`` object (:func:`manifest_entry`) gives ``edge`` and ``codec``.

The sizes sort before the bricks (keys are sorted), so a reader walks the record's entries
(dataset/wire.py), skipping each bricks payload unread, and finds brick ``i``'s bytes at the
payload's offset plus, for each brick ``j`` before it, ``1 + varint_size(size_j) + size_j``,
plus ``1 + varint_size(size_i)`` (:func:`dataset.wire.bytes_values`). The codec and geometry
are here, shared by the converter (transforms/records/build.py), verify and the reader.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.errors import CorruptDataError
from dcm2tfrecord.dataset.features import (IMAGE_BRICK_SIZES, IMAGE_BRICKS, IMAGE_RAW, MASK_BRICK_SIZES,
                                           MASK_BRICKS, MASK_CHANNELS, MASK_DTYPE, MASK_RAW)

ZSTD_LEVEL = 3           # fixed: equal input gives equal bytes
MAX_EDGE = 4096
MANIFEST_KEY = "volume_chunks"     # dataset.json's object: {"edge": N, "codec": ...}


class VolumeCodec(StrEnum):
    """``--volume_codec``: each brick's bytes as they are, or one zstd frame of them."""
    NONE = "none"
    ZSTD = "zstd"


class BrickError(CorruptDataError, ValueError):
    """A brick that does not decode to its voxels."""


# which bricks features hold which pixels: (bricks, sizes) of the image and of the mask
IMAGE = (IMAGE_BRICKS, IMAGE_BRICK_SIZES)
MASK = (MASK_BRICKS, MASK_BRICK_SIZES)
BRICK_FEATURES = (IMAGE_BRICKS, MASK_BRICKS)


def edge_refusal(edge: int) -> str:
    """Why ``--volume_chunks edge`` is refused ("" when it is not)."""
    if edge < 0 or edge > MAX_EDGE or edge == 1:
        return (f"--volume_chunks {edge} must be a brick edge in voxels from 2 to {MAX_EDGE} (e.g. 64), "
                "or 0 for one image_raw value a record")
    return ""


def grid(shape: Sequence[int], edge: int) -> tuple[int, int, int]:
    """Bricks along (d, h, w) of a volume of ``shape`` (its first three axes)."""
    return tuple(-(-int(n) // edge) for n in shape[:3])  # type: ignore[return-value]


def boxes(shape: Sequence[int], edge: int) -> list[tuple[tuple[int, int], ...]]:
    """Each brick's ``((d0, d1), (h0, h1), (w0, w1))``, in C order of brick index."""
    counts = grid(shape, edge)
    return [tuple((k * edge, min((k + 1) * edge, int(n))) for k, n in zip(ks, shape[:3]))
            for ks in itertools.product(*[range(c) for c in counts])]


def count(shape: Sequence[int], edge: int) -> int:
    """Bricks of a volume of ``shape``: ``len(boxes(shape, edge))`` without listing them."""
    return int(np.prod(grid(shape, edge)))


def box_of(index: int, shape: Sequence[int], edge: int) -> tuple[tuple[int, int], ...]:
    """Brick ``index``'s ``((d0, d1), (h0, h1), (w0, w1))``: ``boxes(shape, edge)[index]``."""
    ks = np.unravel_index(int(index), grid(shape, edge))
    return tuple((int(k) * edge, min((int(k) + 1) * edge, int(n))) for k, n in zip(ks, shape[:3]))


def overlapping(shape: Sequence[int], edge: int, start: Sequence[int], stop: Sequence[int]) -> list[int]:
    """Indices (C order) of the bricks that the box ``[start, stop)`` (inside the volume) touches."""
    counts = grid(shape, edge)
    ranges = [range(int(a) // edge, -(-int(b) // edge)) for a, b in zip(start, stop)]
    if any(len(r) == 0 for r in ranges):
        return []
    return [int(np.ravel_multi_index(ks, counts)) for ks in itertools.product(*ranges)]


def _imagecodecs():
    try:
        import imagecodecs
    except ImportError:
        raise ImportError("zstd bricks (--volume_codec zstd) need imagecodecs: pip install imagecodecs, "
                         "or the reader's zstd extra (pip install './reader_dist[zstd]')") from None
    return imagecodecs


def _compress(data: bytes, codec: str) -> bytes:
    if codec == VolumeCodec.ZSTD:
        imagecodecs = _imagecodecs()
        return bytes(imagecodecs.zstd_encode(data, level=ZSTD_LEVEL))
    return data


def _decompress(data, codec: str, size: int) -> bytes:
    if codec == VolumeCodec.ZSTD:
        imagecodecs = _imagecodecs()
        try:
            return bytes(imagecodecs.zstd_decode(bytes(data), out=size))
        except Exception as exc:       # imagecodecs.ZstdError, or a wrong size
            raise BrickError(f"not a zstd frame of {size} bytes ({exc})") from None
    if codec != VolumeCodec.NONE:
        raise BrickError(f"codec {codec!r} is not one this reader decodes ({', '.join(VolumeCodec)})")
    return data            # uncompressed: the bytes as read (a view; the caller copies the voxels out)


def encode(volume: np.ndarray, edge: int, codec: str) -> list[bytes]:
    """The bricks of ``volume`` ``[d, h, w, c]``, each compressed by ``codec``."""
    little = volume.dtype.newbyteorder("<")
    out = []
    for (d0, d1), (h0, h1), (w0, w1) in boxes(volume.shape, edge):
        brick = np.ascontiguousarray(volume[d0:d1, h0:h1, w0:w1], dtype=little)
        out.append(_compress(brick.tobytes(), codec))
    return out


def decode_brick(data, codec: str, box: Sequence[tuple[int, int]], channels: int, dtype: str) -> np.ndarray:
    """One brick's ``[bd, bh, bw, channels]`` array of ``dtype`` (native order)."""
    shape = tuple(b - a for a, b in box) + (int(channels),)
    stored = np.dtype(dtype).newbyteorder("<")
    size = int(np.prod(shape)) * stored.itemsize
    raw = _decompress(data, codec, size)
    if len(raw) != size:
        raise BrickError(f"{len(raw)} bytes for a {list(shape)} {dtype} brick ({size})")
    return np.frombuffer(raw, dtype=stored).reshape(shape).astype(np.dtype(dtype), copy=False)


def assemble(bricks: Mapping[int, object], shape: Sequence[int], edge: int, codec: str, dtype: str,
             start: Optional[Sequence[int]] = None, stop: Optional[Sequence[int]] = None) -> np.ndarray:
    """The box ``[start, stop)`` (default: the whole volume) of a ``shape`` ``[d, h, w, c]``
    volume from its bricks ``{index: bytes}`` (at least those :func:`overlapping` it)."""
    start = tuple(int(n) for n in (start if start is not None else (0, 0, 0)))
    stop = tuple(int(n) for n in (stop if stop is not None else shape[:3]))
    out = np.empty(tuple(b - a for a, b in zip(start, stop)) + (int(shape[3]),), dtype=np.dtype(dtype))
    for index in overlapping(shape, edge, start, stop):
        box = box_of(index, shape, edge)
        if index not in bricks:
            raise BrickError(f"brick {index} is missing")
        try:
            brick = decode_brick(bricks[index], codec, box, shape[3], dtype)
        except BrickError as exc:
            raise BrickError(f"brick {index} {[list(b) for b in box]}: {exc}") from None
        lo = [max(a, s) for (a, _), s in zip(box, start)]
        hi = [min(b, t) for (_, b), t in zip(box, stop)]
        out[tuple(slice(low - s, high - s) for low, high, s in zip(lo, hi, start))] = \
            brick[tuple(slice(low - a, high - a) for low, high, (a, _) in zip(lo, hi, box))]
    return out


def _spanned(shape: Sequence[int], edge: int, start: Sequence[int], stop: Sequence[int]):
    """For each brick the box ``[start, stop)`` (inside the volume) overlaps, in C order: its index,
    its extent ``(nd, nh, nw)``, the planes ``(d0, d1)`` and rows ``(h0, h1)`` of it the box spans,
    and the slices of the brick and of the box's array that meet (walked by axis: no box listed)."""
    counts = grid(shape, edge)
    axes = []
    for a, b, n in zip(start, stop, shape[:3]):
        a, b, n = int(a), int(b), int(n)
        pieces = []
        for k in range(a // edge, -(-b // edge)):
            b0, b1 = k * edge, min((k + 1) * edge, n)
            lo, hi = max(a, b0), min(b, b1)
            pieces.append((k, b1 - b0, lo - b0, hi - b0, slice(lo - b0, hi - b0), slice(lo - a, hi - a)))
        axes.append(pieces)
    for kd, nd, d0, d1, sd, od in axes[0]:
        for kh, nh, h0, h1, sh, oh in axes[1]:
            for kw, nw, _, _, sw, ow in axes[2]:
                yield (kd * counts[1] + kh) * counts[2] + kw, (nd, nh, nw), (d0, d1, h0, h1), (sd, sh, sw), (od, oh, ow)


def read_region(read: Callable[[int, int], bytes], placed: Sequence[tuple[int, int]], shape: Sequence[int],
                edge: int, codec: str, dtype: str, start: Sequence[int], stop: Sequence[int],
                read_into: Optional[Callable[[int, Any], int]] = None, mapped: Optional[np.ndarray] = None,
                touched: Optional[Callable[[int, int], None]] = None) -> np.ndarray:
    """The box ``[start, stop)`` (inside the volume) of a ``shape`` ``[d, h, w, c]`` volume whose
    bricks lie at ``placed`` (``(offset, size)`` each, C order), read through ``read(offset, size)``:
    only the bricks the box overlaps, and of an uncompressed brick only the planes ``d`` the box
    spans (a brick is C order, so they are one contiguous range of it); a zstd brick whole.
    ``read_into(offset, buffer)`` (the bytes read): uncompressed bricks are read into one reused
    buffer instead (fresh large bytes objects cost their page faults, more than the copy).
    ``mapped`` (the whole file as uint8, e.g. a read-only ``mmap``): uncompressed bricks are
    copied straight from it into the region, each brick's overlap by one slice assignment (no read,
    no intermediate buffer); ``touched(nbytes, bricks)`` is then told the bytes of the file's pages
    the copies touch (4 KiB pages of the rows each spanned plane of a brick contributes)."""
    if codec == VolumeCodec.NONE and mapped is not None:
        return _copy_mapped(mapped, placed, shape, edge, dtype, start, stop, touched)
    indices = overlapping(shape, edge, start, stop)
    if codec != VolumeCodec.NONE:
        return assemble(dict(zip(indices, read_bricks(read, [placed[i] for i in indices]))), shape, edge, codec,
                        dtype, start, stop)
    stored = np.dtype(dtype).newbyteorder("<")
    channels = int(shape[3])
    spans, parts = [], []
    for index, (nd, nh, nw), (d0, d1, _, _), inside, into in _spanned(shape, edge, start, stop):
        plane = nh * nw * channels * stored.itemsize
        offset, size = placed[index]
        if size != plane * nd:
            raise BrickError(f"brick {index}: {size} bytes for a {[nd, nh, nw, channels]} {dtype} brick "
                             f"({plane * nd})")
        spans.append((offset + d0 * plane, (d1 - d0) * plane))
        parts.append(((d1 - d0, nh, nw, channels), (slice(0, d1 - d0),) + inside[1:], into))
    out = np.empty(tuple(int(b) - int(a) for a, b in zip(start, stop)) + (channels,), dtype=np.dtype(dtype))
    if read_into is None:
        found: Iterable = read_bricks(read, spans)
    else:
        scratch = np.empty(max((n for _, n in spans), default=0), np.uint8)
        found = _read_each(read_into, spans, scratch)
    for data, (extent, inside, into) in zip(found, parts):
        out[into] = np.frombuffer(data, dtype=stored).reshape(extent)[inside]
    return out


PAGE = 4096


def _copy_mapped(mapped: np.ndarray, placed: Sequence[tuple[int, int]], shape: Sequence[int], edge: int,
                 dtype: str, start: Sequence[int], stop: Sequence[int],
                 touched: Optional[Callable[[int, int], None]]) -> np.ndarray:
    """``read_region`` of uncompressed bricks out of ``mapped`` (the file's bytes, uint8)."""
    stored = np.dtype(dtype).newbyteorder("<")
    channels = int(shape[3])
    out = np.empty(tuple(int(b) - int(a) for a, b in zip(start, stop)) + (channels,), dtype=np.dtype(dtype))
    spans = []                    # (offset, plane bytes, row bytes, d0, d1, h0, h1) of each brick copied
    for index, (nd, nh, nw), (d0, d1, h0, h1), inside, into in _spanned(shape, edge, start, stop):
        row = nw * channels * stored.itemsize
        offset, size = placed[index]
        if size != row * nh * nd:
            raise BrickError(f"brick {index}: {size} bytes for a {[nd, nh, nw, channels]} {dtype} brick "
                             f"({row * nh * nd})")
        if offset < 0 or offset + size > mapped.shape[0]:
            raise BrickError(f"brick {index} at offset {offset} ({size} bytes): the shard ends first "
                             f"({mapped.shape[0]} bytes)")
        out[into] = mapped[offset:offset + size].view(stored).reshape(nd, nh, nw, channels)[inside]
        spans.append((offset, row * nh, row, d0, d1, h0, h1))
    if touched is not None:
        touched(pages(spans) * PAGE, len(spans))
    return out


def pages(spans: Sequence[tuple[int, int, int, int, int, int, int]]) -> int:
    """The 4 KiB pages that rows ``[h0, h1)`` of planes ``[d0, d1)`` of bricks at ``offset``
    (``(offset, plane bytes, row bytes, d0, d1, h0, h1)`` each; whole rows: a row's columns are
    adjacent) lie on, a page shared by neighbouring spans counted once."""
    if not spans:
        return 0
    offset, plane, row, d0, d1, h0, h1 = (np.asarray(c, np.int64) for c in zip(*spans))
    planes = d1 - d0
    brick = np.repeat(np.arange(len(spans)), planes)
    depth = np.arange(int(planes.sum())) - np.repeat(np.cumsum(planes) - planes, planes) + d0[brick]
    first = offset[brick] + depth * plane[brick] + h0[brick] * row[brick]
    last = first + (h1 - h0)[brick] * row[brick] - 1
    order = np.argsort(first, kind="stable")
    first, last = first[order] // PAGE, last[order] // PAGE
    covered = np.concatenate([[-1], np.maximum.accumulate(last)[:-1]])     # pages of the spans before
    return int(np.maximum(last - np.maximum(first, covered + 1) + 1, 0).sum())


def _read_each(read_into: Callable[[int, Any], int], spans: Sequence[tuple[int, int]], scratch: np.ndarray):
    """Each span's bytes, read into ``scratch`` in turn (each valid until the next is read)."""
    for offset, size in spans:
        view = scratch[:size]
        done = read_into(offset, view)
        if done != size:
            raise BrickError(f"{done} bytes of {size} at offset {offset}: the shard ends first")
        yield view


def record_features(features: dict, pixels: np.ndarray, edge: int, codec: str) -> dict:
    """A record's features with ``image_raw`` (and ``mask_raw``, if any) as bricks: ``pixels``
    is the image ``[d, h, w, c]``; the mask is read back from its bytes, ``mask_dtype`` and
    ``mask_channels``."""
    out = dict(features)
    out.pop(IMAGE_RAW, None)
    bricks = encode(pixels, edge, codec)
    out[IMAGE_BRICKS], out[IMAGE_BRICK_SIZES] = bricks, np.asarray([len(b) for b in bricks], np.int64)
    mask = out.pop(MASK_RAW, None)
    if mask is not None:
        dtype = np.dtype(str(out[MASK_DTYPE]))
        values = np.frombuffer(mask, dtype=dtype).reshape(pixels.shape[:3] + (int(out[MASK_CHANNELS]),))
        bricks = encode(values, edge, codec)
        out[MASK_BRICKS], out[MASK_BRICK_SIZES] = bricks, np.asarray([len(b) for b in bricks], np.int64)
    return out


def manifest_entry(edge: int, codec: str) -> dict:
    """dataset.json's ``volume_chunks`` object."""
    entry: dict = {"edge": int(edge), "codec": str(codec), "order": "C",
                   "image": {"bricks": IMAGE_BRICKS, "sizes": IMAGE_BRICK_SIZES},
                   "mask": {"bricks": MASK_BRICKS, "sizes": MASK_BRICK_SIZES}}
    if codec == VolumeCodec.ZSTD:
        entry["level"] = ZSTD_LEVEL
    return entry


def manifest_features(features: Mapping, edge: int, codec: str) -> dict:
    """dataset.json's features of a chunked dataset: ``image_raw``/``mask_raw`` replaced by the
    bricks and their sizes."""
    out = {k: dict(v) for k, v in features.items() if k not in (IMAGE_RAW, MASK_RAW)}
    pairs = [(IMAGE_BRICKS, IMAGE_BRICK_SIZES, "image")]
    if MASK_RAW in features:
        pairs.append((MASK_BRICKS, MASK_BRICK_SIZES, "mask"))
    for bricks, sizes, what in pairs:
        out[bricks] = {"dtype": "bytes", "shape": [-1], "encoding": "bricks",
                       "description": f"the {what} as bricks of {edge} voxels a side (the last along an axis: "
                                      f"what is left), C order of brick index, each [bd, bh, bw, channels] "
                                      f"little-endian, compressed by {codec} (dataset.json's {MANIFEST_KEY})"}
        out[sizes] = {"dtype": "int64", "shape": [-1], "description": f"bytes of each value of {bricks}"}
    return out


class Chunks:
    """A chunked dataset's layout as dataset.json gives it (None from :func:`of_manifest` for a
    plain one)."""

    def __init__(self, edge: int, codec: str):
        if edge_refusal(int(edge)) or edge == 0:
            raise ValueError(f"volume_chunks edge {edge} is not a brick edge")
        if codec not in list(VolumeCodec):
            raise ValueError(f"volume_chunks codec {codec!r} is not one this reader decodes "
                             f"({', '.join(VolumeCodec)})")
        self.edge, self.codec = int(edge), str(codec)

    def __repr__(self) -> str:
        return f"Chunks(edge={self.edge}, codec={self.codec!r})"


def of_manifest(extra: Mapping) -> Optional[Chunks]:
    """The ``volume_chunks`` object of dataset.json's keys (``Manifest.extra``), or None."""
    entry = extra.get(MANIFEST_KEY)
    if not isinstance(entry, Mapping):
        return None
    return Chunks(int(entry.get("edge", 0)), str(entry.get("codec", VolumeCodec.NONE)))


def read_bricks(read: Callable[[int, int], bytes], spans: Iterable[tuple[int, int]],
                gap: int = 16) -> list[bytes]:
    """The bytes at each ``(offset, size)`` (in increasing offset order), neighbours within ``gap``
    bytes of each other read together: ranges of consecutive bricks become one read."""
    spans = list(spans)
    out: list = []
    i = 0
    while i < len(spans):
        j = i
        while j + 1 < len(spans) and 0 <= spans[j + 1][0] - (spans[j][0] + spans[j][1]) <= gap:
            j += 1
        first = spans[i][0]
        data = memoryview(read(first, spans[j][0] + spans[j][1] - first))     # slices of it: views
        for offset, size in spans[i:j + 1]:
            out.append(data[offset - first:offset - first + size])
        i = j + 1
    return out
