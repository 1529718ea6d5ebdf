"""``--intensity zscore|none``: per-image intensity normalisation, nnU-Net's ``ZScoreNormalization``
with ``use_mask_for_norm`` (nnunetv2.preprocessing.normalization.default_normalization_schemes).

For each channel ``c`` of a record's ``(D, H, W, C)`` pixels, the region is the voxels where that
channel is non-zero (all voxels when none is). The mean and standard deviation of the channel's
values in the region (float64, population std) give::

    out = (x - mean) / max(std, 1e-8)    inside the region
    out = 0                              outside it

as float32. nnU-Net computes the region from its cropping's non-zero mask (``seg >= 0``) and,
with ``use_mask_for_norm`` (its default when cropping shrinks the image by a quarter or more),
sets the voxels outside it to 0; here the region is always used, so a record's background stays
0 whatever its size. Two differences from nnU-Net's mask, by choice: the region is each
channel's own non-zero voxels (nnU-Net's is any channel's, shared), and its holes are not filled
(nnU-Net fills them, ``binary_fill_holes``): a zero voxel inside the body is outside the region
and stays 0. For images whose background is 0 and whose body holds no exact 0 (MRI, nnU-Net's
use of this scheme) the result is the same. ``ct`` (clip and z-score with the dataset's
foreground fingerprint, computed in the job) is transforms.images.fingerprint.

The mean and std of each channel are kept as ``intensity/mean`` and ``intensity/std`` so that
``reader.intensity.denormalize`` undoes it (``x * std + mean`` inside the region). Masks are
untouched. The step comes after ``--crop`` and before ``--spacing`` (nnU-Net's
DefaultPreprocessor: crop, normalise, resample).
"""
from __future__ import annotations

import numpy as np

from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.features import INTENSITY_MEAN as MEAN
from dcm2tfrecord.dataset.features import INTENSITY_STD as STD

EPSILON = 1e-8          # nnU-Net's: max(std, 1e-8)
FEATURES = {
    MEAN: {"dtype": "float", "shape": [-1],
           "description": "--intensity zscore: per channel, the mean of the image's non-zero voxels "
                          "(all voxels when none is) before normalisation"},
    STD: {"dtype": "float", "shape": [-1],
          "description": "--intensity zscore: per channel, the standard deviation of those voxels; "
                         "the image was (x - mean) / max(std, 1e-8) there, 0 elsewhere"},
}


class Intensity(StrEnum):
    """``--intensity``: none, a z-score per image (:func:`zscore`), or nnU-Net's CT scheme with
    the dataset's fingerprint (transforms.images.fingerprint)."""
    NONE = "none"
    ZSCORE = "zscore"
    CT = "ct"           # the dataset's fingerprint: transforms.images.fingerprint


def zscore(pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(normalised float32 (D, H, W, C) pixels, mean per channel, std per channel)`` (module
    docstring): per channel over its non-zero voxels (all when none is), zero outside them."""
    values = np.asarray(pixels)
    out = np.zeros(values.shape, dtype=np.float32)
    channels = values.shape[-1]
    means = np.zeros(channels, dtype=np.float64)
    stds = np.zeros(channels, dtype=np.float64)
    for c in range(channels):
        channel = values[..., c].astype(np.float64)
        region = channel != 0
        if not region.any():
            region = np.ones_like(region)
        inside = channel[region]
        means[c], stds[c] = float(inside.mean()), float(inside.std())
        out[..., c][region] = ((inside - means[c]) / max(stds[c], EPSILON)).astype(np.float32)
    return out, means.astype(np.float32), stds.astype(np.float32)


def features(mean: np.ndarray, std: np.ndarray) -> dict:
    """The record's ``intensity/*`` features."""
    return {MEAN: np.asarray(mean, dtype=np.float32).reshape(-1),
            STD: np.asarray(std, dtype=np.float32).reshape(-1)}
