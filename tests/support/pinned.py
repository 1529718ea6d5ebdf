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
        resize="48x64", resize_mode="pad", channels="1", seed=7),
    "series": dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, unit="series"),
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
        'train-00000-of-00002.tfrecord': '657eecec436838e7',
        'train-00000-of-00002.tfrecord.idx': '9f954a759e02fd19',
        'train-00001-of-00002.tfrecord': '62cb352a9621a0f9',
        'train-00001-of-00002.tfrecord.idx': 'bcfe59a95b535691',
    },
    'frames_split': {
        'test-00000-of-00005.tfrecord': 'f94bcb95d790c322',
        'test-00000-of-00005.tfrecord.idx': '6410d9c73a0034a5',
        'test-00001-of-00005.tfrecord': 'e817f762a498c8b2',
        'test-00001-of-00005.tfrecord.idx': '27cdeb90beb7e04e',
        'test-00002-of-00005.tfrecord': 'cf428abe7626a38c',
        'test-00002-of-00005.tfrecord.idx': '83eadf94bdf1aea0',
        'test-00003-of-00005.tfrecord': 'c4cea9e2472a4559',
        'test-00003-of-00005.tfrecord.idx': '04d0eecde983dfc1',
        'test-00004-of-00005.tfrecord': '68b9a5262c3dc7ee',
        'test-00004-of-00005.tfrecord.idx': 'e43f01cf286b51e1',
        'train-00000-of-00004.tfrecord': 'b5eb9c3a517fc63f',
        'train-00000-of-00004.tfrecord.idx': 'cd9520bcc6fbad4c',
        'train-00001-of-00004.tfrecord': '438c9f9bab517994',
        'train-00001-of-00004.tfrecord.idx': '5aa8721795a4a0f5',
        'train-00002-of-00004.tfrecord': '205f613c7c1f6c40',
        'train-00002-of-00004.tfrecord.idx': '5971687d707d49d1',
        'train-00003-of-00004.tfrecord': '1ef9d5314c4fdcce',
        'train-00003-of-00004.tfrecord.idx': '22a80ecbc84c8b89',
    },
    'labels_splits_gzip_window': {
        'test-00000-of-00001.tfrecord.gz': '6104178c522998d8',
        'test-00000-of-00001.tfrecord.gz.idx': '0276dd6b4cd4b6d6',
        'train-00000-of-00001.tfrecord.gz': '88a3b40a285fd2ab',
        'train-00000-of-00001.tfrecord.gz.idx': '9350989f2b326b20',
        'validation-00000-of-00001.tfrecord.gz': '1e881954424a8e0b',
        'validation-00000-of-00001.tfrecord.gz.idx': '8a00dc828895ec5d',
    },
    'series': {
        'train-00000-of-00001.tfrecord': '60e02ba23ae425d3',
        'train-00000-of-00001.tfrecord.idx': 'fe2999519164af28',
    },
}
