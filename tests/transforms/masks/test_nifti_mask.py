"""transforms.masks.nifti_mask: a NIfTI label map checked against its image's grid and its values
mapped to classes, on specs and voxels read from nibabel-written files."""
from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest
from nibabel.affines import from_matvec
from nibabel.eulerangles import euler2mat

from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import classes, nifti_mask
from dcm2tfrecord.transforms.nifti import read as nifti

AFFINE = from_matvec(euler2mat(0.3, -0.2, 0.45) @ np.diag((0.7, 0.9, 2.5)), [-101.5, 40.25, -12.0])
CLASS_MAP = classes.parse_mapping('kidney: ["1"]\ntumour: ["2", "3"]\n', "map.yaml")


def _written(tmp_path, name: str, data: np.ndarray, affine=AFFINE) -> tuple[nifti.NiftiSpec, np.ndarray]:
    path = str(tmp_path / name)
    img = nib.Nifti1Image(data, affine)
    img.header.set_data_dtype(data.dtype)
    nib.save(img, path)
    return nifti.read(path)


@pytest.fixture
def image(tmp_path):
    return _written(tmp_path, "image.nii.gz", np.zeros((6, 5, 4), np.int16))[0]


def test_values_become_classes_by_their_text(tmp_path, image):
    labels = np.random.default_rng(0).integers(0, 5, (6, 5, 4), dtype=np.uint8)     # 4 maps to no class
    mask, voxels = _written(tmp_path, "labels.nii.gz", labels)
    ours = labels.transpose(2, 1, 0)
    label_map = nifti_mask.record_mask(image, mask, voxels, None, CLASS_MAP, classes.LABEL_MAP)
    np.testing.assert_array_equal(label_map[..., 0], np.array([0, 1, 2, 2, 0], np.uint8)[ours])
    binary = nifti_mask.record_mask(image, mask, voxels, None, CLASS_MAP, classes.BINARY)
    np.testing.assert_array_equal(binary, np.stack([ours == 1, (ours == 2) | (ours == 3)], -1).astype(np.uint8))


def test_integral_floats_and_scaled_labels_are_class_indices(tmp_path, image):
    labels = np.random.default_rng(1).integers(0, 4, (6, 5, 4)).astype(np.float32)
    mask, voxels = _written(tmp_path, "labels.nii", labels)
    got = nifti_mask.record_mask(image, mask, voxels, None, CLASS_MAP, classes.LABEL_MAP)
    np.testing.assert_array_equal(got[..., 0], np.array([0, 1, 2, 2], np.uint8)[labels.astype(int).transpose(2, 1, 0)])


@pytest.mark.parametrize("values,says", [
    (np.array([0.0, 0.5, 1.0]), "no integers (e.g. 0.5)"),
    (np.array([0.0, np.nan]), "NaN or infinite"),
    (np.array([0, -1, 2]), "negative values (e.g. -1)"),
])
def test_values_that_are_no_class_indices_are_mask_invalid(values, says):
    with pytest.raises(ConversionError) as caught:
        nifti_mask.draw(values.reshape(1, 1, -1), CLASS_MAP,
                        classes.Canvas((1, 1, len(values)), len(CLASS_MAP.classes), classes.LABEL_MAP))
    assert caught.value.reason == "mask_invalid" and says in str(caught.value), str(caught.value)


def test_a_mask_must_lie_on_the_images_grid(tmp_path, image):
    labels = np.zeros((6, 5, 4), np.uint8)
    same = _written(tmp_path, "same.nii", labels)[0]
    assert nifti_mask.grid_mismatch(image, same) == ""
    nudged = AFFINE.copy()
    nudged[:3, 3] += 2e-4                                        # float32 noise of a second write: the same grid
    nudged[:3, :3] *= 1 + 2e-5
    assert nifti_mask.grid_mismatch(image, _written(tmp_path, "nudged.nii", labels, nudged)[0]) == ""
    moved = AFFINE.copy()
    moved[:3, 3] += [0.0, 0.0, 0.002]
    assert "origin lies 0.002 mm" in nifti_mask.grid_mismatch(image, _written(tmp_path, "moved.nii", labels, moved)[0])
    finer = AFFINE @ np.diag([1.0, 1.0, 1.001, 1.0])             # 0.1 % thinner slices
    assert "voxel step along k" in nifti_mask.grid_mismatch(image, _written(tmp_path, "finer.nii", labels, finer)[0])
    flipped = AFFINE @ np.diag([-1.0, 1.0, 1.0, 1.0])
    assert "voxel step along i" in nifti_mask.grid_mismatch(image, _written(tmp_path, "flip.nii", labels, flipped)[0])
    small = _written(tmp_path, "small.nii", labels[:, :, :3])[0]
    assert nifti_mask.grid_mismatch(image, small) == "its grid is 6x5x3 voxels, the image's 6x5x4"
    with pytest.raises(ConversionError) as caught:
        nifti_mask.record_mask(image, small, np.zeros(small.shape, np.uint8), None, CLASS_MAP, classes.LABEL_MAP)
    assert caught.value.reason == "mask_grid_mismatch"


def test_a_3d_mask_labels_every_volume_and_a_4d_mask_one_each(tmp_path):
    image = _written(tmp_path, "image.nii", np.zeros((6, 5, 4, 3), np.int16))[0]
    labels = np.random.default_rng(2).integers(0, 3, (6, 5, 4, 3), dtype=np.uint8)
    one, one_voxels = _written(tmp_path, "one.nii", labels[..., 0])
    each, each_voxels = _written(tmp_path, "each.nii", labels)
    for volume in range(3):
        np.testing.assert_array_equal(
            nifti_mask.record_mask(image, one, one_voxels, volume, CLASS_MAP, classes.LABEL_MAP)[..., 0],
            labels[..., 0].transpose(2, 1, 0))
        np.testing.assert_array_equal(
            nifti_mask.record_mask(image, each, each_voxels, volume, CLASS_MAP, classes.LABEL_MAP)[..., 0],
            labels[..., volume].transpose(2, 1, 0))
    two = _written(tmp_path, "two.nii", labels[..., :2])[0]
    assert "holds 2 volumes, the image 3" in nifti_mask.grid_mismatch(image, two)


def test_an_empty_mask_has_the_records_shape_in_either_layout():
    assert nifti_mask.empty_mask((3, 4, 5, 1), CLASS_MAP, classes.LABEL_MAP).shape == (3, 4, 5, 1)
    binary = nifti_mask.empty_mask((3, 4, 5, 1), CLASS_MAP, classes.BINARY)
    assert binary.shape == (3, 4, 5, 2) and binary.dtype == np.uint8 and not binary.any()


class _CountingCanvas(classes.Canvas):
    def __init__(self, *args):
        super().__init__(*args)
        self.regions = 0

    def add(self, index, region, k=None, window=(slice(None), slice(None))):
        self.regions += 1
        super().add(index, region, k, window)


def test_an_instance_mask_costs_one_region_per_class_not_one_per_label():
    """An instance mask (one value per lesion, here 4,000) whose values all map to one class is
    drawn with one full-volume region for that class: its cost is its voxels and its classes, not
    labels x voxels (2 M labels did not finish)."""
    labels = np.arange(8000, dtype=np.int32).reshape(20, 20, 20) % 4001          # 0 .. 4000, each present
    lesions = classes.parse_mapping('lesion: ["[0-9]+"]\n', "map.yaml")
    canvas = _CountingCanvas((20, 20, 20), 1, classes.BINARY)
    nifti_mask.draw(labels, lesions, canvas)
    assert canvas.regions == 1
    np.testing.assert_array_equal(canvas.array[..., 0], (labels > 0).astype(np.uint8))
    label_map = _CountingCanvas((20, 20, 20), len(CLASS_MAP.classes), classes.LABEL_MAP)
    nifti_mask.draw(labels, CLASS_MAP, label_map)
    assert label_map.regions == 2
    np.testing.assert_array_equal(label_map.array[..., 0], np.select([labels == 1, (labels == 2) | (labels == 3)],
                                                                     [1, 2], 0).astype(np.uint8))
