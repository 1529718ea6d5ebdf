"""The shard writer: records held to their plan, and shards that standard TFRecord readers read.

A record that decodes to another size than planned is refused.

Shard sizes are planned from headers (docs/CONVERTING.md, "Concepts", *Shard*); the fuzz oracle
(tests/transforms/records/test_fuzz.py) checks that written inputs decode to their probed shape,
and the writer itself refuses a record that does not, with a reason, instead
of writing a shard larger or smaller than planned.
"""
import dataclasses
import gzip
import hashlib
import os

import pytest
import tensorflow as tf

from dcm2tfrecord.dataset.shard_target import ShardTarget
from dcm2tfrecord.dataset.shard_writer import open_shard
from dcm2tfrecord.dataset.tfrecord import parse_index
from dcm2tfrecord.transforms.output.write import write_shard
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.record_model import ShardPlan, SourceFile
from tests.support import write_png_archive


def _probed(path: str):
    st = os.stat(path)
    return probe_file(SourceFile(path, os.path.basename(path), st.st_size, st.st_mtime))


def test_a_record_whose_decoded_size_differs_from_its_plan_is_refused(tmp_path):
    paths = write_png_archive(tmp_path / "a", count=3, height=40, width=30, seed=5)
    good, lying, small = (_probed(p) for p in paths)
    # what a header that lies looks like to the writer: a plan of 4000 rows for a 40-row image
    lying = dataclasses.replace(lying, spec=dataclasses.replace(lying.spec, height=4000))
    small = dataclasses.replace(small, spec=dataclasses.replace(small.spec, width=3))
    out = tmp_path / "out"
    os.makedirs(out)
    result, outcomes = write_shard(ShardPlan("train", 0, 1, (good, lying, small)), ShardTarget.of(str(out)))
    assert [(o.uri, o.status, o.reason) for o in outcomes] == [
        (paths[1], reasons.FAILED, reasons.DECODED_SIZE_MISMATCH),
        (paths[2], reasons.FAILED, reasons.DECODED_SIZE_MISMATCH)]
    assert "(1, 40, 30, 1)" in outcomes[0].message and "(1, 4000, 30, 1)" in outcomes[0].message
    shard = out / result.file
    assert result.num_records == 1 and result.num_bytes == os.path.getsize(shard)
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(shard))]
    assert len(records) == 1
    assert good.record_id.encode() in records[0]
    assert result.num_bytes <= good.planned_bytes


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_shards_are_standard_tfrecord_files_read_by_tf_data_and_beam(tmp_path, compression):
    """The format's framing codec (dataset/tfrecord.py) is the standard one: TensorFlow's and
    Beam's own TFRecord readers read back exactly what the writer was handed, and the .idx
    locates every record."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    records = [b"", b"x", os.urandom(300), os.urandom(70000)]
    name = "train-00000-of-00001.tfrecord" + (".gz" if compression == "gzip" else "")
    with open_shard(ShardTarget.of(str(tmp_path), compression), name) as shard:
        for record in records:
            shard.append(memoryview(record))
    path = str(tmp_path / name)
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == [name, name + ".idx"]
    assert (shard.num_records, shard.num_bytes) == (4, os.path.getsize(path))
    assert shard.sha256 == hashlib.sha256(open(path, "rb").read()).hexdigest()
    tf_compression = "GZIP" if compression == "gzip" else ""
    assert [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=tf_compression)] == records
    with beam.Pipeline() as pipeline:
        read = pipeline | beam.io.ReadFromTFRecord(path, coder=beam.coders.BytesCoder())
        assert_that(read, equal_to(records))
    stream = gzip.open(path).read() if compression == "gzip" else open(path, "rb").read()
    offsets, sizes = parse_index(open(path + ".idx").read())
    assert [stream[o + 12:o + s - 4] for o, s in zip(offsets.tolist(), sizes.tolist())] == records
    assert int(offsets[-1] + sizes[-1]) == len(stream)


def test_a_shard_that_fails_midway_leaves_no_file_under_its_name(tmp_path):
    with pytest.raises(RuntimeError):
        with open_shard(ShardTarget.of(str(tmp_path)), "train-00000-of-00001.tfrecord") as shard:
            shard.append(b"a record")
            raise RuntimeError("the source vanished")
    assert not [n for n in os.listdir(tmp_path) if not n.startswith(".")]
    assert os.listdir(tmp_path / ".incomplete") == []


@pytest.mark.parametrize("sizes", [[], [3], [70_000], [5, 200_000, 7], [100_000, 90_000], [1, 2, 3] * 20,
                                   [65_536, 65_537, 0, 10]])
def test_a_record_given_as_parts_frames_as_its_joined_bytes(sizes):
    """framed_segments(parts) is frame(joined parts) around the joined parts, whatever the
    parts; a large part is written as it is (a bytes part is not copied at all)."""
    import numpy as np
    from dcm2tfrecord.dataset.tfrecord import frame, framed_segments
    rng = np.random.default_rng(len(sizes) + sum(sizes))
    parts = []
    for i, size in enumerate(sizes):
        data = rng.integers(0, 256, size, dtype=np.uint8)
        parts.append(memoryview(data) if i % 2 else data.tobytes())
    joined = b"".join(bytes(p) for p in parts)
    head, tail = frame(joined)
    segments = framed_segments(parts)
    assert b"".join(segments) == head + joined + tail
    for part in parts:
        if isinstance(part, bytes) and len(part) > 65_536:
            assert any(segment is part for segment in segments)
    assert len(segments) <= 2 * len([s for s in sizes if s > 65_536]) + 2
