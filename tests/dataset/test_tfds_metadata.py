"""TFDS's metadata beside dataset.json (dataset/tfds_metadata.py), read by TFDS itself.

Every dataset here is a real conversion, opened with ``tfds.builder_from_directory(dir)`` and
read with ``as_dataset(split=..., shuffle_files=False)``, record by record against
``reader.RandomAccess`` (the same order: shards in manifest order, records in file order):
pixels and their shape, label and class names, id, every ``dicom/*`` feature. Datasets TFDS cannot
read (gzip shards, a version mixing shards of two versions) get no TFDS files, and ``verify``
checks the files that are there.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow_datasets as tfds

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.names import TFDS_FEATURES_NAME, TFDS_INFO_NAME, tfds_labels_name
from dcm2tfrecord.dataset.tfds_metadata import NAMES
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import mask_datasets, rid, run_convert, write_png_archive
from tests.support.reader_datasets import SMALL_SHARDS, archive, gzipped, plain  # noqa: F401  (fixtures)


# TFDS interleaves 16 shards 16 records at a time unless told to read them one after the other
IN_ORDER = tfds.ReadConfig(interleave_cycle_length=1)


def _pixels_equal(got, want: np.ndarray, stored_dtype: str) -> None:
    """TFDS's image_raw against RandomAccess's image: the same array, or (several shapes) the same
    values flat, or (several dtypes) the stored bytes."""
    if isinstance(got, bytes):
        assert got == want.astype(stored_dtype).tobytes()
        return
    assert got.dtype == want.dtype
    if got.ndim == 1 and want.ndim > 1:
        np.testing.assert_array_equal(got, want.reshape(-1))
    else:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def _leaf(example: dict, key: str):
    for part in key.split("/"):
        example = example[part]
    return example


def assert_tfds_reads_as_random_access(dataset_dir: str, split: str, masks: bool = False) -> int:
    """Every record TFDS reads of ``split`` equals RandomAccess's record at the same position."""
    builder = tfds.builder_from_directory(dataset_dir)
    records = reader.RandomAccess(dataset_dir, split)
    count = 0
    for i, example in enumerate(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False,
                                                                 read_config=IN_ORDER))):
        want = records[i]
        where = f"{split}[{i}]"
        _pixels_equal(example["image_raw"], want["image"], want["dtype"].decode())
        if masks:
            _pixels_equal(example["mask_raw"], want["mask"], want["mask_dtype"].decode())
        for key, value in want.items():
            if key in ("image", "mask"):
                continue
            got = _leaf(example, key)
            if isinstance(value, bytes):
                assert got == value, (where, key)
            elif np.ndim(value) == 0 and value == -1 and key.startswith("dicom/"):
                # absent from this record (a PNG's): TFDS gives its default for an optional int64
                assert got in (-1, np.iinfo(np.int64).min), (where, key, got)
            else:
                np.testing.assert_array_equal(np.asarray(got), np.asarray(value), err_msg=f"{where} {key}")
        count += 1
    assert count == len(records) == builder.info.splits[split].num_examples
    return count


def test_tfds_reads_every_record_of_dicom_and_images_of_several_dtypes_and_shapes(sample_dataset):
    """The sample archive: CT, MR, colour DICOM and PNG/JPEG, of several dtypes and shapes, PNG records
    without dicom/* features: pixels as their raw bytes, every other feature as RandomAccess reads it."""
    builder = tfds.builder_from_directory(sample_dataset)
    manifest = reader.info(sample_dataset)
    assert sorted(builder.info.splits) == sorted(manifest["splits"])
    features = builder.info.features
    assert features["dicom"]["modality"].dtype == np.object_
    assert features["dicom"]["image_position_patient"].shape == (None,)
    assert "Image Position" in features["dicom"]["image_position_patient"].doc.desc
    total = sum(assert_tfds_reads_as_random_access(sample_dataset, split) for split in builder.info.splits)
    assert total == manifest["counts"]["records"]
    assert verify_dataset(sample_dataset).ok


def test_class_names_supervised_keys_and_split_slices(plain):  # noqa: F811
    """Two classes from folder names, 8x8 RGB in 14 small shards: a ClassLabel with the names, a
    static (8, 8, 3) uint8 image, as_supervised, and TFDS's own slices hold the records ours do."""
    builder = tfds.builder_from_directory(plain)
    info = reader.info(plain)
    assert builder.info.features["label"].names == info.class_names == ["cat", "dog"]
    assert builder.info.features["image_raw"].shape == (8, 8, 3)
    assert builder.info.supervised_keys == ("image_raw", "label")
    assert [s.shard_lengths for s in builder.info.splits.values()] == \
        [info.manifest.splits[name].shard_records for name in builder.info.splits]
    assert_tfds_reads_as_random_access(plain, "train")
    images, labels = next(iter(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True, batch_size=48,
                                                                  shuffle_files=False, read_config=IN_ORDER))))
    records = reader.RandomAccess(plain, "train")
    assert images.shape == (len(records), 8, 8, 3)
    np.testing.assert_array_equal(labels, [records[i]["label"] for i in range(len(records))])
    for spec in ("train[:25%]", "train[-5:]", "train[10:20]+train[:3]"):
        ours = reader.RandomAccess(plain, spec)
        theirs = list(tfds.as_numpy(builder.as_dataset(split=spec, shuffle_files=False, read_config=IN_ORDER)))
        assert [t["id"] for t in theirs] == [ours[i]["id"] for i in range(len(ours))], spec


def test_gzip_shards_get_no_tfds_files_and_verify_says_why(gzipped):  # noqa: F811
    assert not any(os.path.exists(os.path.join(gzipped, name)) for name in NAMES)
    report = verify_dataset(gzipped)
    assert report.ok and any("TFDS reads TFRecord shards uncompressed only" in n for n in report.notes)


@pytest.mark.parametrize("layout, depths, image_shape", [
    ("label_map", [4, 4, 4], (4, 32, 32, 1)),      # one shape: static
    ("binary", [3, 4, 4], (None, 32, 32, 1)),      # depths vary: one unknown dimension
])
def test_volumes_with_masks(tmp_path, layout, depths, image_shape):
    """--unit series --class_map: volumes and their masks, shaped as RandomAccess shapes them."""
    archive_dir = tmp_path / "in"
    for number, depth in enumerate(depths):
        mask_datasets.annotated_series(archive_dir, number, depth=depth)
    out = str(tmp_path / "out")
    run_convert(archive_dir, out, class_map=mask_datasets.class_map(tmp_path), unit="series",
                mask_layout=layout, target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)
    features = tfds.builder_from_directory(out).info.features
    assert features["image_raw"].shape == image_shape
    channels = 1 if layout == "label_map" else len(mask_datasets.CLASSES)
    assert features["mask_raw"].shape == image_shape[:3] + (channels,)
    assert features["mask_raw"].dtype == np.uint8
    assert assert_tfds_reads_as_random_access(out, "train", masks=True) == len(depths)


def _tfds_files(directory) -> list[str]:
    return sorted(n for n in NAMES if os.path.exists(os.path.join(directory, n)))


def test_incremental_versions(tmp_path):
    """Version 1 is read by TFDS; a version that reuses every shard names them ../0001/ (with 0 records
    for a shard it no longer holds); one that mixes reused and new shards has no TFDS files, as TFDS
    names a split's shards with one template."""
    archive_dir, root = tmp_path / "archive", tmp_path / "root"
    paths = write_png_archive(archive_dir / "a", 6, 8, 8, seed=1)
    options = dict(incremental=True, labels_from_dirs=True, target_shard_mb=0.001, min_shard_mb=0.0005,
                   max_shard_mb=0.002)
    run_convert(archive_dir, root, **options)
    first = str(root / "versions" / "0001")
    assert tfds.builder_from_directory(first).info.version == "1.0.0"
    assert assert_tfds_reads_as_random_access(first, "train") == 6
    # version 2: the sources of the first shard gone, every other shard reused as it is
    first_shards = json.load(open(os.path.join(first, "dataset.json")))["splits"]["train"]["shards"]
    assert len(first_shards) > 1, first_shards
    records = reader.RandomAccess(first, "train")
    gone = {records[i]["id"].decode() for i in range(first_shards[0]["num_records"])}
    for path in paths:
        if rid(os.path.relpath(path, archive_dir)) in gone:
            os.remove(path)
    kept = len(first_shards)
    run_convert(archive_dir, root, **options)
    second = str(root / "versions" / "0002")
    shards = json.load(open(os.path.join(second, "dataset.json")))["splits"]["train"]["shards"]
    assert all(s["file"].startswith("../0001/") for s in shards)
    info = json.load(open(os.path.join(second, TFDS_INFO_NAME)))
    assert info["splits"][0]["filepathTemplate"] == "../0001/{SPLIT}-v0001-{SHARD_X_OF_Y}.tfrecord"
    lengths = [int(n) for n in info["splits"][0]["shardLengths"]]
    assert len(lengths) == kept and lengths.count(0) == kept - len(shards)
    assert assert_tfds_reads_as_random_access(second, "train") == sum(s["num_records"] for s in shards)
    assert tfds.builder_from_directory(second).info.version == "2.0.0"
    # version 3: new sources beside reused shards
    write_png_archive(archive_dir / "b", 3, 8, 8, seed=2)
    summary = run_convert(archive_dir, root, **options)
    assert any(n.startswith("no TFDS metadata") and "several versions" in n for n in summary["notes"])
    third = root / "versions" / "0003"
    assert _tfds_files(third) == []
    report = verify_dataset(str(root))
    assert report.ok and any("several versions" in n for n in report.notes), report.notes


def test_verify_checks_the_tfds_files_and_overwrite_removes_them(plain, tmp_path):  # noqa: F811
    copy = str(tmp_path / "copy")
    shutil.copytree(plain, copy)
    assert verify_dataset(copy).ok and _tfds_files(copy) == sorted(NAMES)
    path = os.path.join(copy, TFDS_INFO_NAME)
    info = json.load(open(path))
    info["splits"][0]["shardLengths"][0] = "1000"
    with open(path, "w") as handle:
        json.dump(info, handle)
    report = verify_dataset(copy)
    assert not report.ok and any(TFDS_INFO_NAME in str(p) and "does not match" in str(p) for p in report.problems)
    os.remove(path)
    report = verify_dataset(copy)
    assert report.ok and any(f"no {TFDS_INFO_NAME}" in n for n in report.notes)
    assert _tfds_files(copy) == sorted(set(NAMES) - {TFDS_INFO_NAME})


def test_overwrite_with_gzip_leaves_no_tfds_files(archive, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    run_convert(archive, out, labels_from_dirs=True, **SMALL_SHARDS)
    assert _tfds_files(out) == sorted(NAMES)
    before = open(out / TFDS_FEATURES_NAME, "rb").read()
    run_convert(archive, out, labels_from_dirs=True, overwrite=True, **SMALL_SHARDS)
    assert open(out / TFDS_FEATURES_NAME, "rb").read() == before     # the same manifest, the same bytes
    summary = run_convert(archive, out, labels_from_dirs=True, overwrite=True, compression="gzip", **SMALL_SHARDS)
    assert _tfds_files(out) == []
    assert any(n.startswith("no TFDS metadata") and "uncompressed only" in n for n in summary["notes"])


def test_tfds_files_left_by_a_run_that_died_before_its_commit_go_at_the_next_commit(archive, tmp_path):  # noqa: F811
    """A run writes the TFDS files just before dataset.json: killed between the two, it leaves them in an
    uncommitted directory. The next run replaces them, or removes those it does not write."""
    out = tmp_path / "out"
    out.mkdir()
    for name in NAMES:
        (out / name).write_text("left by a run killed before its commit\n")
    run_convert(archive, out, compression="gzip", **SMALL_SHARDS)
    assert _tfds_files(out) == [] and verify_dataset(str(out)).ok
    for name in NAMES:
        (out / name).write_text("left by a run killed before its commit\n")
    run_convert(archive, out, overwrite=True, **SMALL_SHARDS)        # no labels: no label.labels.txt
    assert _tfds_files(out) == sorted(set(NAMES) - {tfds_labels_name("label")})
    assert verify_dataset(str(out)).ok
    assert assert_tfds_reads_as_random_access(str(out), "train") == 48
