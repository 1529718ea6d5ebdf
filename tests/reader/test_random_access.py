"""reader.RandomAccess: records by index without TensorFlow, equal to reader.load's.

Real conversions: the every-dtype archive of reader/test_dtypes (volumes,
colour, int16/uint16/uint32/float32, pydicom's files, mixed sizes and dtypes),
the two-class archive of reader/test_tfdata (14 small shards, plain and
gzip), an --incremental root whose second version reuses shards of the first,
and a copy on the GCS emulator.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.example import KINDS, decode_example
from dcm2tfrecord.dataset.tfrecord import crc32c, masked_crc, parse_index
from tests.support import run_convert, write_png_archive
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.reader_datasets import converted  # noqa: F401  (fixture)
from tests.support.reader_datasets import _write_png_dataset
from tests.support.reader_datasets import archive, gzipped, plain  # noqa: F401  (fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _by_id_from_load(dataset_dir: str, split: str) -> dict:
    """id -> one record of reader.load(output="dict"), as NumPy values."""
    out = {}
    exact = reader.info(dataset_dir).layout(split).dtype     # explicit for mixed (float64) splits
    for batch in reader.load(dataset_dir, split=split, batch_size=1, shuffle=False, output="dict",
                             dtype=exact):
        record = {k: (v.to_list()[0] if isinstance(v, tf.RaggedTensor) else v.numpy()[0])
                  for k, v in batch.items()}
        out[record["id"]] = record
    return out


def _assert_same_record(got: dict, want: dict, where: str):
    assert sorted(got) == sorted(want), where
    for key, expected in want.items():
        value = got[key]
        if key == "image":
            assert value.dtype == expected.dtype and value.shape == expected.shape, (where, key)
            np.testing.assert_array_equal(value, expected, err_msg=f"{where} {key}")
        elif isinstance(expected, list):                       # ragged (variable length)
            np.testing.assert_allclose(np.asarray(value, np.float64), np.asarray(expected, np.float64),
                                       err_msg=f"{where} {key}")
        else:
            np.testing.assert_array_equal(np.asarray(value), np.asarray(expected), err_msg=f"{where} {key}")
            if not isinstance(expected, (bytes, np.bytes_)) and np.asarray(expected).dtype != object:
                assert np.asarray(value).dtype == np.asarray(expected).dtype, (where, key)


def test_every_split_and_dtype_equals_reader_load(converted):  # noqa: F811
    dataset, _ = converted
    splits = reader.info(dataset).split_names
    assert len(splits) >= 24 + 6
    for split in splits:
        records = reader.RandomAccess(dataset, split)
        want = _by_id_from_load(dataset, split)
        assert len(records) == len(want) == reader.info(dataset).num_records(split)
        got = {records[i]["id"]: records[i] for i in range(len(records))}
        assert sorted(got) == sorted(want), split
        for rid, record in want.items():
            _assert_same_record(got[rid], record, f"{split}/{rid!r}")
        if "volume" in split:
            assert got[rid]["image"].ndim == 4


def test_protobuf_parser_equals_tensorflow_on_every_record(converted):  # noqa: F811
    """Every feature of every record the converter wrote: ours vs tf.train.Example."""
    dataset, _ = converted
    meta = reader.info(dataset)
    seen = set()
    for split in meta.split_names:
        for path in meta.shard_paths(split):
            for serialized in tf.data.TFRecordDataset(path):
                raw = serialized.numpy()
                ours = decode_example(raw)
                theirs = tf.train.Example.FromString(raw).features.feature
                assert sorted(ours) == sorted(theirs)
                for name, feature in theirs.items():
                    kind = feature.WhichOneof("kind")
                    assert ours[name] == (KINDS[kind], getattr(feature, kind).value), name
                    seen.add((name, kind))
    kinds = {kind for _, kind in seen}
    assert kinds == {"bytes_list", "int64_list", "float_list"}
    assert {"image_raw", "label", "id", "depth", "height", "width", "channels", "dtype"} <= {n for n, _ in seen}


def test_png_encoded_records_decode_like_reader_load(tmp_path):
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 65535, (6, 5, 1), dtype=np.uint16) for _ in range(4)]
    _write_png_dataset(tmp_path / "png16", images)
    records = reader.RandomAccess(str(tmp_path / "png16"))
    for i, image in enumerate(images):
        assert records[i]["image"].dtype == np.uint16
        np.testing.assert_array_equal(records[i]["image"], image)
        assert records[i]["label"] == i


def test_indexing_follows_the_manifest_order_and_sequence_protocol(plain):  # noqa: F811
    records = reader.RandomAccess(plain)
    meta = reader.info(plain)
    in_files = [tf.train.Example.FromString(s.numpy()).features.feature["id"].bytes_list.value[0]
                for path in meta.shard_paths() for s in tf.data.TFRecordDataset(path)]
    assert [records[i]["id"] for i in range(len(records))] == in_files
    assert records[-1]["id"] == in_files[-1] and records[np.int64(3)]["id"] == in_files[3]
    with pytest.raises(IndexError):
        records[len(records)]
    assert [r["id"] for r in records] == in_files          # iteration stops at IndexError
    assert records[0]["image"].flags.writeable and records[0]["image"].shape == (8, 8, 3)
    assert records.layout.dtype == "uint8" and records[0]["label"].dtype == np.int64


def test_pickles_without_open_files_and_reads_in_forked_and_spawned_workers(plain):  # noqa: F811
    """What a torch DataLoader (fork) or Grain (spawn) does with a map-style dataset."""
    import multiprocessing
    records = reader.RandomAccess(plain)
    first = records[5]
    clone = pickle.loads(pickle.dumps(records))
    np.testing.assert_array_equal(clone[5]["image"], first["image"])
    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            ids = pool.map(_id_of, [(records, i) for i in range(len(records))])
        assert ids == [records[i]["id"] for i in range(len(records))], method


def _id_of(args):
    records, i = args
    return records[i]["id"]


def _flip_byte(path: str, offset: int):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def test_a_corrupt_record_raises_an_error_naming_shard_and_index(plain, tmp_path):  # noqa: F811
    copy = str(tmp_path / "dataset")
    shutil.copytree(plain, copy)
    records = reader.RandomAccess(copy)
    i = next(i for i in range(len(records)) if records.locate(i)[1] == 1 and records.locate(i + 1)[1] == 2)
    shard, k = records.locate(i)
    path = reader.info(copy).shard_paths()[shard]
    offsets, sizes = parse_index(open(path + ".idx").read())
    _flip_byte(path, int(offsets[k]) + int(sizes[k]) // 2)          # inside the data
    fresh = reader.RandomAccess(copy)
    name = os.path.basename(path)
    with pytest.raises(reader.CorruptRecordError, match=rf"{name}: record {k}: data checksum"):
        fresh[i]
    fresh[i - 1], fresh[i + 1]                                     # neighbours are fine
    _flip_byte(path, int(offsets[k - 1]) + 2)                        # inside a length field
    with pytest.raises(reader.CorruptRecordError, match=rf"{name}: record {k - 1}"):
        reader.RandomAccess(copy)[i - 1]


def test_gzip_shards_are_refused_with_the_reason(gzipped):  # noqa: F811
    with pytest.raises(ValueError, match="gzip.*uncompressed stream.*--compression none"):
        reader.RandomAccess(gzipped)


def _crc32c_python(data) -> int:
    """CRC-32C bit by bit (RFC 3720 B.4): the reference google-crc32c is held to."""
    crc = 0xFFFFFFFF
    for byte in bytes(data):
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def test_crc32c_matches_the_pure_python_reference_and_tensorflow_framing(plain):  # noqa: F811
    assert crc32c(b"123456789") == _crc32c_python(b"123456789") == 0xE3069283   # RFC 3720 check value
    data = os.urandom(1000)
    assert crc32c(data) == _crc32c_python(data)
    path = reader.info(plain).shard_paths()[0]
    blob = open(path, "rb").read()
    length = int.from_bytes(blob[:8], "little")
    assert masked_crc(blob[:8]) == int.from_bytes(blob[8:12], "little")
    assert masked_crc(blob[12:12 + length]) == int.from_bytes(blob[12 + length:16 + length], "little")


def test_versioned_root_reads_latest_and_reused_shards(tmp_path):
    archive, root = tmp_path / "archive", str(tmp_path / "root")
    write_png_archive(archive / "a", 6, 8, 8, seed=1)
    options = dict(incremental=True, labels_from_dirs=True, target_shard_mb=0.001,
                   min_shard_mb=0.0005, max_shard_mb=0.002)
    run_convert(archive, root, **options)
    write_png_archive(archive / "b", 3, 8, 8, seed=2)
    run_convert(archive, root, **options)
    manifest = json.load(open(os.path.join(root, "versions", "0002", "dataset.json")))
    assert any(s["file"].startswith("../0001/") for s in manifest["splits"]["train"]["shards"])
    for version in (None, 1):
        records = reader.RandomAccess(root, version=version)
        want = _by_id_from_load_version(root, version)
        assert len(records) == len(want) == (9 if version is None else 6)
        for i in range(len(records)):
            _assert_same_record(records[i], want[records[i]["id"]], f"v{version} {i}")


def _by_id_from_load_version(root, version):
    out = {}
    for batch in reader.load(root, batch_size=1, shuffle=False, output="dict", version=version):
        record = {k: v.numpy()[0] for k, v in batch.items()}
        out[record["id"]] = record
    return out


def test_gs_paths_read_the_same_records(plain, gcs_emulator):  # noqa: F811
    gcs_emulator.upload_tree(plain, "random_access/dataset")
    remote = reader.RandomAccess(gcs_emulator.url("random_access/dataset"))
    local = reader.RandomAccess(plain)
    assert len(remote) == len(local)
    for i in (0, 17, len(local) - 1):
        _assert_same_record(remote[i], local[i], f"gs {i}")


BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "apache_beam", "keras") or \
                name.startswith(("dcm2tfrecord.pipeline", "dcm2tfrecord.transforms")):
            raise ImportError(f"blocked: {name}")
sys.meta_path.insert(0, _Block())
"""


def test_random_access_imports_neither_tensorflow_nor_beam(plain):  # noqa: F811
    script = BLOCKER + textwrap.dedent(f"""
        from dcm2tfrecord import reader
        records = reader.RandomAccess({plain!r}, "train")
        first = records[0]
        print("records", len(records), first["image"].shape, first["image"].dtype)
        print("loaded", sorted(m for m in sys.modules
                               if m.split(".")[0] in ("tensorflow", "apache_beam", "keras")))
        try:
            reader.load
        except ImportError as error:
            print("load needs", error)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO, timeout=120, env=dict(os.environ, PYTHONPATH=REPO))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "records 48 (8, 8, 3) uint8" in result.stdout
    assert "loaded []" in result.stdout
    assert "load needs blocked: tensorflow" in result.stdout


def _grain_loader(records, seed, workers):
    import grain.python as grain
    sampler = grain.IndexSampler(len(records), shard_options=grain.NoSharding(), shuffle=True,
                                 num_epochs=2, seed=seed)
    return grain.DataLoader(data_source=records, sampler=sampler, worker_count=workers,
                            operations=[grain.Batch(5, drop_remainder=False)])


def _batch_ids(batch) -> list:
    return [bytes(x) for x in batch["id"]]


def test_grain_shuffles_globally_and_resumes_exactly_from_a_checkpoint(plain):  # noqa: F811
    records = reader.RandomAccess(plain)
    full = [_batch_ids(b) for b in _grain_loader(records, seed=7, workers=0)]
    flat = [i for b in full for i in b]
    assert len(flat) == 2 * len(records)
    epoch1, epoch2 = flat[:len(records)], flat[len(records):]
    assert sorted(epoch1) == sorted(epoch2) == sorted(records[i]["id"] for i in range(len(records)))
    assert epoch1 != epoch2 and epoch1 != [records[i]["id"] for i in range(len(records))]

    iterator = iter(_grain_loader(records, seed=7, workers=0))
    for _ in range(7):                                   # past the first epoch's end
        next(iterator)
    state = iterator.get_state()                         # what a checkpoint stores (bytes)
    resumed = iter(_grain_loader(reader.RandomAccess(plain), seed=7, workers=0))
    resumed.set_state(state)
    assert [_batch_ids(b) for b in resumed] == full[7:]


def test_grain_multiprocess_loader_reads_every_record_and_resumes(plain):  # noqa: F811
    """Two worker processes (each gets the pickled source): every record once per epoch,
    and a checkpoint taken mid-run resumes exactly, workers included."""
    records = reader.RandomAccess(plain)
    multi = [_batch_ids(b) for b in _grain_loader(records, seed=3, workers=2)]
    flat = sorted(i for b in multi for i in b)
    assert flat == sorted(2 * [records[i]["id"] for i in range(len(records))])
    iterator = iter(_grain_loader(records, seed=3, workers=2))
    for _ in range(6):
        next(iterator)
    state = iterator.get_state()
    del iterator
    resumed = iter(_grain_loader(records, seed=3, workers=2))
    resumed.set_state(state)
    assert [_batch_ids(b) for b in resumed] == multi[6:]
