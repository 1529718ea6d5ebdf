"""``load``: the tf.data input pipeline, fast by default.

Unseeded (the fastest order, different every run):
shards from dataset.json -> (this pipeline's shards) -> shuffle shards per epoch
-> parallel interleave of TFRecordDatasets -> (cache) -> shuffle records
-> (repeat) -> batch -> one parse_example + decode_raw per batch
-> (cast / scale) -> prefetch

A seed alone reproduces that pipeline's order run after run (seeded shard
shuffle, deterministic interleave, seeded shuffle buffer), at its speed.

With ``resumable=True`` and a seed, or ``shuffle=False`` (an order that is a
pure function of the manifest, split, seed and epoch; see ``reader.schedule``),
so that ``start_step`` can resume exactly:
epochs -> per epoch, the shards in a permuted order (those finished before
the start left out, those open there started by ``skip``) -> the same
deterministic parallel interleave -> seeded shuffle per window of records
-> batch -> parse as above.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
from typing import Any, Callable, Optional

import numpy as np

from dcm2tfrecord.reader.tfquiet import tf

from dcm2tfrecord.dataset import wire
from dcm2tfrecord.dataset.features import IMAGE_RAW
from dcm2tfrecord.dataset.tfrecord import CorruptIndexError, CorruptRecordError, checked_index, unframe
from dcm2tfrecord.dataset.manifest import SplitEntry
from dcm2tfrecord.reader import shard_cache, splits, storage
from dcm2tfrecord.reader.decode import batch_parser, conversion
from dcm2tfrecord.reader.manifest import DatasetInfo, info, info_via_storage, shard_path
from dcm2tfrecord.reader.options import ReadOptions
from dcm2tfrecord.reader.layout import require_masks
from dcm2tfrecord.reader.schedule import Order
from dcm2tfrecord.reader.sharding import ALL, BY_RECORD, ReadPlan, logger

AUTOTUNE = tf.data.AUTOTUNE
MAX_CYCLE_LENGTH = 16
READ_BUFFER_BYTES = 1 << 20
UNBUFFERED_MIN_RECORD_BYTES = 64 << 10
SHUFFLE_BUFFER_BYTES = 64 << 20
SHUFFLE_BUFFER_RECORDS = (2, 10_000)
# Seeded order: records are shuffled in windows of this many bytes' worth; a
# resumed run reads at most one window it does not use.
SHUFFLE_WINDOW_BYTES = 16 << 20


def parse_fn(dataset_dir: str, split: str = "train", *, output: str = "tuple", dtype=None,
             scale: Optional[float] = None, pad: bool = False, version=None, masks: bool = False) -> Callable:
    """The batched parse function ``load`` maps over ``batch``-ed serialized records.

    ``serialized [batch] -> (images, labels)`` (or a dict with ``output="dict"``;
    ``(images, masks, labels)`` with ``masks=True``, as ``load``), for people who
    compose their own pipeline::

        ds = tf.data.TFRecordDataset(files).batch(64).map(reader.parse_fn(d))

    Splits holding several image sizes need ``pad=True`` (see ``load``).
    """
    manifest = info(dataset_dir, version)
    entry = manifest.entry(split)
    layout = manifest.layout(split)
    if not layout.batchable and not pad:
        raise layout.variable_size_error([list(s) for s in entry.shapes])
    check_no_silent_float64(entry, split, layout.dtype, dtype, scale)
    if masks:
        require_masks(manifest.manifest, dataset_dir)
    return batch_parser(manifest.manifest, layout, output, dtype, scale, masks)


def check_no_silent_float64(entry: SplitEntry, split: str, common: str, dtype, scale) -> None:
    """A split of several stored dtypes whose only exact common dtype is float64 (int32 with
    float32, say) would read back at 8 bytes a value without a word: ask for a dtype instead."""
    stored = sorted(entry.dtypes)
    if dtype is None and scale is None and common == "float64" and "float64" not in stored:
        raise ValueError(
            f"split {split!r} holds {', '.join(stored)} records; the only dtype holding all their "
            "values exactly is float64, which doubles memory: pass dtype= to reader.load (e.g. "
            "dtype='float32', or dtype='float64' to keep every value), or convert with "
            "--dicom_values window for one uint8/uint16 dtype")


def _shuffle_buffer(entry: SplitEntry, budget: int = SHUFFLE_BUFFER_BYTES) -> int:
    """As many records as fit in ``budget`` bytes, within SHUFFLE_BUFFER_RECORDS."""
    records = max(entry.num_records, 1)
    per_record = max((entry.num_bytes or 0) // records, 1)
    low, high = SHUFFLE_BUFFER_RECORDS
    return min(records, high, max(low, budget // per_record))


def _read_buffer(entry: SplitEntry, compression: str, files) -> int:
    """``buffer_size`` of each shard's TFRecordDataset: 0 (unbuffered) for large local records.

    Unbuffered, the reader reads each record (header, then data + checksum) with
    one ``pread`` straight into the record's own string; through a buffer every
    byte is copied once more, from the buffer into the record. For records of
    64 KiB and more (224x224x3 is 147 KiB) the saved copy outweighs the two
    system calls per record: 20% less CPU for bytes-only reads of 147 KiB
    records on the benchmark machine. Small records, gzip shards (zlib reads
    through its own buffer) and remote files (one request per read) keep a
    1 MiB buffer.
    """
    records = max(entry.num_records, 1)
    per_record = (entry.num_bytes or 0) // records
    local = all("://" not in str(f) for f in files)
    if not compression and local and per_record >= UNBUFFERED_MIN_RECORD_BYTES:
        return 0
    return READ_BUFFER_BYTES


def _cache(records: tf.data.Dataset, read: ReadOptions, plan: ReadPlan) -> tf.data.Dataset:
    cache = read.cache
    assert cache is not None
    if cache == "memory":
        return records.cache()
    path = os.fspath(cache)
    if plan.pipelines > 1:
        path = f"{path}.pipeline-{plan.pipeline}-of-{plan.pipelines}"
    return records.cache(path)


def load(dataset_dir: str, split: Optional[str] = None, batch_size: Optional[int] = None, *,
         options: Optional[ReadOptions] = None, **changes: Any) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches (a dict with ``output="dict"``).

    The options are the fields of ``options``, a :class:`ReadOptions` (default: its
    defaults), changed by those given here by keyword (``split``, ``batch_size`` also by
    position): ``load(d, split="train", batch_size=32, seed=1)`` is
    ``load(d, options=ReadOptions(split="train", batch_size=32, seed=1))``. A keyword that
    is no field of ReadOptions is a TypeError.

    Images are ``[batch, height, width, channels]``, or ``[batch, depth, height,
    width, channels]`` for splits holding volumes, in their stored dtype
    (mixed-dtype splits: the smallest dtype holding all values exactly), unless
    ``dtype`` and/or ``scale`` ask for ``cast(images, dtype or float32) * scale``,
    done after batching. Shapes are static when all records share one. Labels are
    as dataset.json declares them (int64 class index, float, or multi-hot); -1
    (NaN for float labels) when unlabeled.

    - ``split``: a split name, or a TFDS split spec: ``"train[:10%]"``, ``"train[10%:20%]"``,
      ``"train[-1000:]"``, ``"train[100:200]"``, ``"train+validation"``,
      ``"train[:50%]+validation[:10]"`` (``reader.splits``). A slice selects records by
      position in the split's stored order before any shuffling, so it holds the same
      records whatever the seed; percents round to the closest record as in TFDS, negative
      boundaries count from the end, out-of-range ones clamp. Cardinality, ``start_step``
      and ``input_context`` apply to the selected records; a union needs splits whose images
      share one shape (mixed dtypes read in their common dtype, as within a split).
    - ``shuffle``: shard order reshuffled every epoch, records through a buffer of
      ``shuffle_buffer`` (default: as many as fit in 64 MiB, 2..10,000; the
      shards are already shuffled as a whole when written).
    - ``seed``: reproducible order (every epoch differs, every run repeats it).
      ``deterministic`` defaults to True with a seed or ``shuffle=False``, else
      False: parallel reads may then also reorder records, which is faster.
    - ``resumable``: with a seed, the order that ``start_step`` can resume:
      epoch ``e``'s order is a pure function of the manifest, split, seed and
      ``e`` (``reader.schedule``); records are shuffled in windows of
      ``shuffle_buffer`` records (default: as many as fit in 16 MiB). Another
      order than ``seed`` alone, and about a quarter more CPU per record (the
      window shuffle; docs/BENCHMARKS.md §6), hence opt-in. With
      ``repeat=False`` each new iteration of the dataset (a Keras epoch) reads
      the next epoch's order. ``shuffle=False`` reads are always resumable.
    - ``start_step``: with ``resumable=True`` and a seed, or ``shuffle=False``, begin at batch
      ``start_step`` of an uninterrupted run with the same arguments and yield
      exactly its batches from there on (across epochs with ``repeat``; with
      ``repeat=False``, step ``k`` is step ``k % steps_per_epoch`` of epoch
      ``k // steps_per_epoch``). Starting costs one shuffle window at most
      plus a header walk of the open shards, not the ``k`` steps before. A step
      past what tf.data counts in 64 bits is a ValueError naming the largest one
      (reader.options.check_start_step).
    - ``repeat``: True for endless epochs, or a number of epochs.
    - ``cache``: ``"memory"`` or a file path prefix; the first epoch reads the
      shards and fills the cache, later epochs read the cache only.
    - ``input_context``: a ``tf.distribute.InputContext``; this pipeline reads its
      part of the split only (by file, or by record when there are fewer shards
      than pipelines; see ``reader.sharding``). ``batch_size`` is this pipeline's
      batch size (``input_context.get_per_replica_batch_size(global_batch)``).
    - ``elastic``: with ``resumable=True`` and a seed (or ``shuffle=False``) and an
      ``input_context``, one global order for all pipelines, each keeping its share of every
      global batch (``batch_size`` x pipelines): ``start_step`` (a global step) then resumes
      exactly after the number of input pipelines changed, the global batch kept. Each
      pipeline reads all of the split's shards and parses its share only (docs/READING.md,
      "Resuming on another number of machines").
    - ``pad``: splits with several image sizes come back zero-padded to the largest
      image of each batch; without it they raise an error naming ``--resize``.
    - ``output="dict"``: every feature dataset.json declares, ``image`` in place of
      ``image_raw``; a feature a record lacks reads as ``b""``, -1 or NaN, and
      variable-length ones come back as ``tf.RaggedTensor``.
    - ``cycle_length``: shards read in parallel (default ``min(shards, 16)``).
    - ``key``: for a dataset written with ``convert --encrypt``, the key-encryption key (a key
      URI, or a KEK object of ``dcm2tfrecord.dataset.encryption``); default: the key URI
      dataset.json names. The key is reached when ``load`` is called (no access: one error
      naming the key URI); every record is decrypted and authenticated as it is read (a
      changed record fails the iteration, naming its shard and index).
    - ``local_cache``, ``local_cache_bytes``: for a ``gs://`` dataset, a local directory and
      its limit in bytes: whole shard copies (``reader.shard_cache``), sha256-checked, the ones
      needed next prefetched and the least useful evicted, never more than the limit held
      (it must hold twice ``cycle_length`` shards); ignored for a local dataset.
    - ``version``: for a root written with ``convert --incremental``, the version
      to read (a number, or a tag's name: ``dcm2tfrecord tag``); default: the one its
      LATEST file names.
    - ``masks``: for a dataset converted with ``--unit series --class_map``, batches of
      ``(images, masks, labels)`` (``mask`` in place of ``mask_raw`` with ``output="dict"``):
      masks ``[batch, depth, height, width, mask_channels]`` (no depth axis where images
      have none), in their stored dtype (uint8; uint16 label maps of 256 classes or more),
      never converted by ``dtype``/``scale``, zero-padded with ``pad`` as images are. A label
      map's value ``i`` is ``info(d).mask_classes[i - 1]`` (0 background), a binary mask's
      channel ``c`` is ``mask_classes[c]``.
      A dataset without masks is a ValueError.

    The dataset's cardinality is the manifest's record count (or this pipeline's
    share of it), so Keras shows steps per epoch; a shard holding a different
    number of records than the manifest says fails the epoch.

    ``reader.as_numpy(ds)`` yields the batches as NumPy arrays (for JAX or NumPy
    loops), and ``reader.info(dataset_dir).int2str(label)`` / ``str2int(name)`` map
    class indices to class names and back.
    """
    given = {"split": split, "batch_size": batch_size}
    changes.update({k: v for k, v in given.items() if v is not None})
    read = dataclasses.replace(options, **changes) if options is not None else ReadOptions(**changes)
    remote = read.local_cache is not None and storage.is_gcs(dataset_dir)
    manifest: DatasetInfo = info_via_storage(dataset_dir, read.version) if remote else info(dataset_dir, read.version)
    if manifest.manifest.volume_chunks is not None:
        raise ValueError(f"{dataset_dir} stores its volumes as bricks (convert --volume_chunks), which tf.data "
                         "does not put back together: read it with reader.RandomAccess (whole records or "
                         "regions) or reader.PatchSampler (whose patches() front end feeds tf.data), or "
                         "convert it without --volume_chunks")
    if read.masks:
        require_masks(manifest.manifest, dataset_dir)
    split = read.split
    entry = manifest.entry(split)
    layout = manifest.layout(split)
    if not layout.batchable and read.batch_size > 1 and not read.pad:
        raise layout.variable_size_error([list(s) for s in entry.shapes])
    check_no_silent_float64(entry, split, layout.dtype, read.dtype, read.scale)
    conversion(layout.dtype, read.dtype, read.scale)        # argument errors now, not at iteration
    if read.resumable and (read.cache or (read.shuffle and read.seed is None)):
        raise ValueError("resumable=True needs a seed (or shuffle=False) and no cache")
    if read.start_step and not read.ordered:
        raise ValueError("start_step needs a seed and resumable=True (or shuffle=False), and no "
                         "cache: only then is the order a function of the step. Pass "
                         "resumable=True to the uninterrupted run as well: a seed alone reads "
                         "another order")
    deterministic = read.is_deterministic
    compression = manifest.adapter.tf_compression_type    # the container's, as TFRecordDataset takes it
    decrypt = _decryptor(manifest, read.key, layout, read,
                         local_files=not remote and not compression and "://" not in manifest.dataset_dir)
    if decrypt is not None and read.cache and read.cache != "memory":
        raise ValueError(f"cache={read.cache!r}: {dataset_dir} is encrypted, and a cache file would "
                         "hold its records decrypted; use cache='memory'")
    plan = manifest.read_plan(split, None if read.elastic else read.input_context)
    if plan.mode != ALL:
        logger.info(plan.describe(split, len(manifest.pieces(split))))
    key = splits.canonical(split)             # seeds the order: a split name is itself
    read_buffer = _read_buffer(entry, compression, plan.files)
    cycle = max(1, min(read.cycle_length or MAX_CYCLE_LENGTH, len(plan.files)))
    local = _Localizer.of(manifest, split, read, cycle) if remote else None

    # Unshuffled from the start, the ordered pipeline's records are the plain one's (files in
    # manifest order, the same deterministic interleave: what reader.schedule replays), which
    # reads them with less tf.data machinery per record (docs/BENCHMARKS.md §8).
    if read.ordered and (read.shuffle or read.start_step or read.elastic):
        window = (read.shuffle_buffer or _shuffle_buffer(entry, SHUFFLE_WINDOW_BYTES)) if read.shuffle else 1
        if read.elastic:
            records = _elastic_share(plan, key, read, window, cycle, compression, read_buffer, decrypt, local)
        else:
            records = _ordered_records(plan, key, read, window, cycle, compression, read_buffer,
                                       decrypt=decrypt, local=local)
        return _batch_and_parse(records, manifest, layout, read, True, decrypt)

    if plan.partial:            # a slice: the pieces' first record and length travel along
        files = tf.data.Dataset.from_tensor_slices((tf.constant(plan.files, dtype=tf.string),
                                                    tf.constant(plan.starts, dtype=tf.int64),
                                                    tf.constant(plan.lengths, dtype=tf.int64)))
    else:
        files = tf.data.Dataset.from_tensor_slices(tf.constant(plan.files, dtype=tf.string))
    if read.shuffle:
        files = files.shuffle(max(len(plan.files), 1), seed=read.seed, reshuffle_each_iteration=True)

    if local is not None and not read.shuffle:       # the same known order every epoch
        local.plan(plan.files)

    def read_piece(path, start=0, length=-1):
        if local is None:
            return _read_shard(path, plan, compression, read_buffer, start=start, length=length, decrypt=decrypt)
        copy = local.acquire(path)
        return local.released(_read_shard(copy, plan, compression, read_buffer, start=start, length=length,
                                          decrypt=decrypt, source=path), copy)

    records = files.interleave(read_piece, cycle_length=cycle, block_length=1,
                               num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    records = records.apply(tf.data.experimental.assert_cardinality(plan.num_records))
    if read.cache:
        records = _cache(records, read, plan)
    if read.shuffle:
        buffer = read.shuffle_buffer or _shuffle_buffer(entry)
        records = records.shuffle(buffer, seed=None if read.seed is None else read.seed + 1,
                                  reshuffle_each_iteration=True)
    if read.repeat:
        records = records.repeat(None if read.repeat is True else int(read.repeat))
    return _batch_and_parse(records, manifest, layout, read, deterministic, decrypt)


def _batch_and_parse(records: tf.data.Dataset, manifest: DatasetInfo, layout: Any, read: ReadOptions,
                     deterministic: bool, decrypt: Optional[Callable] = None) -> tf.data.Dataset:
    batches = records.batch(read.batch_size, drop_remainder=read.drop_remainder)
    parse = batch_parser(manifest.manifest, layout, read.output, read.dtype, read.scale, read.masks)
    if isinstance(decrypt, _Decryptor) and decrypt.batched:
        parse = decrypt.parse_batch(parse)
    batches = batches.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)

    options = tf.data.Options()
    options.deterministic = deterministic
    if read.input_context is not None:
        # Sharded here already: tf.distribute must not shard it a second time.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batches.with_options(options).prefetch(AUTOTUNE)


# Encrypted records reach the parser one of two ways (docs/BENCHMARKS.md §25). From local,
# uncompressed shards, where the images decode with one reshape (vectorized layouts) and masks
# are not read, the records never pass through TensorFlow as strings: the pipeline carries
# (shard, record index) pairs, and each batch is one call to Python that reads its records
# (pread, at the .idx offsets, into a reused buffer), checks their CRCs, decrypts them into a
# reused buffer, copies each image's bytes once into the batch's array (returned to TensorFlow
# as numbers) and returns the rest of each Example (everything but image_raw) for
# parse_example. Otherwise (remote or gzip shards, masks, other layouts, cache="memory", which
# holds records) TFRecordDataset reads the records and each is decrypted alone, before the
# shuffle, into its serialized Example.
BATCH_DECRYPTION = True


def _slice(view: memoryview, at: int, size: int) -> bytes:
    return view[at:at + size]           # type: ignore[return-value]  # walk_example reads any buffer


class _Decryptor:
    """An encrypted dataset's records decrypted: ``decrypt(path, index, data)`` (NumPy values:
    a shard's path, a record's index in it, its stored bytes) -> the serialized Example; with
    ``batched``, :meth:`batch` reads, checks and decrypts a batch of ``(path, index)`` records
    itself and decodes their images."""

    def __init__(self, keys, files: dict, indexes: dict, layout: Any = None):
        self.keys, self.files, self.indexes = keys, files, indexes
        self._local, self._lock = threading.local(), threading.Lock()
        self._offsets: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.batched = layout is not None
        if self.batched:
            self.dtype = np.dtype(layout.stored_dtypes[0]).newbyteorder("<")
            self.values = math.prod(layout.image_shape())
            self.nbytes = self.values * self.dtype.itemsize

    def __call__(self, path, index, data):
        return self.keys.decrypt(self.files[path.decode("utf-8")], data, int(index))

    def _buffer(self, name: str, size: int) -> bytearray:
        """A buffer of this thread (the map runs calls in parallel), grown as needed."""
        buffer = getattr(self._local, name, None)
        if buffer is None or len(buffer) < size:
            buffer = bytearray(max(size, 1 << 16))
            setattr(self._local, name, buffer)
        return buffer

    def _index(self, path: str, fd: int) -> tuple[np.ndarray, np.ndarray]:
        """The shard's ``(offsets, sizes)``, from its .idx checked against its size (once)."""
        found = self._offsets.get(path)
        if found is None:
            index = self.indexes[path]
            try:
                text = storage.read_text(index)
            except (OSError, UnicodeDecodeError) as error:
                raise CorruptIndexError(f"{index}: cannot be read as a .idx file ({error})") from None
            found = checked_index(text, index, os.fstat(fd).st_size)
            with self._lock:
                self._offsets[path] = found
        return found

    def count(self, path) -> np.int64:
        """The number of records in the shard at ``path`` (its .idx's)."""
        name = path.decode("utf-8")
        fd = os.open(name, os.O_RDONLY)
        try:
            return np.int64(len(self._index(name, fd)[0]))
        finally:
            os.close(fd)

    def batch(self, paths, indices):
        """A batch's ``(pixels [batch, values] of the stored dtype, the Examples without their
        image_raw [batch])``: each record read into a reused buffer and unframed (its CRCs
        checked), decrypted into another, its image's bytes found by the wire-format walk
        (dataset/wire.py) and copied once, into the batch's array."""
        pixels = np.empty((len(indices), self.values), self.dtype)
        out = pixels.view(np.uint8).reshape(len(indices), self.nbytes)
        rest = np.empty(len(indices), dtype=object)
        fds: dict = {}
        try:
            for i, (path, index) in enumerate(zip(paths, indices)):
                name, index = path.decode("utf-8"), int(index)
                shard = self.files[name]
                fd = fds.get(name)
                if fd is None:
                    fd = fds[name] = os.open(name, os.O_RDONLY)
                offsets, sizes = self._index(name, fd)
                size = int(sizes[index])
                framed_buffer = self._buffer("framed", size)
                if storage.pread_into(fd, int(offsets[index]), memoryview(framed_buffer)[:size]) != size:
                    raise CorruptRecordError(f"{shard}: record {index} is truncated (the shard ends "
                                             f"before the {size} bytes its .idx gives)")
                framed = np.frombuffer(framed_buffer, np.uint8, size)    # an array: unframe slices it in place
                data = unframe(framed, shard, index)      # type: ignore[arg-type]
                plain_buffer = self._buffer("plain", size)
                length = self.keys.cipher(shard).decrypt_into(data, index, plain_buffer)
                plain = memoryview(plain_buffer)[:length]
                walk = wire.walk_example(functools.partial(_slice, plain), length, skip=(IMAGE_RAW,))
                span = walk.spans.get(IMAGE_RAW)
                if span is None or plain[span.offset] != 0x0A:
                    raise wire.WireError(f"{shard}: record {index} holds no {IMAGE_RAW} of one value")
                image, at = wire.read_varint(plain, span.offset + 1)
                if at + image != span.offset + span.size or image != self.nbytes:
                    raise wire.WireError(f"{shard}: record {index}: {IMAGE_RAW} holds {image} bytes in "
                                         f"one value of {span.size}, the split's shape {self.nbytes}")
                out[i] = np.frombuffer(plain, np.uint8, image, at)
                rest[i] = walk.small
        finally:
            for fd in fds.values():
                os.close(fd)
        return pixels, rest

    def records(self, path: tf.Tensor) -> tf.data.Dataset:
        """The record indices of the shard at ``path``: 0 .. its count - 1."""
        count = tf.numpy_function(self.count, [path], tf.int64, stateful=False)
        count.set_shape([])
        return tf.data.Dataset.range(count)

    def parse_batch(self, parse: Callable) -> Callable:
        """``parse`` (reader.decode.batch_parser's) of ``(paths, indices)`` batches."""
        dtype = tf.as_dtype(self.dtype.newbyteorder("="))

        def parse_encrypted(paths, indices):
            pixels, rest = tf.numpy_function(self.batch, [paths, indices], [dtype, tf.string], stateful=False)
            pixels.set_shape([indices.shape[0], self.values])
            rest.set_shape(indices.shape)
            return parse(rest, pixels)
        return tf.autograph.experimental.do_not_convert(parse_encrypted)


def _decryptor(manifest: DatasetInfo, key, layout: Any = None, read: Optional[ReadOptions] = None,
               local_files: bool = False) -> Optional[_Decryptor]:
    """For an encrypted dataset, its :class:`_Decryptor` (batched where ``layout``, ``read``
    and ``local_files``, uncompressed local shards, allow: see BATCH_DECRYPTION); None for
    plain records. The KEK is reached now, so a missing key fails ``load`` itself, in one line."""
    keys = manifest.manifest.keys(key, read_bytes=storage.read_bytes)
    if keys is None:
        return None
    keys.kek()
    shards = [s for entry in manifest.manifest.splits.values() for s in entry.shards]
    files = {shard_path(manifest.dataset_dir, s.file): s.file for s in shards}
    indexes = {shard_path(manifest.dataset_dir, s.file): shard_path(manifest.dataset_dir, s.index) for s in shards}
    batched = (BATCH_DECRYPTION and local_files and layout is not None and read is not None
               and layout.vectorized and not read.masks and not read.cache)   # a cache holds records
    return _Decryptor(keys, files, indexes, layout if batched else None)


def _decrypted(records: tf.data.Dataset, path, decrypt: Callable) -> tf.data.Dataset:
    """``(index, stored bytes)`` pairs of one shard -> its serialized Examples, decrypted; or,
    for a batched decryptor, record indices -> ``(path, index)``, read and decrypted once batched."""
    if getattr(decrypt, "batched", False):
        return records.map(tf.autograph.experimental.do_not_convert(lambda index: (path, index)))

    def one(index, data):
        plain = tf.numpy_function(decrypt, [path, index, data], tf.string, stateful=False)
        plain.set_shape([])
        return plain
    return records.map(tf.autograph.experimental.do_not_convert(one))


class _Localizer:
    """``local_cache=`` in a tf.data pipeline: each remote shard is read from its local copy
    (``reader.shard_cache``), fetched (and pinned) when the interleave opens it, unpinned
    after its last record; the interleave opens up to ``cycle_length`` shards ahead, so
    those are fetched while the open ones are read. Where the order is known (``resumable``,
    ``shuffle=False``), eviction keeps the shards needed soonest and the next ones are
    prefetched."""

    def __init__(self, cache: shard_cache.ShardCache, shards: dict):
        self.cache, self.shards = cache, shards

    @classmethod
    def of(cls, manifest: DatasetInfo, split: str, read: ReadOptions, cycle: int) -> "_Localizer":
        assert read.local_cache is not None and read.local_cache_bytes is not None
        cache = shard_cache.shared(read.local_cache, read.local_cache_bytes)
        shards = {}
        for piece in manifest.pieces(split):
            entry = manifest.manifest.splits[piece.split].shards[piece.shard]
            uri = manifest._piece_path(piece)
            size = entry.num_bytes if isinstance(entry.num_bytes, int) else storage.size(uri)
            shards[uri] = shard_cache.Shard(uri, entry.sha256, size)
        sizes = sorted((s.size for s in shards.values()), reverse=True)
        if sizes and sizes[0] > cache.limit_bytes:
            largest = max(shards.values(), key=lambda s: s.size)
            raise ValueError(f"shard {largest.uri} is {largest.size} bytes, more than {shard_cache.OPTION}="
                             f"{cache.limit_bytes} holds: raise {shard_cache.OPTION} to at least {largest.size}")
        # tf.data's parallel interleave opens cycle_length shards and prefetches as many more
        # (its future elements): each is pinned from when it is opened to its last record
        opened = 2 * cycle
        if sum(sizes[:opened]) > cache.limit_bytes:
            raise ValueError(f"{shard_cache.OPTION}={cache.limit_bytes} holds fewer than the {opened} shards "
                             f"reader.load may hold open at once (twice cycle_length={cycle}; the {opened} "
                             f"largest: {sum(sizes[:opened])} bytes): raise it, or lower cycle_length")
        return cls(cache, shards)

    def plan(self, uris) -> None:
        self.cache.plan([self.shards[str(u)] for u in uris])

    def _fetch(self, uri) -> bytes:
        shard = self.shards[uri.decode() if isinstance(uri, bytes) else str(uri)]
        return self.cache.acquire(shard.uri, shard.sha256, shard.size).path.encode()

    def _release(self, path) -> bytes:
        self.cache.release(path.decode() if isinstance(path, bytes) else str(path))
        return b""

    def acquire(self, uri: tf.Tensor) -> tf.Tensor:
        path = tf.numpy_function(self._fetch, [uri], tf.string, stateful=True)
        path.set_shape([])
        return path

    def released(self, records: tf.data.Dataset, path: tf.Tensor) -> tf.data.Dataset:
        """``records``, then the copy unpinned (a last turn yielding nothing: the interleave's
        order is unchanged, its turn noticing the shard's end simply unpins it first)."""
        def release(p):
            done = tf.numpy_function(self._release, [p], tf.string, stateful=True)
            done.set_shape([])
            return done
        tail = tf.data.Dataset.from_tensors(path).map(release).filter(lambda _: False)
        return records.concatenate(tail)


def _read_shard(path, plan: ReadPlan, compression: str, read_buffer: int, skip=0, start=0,
                length=-1, decrypt: Optional[Callable] = None, source=None) -> tf.data.Dataset:
    """One shard's records in this pipeline's view, from its ``skip``-th on.

    In a slice, the shard's piece only: records ``start .. start + length - 1``
    of the file (``length`` -1: to its end, where a shard holding more records
    than the manifest says fails the epoch's cardinality check). Both skips use
    TFRecordDataset's own skip, which walks the 12-byte length headers and
    seeks past the data: the skipped records are neither read nor checked.
    """
    batched = getattr(decrypt, "batched", False)        # record indices: the decryptor reads them
    records = decrypt.records(path) if batched else tf.data.TFRecordDataset(  # type: ignore[union-attr]
        path, compression_type=compression, buffer_size=read_buffer)
    step = plan.pipelines if plan.mode == BY_RECORD else 1
    first: Any = 0
    if not (isinstance(start, int) and isinstance(skip, int) and start == skip == 0):
        first = start + skip * step
        records = records.skip(first)     # whole shards from their start: no op
    if decrypt is not None and not batched:     # each record's index in its shard is bound into its ciphertext
        records = records.enumerate(tf.cast(first, tf.int64))
    if plan.partial:            # traced only for slices: whole-shard reads keep their graph
        rest = tf.maximum(tf.cast(length, tf.int64) - skip * step, 0)
        records = records.take(tf.where(length < 0, tf.constant(-1, tf.int64), rest))
    if plan.mode == BY_RECORD:
        records = records.shard(step, plan.pipeline)
    # decrypted under the shard's own name (``source``: its URI where ``path`` is a local copy)
    return records if decrypt is None else _decrypted(records, path if source is None else source, decrypt)


def _window_seed(seed: Optional[int], split: str, epoch, window) -> tf.Tensor:
    """A 62-bit seed per (seed, split, epoch, window): FarmHash of their text."""
    text = tf.strings.format("{}:{}:{}", (epoch, window, tf.constant(f"{seed}/{split}")))
    return tf.strings.to_hash_bucket_fast(text, 1 << 62)


WINDOW_GRAPH_SEED = 87654321


def _shuffle_window(records: tf.data.Dataset, window: int, seed: tf.Tensor) -> tf.data.Dataset:
    """``records`` (one window) shuffled by ``seed`` alone.

    An op seed is combined with the global seed (``tf.random.set_seed``, which
    ``keras.utils.set_random_seed`` calls); fixing the seed of this function's
    own graph keeps the user's global seed out of the order (and avoids
    TensorFlow's failure on a global seed of 0 with a tensor op seed).
    """
    tf.random.set_seed(WINDOW_GRAPH_SEED)         # traced: sets this function graph's seed only
    if isinstance(records, tuple):                # a window of (path, index, data): one dataset each
        records = tf.data.Dataset.zip(records)
    return records.shuffle(window, seed=seed)


def _elastic_share(plan: ReadPlan, split: str, read: ReadOptions, window: int, cycle: int,
                   compression: str, read_buffer: int, decrypt: Optional[Callable] = None,
                   local: Optional["_Localizer"] = None) -> tf.data.Dataset:
    """This input pipeline's share of the split's one global order (``elastic=True``).

    The global order is the single-pipeline order of the whole split (``reader.schedule``:
    the manifest, split, seed and epoch, nothing else), batched by the global batch,
    ``batch_size`` x the input pipelines; pipeline ``i`` of ``n`` keeps records ``i, i + n,
    ...`` of it, so its batch ``k`` holds global records ``k B + i + j n`` (``j < batch_size``)
    and the ``n`` pipelines' batches ``k`` together are global batch ``k`` exactly, whatever
    ``n``. ``start_step`` is a global step, so a run resumed with another number of pipelines
    (the global batch kept) reads what the uninterrupted run would have read from there. With
    ``drop_remainder`` each pass ends at its last whole global batch (every pipeline then has
    as many steps); without it the last, partial global batch is shared as far as it goes.
    Each pipeline reads every shard of the split (TFRecordDataset, buffered) and parses only
    its share."""
    index, pipelines = read.pipelines
    whole = dataclasses.replace(read, batch_size=read.batch_size * pipelines, input_context=None,
                                elastic=False)
    records = _ordered_records(plan, split, whole, window, cycle, compression, read_buffer,
                               whole_batches=read.drop_remainder, decrypt=decrypt, local=local)
    return records.shard(pipelines, index) if pipelines > 1 else records


def _ordered_records(plan: ReadPlan, split: str, read: ReadOptions, window: int, cycle: int,
                     compression: str, read_buffer: int, whole_batches: bool = False,
                     decrypt: Optional[Callable] = None,
                     local: Optional["_Localizer"] = None) -> tf.data.Dataset:
    """The records of a seeded (or unshuffled) load, from batch ``read.start_step`` on;
    ``whole_batches``: each pass of a finite ``repeat`` ends at its last whole batch."""
    seed, repeat, batch_size = read.order_seed, read.repeat, read.batch_size
    drop_remainder, start_step = read.drop_remainder, read.start_step
    order = Order(plan.counts, seed, split, cycle)
    total = order.num_records
    if total == 0:       # e.g. a pipeline of more pipelines than records: endless epochs of nothing
        if getattr(decrypt, "batched", False):
            return tf.data.Dataset.from_tensor_slices((tf.constant([], tf.string), tf.constant([], tf.int64)))
        return tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
    files = tf.constant(plan.files, dtype=tf.string)
    starts, lengths = tf.constant(plan.starts, tf.int64), tf.constant(plan.lengths, tf.int64)
    epochs_per_pass = None if repeat is True else (int(repeat) if repeat else 1)
    if epochs_per_pass is None:                           # one endless pass
        first_pass = 0
        first_epoch, first_position = divmod(start_step * batch_size, max(total, 1))
    else:        # each iteration of the dataset is a pass of epochs_per_pass epochs
        records = total * epochs_per_pass
        steps = records // batch_size if drop_remainder else math.ceil(records / batch_size)
        first_pass, step = divmod(start_step, max(steps, 1))
        epoch, first_position = divmod(min(step * batch_size, records), max(total, 1))
        first_epoch = first_pass * epochs_per_pass + epoch
        whole = records // batch_size * batch_size                 # the records of a pass's whole batches
        first_whole = max(whole - step * batch_size, 0)

    def inputs_from(epoch, position):
        shards, skips = order.inputs_from(int(epoch), int(position))
        if local is not None:             # the epoch's shards in order: evict and prefetch by it
            local.plan([plan.files[s] for s in shards])
        return shards, skips

    # Plain Python on constants: traced as written, without autograph's conversion (tracing
    # is most of the cost of starting a pipeline).
    @tf.autograph.experimental.do_not_convert
    def read_piece(shard, skip):
        uri = tf.gather(files, shard)
        path = uri if local is None else local.acquire(uri)
        records = _read_shard(path, plan, compression, read_buffer, skip,
                              tf.gather(starts, shard), tf.gather(lengths, shard), decrypt, source=uri)
        return records if local is None else local.released(records, path)

    @tf.autograph.experimental.do_not_convert
    def epoch_records(epoch, position):
        aligned = position // window * window
        shards, skips = tf.numpy_function(inputs_from, [epoch, aligned], [tf.int64] * 2, stateful=False)
        shards.set_shape([None])
        skips.set_shape([None])
        # tf.data's deterministic interleave is the round robin Order replays (reader.schedule).
        records = tf.data.Dataset.from_tensor_slices((shards, skips)).interleave(
            read_piece, cycle_length=cycle, block_length=1, num_parallel_calls=AUTOTUNE, deterministic=True)
        if window > 1:
            windows = tf.data.Dataset.zip((tf.data.Dataset.range(aligned // window, tf.int64.max),
                                            records.window(window)))
            records = windows.flat_map(tf.autograph.experimental.do_not_convert(
                lambda w, records: _shuffle_window(records, window, _window_seed(seed, split, epoch, w))))
        return records.skip(position - aligned).apply(
            tf.data.experimental.assert_cardinality(total - position))

    counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="reader_iterations")

    @tf.autograph.experimental.do_not_convert
    def passes(_):
        j = counter.assign_add(1) - 1                       # this iteration of the dataset
        if epochs_per_pass is None:
            epochs = tf.data.Dataset.range(first_epoch, tf.int64.max)
        else:
            start = tf.where(j == 0, tf.constant(first_epoch, tf.int64),
                             (first_pass + j) * epochs_per_pass)
            epochs = tf.data.Dataset.range(start, (first_pass + j + 1) * epochs_per_pass)
        out = epochs.map(lambda e: (e, tf.where((j == 0) & (e == first_epoch),
                                                tf.constant(first_position, tf.int64),
                                                tf.constant(0, tf.int64)))).flat_map(epoch_records)
        if whole_batches and epochs_per_pass is not None:
            out = out.take(tf.where(j == 0, tf.constant(first_whole, tf.int64), tf.constant(whole, tf.int64)))
        return out

    records = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).flat_map(passes)
    if epochs_per_pass is None:
        return records.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    if start_step == 0:
        return records.apply(tf.data.experimental.assert_cardinality(whole if whole_batches else
                                                                     total * epochs_per_pass))
    return records
