"""--spacing's resampling (transforms/images/spacing.py) on arrays: the image equals SciPy's own
spline on the same grid, the anisotropic path resamples in-plane then by nearest neighbour, and
masks keep their classes (nnU-Net's per-class rule)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from dcm2tfrecord.transforms.images import spacing


def _smooth(shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return ndimage.gaussian_filter(rng.normal(0, 1000, shape), 2.0)


def test_planned_shape_rounds_and_keeps_at_least_one():
    assert spacing.planned_shape((10, 100, 99), (2.5, 0.7, 0.7), (1.0, 1.0, 1.0)) == (25, 70, 69)
    assert spacing.planned_shape((1, 4, 4), (1.0, 1.0, 1.0), (5.0, 10.0, 1.0)) == (1, 1, 4)


def test_image_equals_scipy_affine_transform_on_the_same_grid():
    volume = _smooth((12, 20, 18)).astype(np.float32)
    source, target = (1.0, 0.8, 0.9), (1.3, 1.1, 0.6)
    out = spacing.resample_image(volume[..., None], source, target)
    shape = spacing.planned_shape(volume.shape, source, target)
    expected = ndimage.affine_transform(volume.astype(np.float64), np.array(target) / np.array(source),
                                        output_shape=shape, order=3, mode="nearest")
    assert out.shape == shape + (1,) and out.dtype == np.float32
    np.testing.assert_allclose(out[..., 0], expected, rtol=1e-4, atol=1e-2)


def test_integers_are_rounded_and_clipped_to_their_dtype():
    volume = np.zeros((6, 6, 6), np.uint8)
    volume[:, :, 3:] = 255          # a step: the spline over- and undershoots it
    out = spacing.resample_image(volume[..., None], (1.0, 1.0, 1.0), (1.0, 1.0, 0.4))
    spline = ndimage.affine_transform(volume.astype(np.float64), [1.0, 1.0, 0.4], output_shape=out.shape[:3],
                                      order=3, mode="nearest")
    assert out.dtype == np.uint8
    assert spline.min() < 0 and spline.max() > 255
    np.testing.assert_array_equal(out[..., 0], np.clip(np.rint(spline), 0, 255).astype(np.uint8))


def test_in_plane_only_keeps_every_slice_apart():
    volume = _smooth((3, 16, 16)).astype(np.int16)
    out = spacing.resample_image(volume[..., None], (5.0, 1.0, 1.0), (5.0, 0.5, 0.5))
    assert out.shape == (3, 32, 32, 1)
    for d in range(3):
        plane = ndimage.affine_transform(volume[d].astype(np.float64), [0.5, 0.5], output_shape=(32, 32),
                                         order=3, mode="nearest")
        np.testing.assert_array_equal(out[d, :, :, 0], np.clip(np.rint(plane), -32768, 32767).astype(np.int16))


def test_anisotropic_data_are_resampled_in_plane_then_nearest_along_the_slices():
    volume = _smooth((8, 16, 16)).astype(np.float32)
    source, target = (5.0, 1.0, 1.0), (2.0, 0.75, 0.75)      # slices 5x the in-plane spacing
    assert spacing.anisotropic(source, target)
    out = spacing.resample_image(volume[..., None], source, target)[..., 0]
    shape = spacing.planned_shape(volume.shape, source, target)
    planes = np.stack([ndimage.affine_transform(p.astype(np.float64), [0.75, 0.75], output_shape=shape[1:],
                                                order=3, mode="nearest") for p in volume])
    nearest = np.clip(np.rint(np.arange(shape[0]) * 2.0 / 5.0).astype(int), 0, volume.shape[0] - 1)
    np.testing.assert_allclose(out, planes[nearest], rtol=1e-4, atol=1e-2)
    # every output slice is one input slice resampled in-plane: no blend between slices
    assert not spacing.anisotropic((1.0, 1.0, 1.0), (2.0, 1.0, 1.0))


def test_a_grid_already_at_the_target_is_left_as_it_is():
    volume = np.arange(24, dtype=np.int16).reshape(2, 3, 4, 1)
    assert spacing.resample_image(volume, (1, 1, 1), (1, 1, 1)) is volume


def test_mask_keeps_a_thin_structure_and_invents_no_class():
    mask = np.zeros((10, 20, 20), np.uint8)
    mask[:, 10, :] = 2              # a plane one voxel thick
    mask[2:8, 3:7, 3:7] = 1
    mask[2:8, 3:7, 7:9] = 3         # touching class 1: no class 2 between them
    out = spacing.resample_mask(mask[..., None], (1.0, 1.0, 1.0), (0.7, 0.45, 0.8))[..., 0]
    assert set(np.unique(out)) == {0, 1, 2, 3}
    between = out[:, :, :][(out != 0)]
    assert set(np.unique(between)) <= {1, 2, 3}
    # the thin plane is still a plane at its place
    rows = np.where((out == 2).any(axis=(0, 2)))[0]
    assert len(rows) >= 1 and all(abs(r * 0.45 - 10) <= 0.5 for r in rows)


def test_mask_round_trip_of_a_sphere_keeps_its_shape():
    grid = np.indices((96, 96, 96)).astype(np.float64)
    sphere = ((grid - 47.5) ** 2).sum(axis=0) <= 40 ** 2      # radius 40 voxels
    mask = sphere.astype(np.uint8)[..., None]
    down = spacing.resample_mask(mask, (1.0, 1.0, 1.0), (1.5, 1.5, 1.5))
    assert down.shape == (64, 64, 64, 1)
    up = spacing.resample_mask(down, (1.5, 1.5, 1.5), (1.0, 1.0, 1.0), mask.shape[:3])
    a, b = mask[..., 0] > 0, up[..., 0] > 0
    dice = 2 * (a & b).sum() / (a.sum() + b.sum())
    assert dice >= 0.99, dice


def test_binary_channels_are_each_thresholded_at_a_half():
    mask = np.zeros((6, 12, 12, 2), np.uint8)
    mask[:, 2:8, 2:8, 0] = 1
    mask[:, 5:10, 5:10, 1] = 1        # overlapping channels stay overlapping
    out = spacing.resample_mask(mask, (1.0, 1.0, 1.0), (1.0, 0.5, 0.5))
    weight = ndimage.affine_transform(mask[0, :, :, 1].astype(np.float64), [0.5, 0.5], output_shape=(24, 24),
                                      order=1, mode="nearest")
    assert out.shape == (6, 24, 24, 2) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[0, :, :, 1], (weight >= 0.5).astype(np.uint8))
    assert ((out[..., 0] == 1) & (out[..., 1] == 1)).any()


@pytest.mark.parametrize("text", ["1,1", "1,1,1,1", "a,1,1", "0,1,1", "-1,1,1", "nan,1,1", "inf,1,1", ""])
def test_parse_refuses_what_is_not_three_positive_numbers(text):
    with pytest.raises(ValueError, match="^--spacing .*e.g. 1,1,1"):
        spacing.parse_spacing(text)


def test_parse_reads_x_y_z_and_axis_order_turns_it_into_depth_height_width():
    assert spacing.parse_spacing(" 0.8, 0.7 ,2.5") == (0.8, 0.7, 2.5)
    assert spacing.axis_order((0.8, 0.7, 2.5)) == (2.5, 0.7, 0.8)
