"""``--crop nonzero|foreground``: cropping a record's ``(D, H, W, C)`` pixels and its mask to a
bounding box, as nnU-Net crops its training data to the non-zero region before resampling.

- ``nonzero`` (nnU-Net's ``crop_to_nonzero``): the box of the voxels where any channel of the
  image is non-zero. nnU-Net fills holes in that region first; a hole lies inside the region, so
  the box is the same and no hole is filled here.
- ``foreground``: the box of the mask's non-zero voxels (needs ``--class_map``), no margin.

A box is ``(k0, k1, j0, j1, i0, i1)``, half-open, in the record's grid before the crop: slices
``k0:k1``, rows ``j0:j1``, columns ``i0:i1``. A volume record is cropped in 3-D; any other
record (a slice, the frames of a multi-frame file) in-plane only, its depth kept whole. A record
whose box is empty (an all-zero image, an empty mask or no mask) is kept whole: its box is its
full extent. The image and the mask are cut by the same box.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dcm2tfrecord.dataset.choices import StrEnum

Box = tuple[int, int, int, int, int, int]


class Crop(StrEnum):
    """``--crop``: off, the image's non-zero box, or the mask's foreground box (:func:`crop_box`)."""
    OFF = "off"
    NONZERO = "nonzero"
    FOREGROUND = "foreground"


def full_box(shape) -> Box:
    """The box of a whole ``(D, H, W, ...)`` array."""
    return 0, int(shape[0]), 0, int(shape[1]), 0, int(shape[2])


def bounding_box(selected: np.ndarray, volume: bool = True) -> Box:
    """The half-open box of the true voxels of a ``(D, H, W)`` boolean array; the whole array when
    none is true; ``volume`` False keeps the depth whole (an in-plane crop)."""
    selected = np.asarray(selected, dtype=bool)
    whole = full_box(selected.shape)
    if not selected.any():
        return whole
    box = []
    for axis in range(3):
        others = tuple(a for a in range(3) if a != axis)
        hits = np.flatnonzero(selected.any(axis=others))
        box += [int(hits[0]), int(hits[-1]) + 1]
    if not volume:
        box[0], box[1] = whole[0], whole[1]
    return box[0], box[1], box[2], box[3], box[4], box[5]


def crop_box(mode: Crop, pixels: np.ndarray, mask: Optional[np.ndarray], volume: bool = True) -> Box:
    """The box ``--crop mode`` cuts ``(D, H, W, C)`` pixels (and their mask) to: any channel of the
    image non-zero, or any channel of the mask non-zero (``foreground``; no mask: the whole)."""
    if mode == Crop.NONZERO:
        return bounding_box(np.any(np.asarray(pixels) != 0, axis=3), volume)
    if mode == Crop.FOREGROUND:
        if mask is None:
            return full_box(pixels.shape)
        return bounding_box(np.any(np.asarray(mask) != 0, axis=3), volume)
    return full_box(pixels.shape)


def crop(array: np.ndarray, box: Box) -> np.ndarray:
    """``array[k0:k1, j0:j1, i0:i1]`` (contiguous; the array itself when the box is whole)."""
    if box == full_box(array.shape):
        return array
    k0, k1, j0, j1, i0, i1 = box
    return np.ascontiguousarray(array[k0:k1, j0:j1, i0:i1])
