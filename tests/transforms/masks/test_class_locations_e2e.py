"""--class_locations end to end (issue 45, item 2): NIfTI images with label maps converted for real,
each record's classes/* read back and held against its mask, verify passing them and failing a
tampered one in one line naming the record and the fix."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.features import CLASS_BOX, CLASS_LOCATION_COUNTS, CLASS_LOCATIONS, CLASS_VOXELS
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support.patch_datasets import convert, task
from tests.support.shard_edits import edit_record, manifest

LIMIT = 6


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("locations")
    task(root / "Task")
    out = root / "out"
    convert(root / "Task", out, class_locations=LIMIT, mask_layout="label_map")
    return str(out)


def test_locations_lie_in_their_classes_and_verify_passes(converted):
    written = manifest(converted)
    assert written["options"]["class_locations"] == LIMIT
    assert written["features"][CLASS_VOXELS]["shape"] == [2] and written["features"][CLASS_BOX]["shape"] == [12]
    records = reader.RandomAccess(converted, "train")
    assert len(records) == 4
    for n in range(len(records)):
        record = records[n]
        mask = record["mask"][..., 0]
        points = record[CLASS_LOCATIONS].reshape(-1, 3)
        counts = record[CLASS_LOCATION_COUNTS]
        assert len(points) == counts.sum()
        for c, own in enumerate(np.split(points, np.cumsum(counts)[:-1])):
            count = int((mask == c + 1).sum())
            assert record[CLASS_VOXELS][c] == count and len(own) == min(LIMIT, count)
            assert all(mask[tuple(p)] == c + 1 for p in own)
            box = record[CLASS_BOX][6 * c:6 * c + 6]
            assert ((own >= box[0::2]) & (own < box[1::2])).all()
        assert counts[0] >= 1                               # every case has a kidney voxel
    assert verify_dataset(converted).ok


def test_a_second_run_draws_the_same_locations(converted, tmp_path):
    root = tmp_path / "again"
    task(root / "Task")
    convert(root / "Task", root / "out", class_locations=LIMIT, mask_layout="label_map")
    first, second = reader.RandomAccess(converted, "train"), reader.RandomAccess(str(root / "out"), "train")
    by_id = {bytes(second[n]["id"]): second[n] for n in range(len(second))}
    for n in range(len(first)):
        record = first[n]
        np.testing.assert_array_equal(record[CLASS_LOCATIONS], by_id[bytes(record["id"])][CLASS_LOCATIONS])


def _moved_off_class(features):
    points = features[CLASS_LOCATIONS].reshape(-1, 3).copy()
    mask = np.frombuffer(features["mask_raw"][0], np.uint8).reshape(
        int(features["depth"][0]), int(features["height"][0]), int(features["width"][0]))
    background = np.argwhere(mask == 0)[0]
    points[0] = background
    features[CLASS_LOCATIONS] = points.reshape(-1)


def _more_than_n(features):
    features[CLASS_LOCATION_COUNTS] = features[CLASS_LOCATION_COUNTS] + np.asarray([1, 0], np.int64)
    features[CLASS_LOCATIONS] = np.concatenate([features[CLASS_LOCATIONS][:3], features[CLASS_LOCATIONS]])


def _shrunk_box(features):
    box = features[CLASS_BOX].copy()
    box[1] = box[0]
    features[CLASS_BOX] = box


@pytest.mark.parametrize("edit,expected", [
    (_moved_off_class, "is not a voxel of class 1"),
    (_more_than_n, "classes/location_counts says class 1 has"),
    (_shrunk_box, "classes/box of class 1 is"),
])
def test_a_tampered_record_fails_verify_naming_it_and_the_fix(converted, tmp_path, edit, expected):
    path = str(tmp_path / "copy")
    shutil.copytree(converted, path)
    edit_record(path, 1, edit)
    problems = [str(p) for p in verify_dataset(path).problems]
    assert len(problems) == 1, problems
    [problem] = problems
    assert ": record 1 at byte " in problem and expected in problem, problem
    assert problem.endswith(f"convert the inputs again with --class_locations {LIMIT}, as dataset.json records")
    assert "\n" not in problem


def test_without_the_option_no_class_features(tmp_path):
    task(tmp_path / "Task")
    convert(tmp_path / "Task", tmp_path / "out")
    with open(os.path.join(str(tmp_path / "out"), "dataset.json")) as handle:
        written = json.load(handle)
    assert not any(name.startswith("classes/") for name in written["features"])
    assert written["options"]["class_locations"] == 0
