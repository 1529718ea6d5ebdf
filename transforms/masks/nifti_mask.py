"""A NIfTI mask on its NIfTI image's grid, its values mapped to classes (issue 33).

A NIfTI mask is a label map: each voxel holds a class index of the tool that drew it (0 the
background, 1 kidney, 2 tumour, ...). Its "segments" are named by their values as text, so the
same --class_map that maps SEG segment and RTSTRUCT ROI names maps them: ``{kidney: ["1"],
tumour: ["2", "3"]}``; a value that maps to no class is background, as is 0 always.

It must lie voxel for voxel on its image: the same ``[k, j, i]`` shape and the same affine.
Affines are compared as stored, within :data:`ORIGIN_TOLERANCE_MM` for the origin and
:data:`STEP_TOLERANCE` (relative) for each voxel step (spacing times direction). NIfTI keeps
its sform in float32: 500 mm in float32 is exact to 3e-5 mm and a direction cosine to 6e-8, so
two writes of one affine (a mask saved by another tool, or from the qform's quaternion) agree
far inside these bounds, while a mask of another reconstruction, a registration or a resampled
grid misses them by whole fractions of a voxel. Masks are never resampled.

A 3-D mask of a 4-D image applies to each of its volumes; a 4-D mask of as many volumes
gives volume ``v`` its volume ``v``. Pure functions of arrays and specs; the writer reads the
files (transforms.records.build).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import classes
from dcm2tfrecord.transforms.nifti.read import NiftiSpec

ORIGIN_TOLERANCE_MM = 1e-3
STEP_TOLERANCE = 1e-4


def grid_mismatch(image: NiftiSpec, mask: NiftiSpec) -> str:
    """Why the mask does not lie on the image's grid ("" when it does): its shape, volume count
    or affine (module docstring)."""
    image_grid, mask_grid = (image.depth, image.height, image.width), (mask.depth, mask.height, mask.width)
    if image_grid != mask_grid:
        return (f"its grid is {'x'.join(map(str, mask.nifti_shape[:3]))} voxels, the image's "
                f"{'x'.join(map(str, image.nifti_shape[:3]))}")
    if mask.volumes not in (1, image.volumes):
        return f"it holds {mask.volumes} volumes, the image {image.volumes}: give one, or one per volume"
    origin = float(np.linalg.norm(mask.affine[:3, 3] - image.affine[:3, 3]))
    if origin > ORIGIN_TOLERANCE_MM:
        return f"its origin lies {origin:.3g} mm from the image's (tolerance {ORIGIN_TOLERANCE_MM} mm)"
    for axis, name in enumerate(("k", "j", "i")):
        step = image.affine[:3, axis]
        apart = float(np.linalg.norm(mask.affine[:3, axis] - step))
        if apart > STEP_TOLERANCE * max(float(np.linalg.norm(step)), 1e-12):
            return (f"its voxel step along {name} differs from the image's by {apart:.3g} mm (spacing or "
                    f"direction; tolerance {STEP_TOLERANCE} of the step)")
    return ""


COUNTED_LABELS = 1 << 16     # draw: integer label maps below this counted, not sorted


def draw(values: np.ndarray, class_map: classes.ClassMap, canvas: classes.Canvas) -> None:
    """A label map ``[k, j, i]`` drawn on ``canvas`` (of its shape): each value named as text,
    mapped by ``class_map``; ConversionError(mask_invalid) for values that are no class indices
    (fractions, negatives, not finite)."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        if not np.isfinite(values).all():
            raise ConversionError(reasons.MASK_INVALID, "it holds NaN or infinite values: a label map holds "
                                                        "class indices")
        fractional = values[values != np.round(values)]
        if fractional.size:
            raise ConversionError(reasons.MASK_INVALID,
                                  f"it holds values that are no integers (e.g. {float(fractional[0]):g}): a "
                                  f"label map holds class indices (a probability map needs a threshold first)")
    low = values.min() if values.size else 0
    if low < 0:
        raise ConversionError(reasons.MASK_INVALID, f"it holds negative values (e.g. {low:g}): a label "
                                                    f"map holds class indices, 0 the background")
    # one pass over the voxels: each present value's class by a lookup table, then one region per
    # class mapped (a mask of 2 M labels costs its voxels and its classes, not labels x voxels)
    high = values.max() if values.size and values.dtype.kind in "iu" else None
    if high is not None and high < COUNTED_LABELS:
        # integer labels below COUNTED_LABELS: the present values by a count of each (np.unique's
        # sort of every voxel cost more than the rest of the draw), each voxel's class by a table
        present = np.flatnonzero(np.bincount(values.reshape(-1)))
        table = np.zeros(int(high) + 1, np.int64)
        table[present] = [class_map.index_of(str(int(v))) if int(v) else 0 for v in present]
        lookup = table[present]
        indices = table[values]
    else:
        present, inverse = np.unique(values, return_inverse=True)
        lookup = np.asarray([class_map.index_of(str(int(v))) if int(v) else 0 for v in present], np.int64)
        indices = lookup[inverse.reshape(values.shape)]
    for index in np.unique(lookup[lookup > 0]):
        canvas.add(int(index), indices == index)


def record_mask(image: NiftiSpec, mask: NiftiSpec, voxels: np.ndarray, volume: Optional[int],
                class_map: classes.ClassMap, layout: str) -> np.ndarray:
    """The record's mask ``[k, j, i, channels]`` (classes.Canvas) for volume ``volume`` of the image
    (None: a 3-D image) from the mask file's spec and voxels (``[(t,) k, j, i, channels]``, as
    transforms.nifti.read gives them); ConversionError(mask_grid_mismatch / mask_invalid) when it
    is not a label map on the image's grid."""
    canvas = classes.Canvas((image.depth, image.height, image.width), len(class_map.classes), layout)
    draw_record(image, mask, voxels, volume, class_map, canvas)
    return canvas.array


def draw_record(image: NiftiSpec, mask: NiftiSpec, voxels: np.ndarray, volume: Optional[int],
                class_map: classes.ClassMap, canvas: classes.Canvas) -> None:
    """The mask of volume ``volume`` of the image drawn on ``canvas`` (of the image's ``[k, j, i]``):
    record_mask's checks, then draw."""
    why = grid_mismatch(image, mask)
    if why:
        raise ConversionError(reasons.MASK_GRID_MISMATCH, why)
    if mask.channels != 1:
        raise ConversionError(reasons.MASK_INVALID, f"it holds {mask.channels} channels per voxel (RGB): a label "
                                                    f"map holds one class index")
    values = voxels[..., 0]
    if mask.volumes > 1:
        values = values[volume or 0]
    draw(values, class_map, canvas)


def empty_mask(shape: tuple, class_map: classes.ClassMap, layout: str) -> np.ndarray:
    """An all-background mask of a record whose pixels are ``shape`` (``[k, j, i, ...]``)."""
    return classes.Canvas(tuple(shape[:3]), len(class_map.classes), layout).array
