"""The run's one ShardTarget (dataset/shard_target.py): naming and streams from one value.

A target built from the settings names the shards (``file_name``, parsed back by ``parse``)
and opens their streams (``open_stream``, at its level) in the same container; the shard
writer and the converter's ``write_shard`` take it whole.
"""
from __future__ import annotations

import gzip
import io
import os
import pickle

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.file_adapters import ADAPTERS, DEFAULT_GZIP_LEVEL, GZIP, Compression
from dcm2tfrecord.dataset.shard_target import ShardTarget
from dcm2tfrecord.dataset.shard_writer import open_shard
from dcm2tfrecord.dataset.tfrecord import parse_index


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("tag", ["", "v0002"])
@pytest.mark.parametrize("split,index,count", [("train", 0, 1), ("val", 2, 3), ("fold_1.a=b+c-d", 12345, 99999)])
def test_a_name_the_target_builds_parses_back_to_the_same_shard(compression, tag, split, index, count):
    target = ShardTarget.of("/out", compression, tag)
    name = target.file_name(split, index, count)
    assert name.endswith(".tfrecord" + ADAPTERS[compression].suffix)
    assert name == names.shard_file_name(split, index, count, tag, compression)
    parsed = target.parse(name)
    assert parsed is not None
    assert (parsed.split, parsed.index, parsed.num_shards, parsed.compression, parsed.parent) == \
        (split, index, count, compression, "")
    assert names.version_tag(parsed.version) == tag
    assert parsed.file == name
    assert target.path(name) == "/out/" + name


def test_the_target_parses_only_the_names_it_writes():
    plain, gz, versioned = ShardTarget.of("/o"), ShardTarget.of("/o", "gzip"), ShardTarget.of("/o", tag="v0002")
    assert gz.parse("train-00000-of-00001.tfrecord") is None              # another container
    assert plain.parse("train-00000-of-00001.tfrecord.gz") is None
    assert plain.parse("train-v0002-00000-of-00001.tfrecord") is None    # another version
    assert versioned.parse("train-00000-of-00001.tfrecord") is None
    assert versioned.parse("train-v0003-00000-of-00001.tfrecord") is None
    assert versioned.parse("../0001/train-v0002-00000-of-00001.tfrecord") is None   # a reused shard
    assert plain.parse("dataset.json") is None and plain.parse("train-00000-of-00001.tfrecord.idx") is None
    assert versioned.parse("train-v0002-00000-of-00001.tfrecord").index == 0


def test_the_container_is_looked_up_once_when_the_target_is_made():
    target = ShardTarget.of("gs://bucket/out", "gzip", level=9)
    assert target.adapter is GZIP and target.compression == Compression.GZIP == "gzip"
    assert ShardTarget.of("/o").adapter is ADAPTERS["none"] and ShardTarget.of("/o", None).compression == "none"
    assert ShardTarget.of("/o", GZIP).adapter is GZIP
    assert target.path("x.tfrecord.gz") == "gs://bucket/out/x.tfrecord.gz"
    with pytest.raises(ValueError, match=r"compression 'zstd' is not a shard container this dcm2tfrecord "
                                         r"knows \(gzip, none\)"):
        ShardTarget.of("/o", "zstd")
    # it crosses to Beam's workers whole, as the write step's argument
    assert pickle.loads(pickle.dumps(target)) == target


def test_the_stream_is_the_targets_container_at_its_level():
    raw = io.BytesIO()
    assert ShardTarget.of("/o").open_stream(raw) is raw          # the plain container: the file itself
    members = {}
    for level in (1, 9, None):
        raw = io.BytesIO()
        stream = ShardTarget.of("/o", "gzip", level=level).open_stream(raw)
        stream.write(b"records " * 1000)
        stream.close()
        members[level] = raw.getvalue()
        assert gzip.decompress(members[level]) == b"records " * 1000
    # gzip's XFL byte (RFC 1952): 4 at level 1, 2 at level 9; None is the default level
    assert (members[1][8], members[9][8]) == (4, 2) and members[None] == members[DEFAULT_GZIP_LEVEL]


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_the_writer_names_and_contains_a_shard_through_one_target(tmp_path, compression):
    target = ShardTarget.of(str(tmp_path), compression, "v0001")
    name = target.file_name("train", 0, 1)
    with open_shard(target, name) as shard:
        for record in (b"one", b"two" * 50):
            shard.append(record)
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == [name, name + ".idx"]
    data = (tmp_path / name).read_bytes()
    stream = gzip.decompress(data) if compression == "gzip" else data
    offsets, sizes = parse_index((tmp_path / (name + ".idx")).read_text())
    assert [stream[o + 12:o + s - 4] for o, s in zip(offsets.tolist(), sizes.tolist())] == [b"one", b"two" * 50]
    assert target.parse(name).compression == compression


def test_the_run_builds_its_target_from_the_settings():
    from dcm2tfrecord.transforms.output.write import shard_target
    from dcm2tfrecord.transforms.settings import ConversionSettings, ShardBounds
    settings = ConversionSettings(("in/*",), "/out", ShardBounds.from_mb(1, 0.5, 2), compression="gzip",
                                  gzip_level=7)
    assert shard_target(settings, "v0003") == ShardTarget("/out", GZIP, "v0003", 7)
    assert shard_target(ConversionSettings(("in/*",), "/o", ShardBounds.from_mb(1, 0.5, 2))) == \
        ShardTarget("/o", ADAPTERS["none"], "", DEFAULT_GZIP_LEVEL)
