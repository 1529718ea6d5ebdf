"""A record's place in the patient, from its ``dicom/affine`` (docs/DICOM.md, "Geometry").

The converter writes ``dicom/affine``: 16 numbers, row-major 4 x 4, mapping the voxel index
``[k, j, i, 1]`` of the record's ``[depth, height, width]`` pixels (slice, row, column) to
DICOM's patient coordinates in millimetres, LPS (x to the patient's left, y posterior, z
head). These helpers take a record as ``RandomAccess`` or ``load(..., output="dict")``
gives it (a dict of arrays or tensors) and turn that affine into the other conventions:

- :func:`affine`: the 4 x 4 LPS matrix itself (None when the record has no geometry);
- :func:`nifti_affine`: NIfTI's, for the array ``volume.transpose(2, 1, 0)`` (``[i, j, k]``,
  as nibabel and dcm2niix store it): RAS, x to the right, y anterior;
- :func:`itk_geometry`: ITK's (SimpleITK) origin, spacing and direction for the array as it
  is (``sitk.GetImageFromArray(volume)`` takes ``[k, j, i]``);
- :func:`volumes`: a stacked 4-D record's pixels as ``[t, z, y, x, channels]``;
- :func:`to_original_grid`: a label array on the grid of a record resampled by ``convert
  --spacing`` or cut by ``convert --crop`` (a model's prediction) put back on the source's
  grid (by nearest neighbour; zeros outside a crop's box).

NumPy only: no TensorFlow, no Beam.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from dcm2tfrecord.dataset.features import DEPTH, HEIGHT, WIDTH

AFFINE = "dicom/affine"
VOLUMES = "dicom/volumes"
VOLUME_INDEX = "dicom/volume_index"
# convert --spacing: the source's grid before resampling (transforms.dicom.patient_space)
ORIGINAL_SHAPE = "dicom/original_shape"
ORIGINAL_AFFINE = "dicom/original_affine"
CROP_BOX = "dicom/crop_box"        # convert --crop: the box cut, [k0, k1, j0, j1, i0, i1] in that grid
LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])
# [k, j, i] -> [i, j, k]: the voxel axes reversed
_REVERSED = np.array([[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]], dtype=float)


def _values(record: Mapping, name: str) -> np.ndarray:
    value = record[name]
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "to_list"):            # a RaggedTensor row
        value = value.to_list()
    return np.asarray(value, dtype=np.float64).reshape(-1)


def affine(record: Mapping) -> Optional[np.ndarray]:
    """The record's 4 x 4 LPS affine (voxel ``[k, j, i, 1]`` -> mm), or None without geometry."""
    if AFFINE not in record:
        return None
    values = _values(record, AFFINE)
    if values.size != 16:
        return None
    return values.reshape(4, 4)


def nifti_affine(lps: np.ndarray) -> np.ndarray:
    """NIfTI's RAS affine for ``volume.transpose(2, 1, 0)`` from the LPS affine of ``[k, j, i]``."""
    return LPS_TO_RAS @ np.asarray(lps, float) @ _REVERSED


def itk_geometry(lps: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """(origin, spacing, direction) as ITK/SimpleITK set them on ``GetImageFromArray(volume)``:
    ITK's physical space is LPS and its index is ``[i, j, k]``, so its axis d is our column
    ``2 - d``; direction is row-major 3 x 3, one unit column per axis. A sheared affine (a
    tilted gantry) has no exact ITK direction: its slice axis is then the step's direction."""
    matrix = np.asarray(lps, float)[:3, :3][:, ::-1]       # columns i, j, k
    spacing = np.linalg.norm(matrix, axis=0)
    direction = matrix / np.where(spacing > 0, spacing, 1.0)
    origin = np.asarray(lps, float)[:3, 3]
    return tuple(origin.tolist()), tuple(spacing.tolist()), tuple(direction.reshape(-1).tolist())


def volumes(pixels: np.ndarray, record: Mapping) -> np.ndarray:
    """A record's ``[depth, height, width, channels]`` pixels as ``[t, z, height, width, channels]``:
    t = ``dicom/volumes`` for a stacked 4-D record (``dicom/volume_index`` -1), else 1."""
    pixels = np.asarray(pixels)
    count = 1
    if VOLUMES in record and VOLUME_INDEX in record and int(_values(record, VOLUME_INDEX)[0]) < 0:
        count = int(_values(record, VOLUMES)[0])
    if pixels.shape[0] % count:
        raise ValueError(f"depth {pixels.shape[0]} is not a multiple of dicom/volumes {count}")
    return pixels.reshape((count, pixels.shape[0] // count) + pixels.shape[1:])


def to_original_grid(labels: np.ndarray, record: Mapping) -> np.ndarray:
    """A label array on the grid of a record that ``convert --spacing`` resampled or ``convert
    --crop`` cut, or both (``[depth, height, width]`` or ``[depth, height, width, channels]``: a
    predicted label map, one channel per class, or the record's own mask) on the source's grid,
    ``dicom/original_shape``. A cropped record's voxels go back into its box, ``dicom/crop_box``,
    zeros (background) outside it; a resampled one's by nearest neighbour: each source voxel takes
    the value of the record's voxel nearest to its centre, found through the two affines
    (``dicom/affine`` and ``dicom/original_affine``: the same place in the patient, in mm); a
    source voxel past the record's grid takes its edge voxel. Values are copied, never blended: a
    label map stays a label map. ValueError for a record without these features (neither
    resampled nor cropped, or resampled without geometry)."""
    labels = np.asarray(labels)
    if ORIGINAL_SHAPE not in record:
        raise ValueError("the record has no dicom/original_shape: it was not resampled by convert --spacing "
                         "nor cut by convert --crop")
    shape = tuple(int(n) for n in _values(record, ORIGINAL_SHAPE))
    if all(name in record for name in (DEPTH, HEIGHT, WIDTH)) and labels.shape[:3] != record_shape(record):
        raise ValueError(f"labels of shape {labels.shape} are not on the record's grid {record_shape(record)}")
    box = tuple(int(n) for n in _values(record, CROP_BOX)) if CROP_BOX in record else None
    current = affine(record)
    original = _values(record, ORIGINAL_AFFINE) if ORIGINAL_AFFINE in record else np.zeros(0)
    if box is not None and len(box) == 6 and len(shape) == 3 \
            and labels.shape[:3] == (box[1] - box[0], box[3] - box[2], box[5] - box[4]) \
            and (current is None or original.size != 16
                 or np.allclose(current[:3, :3], original.reshape(4, 4)[:3, :3], rtol=1e-5, atol=1e-6)):
        out = np.zeros(shape + labels.shape[3:], dtype=labels.dtype)   # cut, not resampled: put back
        out[box[0]:box[1], box[2]:box[3], box[4]:box[5]] = labels
        return out
    if current is None or original.size != 16 or len(shape) != 3:
        raise ValueError("the record has no dicom/affine and dicom/original_affine to map its grid back with")
    # source voxel [k, j, i, 1] -> mm -> the record's voxel index
    mapping = np.linalg.inv(current) @ original.reshape(4, 4)
    j, i = np.meshgrid(np.arange(shape[1]), np.arange(shape[2]), indexing="ij")
    plane = np.stack([np.zeros_like(j), j, i, np.ones_like(j)]).reshape(4, -1).astype(np.float64)
    out = np.empty(shape + labels.shape[3:], dtype=labels.dtype)
    limits = np.asarray(labels.shape[:3])[:, None] - 1
    for k in range(shape[0]):
        plane[0] = k
        index = np.clip(np.rint((mapping @ plane)[:3]), 0, limits).astype(np.intp)
        out[k] = labels[index[0], index[1], index[2]].reshape(shape[1:] + labels.shape[3:])
    if box is not None and len(box) == 6:          # --crop: nothing of the record lies outside its box
        inside = np.zeros(shape, dtype=bool)
        inside[box[0]:box[1], box[2]:box[3], box[4]:box[5]] = True
        out[~inside] = 0
    return out


def record_shape(record: Mapping) -> tuple[int, int, int]:
    """``[depth, height, width]`` of a record (its ``depth``, ``height`` and ``width`` features)."""
    return tuple(int(_values(record, name)[0]) for name in (DEPTH, HEIGHT, WIDTH))  # type: ignore[return-value]
