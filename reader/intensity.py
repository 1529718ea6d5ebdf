"""A record's intensities back from ``convert --intensity zscore`` (nnU-Net's z-score) or
``--intensity ct`` (nnU-Net's CT scheme with the dataset's fingerprint).

The converter wrote, per channel ``c``, ``(x - mean[c]) / max(std[c], 1e-8)`` over the image's
non-zero voxels and 0 elsewhere, and kept ``intensity/mean`` and ``intensity/std`` (one value a
channel). :func:`denormalize` undoes it: ``x * max(std, 1e-8) + mean`` where the normalised
image is non-zero, 0 elsewhere (the background the source had; a voxel exactly at the mean,
which normalised to 0, comes back as 0 too). After ``--spacing`` it is the resampled source's
values, as the resampling left them.

``ct`` clipped every voxel to ``intensity/clip_low`` .. ``intensity/clip_high`` (the train split's
foreground 0.5 and 99.5 percentiles), then wrote ``(x - mean) / max(std, 1e-8)`` everywhere, with
the dataset's mean and std: :func:`denormalize` gives ``x * max(std, 1e-8) + mean`` everywhere,
the source's values where they lay within the clip bounds, the bound where they did not.

NumPy only: no TensorFlow, no Beam.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

MEAN = "intensity/mean"
STD = "intensity/std"
CLIP_LOW = "intensity/clip_low"      # --intensity ct only
EPSILON = 1e-8


def _vector(value) -> np.ndarray:
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value, dtype=np.float64).reshape(-1)


def statistics(record: Mapping) -> tuple[np.ndarray, np.ndarray] | None:
    """``(mean, std)`` per channel of a record converted with ``--intensity zscore`` (a dict as
    ``RandomAccess`` or ``load(..., output="dict")`` gives it), None without them."""
    if MEAN not in record or STD not in record:
        return None
    mean, std = _vector(record[MEAN]), _vector(record[STD])
    if mean.size == 0 or mean.size != std.size:
        return None
    return mean, std


def denormalize(image, record: Mapping) -> np.ndarray:
    """The record's ``image`` (``[..., channels]``, the normalised float32 pixels or a model's
    output on them) in the source's intensities (module docstring), float64; the image as it is
    when the record has no ``intensity/*`` features."""
    if hasattr(image, "numpy"):
        image = image.numpy()
    values = np.asarray(image, dtype=np.float64)
    found = statistics(record)
    if found is None:
        return values
    mean, std = found
    restored = values * np.maximum(std, EPSILON) + mean
    if CLIP_LOW in record:      # ct: every voxel was normalised
        return restored
    return np.where(values != 0, restored, 0.0)
