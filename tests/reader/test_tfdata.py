"""reader.load in training setups: Keras, tf.distribute input pipelines, order, gzip, cache.

Real conversions of a small two-class image archive into 14 shards of 3-4
records, plain and gzip.
"""
from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support import run_convert, write_png_archive
from tests.support.reader_datasets import RECORDS, SMALL_SHARDS, archive, gzipped, plain  # noqa: F401  (fixtures)

def _records(ds) -> list[tuple[str, bytes, int]]:
    """(id, pixels, label) per record, in the order the dataset yields them."""
    out = []
    for batch in ds:
        for rid, image, label in zip(batch["id"].numpy(), batch["image"].numpy(), batch["label"].numpy()):
            out.append((rid.decode(), image.tobytes(), int(label)))
    return out


def _ids(ds) -> list[str]:
    return [r[0] for r in _records(ds)]


def _shard_of(dataset_dir) -> dict:
    """record id -> index of the shard holding it, read straight from the files."""
    meta = reader.info(dataset_dir)
    out = {}
    for index, path in enumerate(meta.shard_paths("train")):
        for serialized in tf.data.TFRecordDataset(path, compression_type=meta.compression):
            example = tf.train.Example.FromString(serialized.numpy())
            out[example.features.feature["id"].bytes_list.value[0].decode()] = index
    return out


def test_info_is_the_manifest_plus_training_numbers(plain):
    meta = reader.info(plain)
    assert isinstance(meta, dict) and meta["counts"]["records"] == RECORDS
    assert meta.num_records("train") == RECORDS
    assert meta.steps_per_epoch("train", 10) == 5
    assert meta.steps_per_epoch("train", 10, drop_remainder=True) == 4
    assert meta.class_names == ["cat", "dog"]
    images, labels = meta.element_spec["train"]
    assert images == tf.TensorSpec([None, 8, 8, 3], tf.uint8)
    assert labels == tf.TensorSpec([None], tf.int64)
    with pytest.raises(ValueError, match="splits: train"):
        meta.num_records("validation")


def test_cardinality_comes_from_the_manifest(plain):
    assert reader.load(plain, batch_size=10).cardinality() == 5
    assert reader.load(plain, batch_size=10, drop_remainder=True).cardinality() == 4
    assert reader.load(plain, batch_size=10, repeat=3).cardinality() == 15
    assert reader.load(plain, batch_size=10, repeat=True).cardinality() == tf.data.INFINITE_CARDINALITY
    fixed = reader.load(plain, batch_size=10, drop_remainder=True)
    assert fixed.element_spec[0].shape.as_list() == [10, 8, 8, 3]


def test_keras_trains_one_epoch_and_reports_the_steps(plain, capsys):
    import keras

    meta = reader.info(plain)
    ds = reader.load(plain, batch_size=10, dtype="float32", scale=1 / 255)
    images, _ = ds.element_spec
    model = keras.Sequential([keras.Input(shape=images.shape[1:]), keras.layers.Flatten(),
                              keras.layers.Dense(len(meta.class_names))])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Steps(keras.callbacks.Callback):
        planned, done = None, 0

        def on_train_begin(self, logs=None):
            Steps.planned = self.params["steps"]

        def on_train_batch_end(self, batch, logs=None):
            Steps.done += 1

    history = model.fit(ds, epochs=1, verbose=2, shuffle=False, callbacks=[Steps()])
    assert Steps.planned == Steps.done == meta.steps_per_epoch("train", 10) == 5
    assert np.isfinite(history.history["loss"][0])
    assert "5/5" in capsys.readouterr().out          # the progress line shows the epoch's steps


@pytest.mark.parametrize("pipelines,mode", [(2, "file"), (3, "file"), (16, "record")])
def test_input_pipelines_see_disjoint_records_that_make_up_the_split(plain, caplog, pipelines, mode):
    meta = reader.info(plain)
    everything = sorted(_ids(reader.load(plain, batch_size=8, output="dict")))
    assert len(everything) == RECORDS
    seen = []
    for index in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                             num_replicas_in_sync=pipelines)
        with caplog.at_level(logging.INFO, logger="dcm2tfrecord.reader"):
            caplog.clear()
            ds = reader.load(plain, batch_size=2, output="dict", input_context=context)
        assert f"sharded by {mode}" in caplog.text
        assert f"input pipeline {index} of {pipelines}" in caplog.text
        ids = _ids(ds)
        assert len(ids) == meta.num_records("train", context)
        assert int(ds.cardinality()) == meta.steps_per_epoch("train", 2, input_context=context)
        seen.append(set(ids))
    for i in range(pipelines):
        for j in range(i + 1, pipelines):
            assert not seen[i] & seen[j]
    assert sorted(set().union(*seen)) == everything
    assert sum(len(s) for s in seen) == RECORDS


def test_seeded_runs_repeat_their_order(plain):
    def two_epochs(seed):
        ds = reader.load(plain, batch_size=5, seed=seed, output="dict")
        return _ids(ds), _ids(ds)

    first, again = two_epochs(7), two_epochs(7)
    assert first == again
    assert first[0] != first[1]                               # each epoch is shuffled anew
    assert sorted(first[0]) == sorted(first[1])
    assert two_epochs(8) != first


def test_unseeded_runs_read_shards_in_a_new_order_every_epoch(plain):
    assert reader.load(plain).options().deterministic is False    # parallel reads may reorder too
    shard_of = _shard_of(plain)
    # One shard at a time, in order, no record shuffle: the record order shows the shard
    # order (a non-deterministic interleave may hand out records of the next shard early).
    order_visible = dict(batch_size=4, output="dict", cycle_length=1, shuffle_buffer=1,
                         deterministic=True)
    ds = reader.load(plain, **order_visible)

    def shard_order(ids):
        order = [shard_of[i] for i in ids]
        runs = [s for k, s in enumerate(order) if k == 0 or order[k - 1] != s]
        assert sorted(runs) == list(range(14))               # every shard read once, whole
        return tuple(runs)

    epochs = [shard_order(_ids(ds)) for _ in range(3)]
    other_run = shard_order(_ids(reader.load(plain, **order_visible)))
    assert len(set(epochs + [other_run])) >= 3               # 14! orders: a repeat is ~1e-11


def test_gzip_and_plain_datasets_give_the_same_records(plain, gzipped):
    assert reader.info(gzipped).compression == "GZIP"
    assert all(p.endswith(".tfrecord.gz") for p in reader.info(gzipped).shard_paths())
    assert reader.info(plain).compression == ""
    from_plain = sorted(_records(reader.load(plain, batch_size=16, shuffle=False, output="dict")))
    from_gzip = sorted(_records(reader.load(gzipped, batch_size=16, shuffle=False, output="dict")))
    assert len(from_plain) == RECORDS
    assert from_plain == from_gzip


def _move_shards_away(dataset_dir, tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    for path in reader.info(dataset_dir).shard_paths():
        shutil.move(path, hidden / os.path.basename(path))


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_cache_serves_later_epochs_without_reading_shards(plain, tmp_path, kind):
    dataset = tmp_path / "dataset"
    shutil.copytree(plain, dataset)
    cache = "memory" if kind == "memory" else str(tmp_path / "cache" / "train")
    if kind == "file":
        os.makedirs(os.path.dirname(cache))
    ds = reader.load(str(dataset), batch_size=8, cache=cache, output="dict")
    first = _records(ds)
    _move_shards_away(str(dataset), tmp_path)
    second = _records(ds)
    assert sorted(first) == sorted(second) and len(second) == RECORDS
    assert first != second                                    # still reshuffled per epoch
    with pytest.raises(tf.errors.NotFoundError):               # the shards are really gone
        _records(reader.load(str(dataset), batch_size=8, output="dict"))
    if kind == "file":                                         # and the cache outlives the dataset object
        third = _records(reader.load(str(dataset), batch_size=8, cache=cache, output="dict"))
        assert sorted(third) == sorted(first)


def test_parse_fn_composes_with_a_hand_made_pipeline(plain):
    meta = reader.info(plain)
    ds = (tf.data.TFRecordDataset(meta.shard_paths("train")).batch(16)
          .map(reader.parse_fn(plain, dtype="float32", scale=1 / 255)))
    images, labels = next(iter(ds))
    assert images.shape == (16, 8, 8, 3) and images.dtype == tf.float32
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) <= 1.0
    stored = next(iter(tf.data.TFRecordDataset(meta.shard_paths("train")).batch(16)
                       .map(reader.parse_fn(plain))))[0]
    np.testing.assert_allclose(images.numpy(), stored.numpy() / np.float32(255), rtol=1e-6)
    assert set(labels.numpy()) <= {0, 1}


def test_scale_needs_a_float_dtype(plain):
    with pytest.raises(ValueError, match="floating"):
        reader.load(plain, dtype="int32", scale=2.0)
    with pytest.raises(ValueError, match="output"):
        reader.load(plain, output="list")


def test_read_buffer_is_off_only_for_large_local_uncompressed_records():
    from dcm2tfrecord.dataset.manifest import SplitEntry
    from dcm2tfrecord.reader.tfdata import READ_BUFFER_BYTES, _read_buffer
    large = SplitEntry(num_records=10, num_bytes=10 * 150_000)
    assert _read_buffer(large, "", ["/data/a.tfrecord", "/data/b.tfrecord"]) == 0
    assert _read_buffer(large, "GZIP", ["/data/a.tfrecord.gz"]) == READ_BUFFER_BYTES
    assert _read_buffer(large, "", ["gs://bucket/a.tfrecord"]) == READ_BUFFER_BYTES
    assert _read_buffer(SplitEntry(num_records=10, num_bytes=10 * 2_000), "",
                        ["/data/a.tfrecord"]) == READ_BUFFER_BYTES


def test_large_records_read_unbuffered_come_back_exact(tmp_path, monkeypatch):
    from PIL import Image

    import dcm2tfrecord.reader.tfdata  # noqa: F401 (binds reader.tfdata, used below)
    paths = write_png_archive(tmp_path / "archive", count=10, height=160, width=160, channels=3, seed=5)
    out = str(tmp_path / "dataset")
    run_convert(tmp_path / "archive", out, target_shard_mb=0.3, min_shard_mb=0.1, max_shard_mb=0.5)
    meta = reader.info(out)
    assert len(meta.shard_paths()) > 1
    assert reader.tfdata._read_buffer(meta.split_entry("train"), meta.compression, meta.shard_paths()) == 0
    expected = sorted(np.asarray(Image.open(p)).tobytes() for p in paths)

    def pixels(**kwargs):
        images = [im for batch, _ in reader.load(out, batch_size=4, **kwargs) for im in batch.numpy()]
        assert all(im.shape == (160, 160, 3) and im.dtype == np.uint8 for im in images)
        return sorted(im.tobytes() for im in images)

    assert pixels() == expected
    assert pixels(shuffle=False) == expected
    monkeypatch.setattr(reader.tfdata, "UNBUFFERED_MIN_RECORD_BYTES", 1 << 40)   # buffered reads
    assert pixels() == expected
