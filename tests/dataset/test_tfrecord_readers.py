"""The output reads identically through every standard TFRecord reader."""
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image

from dcm2tfrecord import reader
from tests.support import IN_MEMORY, run_convert, write_png_archive


@pytest.fixture(scope="module")
def gray_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("gray")
    write_png_archive(root / "archive", count=40, height=48, width=64, channels=1, seed=3)
    run_convert(root / "archive", root / "out", target_shard_mb=0.05, min_shard_mb=0.02,
                max_shard_mb=0.1)
    return str(root / "archive"), str(root / "out")


def _shards(dataset_dir):
    return [os.path.join(dataset_dir, s["file"])
            for s in reader.info(dataset_dir)["splits"]["train"]["shards"]]


def _raw_records(dataset_dir):
    return [r.numpy() for r in tf.data.TFRecordDataset(_shards(dataset_dir))]


def test_tfrecorddataset_and_beam_read_the_same_records(gray_dataset):
    _, out = gray_dataset
    via_tf = _raw_records(out)
    assert len(via_tf) == 40
    assert len(_shards(out)) > 1
    with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(IN_MEMORY)) as p:
        via_beam = p | beam.io.ReadFromTFRecord(os.path.join(out, "*.tfrecord"))
        assert_that(via_beam, equal_to(via_tf))


def test_classic_parse_single_example_reader(gray_dataset):
    archive, out = gray_dataset
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "height": tf.io.FixedLenFeature([], tf.int64),
            "width": tf.io.FixedLenFeature([], tf.int64),
            "channels": tf.io.FixedLenFeature([], tf.int64)}
    seen = 0
    references = {np.asarray(Image.open(os.path.join(archive, f))).tobytes()
                  for f in os.listdir(archive) if f.endswith(".png")}
    for serialized in _raw_records(out):
        ex = tf.io.parse_single_example(serialized, spec)
        image = tf.reshape(tf.io.decode_raw(ex["image_raw"], tf.uint8),
                           [ex["height"], ex["width"], ex["channels"]])
        assert image.shape == (48, 64, 1)
        assert int(ex["label"]) == -1
        assert image.numpy().tobytes() in references
        seen += 1
    assert seen == 40


def test_reader_fast_path_has_static_shapes_and_all_records(gray_dataset):
    _, out = gray_dataset
    ds = reader.load(out, batch_size=8, shuffle=True, seed=1)
    assert ds.element_spec[0].shape.as_list() == [None, 48, 64, 1]
    assert ds.element_spec[0].dtype == tf.uint8
    total = sum(int(images.shape[0]) for images, labels in ds)
    assert total == 40

    def order(seed):   # the images are all distinct, so their sequence is the record order
        return [image.tobytes() for images, _ in reader.load(out, batch_size=8, shuffle=True, seed=seed)
                for image in images.numpy()]
    first, again, other = order(5), order(5), order(6)
    assert len(set(first)) == 40
    assert first == again
    assert sorted(other) == sorted(first) and other != first


def test_reader_rejects_variable_shapes_with_a_clear_message(sample_dataset):
    with pytest.raises(ValueError, match="--resize"):
        reader.load(sample_dataset, batch_size=4)
    padded = reader.load(sample_dataset, batch_size=4, pad=True, shuffle=False, dtype="float64")
    images, labels = next(iter(padded))
    assert images.shape.rank == 5 and images.shape[0] == 4
