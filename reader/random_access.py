"""``RandomAccess``: record ``i`` of a split as NumPy arrays, without TensorFlow.

Every shard has a DALI-format ``.idx`` next to it (offset and size of each
record) and dataset.json gives each shard's record count, so record ``i`` is
one ranged read: find its shard by the cumulative counts, its bytes by the
index, check the TFRecord CRCs, parse the ``tf.train.Example`` with the
protobuf runtime, decode the pixels with NumPy. This makes a split

- a PyTorch map-style dataset as it is (``len``, ``[i]``; duck-typed, no torch
  import), picklable for ``DataLoader`` workers;
- a Grain ``RandomAccessDataSource``: ``grain.python.DataLoader`` with an
  ``IndexSampler`` shuffles globally and checkpoints its position exactly;
- a plain sequence for NumPy/JAX code.

Imports neither TensorFlow nor Beam. Shards in a container whose file adapter
(dataset/file_adapters.py) cannot be entered at an offset are refused with the
adapter's reason: gzip shards, whose ``.idx`` offsets address the uncompressed
stream, and a gzip stream cannot be entered at an offset without decompressing
everything before it. DALI's ``fn.readers.tfrecord`` cannot read ``.tfrecord.gz``
either; the PyPI ``tfrecord`` package reads gzip shards with their ``.idx`` files.
"""
from __future__ import annotations

import bisect
import collections
import io
import operator
import os
import threading
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from dcm2tfrecord.dataset import bricks, names, png, wire
from dcm2tfrecord.dataset.example import decode_example
from dcm2tfrecord.dataset.features import (DTYPE, ENCODING_PNG, IMAGE_BRICK_SIZES, IMAGE_BRICKS, IMAGE_RAW, LABEL,
                                           MASK_BRICK_SIZES, MASK_BRICKS, MASK_CHANNELS, MASK_DTYPE, MASK_RAW)
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.dataset.tfrecord import CorruptIndexError, CorruptRecordError, checked_index, scan_index, unframe
from dcm2tfrecord.reader import shard_cache, splits, storage
from dcm2tfrecord.reader.layout import DEFAULT_LABEL, MISSING, RAW, REQUIRED, SHAPE_FEATURES, Layout, split_layout

__all__ = ["RandomAccess", "CorruptRecordError", "CorruptIndexError"]

_NUMPY = {"int64": np.int64, "float": np.float32}
_BRICK_FEATURES = (IMAGE_BRICKS, IMAGE_BRICK_SIZES, MASK_BRICKS, MASK_BRICK_SIZES)
HEADER = 12              # a TFRecord's length and its CRC, before the Example
LAYOUTS_KEPT = 4096      # chunked records whose layout (small features, brick offsets) is kept


class _Chunked:
    """One chunked record's layout: its small features and each brick's (offset, size) in
    its shard, image and mask."""

    def __init__(self, fields: dict, image: list, mask: Optional[list], table_bytes: int):
        self.fields, self.image, self.mask, self.table_bytes = fields, image, mask, table_bytes


def _read_manifest(dataset_dir: str, version) -> tuple[Manifest, str]:
    data, path, directory = storage.read_dataset_json(dataset_dir, version)
    return Manifest.from_json(data, path), directory


class _Feature:
    """How one feature comes out of a record: a scalar, a fixed-shape array or a 1-D run."""

    def __init__(self, name: str, description: Mapping):
        self.name = name
        self.kind = description.get("dtype", "bytes")
        if self.kind not in ("bytes", "int64", "float"):
            raise ValueError(f"feature {name!r}: dtype {self.kind!r} is not bytes, int64 or float")
        self.shape = tuple(int(x) if x is not None else -1 for x in description.get("shape", []))
        self.variable = any(x < 0 for x in self.shape)
        self.required = name in REQUIRED

    def value(self, values, record: str):
        if not values and not self.variable:
            if self.required:
                raise ValueError(f"{record}: feature {self.name!r} is missing")
            values = [MISSING[self.kind]] * int(np.prod(self.shape, dtype=np.int64))
        if self.kind == "bytes":
            if not self.shape:
                return values[0]
            return np.array(list(values), dtype=object).reshape(self.shape if not self.variable else -1)
        dtype = _NUMPY[self.kind]
        if not self.shape:
            return dtype(values[0])
        array = np.array(values, dtype=dtype)
        return array if self.variable else array.reshape(self.shape)


class RandomAccess:
    """The records of one split, by index, as dicts of NumPy arrays.

    ``ra[i]`` is keyed like ``reader.load(..., output="dict")``: ``image``
    (``[h, w, c]``, or ``[d, h, w, c]`` in splits holding volumes, in the
    split's dtype: the stored one, or for mixed splits the smallest that holds
    all exactly), ``label``, ``id``, the shape features and every other
    feature dataset.json declares (absent ones as ``b""``, -1 or NaN,
    variable-length ones as 1-D arrays). Record ``i`` is the ``i``-th in the
    manifest's shard order (the write-time order, a global shuffle).
    ``split`` may be a split spec (``"train[:10%]"``, ``"train+validation"``;
    see ``reader.splits``): record ``i`` is then the ``i``-th it selects.

    - ``verify``: check both TFRecord CRCs of every record read (a corrupt
      record raises ``CorruptRecordError`` naming its shard and index).
    - ``version``: for a root written with ``convert --incremental``.
    - ``key``: for a dataset written with ``convert --encrypt``, the key-encryption key: a
      key URI (``keyfile:PATH``, ``gcp-kms://...``) or a KEK object
      (``dcm2tfrecord.dataset.encryption``); default: the key URI dataset.json names. Each
      record is decrypted and authenticated after its CRCs are checked: a wrong key or a
      changed record raises ``DecryptionError`` naming the shard, the record and the key URI.
    - ``local_cache``, ``local_cache_bytes``: for a ``gs://`` dataset, a local directory
      holding at most that many bytes of whole shard copies (``reader.shard_cache``): a
      shard is fetched (checked against the manifest's sha256) on the first read of any of
      its records and read locally from then on, the least recently used copies evicted
      to stay within the limit. Accepted and ignored for a local dataset (no copy).

    Thread-safe; picklable (open files are not carried, each process opens
    its own), so it works in ``torch.utils.data.DataLoader`` workers and
    Grain's multi-process loader.
    """

    def __init__(self, dataset_dir: str, split: str = "train", *, version=None, verify: bool = True,
                 key=None, local_cache: Optional[str] = None, local_cache_bytes: Optional[int] = None):
        shard_cache.check_options(local_cache, local_cache_bytes)
        self._init(dataset_dir, split, version, verify, key=key, local=(local_cache, local_cache_bytes))

    def _init(self, dataset_dir, split, version, verify, manifest=None, directory=None, key=None,
              local=(None, None)):
        if manifest is None:
            manifest, directory = _read_manifest(dataset_dir, version)
        self._args = (dataset_dir, split, version, verify, manifest, directory, key, local)
        # an encrypted dataset's ciphers: the KEK is reached when the first record is read
        self._keys = manifest.keys(key, read_bytes=storage.read_bytes)
        self.dataset_dir = directory
        self.split = split
        self.verify = verify
        sizes = {name: entry.num_records for name, entry in manifest.splits.items()}
        slices = splits.resolve(split, sizes, directory)
        adapter = manifest.adapter
        if not adapter.random_access:
            raise ValueError(f"{directory} {adapter.random_access_refusal}")
        self.manifest: Manifest = manifest
        entry = splits.selection_entry(manifest, split, slices)
        self.layout: Layout = split_layout(manifest, split, entry)
        pieces = splits.pieces(slices, {s.split: manifest.splits[s.split].shard_records for s in slices})
        shards = [manifest.splits[p.split].shards[p.shard] for p in pieces]
        self._files = [s.file for s in shards]
        self._paths = [names.shard_path(directory, s.file) for s in shards]
        self._index_paths = [names.shard_path(directory, s.index) for s in shards]
        # what each shard's .idx must add up to (the writer's byte count; a hand-written
        # manifest without it: the file's size, asked for when its index is first read)
        self._shard_bytes = [s.num_bytes for s in shards]
        self._firsts = [p.start for p in pieces]      # records of each shard before its piece
        self._sizes = [p.size for p in pieces]
        counts = [p.count for p in pieces]
        self._starts = list(np.cumsum([0] + counts[:-1]).tolist())
        self._len = int(sum(counts))
        self._readers = [storage.RangeReader(p) for p in self._paths]
        self._cache: Optional[shard_cache.ShardCache] = None
        self._copies: list[shard_cache.Shard] = []
        if local[0] is not None and storage.is_gcs(directory):
            self._cache = shard_cache.shared(local[0], local[1])
            for path, size in zip(self._paths, self._shard_bytes):
                size = size if isinstance(size, int) and not isinstance(size, bool) else storage.size(path)
                self._copies.append(shard_cache.Shard(path, shards[len(self._copies)].sha256, size))
            largest = max(self._copies, key=lambda c: c.size, default=None)
            if largest is not None and largest.size > self._cache.limit_bytes:
                raise ValueError(f"shard {largest.uri} is {largest.size} bytes, more than {shard_cache.OPTION}="
                                 f"{self._cache.limit_bytes} holds: raise {shard_cache.OPTION} to at least "
                                 f"{largest.size}")
        self._indexes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        # --volume_chunks: image and mask as bricks (dataset/bricks.py); None for image_raw records
        self.chunks: Optional[bricks.Chunks] = manifest.volume_chunks
        self._layouts: collections.OrderedDict = collections.OrderedDict()
        self.bytes_read = 0          # bytes this object (in this process) has read from shards
        self.reads = 0               # and in how many reads
        # local shards mapped read-only, uncompressed bricks copied from the maps (bytes_read:
        # the pages the copies touch); per process, like the readers' handles
        self.map_local = True
        self._maps: dict[int, Optional[np.ndarray]] = {}
        self._maps_pid = os.getpid()
        features = dict(manifest.features)
        features.setdefault(LABEL, DEFAULT_LABEL)
        self._features = {}
        for name in sorted(set(features) | set(REQUIRED)):
            description = features.get(name, {"dtype": "int64" if name in SHAPE_FEATURES else "bytes",
                                              "shape": []})
            self._features[name] = _Feature(name, description)

    def __getstate__(self):
        return self._args

    def __setstate__(self, state):
        self._init(*state)

    def __len__(self) -> int:
        return self._len

    def __repr__(self) -> str:
        return (f"RandomAccess({self.dataset_dir!r}, split={self.split!r}: {self._len} records "
                f"in {len(self._paths)} shards)")

    def locate(self, index) -> tuple[int, int]:
        """``(shard number, record number in that shard)`` of record ``index``.

        Shards are numbered in reading order (for a slice: the shards it covers)."""
        i = operator.index(index)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record {index} out of range for {self._len} records")
        shard = bisect.bisect_right(self._starts, i) - 1
        return shard, self._firsts[shard] + i - self._starts[shard]

    def _index(self, shard: int) -> tuple[np.ndarray, np.ndarray]:
        found = self._indexes.get(shard)
        if found is None:
            with self._lock:
                found = self._indexes.get(shard)
                if found is None:
                    path = self._index_paths[shard]
                    if storage.exists(path):
                        found = self._parse_index(shard, path)
                    else:                # a dataset written by hand without .idx files
                        found = scan_index(self._readers[shard])
                    if len(found[0]) != self._sizes[shard]:
                        raise ValueError(f"{path} lists {len(found[0])} records, dataset.json "
                                         f"says {self._sizes[shard]}")
                    self._indexes[shard] = found
        return found

    def _parse_index(self, shard: int, path: str) -> tuple[np.ndarray, np.ndarray]:
        try:
            text = storage.read_text(path)
        except (OSError, UnicodeDecodeError) as error:
            raise CorruptIndexError(f"{path}: cannot be read as a .idx file ({error})") from None
        shard_bytes = self._shard_bytes[shard]
        if not isinstance(shard_bytes, int) or isinstance(shard_bytes, bool):
            shard_bytes = storage.size(self._paths[shard])
        return checked_index(text, path, shard_bytes)

    def _read(self, shard: int, offset: int, size: int) -> bytes:
        if self._cache is None:
            data = self._readers[shard].read(offset, size)
        else:                      # local_cache: the shard's local copy, pinned while it is read
            copy = self._copies[shard]
            pinned = self._cache.acquire(copy.uri, copy.sha256, copy.size)
            try:
                data = os.pread(pinned.fd, size, offset)
            finally:
                self._cache.release(pinned)
        with self._lock:
            self.bytes_read += len(data)
            self.reads += 1
        return data

    def _read_into(self, shard: int, offset: int, buffer) -> int:
        """``_read`` into ``buffer`` (``len(buffer)`` bytes at ``offset``); the bytes read."""
        if self._cache is None:
            done = self._readers[shard].read_into(offset, buffer)
        else:
            copy = self._copies[shard]
            pinned = self._cache.acquire(copy.uri, copy.sha256, copy.size)
            try:
                done = storage.pread_into(pinned.fd, offset, memoryview(buffer).cast("B"))
            finally:
                self._cache.release(pinned)
        with self._lock:
            self.bytes_read += done
            self.reads += 1
        return done

    def _mapped(self, shard: int) -> Optional[np.ndarray]:
        """Shard ``shard``'s bytes (uint8) through a read-only map of a local file, or None (a
        ``gs://`` shard, read through local_cache or with ranged reads; ``map_local`` False)."""
        if not self.map_local or self._cache is not None:
            return None
        with self._lock:
            if self._maps_pid != os.getpid():
                self._maps, self._maps_pid = {}, os.getpid()
            if shard not in self._maps:
                view = self._readers[shard].view()
                self._maps[shard] = None if view is None else np.frombuffer(view, np.uint8)
            return self._maps[shard]

    def _touched(self, nbytes: int, count: int) -> None:
        with self._lock:
            self.bytes_read += nbytes
            self.reads += count

    def serialized(self, index) -> memoryview:
        """The serialized ``tf.train.Example`` of record ``index`` (CRC-checked with ``verify``;
        decrypted, for an encrypted dataset)."""
        shard, k = self.locate(index)
        offsets, sizes = self._index(shard)
        offset, size = int(offsets[k]), int(sizes[k])
        record = self._read(shard, offset, size)
        data = unframe(record, self._paths[shard], k, self.verify)
        if self._keys is None:
            return data
        return memoryview(self._keys.decrypt(self._files[shard], data, k))

    def _fields(self, values: Mapping, where: str) -> dict:
        """Every declared feature but the pixels, as ``ra[i]`` gives them."""
        return {name: feature.value(values.get(name, ()), where) for name, feature in self._features.items()
                if name != IMAGE_RAW and name not in _BRICK_FEATURES}

    def _chunked(self, index) -> _Chunked:
        """Record ``index``'s layout (chunked datasets): its entries walked by small reads, the
        bricks' payloads unread (dataset/wire.py); kept for the next region of the record."""
        shard, k = self.locate(index)
        key = (shard, k)
        with self._lock:
            found = self._layouts.get(key)
            if found is not None:
                self._layouts.move_to_end(key)
                return found
        offsets, sizes = self._index(shard)
        start, size = int(offsets[k]) + HEADER, int(sizes[k]) - HEADER - 4
        where = f"{self._paths[shard]} record {k}"
        try:
            walk = wire.walk_example(lambda at, n: self._read(shard, start + at, n), size, bricks.BRICK_FEATURES)
            values = {name: found for name, (_, found) in decode_example(walk.small).items()}
        except Exception as error:
            raise CorruptRecordError(f"{where}: not a chunked tf.train.Example ({error})") from error
        fields = self._fields(values, where)
        spans: list[Optional[list[tuple[int, int]]]] = []
        for name, sizes_name in (bricks.IMAGE, bricks.MASK):
            span = walk.spans.get(name)
            if span is None:
                spans.append(None)
                continue
            listed = [int(n) for n in values.get(sizes_name, ())]
            placed = wire.bytes_values(start + span.offset, listed)
            if not placed or placed[-1][0] + placed[-1][1] != start + span.offset + span.size:
                raise CorruptRecordError(f"{where}: {sizes_name} does not add up to {name}'s {span.size} bytes")
            spans.append(placed)
        if spans[0] is None:
            raise CorruptRecordError(f"{where}: feature {IMAGE_BRICKS!r} is missing")
        found = _Chunked(fields, spans[0], spans[1], walk.bytes_read)
        with self._lock:
            self._layouts[key] = found
            while len(self._layouts) > LAYOUTS_KEPT:
                self._layouts.popitem(last=False)
        return found

    def info(self, index) -> dict:
        """Record ``index``'s features without its pixels (``ra[i]`` less ``image`` and ``mask``):
        on a chunked dataset read without the bricks."""
        if self.chunks is None:
            out = self[index]
            out.pop("image", None)
            out.pop("mask", None)
            return out
        return dict(self._chunked(index).fields)

    def region(self, index, start: Union[Sequence[int], np.ndarray], size: Union[Sequence[int], np.ndarray], *,
               image: bool = True, mask: bool = True, pad_value=0) -> dict:
        """The box ``[start, start + size)`` of record ``index``'s ``(d, h, w)`` voxels:
        ``{"image": [d, h, w, c], "mask": [d, h, w, mask_channels]}`` (``mask`` where the records
        hold masks; ``image``/``mask`` False leave one out), where the box leaves the volume padded
        (the image with ``pad_value``, the mask with 0). A 2-D record is one voxel deep.

        On a chunked dataset (``convert --volume_chunks``) only the bricks the box overlaps are
        read (and the record's layout, once: its small features); otherwise the record is read
        whole. Region reads of bricks check no TFRecord CRC (that covers the whole record): a
        brick that does not decode to its voxels raises ``CorruptRecordError``."""
        start = tuple(int(n) for n in start)
        size = tuple(int(n) for n in size)
        if len(start) != 3 or len(size) != 3 or min(size) < 1:
            raise ValueError(f"region: start {start} and size {size} must be three numbers (d, h, w), sizes >= 1")
        if self.chunks is None:
            record = self[index]
            out = {}
            for name, pad in (("image", pad_value), ("mask", 0)):
                if name in record and (image if name == "image" else mask):
                    volume = record[name] if self.layout.volume else record[name][None]
                    out[name] = cut(volume, start, size, pad)
            return out
        layout = self._chunked(index)
        shard, k = self.locate(index)
        where = f"{self._paths[shard]} record {k}"
        fields = layout.fields
        shape = tuple(int(fields[name]) for name in SHAPE_FEATURES[:3])
        lo = [max(a, 0) for a in start]
        hi = [min(a + n, m) for a, n, m in zip(start, size, shape)]
        out = {}
        wanted = [("image", layout.image, int(fields[SHAPE_FEATURES[3]]), _text(fields[DTYPE]),
                   np.dtype(self.layout.dtype), pad_value)] if image else []
        if mask and layout.mask is not None:
            wanted.append(("mask", layout.mask, int(fields[MASK_CHANNELS]), _text(fields[MASK_DTYPE]),
                           np.dtype(_text(fields[MASK_DTYPE])), 0))
        whole = list(lo) == list(start) and hi == [a + n for a, n in zip(start, size)]   # no padding
        for name, placed, channels, stored, dtype, pad in wanted:
            part = None
            if all(b > a for a, b in zip(lo, hi)):
                if len(placed) != bricks.count(shape, self.chunks.edge):
                    raise CorruptRecordError(f"{where}: {len(placed)} {name} bricks for shape {list(shape)} "
                                             f"in bricks of {self.chunks.edge}")
                try:
                    part = bricks.read_region(lambda at, n: self._read(shard, at, n), placed, shape + (channels,),
                                              self.chunks.edge, self.chunks.codec, stored, lo, hi,
                                              read_into=lambda at, buffer: self._read_into(shard, at, buffer),
                                              mapped=self._mapped(shard), touched=self._touched)
                except bricks.BrickError as error:
                    raise CorruptRecordError(f"{where}: {name} {error}") from None
            if whole and part is not None:
                out[name] = part.astype(dtype, copy=False)        # a fresh array: no second copy
                continue
            box = np.full(size + (channels,), pad, dtype=dtype)
            if part is not None:
                box[tuple(slice(a - s, b - s) for a, b, s in zip(lo, hi, start))] = part.astype(dtype, copy=False)
            out[name] = box
        return out

    def __getitem__(self, index) -> dict:
        shard, k = self.locate(index)
        where = f"{self._paths[shard]} record {k}"
        serialized = self.serialized(index)
        try:
            values = {name: found for name, (_, found) in decode_example(serialized).items()}
        except Exception as error:       # protobuf's DecodeError: say which record
            raise CorruptRecordError(f"{where}: not a tf.train.Example ({error})") from error
        out = self._fields(values, where)
        if self.chunks is not None:
            return self._whole_chunked(values, out, where)
        raw = values.get(IMAGE_RAW)
        if not raw:
            raise ValueError(f"{where}: feature {IMAGE_RAW!r} is missing")
        out["image"] = self._image(raw[0], out, where)
        if MASK_RAW in out:
            out["mask"] = self._mask(out.pop(MASK_RAW), out, where)
        return out

    def _whole_chunked(self, values: Mapping, out: dict, where: str) -> dict:
        """``ra[i]`` of a chunked record: its bricks reassembled."""
        assert self.chunks is not None
        shape = tuple(int(out[name]) for name in SHAPE_FEATURES)
        pixels = [(IMAGE_BRICKS, "image", shape, _text(out[DTYPE]), self.layout.dtype)]
        if MASK_BRICKS in values:
            stored = _text(out[MASK_DTYPE])
            pixels.append((MASK_BRICKS, "mask", shape[:3] + (int(out[MASK_CHANNELS]),), stored, stored))
        for feature, name, full, stored, dtype in pixels:
            found = values.get(feature)
            if not found:
                raise ValueError(f"{where}: feature {feature!r} is missing")
            if len(found) != bricks.count(full, self.chunks.edge):
                raise CorruptRecordError(f"{where}: {len(found)} {name} bricks for shape {list(full)} in bricks "
                                         f"of {self.chunks.edge}")
            try:
                volume = bricks.assemble(dict(enumerate(found)), full, self.chunks.edge, self.chunks.codec, stored)
            except bricks.BrickError as error:
                raise CorruptRecordError(f"{where}: {name} {error}") from None
            volume = volume.astype(np.dtype(dtype), copy=False)
            out[name] = volume if self.layout.volume else volume[0]
        return out

    def _mask(self, raw, features: dict, where: str) -> np.ndarray:
        """A record's mask (--class_map) as ``image`` is shaped: [d, h, w, mask_channels]
        (no depth axis for a split of 2-D records)."""
        raw = raw[0] if isinstance(raw, (list, tuple)) else raw
        stored = features[MASK_DTYPE]
        stored = stored.decode() if isinstance(stored, bytes) else str(stored)
        shape = tuple(int(features[k]) for k in SHAPE_FEATURES[:3]) + (int(features[MASK_CHANNELS]),)
        values = np.frombuffer(raw, dtype=np.dtype(stored).newbyteorder("<"))
        if values.size != int(np.prod(shape)):
            raise CorruptRecordError(f"{where}: {values.size} {stored} mask values for shape {list(shape)}")
        mask = values.reshape(shape).astype(np.dtype(stored))
        return mask if self.layout.volume else mask[0]

    def _image(self, raw: bytes, features: dict, where: str) -> np.ndarray:
        layout = self.layout
        shape = tuple(int(features[k]) for k in SHAPE_FEATURES)     # (d, h, w, c)
        stored = features[DTYPE].decode() if isinstance(features[DTYPE], bytes) else features[DTYPE]
        image: Optional[np.ndarray] = None
        if layout.encoding == RAW:
            pixels = np.frombuffer(raw, dtype=np.dtype(stored).newbyteorder("<"))
            if pixels.size != int(np.prod(shape)):
                raise CorruptRecordError(f"{where}: {pixels.size} {stored} values for shape {list(shape)}")
            image = pixels.reshape(shape)
        elif layout.encoding == ENCODING_PNG:     # NumPy alone (dataset/png.py): the light install
            try:
                image = png.decode(raw, shape, stored)
            except png.ForeignPng:                # another tool's PNG: Pillow's, as a JPEG's
                pass
            except ValueError as exc:
                raise CorruptRecordError(f"{where}: {exc}") from None
        if image is None:
            from PIL import Image        # JPEG records, and PNGs of other writers
            with Image.open(io.BytesIO(raw)) as decoded:
                image = np.asarray(decoded).reshape(shape)
        out = np.dtype(layout.dtype)
        # astype copies: a writable array in native byte order (torch wants one).
        image = image.astype(out) if image.dtype != out or not image.flags.writeable else image
        return image if layout.volume else image[0]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def cut(volume: np.ndarray, origin: Union[Sequence[int], np.ndarray], size: Union[Sequence[int], np.ndarray],
        pad_value: Any = 0) -> np.ndarray:
    """``volume[origin : origin + size]`` on its first three axes, padded with ``pad_value`` where
    the box leaves the volume; a new contiguous array."""
    out = np.full(tuple(size) + volume.shape[3:], pad_value, dtype=volume.dtype)
    src, dst = [], []
    for o, s, n in zip(origin, size, volume.shape[:3]):
        lo, hi = max(int(o), 0), min(int(o) + int(s), n)
        if hi <= lo:
            return out
        src.append(slice(lo, hi))
        dst.append(slice(lo - int(o), hi - int(o)))
    out[tuple(dst)] = volume[tuple(src)]
    return out
