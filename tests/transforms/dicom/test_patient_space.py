"""transforms.dicom.patient_space: the LPS affine from positions, orientation and pixel spacing."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.transforms.dicom import patient_space

# an oblique, non-square case: every axis distinguishable
ROW = np.array([np.sqrt(3) / 2, 0.5, 0.0])
COL = np.array([-0.5, np.sqrt(3) / 2, -np.sqrt(2)]) / np.sqrt(3)      # unit, and normal to ROW
IOP = tuple(ROW) + tuple(COL)
SPACING = (0.7, 0.9)                   # (between rows, between columns)


def _positions(n: int, step: float = 2.0) -> list[tuple[float, ...]]:
    normal = np.cross(ROW, COL)
    return [tuple(np.array([-10.0, 20.0, 30.0]) + k * step * normal) for k in range(n)]


def test_each_index_lands_where_dicom_puts_it():
    """PS3.3 C.7.6.2.1.1: pixel (row j, column i) of slice k lies at P_k + i * col_spacing * row
    cosines + j * row_spacing * column cosines."""
    positions = _positions(5)
    matrix = patient_space.affine(IOP, positions, SPACING)
    for k, j, i in [(0, 0, 0), (4, 3, 7), (2, 10, 1)]:
        want = np.asarray(positions[k]) + i * SPACING[1] * ROW + j * SPACING[0] * COL
        np.testing.assert_allclose((matrix @ [k, j, i, 1])[:3], want, atol=1e-9)


def test_the_slice_step_is_measured_so_a_reversed_or_sheared_series_keeps_it():
    reversed_positions = _positions(4)[::-1]
    matrix = patient_space.affine(IOP, reversed_positions, SPACING)
    np.testing.assert_allclose(matrix[:3, 0], -2.0 * np.cross(ROW, COL), atol=1e-9)
    sheared = [tuple(np.asarray(p) + k * np.array([0.0, 0.5, 0.0])) for k, p in enumerate(_positions(4))]
    matrix = patient_space.affine(IOP, sheared, SPACING)
    np.testing.assert_allclose(matrix[:3, 0], 2.0 * np.cross(ROW, COL) + [0.0, 0.5, 0.0], atol=1e-9)


def test_one_slice_steps_along_the_normal_by_its_spacing():
    matrix = patient_space.affine(IOP, _positions(1), SPACING, single_spacing=5.0)
    np.testing.assert_allclose(matrix[:3, 0], 5.0 * np.cross(ROW, COL), atol=1e-9)
    assert patient_space.single_slice_spacing([2.5], [5.0]) == 2.5
    assert patient_space.single_slice_spacing([], [5.0]) == 5.0
    assert patient_space.single_slice_spacing([0.0], []) == 1.0


@pytest.mark.parametrize("orientation, positions, spacing", [
    ((), [(0.0, 0.0, 0.0)], SPACING), (IOP, [], SPACING), (IOP, [(0.0, 0.0, 0.0)], ())])
def test_without_position_orientation_or_spacing_there_is_no_affine(orientation, positions, spacing):
    assert patient_space.affine(orientation, positions, spacing) is None
    assert patient_space.features(orientation, positions, spacing)[patient_space.AFFINE].size == 0


@pytest.mark.parametrize("value", [None, "1\\2\\3", [1.0, 2.0], [1.0, float("nan"), 2.0], ["a", "b", "c"]])
def test_floats_refuses_what_is_not_that_many_finite_numbers(value):
    assert patient_space.floats(value, 3) == ()


def test_one_slice_of_a_record_moves_its_origin_to_that_slice():
    features = patient_space.features(IOP, _positions(4), SPACING)
    third = patient_space.one_slice(features, 2)
    np.testing.assert_allclose(third[patient_space.POSITION], _positions(4)[2], atol=1e-4)
    matrix = np.asarray(third[patient_space.AFFINE], float).reshape(4, 4)
    np.testing.assert_allclose(matrix[:3, 3], _positions(4)[2], atol=1e-4)


def test_direction_cosines_stored_rounded_are_taken_at_unit_length():
    """pydicom's J2K_pixelrep_mismatch.dcm stores (0, 0.9272, -0.3746): 1.0000125 long, 0.003 mm
    across its 512 pixels; dcm2niix normalises (test_geometry_zoo.py)."""
    rounded = (1.0, 0.0, 0.0, 0.0, 0.9272, -0.3746)
    matrix = patient_space.affine(rounded, [(0.0, 0.0, 0.0)], (0.431, 0.431))
    np.testing.assert_allclose(np.linalg.norm(matrix[:3, 1]), 0.431, rtol=1e-12)
    assert patient_space.affine((0.0,) * 6, [(0.0, 0.0, 0.0)], (1.0, 1.0)) is None


@pytest.mark.parametrize("resize, mode, to_old", [
    ((64, 64), "stretch", lambda j, i: (2 * j + 0.5, 2 * i + 0.5)),
    ((64, 96), "pad", lambda j, i: (2 * j + 0.5, 2 * (i - 16) + 0.5)),
    ((64, 32), "crop", lambda j, i: (2 * j + 0.5, 2 * (i + 16) + 0.5)),
    ((256, 256), "stretch", lambda j, i: ((j + 0.5) / 2 - 0.5, (i + 0.5) / 2 - 0.5)),
])
def test_a_resized_record_says_where_its_own_voxels_lie(resize, mode, to_old):
    """CT_small (128 x 128) through the write path with --resize: voxel (j, i) of the record is
    the point of the original image its pixel centre was resampled from (Pillow's mapping)."""
    import dataclasses
    import os
    from pydicom.data import get_testdata_file
    from dcm2tfrecord.transforms.records.build import decode_record
    from dcm2tfrecord.transforms.records.probe import probe_file
    from dcm2tfrecord.transforms.settings import DecodeSettings
    from dcm2tfrecord.transforms.record_model import SourceFile
    path = get_testdata_file("CT_small.dcm")
    source = SourceFile(path, "ct.dcm", os.path.getsize(path), 0.0)

    def decoded(settings):
        record = probe_file(source, settings=settings)
        with open(path, "rb") as handle:
            return decode_record(record, handle, settings)
    plain = DecodeSettings(id_salt="s")
    _, original = decoded(plain)
    pixels, resized = decoded(dataclasses.replace(plain, resize=resize, resize_mode=mode))
    assert pixels.shape[1:3] == resize
    old = np.asarray(original[patient_space.AFFINE], float).reshape(4, 4)
    new = np.asarray(resized[patient_space.AFFINE], float).reshape(4, 4)
    for j, i in [(0, 0), (resize[0] - 1, resize[1] - 1), (3, 7)]:
        np.testing.assert_allclose(new @ [0, j, i, 1], old @ [0, *to_old(j, i), 1], atol=1e-3)
    np.testing.assert_allclose(resized[patient_space.POSITION], (new @ [0, 0, 0, 1])[:3], atol=1e-3)


@pytest.mark.parametrize("positions", [[(0.0, 0.0, 1e300)], [(1e308, -1e308, 1e308)],
                                       [(0.0, 0.0, -3e38), (0.0, 0.0, 3e38)]])   # the step overflows
def test_geometry_a_record_cannot_hold_is_refused_as_invalid_value_quietly(positions):
    """Issue 43, item 4: positions of 1e300 gave records an infinite affine (and printed numpy's
    overflow warning)."""
    import warnings

    from dcm2tfrecord.dataset import reasons
    from dcm2tfrecord.transforms.errors import ConversionError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConversionError) as caught:
            patient_space.features((1.0, 0.0, 0.0, 0.0, 1.0, 0.0), positions, (0.7, 0.9))
    assert caught.value.reason == reasons.INVALID_VALUE and "not finite" in str(caught.value)
    # the largest position a record holds still gives one
    held = patient_space.features((1.0, 0.0, 0.0, 0.0, 1.0, 0.0), [(0.0, 0.0, 3e38)], (0.7, 0.9))
    assert np.isfinite(held[patient_space.AFFINE]).all()


def test_respaced_scales_the_columns_keeps_the_first_voxel_and_records_the_source():
    """--spacing (transforms.images.spacing): output voxel n at source index n * scale."""
    ps = patient_space
    orientation = (0.866025, 0.5, 0.0, -0.353553, 0.612372, -0.707107)
    positions = [(-10.0 + k, 20.0, 30.0 + 2.5 * k) for k in range(4)]
    features = ps.features(orientation, positions, (0.7, 0.9))
    features.update({ps.PIXEL_SPACING: np.float32([0.7, 0.9]), ps.SLICE_SPACING: np.float32([2.7])})
    original = ps.voxel_spacing(features)
    np.testing.assert_allclose(original, (np.hypot(1.0, 2.5), 0.7, 0.9), rtol=1e-6)
    target = (1.0, 1.4, 0.45)
    scale = [t / s for s, t in zip(original, target)]
    out = ps.respaced(features, (4, 10, 12), original, scale, target, (11, 5, 24), depth=True)
    matrix = np.asarray(out[ps.AFFINE], np.float64).reshape(4, 4)
    before = np.asarray(features[ps.AFFINE], np.float64).reshape(4, 4)
    np.testing.assert_allclose(np.linalg.norm(matrix[:3, :3], axis=0), target, rtol=1e-5)
    np.testing.assert_allclose(matrix[:3, 3], before[:3, 3])                 # the first voxel's centre stays
    np.testing.assert_allclose(matrix[:3, :3] / np.linalg.norm(matrix[:3, :3], axis=0),
                               before[:3, :3] / np.linalg.norm(before[:3, :3], axis=0), atol=1e-6)  # directions
    placed = np.asarray(out[ps.POSITION]).reshape(-1, 3)
    assert len(placed) == 11
    np.testing.assert_allclose(placed[10], (matrix @ [10, 0, 0, 1])[:3], atol=1e-4)
    np.testing.assert_allclose(out[ps.PIXEL_SPACING], [1.4, 0.45])
    np.testing.assert_allclose(out[ps.SLICE_SPACING], [1.0])
    np.testing.assert_array_equal(out[ps.ORIGINAL_SHAPE], [4, 10, 12])
    np.testing.assert_allclose(out[ps.ORIGINAL_SPACING], original, rtol=1e-6)
    np.testing.assert_array_equal(out[ps.ORIGINAL_AFFINE], features[ps.AFFINE])
    # in-plane only: the slices' positions and the slice spacing stay
    flat = ps.respaced(features, (4, 10, 12), original, [1.0] + scale[1:], (original[0],) + target[1:], (4, 5, 24),
                       depth=False)
    np.testing.assert_array_equal(flat[ps.POSITION], features[ps.POSITION])
    np.testing.assert_array_equal(flat[ps.SLICE_SPACING], features[ps.SLICE_SPACING])
