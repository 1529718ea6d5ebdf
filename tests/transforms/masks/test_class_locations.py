"""--class_locations (issue 45, item 2), the pure function: each class's voxel count, box and up to N
of its voxels, deterministic from the mask, the record id and N (transforms/masks/locations.py)."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.dataset.features import CLASS_BOX, CLASS_LOCATION_COUNTS, CLASS_LOCATIONS, CLASS_VOXELS
from dcm2tfrecord.transforms.masks.locations import class_locations


def _label_map(seed: int = 0, shape=(7, 9, 11)) -> np.ndarray:
    mask = np.zeros(shape, np.uint8)
    rng = np.random.default_rng(seed)
    mask[1:4, 2:7, 3:9] = rng.integers(0, 3, size=(3, 5, 6))       # classes 1 and 2 in a box
    mask[6, 8, 10] = 1                                                # one more at the far corner
    return mask[..., None]


def _split(features: dict) -> list[np.ndarray]:
    points = features[CLASS_LOCATIONS].reshape(-1, 3)
    ends = np.cumsum(features[CLASS_LOCATION_COUNTS])
    return np.split(points, ends[:-1])


@pytest.mark.parametrize("limit", [1, 5, 10_000])
def test_locations_lie_in_their_class_capped_and_boxed(limit):
    mask = _label_map()
    features = class_locations(mask, "record-a", limit, 3)
    for c, own in enumerate(_split(features)):
        klass = c + 1
        selected = mask[..., 0] == klass
        count = int(selected.sum())
        assert features[CLASS_VOXELS][c] == count
        assert features[CLASS_LOCATION_COUNTS][c] == min(limit, count) == len(own)
        assert all(selected[tuple(p)] for p in own)
        assert len({tuple(p) for p in own}) == len(own)                 # no voxel twice
        assert own.tolist() == sorted(own.tolist())                      # C order
        box = features[CLASS_BOX][6 * c:6 * c + 6]
        if count:
            hits = np.argwhere(selected)
            assert box.tolist() == [v for a in range(3) for v in (hits[:, a].min(), hits[:, a].max() + 1)]
            assert ((own >= box[0::2]) & (own < box[1::2])).all()
        else:
            assert box.tolist() == [0] * 6
    assert features[CLASS_VOXELS][2] == 0 and features[CLASS_LOCATION_COUNTS][2] == 0      # class 3 absent
    assert features[CLASS_LOCATIONS].dtype == np.int64


def test_a_class_of_one_voxel_at_the_far_corner_keeps_it():
    mask = np.zeros((4, 5, 6, 1), np.uint8)
    mask[3, 4, 5] = 1
    features = class_locations(mask, "x", 8, 1)
    assert features[CLASS_LOCATIONS].tolist() == [3, 4, 5]
    assert features[CLASS_BOX].tolist() == [3, 4, 4, 5, 5, 6]


def test_deterministic_per_record_id_and_class():
    mask = _label_map()
    first = class_locations(mask, "record-a", 5, 2)
    again = class_locations(mask.copy(), "record-a", 5, 2)
    other = class_locations(mask, "record-b", 5, 2)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert first[CLASS_LOCATIONS].tolist() != other[CLASS_LOCATIONS].tolist()     # another draw
    np.testing.assert_array_equal(first[CLASS_VOXELS], other[CLASS_VOXELS])


def test_binary_layout_classes_may_overlap():
    per_class = np.zeros((3, 4, 5, 2), np.uint8)
    per_class[0, :2, :2, 0] = 1
    per_class[0, 1:3, 1:3, 1] = 1                        # overlaps class 1 at (0, 1, 1)
    features = class_locations(per_class, "r", 100, 2)
    assert features[CLASS_VOXELS].tolist() == [4, 4]
    first, second = _split(features)
    assert [0, 1, 1] in first.tolist() and [0, 1, 1] in second.tolist()
    assert features[CLASS_BOX].tolist() == [0, 1, 0, 2, 0, 2, 0, 1, 1, 3, 1, 3]


def test_a_limit_below_one_is_refused():
    with pytest.raises(ValueError, match="limit 0"):
        class_locations(np.zeros((1, 1, 1, 1), np.uint8), "r", 0, 1)
