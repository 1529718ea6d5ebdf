"""Shard sizes stay within bounds; the same input gives byte-identical output on any runner.

Determinism is held to the pinned shard hashes (tests/e2e/test_output_bytes_pinned.py):
the pinned archive, rebuilt elsewhere with its files created in a shuffled
order, must give the pinned bytes with 1, 2 and 4 workers, in one process
(threads) and in several. Shards come pre-shuffled: a class-per-folder
archive is mixed inside every shard, and --seed changes the order and the
shard membership but not the set of records.
"""
import filecmp
import hashlib
import os
import random
import shutil

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from dcm2tfrecord import reader
from tests.support import synthetic_image
from tests.support import SAMPLE_OPTIONS, run_convert, write_png_archive
from tests.support.pinned import PINNED, archive, convert  # noqa: F401 (archive: a fixture)

MB = 1 << 20


@pytest.fixture(scope="module")
def rgb_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("rgb30") / "archive"
    write_png_archive(root, count=150, height=256, width=256, channels=3, seed=11)
    return str(root)


def test_every_shard_within_small_bounds(rgb_archive, tmp_path):
    summary = run_convert(rgb_archive, tmp_path / "out", target_shard_mb=2, min_shard_mb=1,
                          max_shard_mb=3)
    manifest = reader.info(str(tmp_path / "out"))
    split = manifest["splits"]["train"]
    assert split["num_records"] == 150
    assert split["num_bytes"] > 28 * MB
    assert len(split["shards"]) >= 10
    for shard in split["shards"]:
        size = os.path.getsize(tmp_path / "out" / shard["file"])
        assert size == shard["num_bytes"]
        assert 1 * MB <= size <= 3 * MB, (shard["file"], size)
    assert summary["splits"]["train"]["shards"] == len(split["shards"])
    names = [s["file"] for s in split["shards"]]
    n = len(names)
    assert names == [f"train-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]


def test_shards_stay_within_bounds_when_record_sizes_differ_wildly(tmp_path):
    """Records from 8x8 to 380x380 RGB (192 B to 433 KB): the plan must still bound every shard."""
    rng = np.random.default_rng(18)
    os.makedirs(tmp_path / "a")
    sides = np.exp(rng.uniform(np.log(8), np.log(380), size=70)).astype(int)
    for i, side in enumerate(sides):
        Image.fromarray(synthetic_image(rng, int(side), int(side), 3)).save(tmp_path / "a" / f"{i:03d}.png")
    planned = [int(s) * int(s) * 3 for s in sides]
    assert max(planned) > 1000 * min(planned)
    run_convert(tmp_path / "a", tmp_path / "out", target_shard_mb=0.5, min_shard_mb=0.25, max_shard_mb=1)
    split = reader.info(str(tmp_path / "out"))["splits"]["train"]
    assert split["num_records"] == 70 and len(split["shards"]) >= 4
    for shard in split["shards"]:
        size = os.path.getsize(tmp_path / "out" / shard["file"])
        assert size == shard["num_bytes"]
        assert 0.25 * MB <= size <= 1 * MB, (shard["file"], size)
    assert sum(s["num_bytes"] for s in split["shards"]) > sum(planned)


def _tree(path):
    return sorted(f for f in os.listdir(path) if not f.startswith("."))


def test_in_memory_and_multi_process_runs_are_byte_identical(sample_archive, sample_dataset, tmp_path):
    out = tmp_path / "multi"
    run_convert(sample_archive, out, beam_args=["--direct_running_mode=multi_processing",
                                                "--direct_num_workers=2"],
                **SAMPLE_OPTIONS)
    assert _tree(out) == _tree(sample_dataset)
    match, mismatch, errors = filecmp.cmpfiles(sample_dataset, out, _tree(out), shallow=False)
    assert mismatch == [] and errors == []
    assert "dataset.json" in match and "errors.jsonl" in match


def test_existing_dataset_is_not_replaced_without_overwrite(rgb_archive, tmp_path):
    from dcm2tfrecord.pipeline.options.usage import UsageError
    small = dict(target_shard_mb=8, min_shard_mb=1, max_shard_mb=64)
    run_convert(rgb_archive, tmp_path / "out", **small)
    with pytest.raises(UsageError, match="--overwrite"):
        run_convert(rgb_archive, tmp_path / "out", **small)
    run_convert(rgb_archive, tmp_path / "out", overwrite=True, **small)
    assert reader.info(str(tmp_path / "out"))["counts"]["written"] == 150


@pytest.fixture(scope="module")
def reordered_archive(archive, tmp_path_factory):   # noqa: F811
    """The pinned archive copied to another folder, its files created in a shuffled order."""
    root, labels = archive
    files = sorted(os.path.relpath(os.path.join(folder, name), root)
                   for folder, _, names in os.walk(root) for name in names)
    random.Random(18).shuffle(files)
    copy = str(tmp_path_factory.mktemp("reordered") / "elsewhere")
    for rel in files:
        os.makedirs(os.path.dirname(os.path.join(copy, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(root, rel), os.path.join(copy, rel))
    return copy, labels


@pytest.mark.parametrize("mode,workers", [("multi_threading", 2), ("multi_threading", 4),
                                          ("multi_processing", 2), ("multi_processing", 4)])
def test_pinned_bytes_whatever_the_workers_and_the_input_order(reordered_archive, tmp_path, mode, workers):
    """One worker in one process is the pinned test itself (in_memory, the original archive)."""
    got = convert(reordered_archive, tmp_path, "default",
                  beam_args=[f"--direct_running_mode={mode}", f"--direct_num_workers={workers}"])
    assert got == PINNED["default"]


CLASSES = ("cats", "dogs", "owls")
CLASS_SHARDS = dict(target_shard_mb=0.012, min_shard_mb=0.006, max_shard_mb=0.05)


@pytest.fixture(scope="module")
def class_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("classes") / "archive"
    for seed, name in enumerate(CLASSES):
        write_png_archive(root / name, count=30, height=16, width=16, seed=seed)
    return str(root)


def _shard_records(dataset_dir: str) -> list[list[tuple[str, int, str]]]:
    """Per shard, in file order: (id, label, sha256 of the pixels) of each record."""
    meta = reader.info(dataset_dir)
    features = {"id": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64),
                "image_raw": tf.io.FixedLenFeature([], tf.string)}
    shards = []
    for path in meta.shard_paths("train"):
        rows = []
        for raw in tf.data.TFRecordDataset(path):
            ex = tf.io.parse_single_example(raw, features)
            rows.append((ex["id"].numpy().decode(), int(ex["label"]),
                         hashlib.sha256(ex["image_raw"].numpy()).hexdigest()))
        shards.append(rows)
    return shards


def test_class_per_folder_archive_is_mixed_inside_every_shard(class_folders, tmp_path):
    run_convert(class_folders, tmp_path / "out", labels_from_dirs=True, **CLASS_SHARDS)
    shards = _shard_records(str(tmp_path / "out"))
    assert len(shards) >= 4 and sum(map(len, shards)) == 90
    for rows in shards:
        labels = [label for _, label, _ in rows]
        assert set(labels) == {0, 1, 2}, labels
    # not three sorted runs: the class changes often along the global order
    order = [label for rows in shards for _, label, _ in rows]
    changes = sum(a != b for a, b in zip(order, order[1:]))
    assert changes > len(order) / 3, order


def test_seed_reorders_records_without_changing_the_record_set(class_folders, tmp_path):
    run_convert(class_folders, tmp_path / "s0", labels_from_dirs=True, **CLASS_SHARDS)
    run_convert(class_folders, tmp_path / "s1", labels_from_dirs=True, seed=1, **CLASS_SHARDS)
    first, second = _shard_records(str(tmp_path / "s0")), _shard_records(str(tmp_path / "s1"))
    flat = lambda shards: [row for rows in shards for row in rows]  # noqa: E731
    assert sorted(flat(first)) == sorted(flat(second))
    assert len(set(flat(first))) == 90
    assert [r[0] for r in flat(first)] != [r[0] for r in flat(second)]
    membership = lambda shards: {frozenset(r[0] for r in rows) for rows in shards}  # noqa: E731
    assert membership(first) != membership(second)
    # the order is a permutation far from the identity, not a rotation or a small swap
    position = {row[0]: i for i, row in enumerate(flat(first))}
    moved = np.array([position[row[0]] for row in flat(second)])
    assert abs(np.corrcoef(moved, np.arange(len(moved)))[0, 1]) < 0.5
