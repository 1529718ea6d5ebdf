"""``load``: the tf.data input pipeline, fast by default.

shards from dataset.json -> (this pipeline's shards) -> shuffle shards per epoch
-> parallel interleave of TFRecordDatasets -> (cache) -> shuffle records
-> (repeat) -> batch -> one parse_example + decode_raw per batch
-> (cast / scale) -> prefetch
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Union

import tensorflow as tf

from reader.decode import batch_parser, conversion
from reader.manifest import DatasetInfo, info
from reader.sharding import ALL, BY_RECORD, logger

AUTOTUNE = tf.data.AUTOTUNE
MAX_CYCLE_LENGTH = 16
READ_BUFFER_BYTES = 1 << 20
UNBUFFERED_MIN_RECORD_BYTES = 64 << 10
SHUFFLE_BUFFER_BYTES = 64 << 20
SHUFFLE_BUFFER_RECORDS = (2, 10_000)


def parse_fn(dataset_dir: str, split: str = "train", *, output: str = "tuple", dtype=None,
             scale: Optional[float] = None, pad: bool = False, version=None) -> Callable:
    """The batched parse function ``load`` maps over ``batch``-ed serialized records.

    ``serialized [batch] -> (images, labels)`` (or a dict with ``output="dict"``),
    for people who compose their own pipeline::

        ds = tf.data.TFRecordDataset(files).batch(64).map(reader.parse_fn(d))

    Splits holding several image sizes need ``pad=True`` (see ``load``).
    """
    manifest = info(dataset_dir, version)
    layout = manifest.layout(split)
    if not layout.batchable and not pad:
        raise layout.variable_size_error(manifest.split(split).get("shapes", []))
    return batch_parser(manifest, layout, output, dtype, scale)


def _shuffle_buffer(entry: dict) -> int:
    """As many records as fit in SHUFFLE_BUFFER_BYTES, within SHUFFLE_BUFFER_RECORDS."""
    records = max(int(entry.get("num_records", 1)), 1)
    per_record = max(int(entry.get("num_bytes", 0)) // records, 1)
    low, high = SHUFFLE_BUFFER_RECORDS
    return min(records, high, max(low, SHUFFLE_BUFFER_BYTES // per_record))


def _read_buffer(entry: dict, compression: str, files) -> int:
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
    records = max(int(entry.get("num_records", 1)), 1)
    per_record = int(entry.get("num_bytes", 0)) // records
    local = all("://" not in str(f) for f in files)
    if not compression and local and per_record >= UNBUFFERED_MIN_RECORD_BYTES:
        return 0
    return READ_BUFFER_BYTES


def _cache(records: tf.data.Dataset, cache: str, pipeline: int, pipelines: int) -> tf.data.Dataset:
    if cache == "memory":
        return records.cache()
    path = os.fspath(cache)
    if pipelines > 1:
        path = f"{path}.pipeline-{pipeline}-of-{pipelines}"
    return records.cache(path)


def load(dataset_dir: str, split: str = "train", batch_size: int = 32, *, shuffle: bool = True,
         seed: Optional[int] = None, repeat: Union[bool, int] = False, drop_remainder: bool = False,
         output: str = "tuple", dtype=None, scale: Optional[float] = None,
         cache: Optional[str] = None, input_context=None, pad: bool = False,
         shuffle_buffer: Optional[int] = None, cycle_length: Optional[int] = None,
         deterministic: Optional[bool] = None, version=None) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches (a dict with ``output="dict"``).

    Images are ``[batch, height, width, channels]``, or ``[batch, depth, height,
    width, channels]`` for splits holding volumes, in their stored dtype
    (mixed-dtype splits: the smallest dtype holding all values exactly), unless
    ``dtype`` and/or ``scale`` ask for ``cast(images, dtype or float32) * scale``,
    done after batching. Shapes are static when all records share one. Labels are
    as dataset.json declares them (int64 class index, float, or multi-hot); -1
    (NaN for float labels) when unlabeled.

    - ``shuffle``: shard order reshuffled every epoch, records through a buffer of
      ``shuffle_buffer`` (default: as many as fit in 64 MiB, 2..10,000; the
      shards are already shuffled as a whole when written).
    - ``seed``: reproducible order (every epoch differs, every run repeats it).
      ``deterministic`` defaults to True with a seed or ``shuffle=False``, else
      False: parallel reads may then also reorder records, which is faster.
    - ``repeat``: True for endless epochs, or a number of epochs.
    - ``cache``: ``"memory"`` or a file path prefix; the first epoch reads the
      shards and fills the cache, later epochs read the cache only.
    - ``input_context``: a ``tf.distribute.InputContext``; this pipeline reads its
      part of the split only (by file, or by record when there are fewer shards
      than pipelines; see ``reader.sharding``). ``batch_size`` is this pipeline's
      batch size (``input_context.get_per_replica_batch_size(global_batch)``).
    - ``pad``: splits with several image sizes come back zero-padded to the largest
      image of each batch; without it they raise an error naming ``--resize``.
    - ``output="dict"``: every feature dataset.json declares, ``image`` in place of
      ``image_raw``; a feature a record lacks reads as ``b""``, -1 or NaN, and
      variable-length ones come back as ``tf.RaggedTensor``.
    - ``cycle_length``: shards read in parallel (default ``min(shards, 16)``).
    - ``version``: for a root written with ``convert --incremental``, the version
      to read (a number); default: the one its LATEST file names.

    The dataset's cardinality is the manifest's record count (or this pipeline's
    share of it), so Keras shows steps per epoch; a shard holding a different
    number of records than the manifest says fails the epoch.
    """
    if output not in ("tuple", "dict"):
        raise ValueError(f"output must be 'tuple' or 'dict', not {output!r}")
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    manifest: DatasetInfo = info(dataset_dir, version)
    entry = manifest.split(split)
    layout = manifest.layout(split)
    if not layout.batchable and batch_size > 1 and not pad:
        raise layout.variable_size_error(entry.get("shapes", []))
    conversion(layout.dtype, dtype, scale)        # argument errors now, not at iteration
    if deterministic is None:
        deterministic = seed is not None or not shuffle
    plan = manifest.read_plan(split, input_context)
    if plan.mode != ALL:
        logger.info(plan.describe(split, len(entry["shards"])))

    files = tf.data.Dataset.from_tensor_slices(tf.constant(plan.files, dtype=tf.string))
    if shuffle:
        files = files.shuffle(len(plan.files), seed=seed, reshuffle_each_iteration=True)
    compression = manifest.compression
    read_buffer = _read_buffer(entry, compression, plan.files)

    def read(path):
        records = tf.data.TFRecordDataset(path, compression_type=compression,
                                          buffer_size=read_buffer)
        return records.shard(plan.pipelines, plan.pipeline) if plan.mode == BY_RECORD else records

    cycle = max(1, min(cycle_length or MAX_CYCLE_LENGTH, len(plan.files)))
    records = files.interleave(read, cycle_length=cycle, block_length=1,
                               num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    records = records.apply(tf.data.experimental.assert_cardinality(plan.num_records))
    if cache:
        records = _cache(records, cache, plan.pipeline, plan.pipelines)
    if shuffle:
        buffer = shuffle_buffer or _shuffle_buffer(entry)
        records = records.shuffle(buffer, seed=None if seed is None else seed + 1,
                                  reshuffle_each_iteration=True)
    if repeat:
        records = records.repeat(None if repeat is True else int(repeat))
    batches = records.batch(batch_size, drop_remainder=drop_remainder)
    batches = batches.map(batch_parser(manifest, layout, output, dtype, scale),
                          num_parallel_calls=AUTOTUNE, deterministic=deterministic)

    options = tf.data.Options()
    options.deterministic = deterministic
    if input_context is not None:
        # Sharded here already: tf.distribute must not shard it a second time.
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batches.with_options(options).prefetch(AUTOTUNE)
