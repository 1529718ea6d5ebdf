"""reader.geometry: a record's LPS affine in NIfTI's and ITK's conventions, and 4-D volumes."""
from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk

from dcm2tfrecord.reader import geometry

ROW = np.array([0.866025, 0.5, 0.0])
COL = np.array([-0.353553, 0.612372, -0.707107])
NORMAL = np.cross(ROW, COL)
LPS = np.eye(4)
LPS[:3, 0], LPS[:3, 1], LPS[:3, 2], LPS[:3, 3] = 2.0 * NORMAL, 0.7 * COL, 0.9 * ROW, [-10.0, 20.0, 30.0]


def _record(lps=LPS) -> dict:
    return {"dicom/affine": np.asarray(lps, np.float32).reshape(-1)}


def test_affine_reads_the_record_and_is_none_without_geometry():
    np.testing.assert_allclose(geometry.affine(_record()), LPS, atol=1e-5)
    assert geometry.affine({"dicom/affine": np.zeros(0, np.float32)}) is None
    assert geometry.affine({}) is None


def test_nifti_affine_puts_each_voxel_of_the_transposed_array_where_the_record_says():
    volume = np.arange(3 * 4 * 5, dtype=np.int16).reshape(3, 4, 5)        # [k, j, i]
    image = nib.Nifti1Image(volume.transpose(2, 1, 0), geometry.nifti_affine(LPS))
    for k, j, i in [(0, 0, 0), (2, 3, 4), (1, 0, 3)]:
        ras = image.affine @ [i, j, k, 1]
        lps = LPS @ [k, j, i, 1]
        np.testing.assert_allclose(ras[:3], [-lps[0], -lps[1], lps[2]], atol=1e-9)
        assert image.get_fdata()[i, j, k] == volume[k, j, i]


def test_itk_geometry_matches_simpleitk_index_to_physical_point():
    volume = np.zeros((3, 4, 5), np.int16)
    image = sitk.GetImageFromArray(volume)
    origin, spacing, direction = geometry.itk_geometry(LPS)
    image.SetOrigin(origin)
    image.SetSpacing(spacing)
    image.SetDirection(direction)
    for k, j, i in [(0, 0, 0), (2, 3, 4), (1, 2, 0)]:
        np.testing.assert_allclose(image.TransformIndexToPhysicalPoint((i, j, k)), (LPS @ [k, j, i, 1])[:3],
                                   atol=1e-6)


def test_volumes_splits_a_stacked_record_and_leaves_others():
    pixels = np.arange(2 * 3 * 2 * 2).reshape(6, 2, 2, 1)
    stacked = {"dicom/volumes": np.int64(2), "dicom/volume_index": np.int64(-1)}
    assert geometry.volumes(pixels, stacked).shape == (2, 3, 2, 2, 1)
    np.testing.assert_array_equal(geometry.volumes(pixels, stacked)[1], pixels[3:])
    one = {"dicom/volumes": np.int64(2), "dicom/volume_index": np.int64(1)}
    assert geometry.volumes(pixels, one).shape == (1, 6, 2, 2, 1)
    with pytest.raises(ValueError, match="not a multiple"):
        geometry.volumes(pixels[:5], stacked)


# ---------------------------------------------------------------- convert --spacing, undone


def _respaced(size, original_lps, scale):
    """What convert --spacing writes for a record of ``size`` voxels resampled so that its voxel
    ``n`` lies at source index ``n * scale`` (transforms.dicom.patient_space.respaced)."""
    shape = tuple(max(1, int(round(n / s))) for n, s in zip(size, scale))
    current = np.asarray(original_lps, float) @ np.diag([*scale, 1.0])
    return shape, {"dicom/affine": current.astype(np.float32).reshape(-1),
                   "dicom/original_affine": np.asarray(original_lps, np.float32).reshape(-1),
                   "dicom/original_shape": np.asarray(size, np.int64),
                   "depth": shape[0], "height": shape[1], "width": shape[2]}


def test_to_original_grid_takes_each_source_voxel_from_the_nearest_record_voxel():
    size, scale = (7, 9, 11), (0.5, 1.5, 0.75)          # slices doubled, rows fewer, columns more
    shape, record = _respaced(size, LPS, scale)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=shape + (1,), dtype=np.uint8)
    back = geometry.to_original_grid(labels, record)
    assert back.shape == size + (1,) and back.dtype == np.uint8
    k, j, i = np.meshgrid(*[np.arange(n) for n in size], indexing="ij")
    index = [np.clip(np.rint(v / s), 0, n - 1).astype(int) for v, s, n in zip((k, j, i), scale, shape)]
    np.testing.assert_array_equal(back[..., 0], labels[index[0], index[1], index[2], 0])


def test_to_original_grid_round_trip_gives_the_source_labels_back():
    """Labels put on a finer grid by nearest neighbour and back are the labels themselves."""
    size, scale = (4, 6, 5), (0.5, 0.5, 0.25)
    shape, record = _respaced(size, LPS, scale)
    source = np.random.default_rng(1).integers(0, 3, size=size, dtype=np.uint8)
    k, j, i = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    fine = source[np.clip(np.rint(k * scale[0] - 1e-9).astype(int), 0, size[0] - 1),
                  np.clip(np.rint(j * scale[1] - 1e-9).astype(int), 0, size[1] - 1),
                  np.clip(np.rint(i * scale[2] - 1e-9).astype(int), 0, size[2] - 1)]
    np.testing.assert_array_equal(geometry.to_original_grid(fine, record), source)


def test_to_original_grid_refuses_a_record_not_resampled_or_labels_off_its_grid():
    with pytest.raises(ValueError, match="--spacing"):
        geometry.to_original_grid(np.zeros((2, 2, 2)), _record())
    shape, record = _respaced((4, 4, 4), LPS, (1.0, 0.5, 0.5))
    with pytest.raises(ValueError, match="not on the record's grid"):
        geometry.to_original_grid(np.zeros((4, 4, 4)), record)


# ---------------------------------------------------------------- convert --crop (and --spacing), undone


def _cropped(size, original_lps, box):
    """What convert --crop writes for a record of ``size`` voxels cut to ``box``
    (transforms.dicom.patient_space.cropped)."""
    moved = np.asarray(original_lps, float).copy()
    moved[:, 3] = moved @ [box[0], box[2], box[4], 1.0]
    shape = (box[1] - box[0], box[3] - box[2], box[5] - box[4])
    return shape, {"dicom/affine": moved.astype(np.float32).reshape(-1),
                   "dicom/original_affine": np.asarray(original_lps, np.float32).reshape(-1),
                   "dicom/original_shape": np.asarray(size, np.int64),
                   "dicom/crop_box": np.asarray(box, np.int64),
                   "depth": shape[0], "height": shape[1], "width": shape[2]}


def test_to_original_grid_puts_a_cropped_record_back_in_its_box():
    size, box = (7, 9, 11), (2, 5, 1, 8, 3, 11)
    source = np.zeros(size + (1,), np.uint8)
    source[box[0]:box[1], box[2]:box[3], box[4]:box[5]] = \
        np.random.default_rng(2).integers(1, 4, size=(3, 7, 8, 1), dtype=np.uint8)
    shape, record = _cropped(size, LPS, box)
    cut = source[box[0]:box[1], box[2]:box[3], box[4]:box[5]]
    np.testing.assert_array_equal(geometry.to_original_grid(cut, record), source)
    # without geometry (a raster image) the box alone puts it back
    bare = {k: v for k, v in record.items() if k not in ("dicom/affine", "dicom/original_affine")}
    np.testing.assert_array_equal(geometry.to_original_grid(cut[..., 0], bare), source[..., 0])


def test_to_original_grid_undoes_crop_then_spacing_with_zeros_outside_the_box():
    size, box, scale = (8, 10, 12), (2, 6, 2, 8, 4, 12), (0.5, 0.5, 2.0)
    source = np.zeros(size, np.uint8)
    source[box[0]:box[1], box[2]:box[3], box[4]:box[5]] = \
        np.random.default_rng(3).integers(1, 4, size=(4, 6, 8), dtype=np.uint8)
    source[box[0]:box[1], box[2]:box[3], box[4]:box[5]:2] = 9   # columns the coarser grid keeps
    cut_shape, cut = _cropped(size, LPS, box)
    shape, record = _respaced(cut_shape, np.asarray(cut["dicom/affine"], float).reshape(4, 4), scale)
    record.update({k: cut[k] for k in ("dicom/original_affine", "dicom/original_shape", "dicom/crop_box")})
    k, j, i = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    inside = source[box[0]:box[1], box[2]:box[3], box[4]:box[5]]
    resampled = inside[np.clip(np.rint(k * scale[0] - 1e-9).astype(int), 0, cut_shape[0] - 1),
                       np.clip(np.rint(j * scale[1] - 1e-9).astype(int), 0, cut_shape[1] - 1),
                       np.clip(np.rint(i * scale[2]).astype(int), 0, cut_shape[2] - 1)]
    back = geometry.to_original_grid(resampled, record)
    assert back.shape == size
    assert not back[:box[0]].any() and not back[box[1]:].any() and not back[:, :box[2]].any() \
        and not back[:, :, :box[4]].any()                              # zeros outside the box
    # finer slices and rows come back exactly; columns are each kept column's nearest
    got = back[box[0]:box[1], box[2]:box[3], box[4]:box[5]]
    np.testing.assert_array_equal(got[:, :, ::2], inside[:, :, ::2])


def test_to_original_grid_refuses_a_record_neither_resampled_nor_cropped():
    with pytest.raises(ValueError, match="--crop"):
        geometry.to_original_grid(np.zeros((2, 2, 2)), _record())
