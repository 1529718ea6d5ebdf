"""The pinned archive, its option sets and their pinned shard hashes
(e2e/test_output_bytes_pinned.py, which says when and how to update PINNED;
e2e/test_shard_bounds_and_determinism.py and e2e/test_determinism_buckets.py hold other
runs to them)."""
from __future__ import annotations

import csv
import hashlib
import json
import os

import pytest

from tests.support import build_sample_archive, ct_file_bytes, run_convert


CT_SLICES = [(patient, series, i) for patient in range(2) for series in (patient,) for i in range(3)]


OPTION_SETS = {
    "default": dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=16, duplicates="keep"),
    "labels_splits_gzip_window": dict(
        target_shard_mb=2, min_shard_mb=1, max_shard_mb=16, labels="LABELS",
        splits="train=0.6,validation=0.2,test=0.2", compression="gzip", dicom_values="window",
        resize="48x64", resize_mode="pad", channels="1", seed=7,
        gzip_level=9),   # the level of every gzip shard before --gzip_level: those bytes, unchanged
    # gzip at --gzip_level's default (1)
    "gzip_default_level": dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=16, compression="gzip"),
    "series": dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, unit="series"),
    # --pixel_encoding png (issue 36, item 3): volumes and RGB too, each record one PNG
    "png_pixels_series": dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, unit="series",
                              pixel_encoding="png"),
    "frames_split": dict(target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=64, frames="split",
                         split_by="study", splits="train=0.5,test=0.5", min_shards=2),
}


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pinned") / "archive")
    build_sample_archive(root)
    os.makedirs(os.path.join(root, "ct"))
    for n, (patient, series, index) in enumerate(CT_SLICES):
        with open(os.path.join(root, "ct", f"p{patient}_s{series}_{index:02d}.dcm"), "wb") as handle:
            handle.write(ct_file_bytes(0, patient, series, index, 3, n))
    labels = os.path.join(str(tmp_path_factory.mktemp("pinned_labels")), "labels.csv")
    rel_paths = sorted(os.path.relpath(os.path.join(folder, name), root)
                       for folder, _, names in os.walk(root) for name in names)
    with open(labels, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label"])
        for i, rel in enumerate(rel_paths):
            writer.writerow([rel, ("benign", "malignant", "normal")[i % 3]])
    return root, labels


def shard_hashes(dataset_dir: str) -> dict:
    with open(os.path.join(dataset_dir, "dataset.json")) as handle:
        manifest = json.load(handle)
    out = {}
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            for name in (shard["file"], shard["index_file"]):
                with open(os.path.join(dataset_dir, name), "rb") as handle:
                    out[name] = hashlib.sha256(handle.read()).hexdigest()[:16]
    return out


def convert(archive, tmp_path, name, beam_args=None):
    root, labels = archive
    options = {k: (labels if v == "LABELS" else v) for k, v in OPTION_SETS[name].items()}
    out = tmp_path / name
    kwargs = {} if beam_args is None else {"beam_args": beam_args}
    run_convert(root, out, **kwargs, **options)
    return shard_hashes(str(out))


PINNED = {
    'default': {
        'train-00000-of-00002.tfrecord': '305b137214eea327',
        'train-00000-of-00002.tfrecord.idx': 'c75e3751a96a09bc',
        'train-00001-of-00002.tfrecord': '7e9fdbf122e9581c',
        'train-00001-of-00002.tfrecord.idx': '379b71d35adb3b37',
    },
    'frames_split': {
        'test-00000-of-00005.tfrecord': 'b2b1fdd3ddd1568f',
        'test-00000-of-00005.tfrecord.idx': '3da3ea5d262af8f3',
        'test-00001-of-00005.tfrecord': 'e3710858c2d5a55f',
        'test-00001-of-00005.tfrecord.idx': '0f440075292952e8',
        'test-00002-of-00005.tfrecord': 'd648432ab4c36c81',
        'test-00002-of-00005.tfrecord.idx': 'bc037c90b57f2de1',
        'test-00003-of-00005.tfrecord': '31d3ce6a469ac064',
        'test-00003-of-00005.tfrecord.idx': 'd7c0ad71489a286c',
        'test-00004-of-00005.tfrecord': 'a3f093e714db1e4f',
        'test-00004-of-00005.tfrecord.idx': 'b74eaff4731a4f26',
        'train-00000-of-00004.tfrecord': '4e17fb5ba382747f',
        'train-00000-of-00004.tfrecord.idx': '383d824e2b844f0a',
        'train-00001-of-00004.tfrecord': 'ff4d6716f83ac62f',
        'train-00001-of-00004.tfrecord.idx': '56522628a325c681',
        'train-00002-of-00004.tfrecord': '8d1fcf1955266340',
        'train-00002-of-00004.tfrecord.idx': 'aec607a7963b17c5',
        'train-00003-of-00004.tfrecord': '7bd232f721b5f7f8',
        'train-00003-of-00004.tfrecord.idx': '9e531c2b15f0a2a3',
    },
    # gzip at --gzip_level's default, 1 (issue 36)
    'gzip_default_level': {
        "train-00000-of-00002.tfrecord.gz": "53b9a45d52336855",
        "train-00000-of-00002.tfrecord.gz.idx": "d9526fe78e1bd690",
        "train-00001-of-00002.tfrecord.gz": "f9fb7ff233577f3e",
        "train-00001-of-00002.tfrecord.gz.idx": "95f6126ac1a6278f"
    },
    # --pixel_encoding png (issue 36, item 3)
    'png_pixels_series': {
        "train-00000-of-00001.tfrecord": "24ced446776c1a6b",
        "train-00000-of-00001.tfrecord.idx": "1f380fec341547c4"
    },
    'labels_splits_gzip_window': {
        'test-00000-of-00001.tfrecord.gz': '5ff7075335a0fa9a',
        'test-00000-of-00001.tfrecord.gz.idx': '229682b7d84ee837',
        'train-00000-of-00001.tfrecord.gz': '45395d7c9ee09bd0',
        'train-00000-of-00001.tfrecord.gz.idx': '8814a9de04994231',
        'validation-00000-of-00001.tfrecord.gz': 'f26a2f285bc7fd82',
        'validation-00000-of-00001.tfrecord.gz.idx': '492e563bac7e65ad',
    },
    'series': {
        'train-00000-of-00001.tfrecord': 'b0fee6479fbbea64',
        'train-00000-of-00001.tfrecord.idx': 'd7d924fff126994e',
    },
}
