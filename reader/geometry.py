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
- :func:`volumes`: a stacked 4-D record's pixels as ``[t, z, y, x, channels]``.

NumPy only: no TensorFlow, no Beam.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

AFFINE = "dicom/affine"
VOLUMES = "dicom/volumes"
VOLUME_INDEX = "dicom/volume_index"
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
