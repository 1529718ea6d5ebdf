"""--intensity zscore on arrays: transforms.images.intensity.zscore against a direct NumPy
computation of nnU-Net's ZScoreNormalization with use_mask_for_norm (nnunetv2's
preprocessing/normalization/default_normalization_schemes.py:
``mean = image[mask].mean(); std = image[mask].std(); image[mask] = (image[mask] - mean) /
max(std, 1e-8); image[~mask] = 0``, the mask being the non-zero region), and its inverse
reader.intensity.denormalize."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.reader import intensity as reader_intensity
from dcm2tfrecord.transforms.images import intensity


def nnunet_zscore(channel: np.ndarray) -> np.ndarray:
    """nnU-Net's formula, written out for one channel (float64, as nnU-Net casts to its target)."""
    image = channel.astype(np.float64).copy()
    mask = image != 0
    if not mask.any():
        mask = np.ones_like(mask)
    mean, std = image[mask].mean(), image[mask].std()
    image[mask] = (image[mask] - mean) / max(std, 1e-8)
    image[~mask] = 0
    return image


def _volume(rng, channels=1, dtype=np.int16):
    pixels = np.zeros((5, 12, 10, channels), dtype=dtype)
    pixels[1:4, 2:10, 3:8] = rng.integers(-1000, 2000, size=(3, 8, 5, channels)).astype(dtype)
    return pixels


def test_zscore_equals_nnunet_formula_per_channel():
    rng = np.random.default_rng(0)
    pixels = _volume(rng, channels=3)
    pixels[..., 2] = 0
    pixels[2, 5, 5, 2] = 7          # a channel whose region is one voxel: std 0 -> 1e-8 guard
    out, mean, std = intensity.zscore(pixels)
    assert out.dtype == np.float32 and out.shape == pixels.shape
    for c in range(3):
        np.testing.assert_allclose(out[..., c], nnunet_zscore(pixels[..., c]), rtol=1e-5, atol=1e-5)
        region = pixels[..., c] != 0
        np.testing.assert_allclose(mean[c], pixels[..., c][region].astype(np.float64).mean(), rtol=1e-6)
        np.testing.assert_allclose(std[c], pixels[..., c][region].astype(np.float64).std(), rtol=1e-6)
        assert np.all(out[..., c][~region] == 0)
    region = pixels[..., 0] != 0
    assert abs(float(out[..., 0][region].mean())) < 1e-5
    assert abs(float(out[..., 0][region].std()) - 1) < 1e-4
    assert std[2] == 0 and out[2, 5, 5, 2] == 0


def test_an_all_zero_image_uses_every_voxel_and_stays_zero():
    out, mean, std = intensity.zscore(np.zeros((2, 3, 4, 1), dtype=np.uint8))
    assert out.dtype == np.float32 and not out.any()
    assert mean.tolist() == [0.0] and std.tolist() == [0.0]


def test_float_input_and_negative_values_are_in_the_region():
    pixels = np.array([-3.0, 0.0, 1.0, 2.0], dtype=np.float32).reshape(1, 1, 4, 1)
    out, mean, std = intensity.zscore(pixels)
    np.testing.assert_allclose(out[..., 0], nnunet_zscore(pixels[..., 0]), rtol=1e-6)
    assert out[0, 0, 1, 0] == 0


def test_denormalize_round_trips_the_non_zero_region():
    rng = np.random.default_rng(1)
    pixels = _volume(rng, channels=2)
    out, mean, std = intensity.zscore(pixels)
    record = intensity.features(mean, std)
    restored = reader_intensity.denormalize(out, record)
    region = out != 0
    np.testing.assert_allclose(restored[region], pixels[region], atol=0.05)
    assert np.all(restored[~region] == 0)
    # every voxel that was non-zero and not exactly at the mean comes back; the background stays 0
    np.testing.assert_allclose(np.rint(restored), pixels, atol=0)


def test_denormalize_without_the_features_returns_the_image():
    image = np.arange(6, dtype=np.float32).reshape(1, 2, 3, 1)
    np.testing.assert_array_equal(reader_intensity.denormalize(image, {"id": "x"}), image)
    assert reader_intensity.statistics({}) is None


def test_the_features_are_declared_with_the_reader_names():
    assert set(intensity.FEATURES) == {reader_intensity.MEAN, reader_intensity.STD}
    assert intensity.EPSILON == reader_intensity.EPSILON


def test_zscore_equals_nnunetv2_zscore_normalization_where_installed():
    """nnunetv2's own ZScoreNormalization (use_mask_for_norm, seg -1 outside each channel's
    non-zero region), where nnunetv2 is importable; skipped otherwise (it is no dependency)."""
    schemes = pytest.importorskip("nnunetv2.preprocessing.normalization.default_normalization_schemes")
    rng = np.random.default_rng(3)
    pixels = _volume(rng, channels=2)
    out, _, _ = intensity.zscore(pixels)
    for c in range(2):
        seg = np.where(pixels[..., c] != 0, 0, -1)
        norm = schemes.ZScoreNormalization(use_mask_for_norm=True, intensityproperties={})
        expected = norm.run(pixels[..., c].copy(), seg)
        assert expected.dtype == np.float32
        np.testing.assert_allclose(out[..., c], expected, rtol=1e-5, atol=1e-5)
