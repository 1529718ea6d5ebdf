"""--crop's boxes and cuts (transforms/images/crop.py) on arrays, and the geometry it rewrites
(transforms/dicom/patient_space.py cropped): a voxel of the cropped record lies where the same
voxel of the source did."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.images import crop as crops
from dcm2tfrecord.transforms.images.crop import Crop


def _volume() -> np.ndarray:
    pixels = np.zeros((6, 8, 10, 1), np.int16)
    pixels[2:4, 1:6, 3:9, 0] = 7
    return pixels


def test_nonzero_box_is_the_bounding_box_of_the_image_half_open():
    pixels = _volume()
    pixels[3, 5, 8, 0] = -1                     # negative values are non-zero too
    assert crops.crop_box(Crop.NONZERO, pixels, None) == (2, 4, 1, 6, 3, 9)
    cut = crops.crop(pixels, (2, 4, 1, 6, 3, 9))
    assert cut.shape == (2, 5, 6, 1) and cut.flags.c_contiguous
    assert (cut != 0).sum() == (pixels != 0).sum()     # nothing non-zero left out


def test_any_channel_counts_and_a_slice_record_is_cut_in_plane_only():
    pixels = np.zeros((4, 5, 6, 3), np.uint8)
    pixels[1, 2, 1, 0] = 1
    pixels[2, 4, 3, 2] = 1
    assert crops.crop_box(Crop.NONZERO, pixels, None) == (1, 3, 2, 5, 1, 4)
    assert crops.crop_box(Crop.NONZERO, pixels, None, volume=False) == (0, 4, 2, 5, 1, 4)


def test_an_empty_image_or_mask_keeps_the_record_whole():
    pixels = np.zeros((3, 4, 5, 1), np.float32)
    assert crops.crop_box(Crop.NONZERO, pixels, None) == (0, 3, 0, 4, 0, 5)
    assert crops.crop_box(Crop.FOREGROUND, _volume(), np.zeros((6, 8, 10, 1), np.uint8)) == (0, 6, 0, 8, 0, 10)
    assert crops.crop_box(Crop.FOREGROUND, _volume(), None) == (0, 6, 0, 8, 0, 10)
    assert crops.crop(pixels, (0, 3, 0, 4, 0, 5)) is pixels


def test_foreground_box_is_the_masks_and_cuts_the_image_and_mask_alike():
    pixels = _volume()
    mask = np.zeros((6, 8, 10, 2), np.uint8)       # one channel a class (--mask_layout binary)
    mask[3, 2:4, 4, 0] = 1
    mask[4, 3, 5:7, 1] = 1
    box = crops.crop_box(Crop.FOREGROUND, pixels, mask)
    assert box == (3, 5, 2, 4, 4, 7)
    image, cut = crops.crop(pixels, box), crops.crop(mask, box)
    assert image.shape[:3] == cut.shape[:3] == (2, 2, 3)
    np.testing.assert_array_equal(image, pixels[3:5, 2:4, 4:7])
    assert cut.sum() == mask.sum()


def _features(size) -> dict:
    row, col = np.array([0.866025, 0.5, 0.0]), np.array([-0.353553, 0.612372, -0.707107])
    step = 2.5 * np.cross(row, col) + [0.0, 0.3, 0.0]             # a tilted gantry's shear
    matrix = np.eye(4)
    matrix[:3, 0], matrix[:3, 1], matrix[:3, 2], matrix[:3, 3] = step, 0.7 * col, 0.9 * row, [-10.0, 20.0, 30.0]
    positions = [matrix @ [k, 0, 0, 1] for k in range(size[0])]
    return {patient_space.AFFINE: matrix.astype(np.float32).reshape(-1),
            patient_space.POSITION: np.asarray([p[:3] for p in positions], np.float32).reshape(-1),
            patient_space.ORIENTATION: np.asarray([*row, *col], np.float32)}


def test_cropped_geometry_puts_each_voxel_where_the_source_had_it():
    size, box = (6, 8, 10), (2, 4, 1, 6, 3, 9)
    features = _features(size)
    out = patient_space.cropped(features, size, box)
    before = features[patient_space.AFFINE].astype(np.float64).reshape(4, 4)
    after = out[patient_space.AFFINE].astype(np.float64).reshape(4, 4)
    for k, j, i in [(0, 0, 0), (1, 4, 5), (1, 0, 2)]:
        np.testing.assert_allclose(after @ [k, j, i, 1], before @ [k + box[0], j + box[2], i + box[4], 1],
                                   atol=1e-4)
    np.testing.assert_allclose(after[:3, :3], before[:3, :3])                     # spacing and directions kept
    positions = out[patient_space.POSITION].reshape(-1, 3)
    assert len(positions) == box[1] - box[0]
    for k, position in enumerate(positions):
        np.testing.assert_allclose(position, (after @ [k, 0, 0, 1])[:3], atol=1e-4)
    np.testing.assert_array_equal(out[patient_space.CROP_BOX], box)
    np.testing.assert_array_equal(out[patient_space.ORIGINAL_SHAPE], size)
    np.testing.assert_array_equal(out[patient_space.ORIGINAL_AFFINE], features[patient_space.AFFINE])
    np.testing.assert_allclose(out[patient_space.ORIGINAL_SPACING], [np.linalg.norm(before[:3, 0]), 0.7, 0.9],
                               rtol=1e-5)
    np.testing.assert_array_equal(out[patient_space.ORIENTATION], features[patient_space.ORIENTATION])


def test_cropped_then_respaced_keeps_the_source_before_both():
    size, box = (6, 8, 10), (2, 4, 1, 6, 3, 9)
    features = _features(size)
    cut = patient_space.cropped(features, size, box)
    scale = (1.0, 2.0, 2.0)
    out = patient_space.respaced(cut, (2, 5, 6), patient_space.voxel_spacing(cut), scale, (2.5, 1.4, 1.8),
                                 (2, 3, 3), True)
    np.testing.assert_array_equal(out[patient_space.ORIGINAL_SHAPE], size)
    np.testing.assert_array_equal(out[patient_space.ORIGINAL_AFFINE], features[patient_space.AFFINE])
    np.testing.assert_array_equal(out[patient_space.CROP_BOX], box)
    np.testing.assert_allclose(out[patient_space.AFFINE].reshape(4, 4)[:3, 3], cut[patient_space.AFFINE]
                               .reshape(4, 4)[:3, 3])


def test_a_record_without_geometry_gets_its_box_and_shape_only():
    out = patient_space.cropped({}, (1, 8, 10), (0, 1, 1, 6, 3, 9))
    assert patient_space.AFFINE not in out and out[patient_space.ORIGINAL_AFFINE].size == 0
    np.testing.assert_array_equal(out[patient_space.CROP_BOX], (0, 1, 1, 6, 3, 9))


@pytest.mark.parametrize("mode", list(Crop))
def test_off_and_every_mode_keep_a_full_image_whole(mode):
    pixels = np.ones((2, 3, 4, 1), np.uint8)
    mask = np.ones((2, 3, 4, 1), np.uint8)
    assert crops.crop_box(mode, pixels, mask) == (0, 2, 0, 3, 0, 4)


def test_the_shard_writer_takes_a_cropped_record_no_larger_than_planned_only_with_crop():
    """Shards are planned on the uncropped size; with --crop a record of the planned dtype and
    channels no larger along any axis goes in, anything else is still decoded_size_mismatch."""
    from dcm2tfrecord.transforms.output.write import size_mismatch
    from dcm2tfrecord.transforms.record_model import ImageSpec, ProbedRecord, SourceFile

    record = ProbedRecord(source=SourceFile("/in/a.nii", "a.nii", 1, 0.0), record_id="a", kind="nifti",
                          spec=ImageSpec(6, 8, 10, 1, "int16"))
    assert size_mismatch(record, "int16", (6, 8, 10, 1)) == ""
    assert size_mismatch(record, "int16", (2, 5, 6, 1))                      # without --crop: refused
    assert size_mismatch(record, "int16", (2, 5, 6, 1), at_most=True) == ""
    assert size_mismatch(record, "int16", (2, 9, 6, 1), at_most=True)       # past the plan along an axis
    assert size_mismatch(record, "uint8", (2, 5, 6, 1), at_most=True)       # another dtype
    assert size_mismatch(record, "int16", (2, 5, 3, 2), at_most=True)       # other channels
