"""One seam per shard container: dataset/file_adapters.py.

The registry holds ``none`` and ``gzip``, keyed by the ``--compression``
values; shard names, the shard writer, ``verify``, ``reader.load`` and
``RandomAccess`` all dispatch through it. A container registered in a test
(zlib, which tf.data reads as ``ZLIB``) is named, written, verified and read
with no other code changed, and no product module but the adapters' spells a
container.
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import shutil
import zlib
from typing import BinaryIO

import numpy as np
import pytest

from dcm2tfrecord.dataset import file_adapters, names
from dcm2tfrecord.dataset.file_adapters import ADAPTERS, FileAdapter
from dcm2tfrecord.dataset.shard_target import ShardTarget
from dcm2tfrecord.dataset.shard_writer import open_shard
from dcm2tfrecord.dataset.tfds_metadata import NAMES as TFDS_NAMES
from dcm2tfrecord.dataset.tfrecord import read_records
from tests.support import run_convert, write_png_archive
from tests.support.source import string_literals

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_registry_holds_the_compression_values_and_their_suffixes():
    assert ADAPTERS["none"].suffix == "" and ADAPTERS["gzip"].suffix == ".gz"
    assert {"none", "gzip"} <= set(ADAPTERS)
    assert ADAPTERS["none"].tf_compression_type == "" and ADAPTERS["gzip"].tf_compression_type == "GZIP"
    assert ADAPTERS["none"].random_access and not ADAPTERS["gzip"].random_access
    assert names.shard_file_name("train", 0, 1) == "train-00000-of-00001.tfrecord"
    assert names.shard_file_name("train", 0, 1, "", "gzip") == "train-00000-of-00001.tfrecord.gz"
    assert names.shard_file_name("val", 2, 3, "v0002", "gzip") == "val-v0002-00002-of-00003.tfrecord.gz"
    assert names.parse_shard_name("train-00000-of-00001.tfrecord.gz").compression == "gzip"
    assert names.parse_shard_name("train-00000-of-00001.tfrecord").compression == "none"
    assert names.parse_shard_name("train-00000-of-00001.tfrecord.zz") is None     # not registered
    with pytest.raises(ValueError, match="compression 'zstd' is not a shard container"):
        names.shard_file_name("train", 0, 1, "", "zstd")


@pytest.mark.parametrize("files,options,expected", [
    (["a.tfrecord"], {"compression": "none"}, "none"), (["a.tfrecord.gz"], {"compression": "gzip"}, "gzip"),
    (["a.tfrecord.gz", "b.tfrecord.gz"], None, "gzip"), (["a.tfrecord.gz", "b.tfrecord"], None, "none"),
    ([], {"compression": "gzip"}, "gzip"), ([], None, "none")])
def test_a_datasets_container_comes_from_its_options_else_its_shard_names(files, options, expected):
    assert file_adapters.of_dataset(options, files).name == expected


# ---------------------------------------------------------------- a container added in a test


class _ZlibWriter:
    """A zlib stream onto ``raw``; ``close`` finishes it and leaves ``raw`` open."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.compressor = raw, zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS)

    def write(self, data) -> int:
        self.raw.write(self.compressor.compress(bytes(data)))
        return len(data)

    def close(self) -> None:
        self.raw.write(self.compressor.flush())


class _ZlibReader:
    """The records of a zlib stream (inflated whole at the first read: a test's shards are small)."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.stream = raw, None

    def read(self, n: int = -1) -> bytes:
        if self.stream is None:
            import io
            self.stream = io.BytesIO(zlib.decompress(self.raw.read()))
        return self.stream.read(n)


@dataclasses.dataclass(frozen=True)
class ZlibAdapter(FileAdapter):
    def open_writer(self, raw: BinaryIO, level=None) -> BinaryIO:
        return _ZlibWriter(raw)  # type: ignore[return-value]

    def open_reader(self, raw: BinaryIO) -> BinaryIO:
        return _ZlibReader(raw)  # type: ignore[return-value]

    @property
    def stream_errors(self) -> tuple[type[BaseException], ...]:
        return (zlib.error,)


ZLIB = ZlibAdapter(name="zlib", suffix=".zz", tf_compression_type="ZLIB", random_access=False,
                   random_access_refusal="holds zlib shards, which RandomAccess cannot enter at an offset")


@pytest.fixture
def zlib_adapter():
    file_adapters.register(ZLIB)
    yield ZLIB
    del ADAPTERS[ZLIB.name]


def test_the_shard_writer_writes_through_a_registered_adapter(zlib_adapter, tmp_path):
    assert names.shard_file_name("train", 0, 1, "", "zlib") == "train-00000-of-00001.tfrecord.zz"
    target = ShardTarget.of(str(tmp_path), "zlib")
    assert target.adapter is zlib_adapter
    name = target.file_name("train", 0, 1)
    assert name == "train-00000-of-00001.tfrecord.zz"
    assert names.parse_shard_name(name).compression == "zlib" and target.parse(name).index == 0
    with open_shard(target, name) as shard:
        for payload in (b"one", b"two" * 100):
            shard.append(payload)
    with open(tmp_path / name, "rb") as handle:
        data = handle.read()
    assert shard.num_bytes == len(data) and shard.sha256 == hashlib.sha256(data).hexdigest()
    import io
    records = [bytes(r.data) for r in read_records(zlib_adapter.open_reader(io.BytesIO(data)))]
    assert records == [b"one", b"two" * 100]
    assert (tmp_path / (name + ".idx")).read_text() == "0 19\n19 316\n"


def test_the_converters_writer_writes_a_registered_container_through_its_target(zlib_adapter, tmp_path):
    """write_shard (transforms/output/write.py), unchanged, names and writes a shard in a container
    registered in this test, from the one target it is handed."""
    import io
    from dcm2tfrecord.transforms.output.write import write_shard
    from dcm2tfrecord.transforms.records.probe import probe_file
    from dcm2tfrecord.transforms.record_model import ShardPlan, SourceFile
    paths = write_png_archive(tmp_path / "archive", 3, 8, 8, channels=1)
    probed = tuple(probe_file(SourceFile(p, os.path.basename(p), os.path.getsize(p), os.path.getmtime(p)))
                   for p in paths)
    out = tmp_path / "out"
    os.makedirs(out)
    result, outcomes = write_shard(ShardPlan("train", 1, 2, probed), ShardTarget.of(str(out), "zlib", "v0004"))
    assert outcomes == [] and result.file == "train-v0004-00001-of-00002.tfrecord.zz"
    data = (out / result.file).read_bytes()
    records = list(read_records(zlib_adapter.open_reader(io.BytesIO(data))))
    assert len(records) == result.num_records == 3
    assert result.sha256 == hashlib.sha256(data).hexdigest() and result.num_bytes == len(data)
    assert (out / (result.file + ".idx")).exists()


@pytest.fixture(scope="module")
def plain_dataset(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("adapters")
    write_png_archive(root / "archive", 12, 8, 8, channels=1)
    out = str(root / "dataset")
    run_convert(root / "archive", out, target_shard_mb=0.001, min_shard_mb=0.0005)
    return out


def _as_zlib(plain: str, target: str) -> str:
    """The plain dataset re-contained: each shard as a zlib stream (.tfrecord.zz), the same
    .idx (offsets address the uncompressed stream), dataset.json updated to match."""
    import io
    shutil.copytree(plain, target)
    with open(os.path.join(target, "dataset.json")) as handle:
        manifest = json.load(handle)
    manifest["options"]["compression"] = "zlib"
    for entry in manifest["splits"].values():
        entry["num_bytes"] = 0
        for shard in entry["shards"]:
            old, new = shard["file"], shard["file"] + ZLIB.suffix
            raw = io.BytesIO()
            writer = ZLIB.open_writer(raw)
            with open(os.path.join(target, old), "rb") as handle:
                writer.write(handle.read())
            writer.close()
            data = raw.getvalue()
            with open(os.path.join(target, new), "wb") as handle:
                handle.write(data)
            os.rename(os.path.join(target, shard["index_file"]), os.path.join(target, new + ".idx"))
            os.remove(os.path.join(target, old))
            shard.update(file=new, index_file=new + ".idx", num_bytes=len(data),
                         sha256=hashlib.sha256(data).hexdigest())
            entry["num_bytes"] += len(data)
    with open(os.path.join(target, "dataset.json"), "w") as handle:
        json.dump(manifest, handle)
    for name in TFDS_NAMES:         # TFDS's metadata described the plain shards just replaced
        if os.path.exists(os.path.join(target, name)):
            os.remove(os.path.join(target, name))
    return target


def test_verify_and_the_readers_pick_up_a_registered_adapter(zlib_adapter, plain_dataset, tmp_path):
    from dcm2tfrecord import reader
    from dcm2tfrecord.dataset.verify import verify_dataset
    from dcm2tfrecord.reader.random_access import RandomAccess
    zipped = _as_zlib(plain_dataset, str(tmp_path / "zlib"))
    assert verify_dataset(plain_dataset).ok
    report = verify_dataset(zipped)
    assert report.ok, report.problems
    assert report.shards > 1 and report.records == 12
    info = reader.info(zipped)
    assert info.adapter is ZLIB and info.compression == "ZLIB"

    def images(directory):
        return sorted(im.tobytes() for batch, _ in reader.load(directory, batch_size=5, shuffle=False)
                      for im in batch.numpy())
    assert images(zipped) == images(plain_dataset)
    with pytest.raises(ValueError, match="holds zlib shards, which RandomAccess cannot enter at an offset"):
        RandomAccess(zipped)
    assert np.array_equal(RandomAccess(plain_dataset)[0]["image"].shape, (8, 8, 1))


def test_a_damaged_stream_is_named_with_its_container(zlib_adapter, plain_dataset, tmp_path):
    from dcm2tfrecord.dataset.verify import verify_dataset
    zipped = _as_zlib(plain_dataset, str(tmp_path / "zlib"))
    shard = sorted(glob.glob(os.path.join(zipped, "*.tfrecord.zz")))[0]
    with open(shard, "r+b") as handle:
        handle.truncate(os.path.getsize(shard) // 2)
    messages = [str(p) for p in verify_dataset(zipped).problems]
    assert any("zlib stream is corrupt" in m for m in messages), messages


def test_random_access_refuses_gzip_through_its_adapter(tmp_path):
    from dcm2tfrecord.reader.random_access import RandomAccess
    write_png_archive(tmp_path / "archive", 3, 8, 8)
    out = str(tmp_path / "gz")
    run_convert(tmp_path / "archive", out, compression="gzip")
    with pytest.raises(ValueError, match=f"^{out} holds gzip shards, which RandomAccess cannot read: their "
                                         r"\.idx offsets address the uncompressed stream"):
        RandomAccess(out)


# ---------------------------------------------------------------- no container spelled elsewhere


# The --compression option's help (pipeline/options/table.py) and its enum (pipeline/options/choices.py,
# checked against ADAPTERS when it loads), and the sample archive's list of non-DICOM input
# extensions (".gz" inputs, not shards) name gzip for other reasons.
ALLOWED = {os.path.join("dataset", "file_adapters.py"), os.path.join("pipeline", "options", "table.py"),
           os.path.join("pipeline", "options", "choices.py"),
           os.path.join("pipeline", "commands", "sample_archive.py"),
           # NIfTI inputs (.nii.gz): an input format's own compression, not a shard container
           os.path.join("transforms", "nifti", "read.py")}


def test_no_product_module_but_the_adapters_spells_a_container():
    stray = []
    for package in ("dataset", "reader", "pipeline", "transforms"):
        for path in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True):
            rel = os.path.relpath(path, ROOT)
            if rel in ALLOWED:
                continue
            stray += [f"{rel}:{line} {value!r}" for line, value in string_literals(path)
                      if "gzip" in value.lower() or ".gz" in value or "zlib" in value.lower()]
    assert not stray, f"containers named outside dataset/file_adapters.py: {stray}"
    for path in glob.glob(os.path.join(ROOT, "*", "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel.split(os.sep)[0] in ("dataset", "reader", "pipeline", "transforms") and rel not in ALLOWED:
            with open(path) as handle:
                text = handle.read()
            assert "import gzip" not in text and "GzipFile" not in text, rel


def test_the_compression_choices_are_the_adapters():
    """--compression's enum is checked against the registry when it loads: an adapter added
    without its choice (or a choice without its adapter) fails at import, not in a run."""
    from dcm2tfrecord.pipeline.options.choices import Compression, values
    assert Compression is file_adapters.Compression          # defined beside the adapters
    assert values(Compression) == tuple(file_adapters.ADAPTERS)


# ---------------------------------------------------------------- gzip's level (issue 36)


def _gzip_shard(tmp_path, level, records):
    from dcm2tfrecord.dataset.shard_writer import open_shard
    out = tmp_path / f"level{level}"
    with open_shard(ShardTarget.of(str(out), "gzip", level=level), "train-00000-of-00001.tfrecord.gz") as shard:
        for record in records:
            shard.append(record)
    return (out / "train-00000-of-00001.tfrecord.gz").read_bytes()


def test_gzip_level_is_applied_and_every_level_is_standard_gzip_of_the_same_stream(tmp_path):
    """--gzip_level reaches the compressor (the member's XFL byte: 4 at level 1, 2 at 9, 0
    between, RFC 1952), each level's shard is standard gzip of one record stream, and higher
    levels are no larger; None is the default level, 1."""
    import gzip as gzip_module

    import tensorflow as tf
    from dcm2tfrecord.dataset.file_adapters import DEFAULT_GZIP_LEVEL, GZIP
    rng = np.random.default_rng(0)
    records = [(rng.integers(0, 64, size=20000, dtype=np.int16)).tobytes() for _ in range(4)]
    shards = {level: _gzip_shard(tmp_path, level, records) for level in (1, 3, 6, 9)}
    assert {level: data[8] for level, data in shards.items()} == {1: 4, 3: 0, 6: 0, 9: 2}
    streams = {gzip_module.decompress(data) for data in shards.values()}
    assert len(streams) == 1
    assert len(shards[9]) <= len(shards[6]) <= len(shards[3]) <= len(shards[1])
    for level in (1, 9):
        path = str(tmp_path / f"level{level}" / "train-00000-of-00001.tfrecord.gz")
        assert [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type="GZIP")] == records
    assert _gzip_shard(tmp_path / "none", None, records) == shards[DEFAULT_GZIP_LEVEL]
    with pytest.raises(ValueError, match="gzip level 0"):
        GZIP.open_writer(open(os.devnull, "wb"), 0)
