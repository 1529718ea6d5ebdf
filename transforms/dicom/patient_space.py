"""Where a record's voxels lie in the patient: positions, orientation and the LPS affine.

DICOM's patient coordinate system (PS3.3 C.7.6.2.1.1) is LPS: x grows to the
patient's Left, y to Posterior, z to Superior (Head), in millimetres. Every
DICOM record carries (docs/DICOM.md, "Geometry"):

- ``dicom/image_position_patient``: Image Position (Patient) of each slice, 3 per
  slice in record order (the centre of the first transmitted voxel);
- ``dicom/image_orientation_patient``: Image Orientation (Patient), the row
  direction cosines (the direction of increasing column index) then the column
  direction cosines (increasing row index);
- ``dicom/affine``: 16 numbers, row-major 4 x 4, mapping the voxel index
  ``[k, j, i, 1]`` of ``image_raw``'s ``[depth, height, width]`` to ``[x, y, z, 1]``
  in LPS mm. Column 0 is the step from one slice to the next, column 1 the
  step down one row (column cosines x row spacing), column 2 the step along a
  row (row cosines x column spacing), column 3 the first slice's position.

The slice step is measured from the positions: (last - first) / (n - 1), so a
tilted-gantry series keeps its shear and a series ordered head-first keeps its
direction. A record of one slice steps along the slice normal (row x column
cosines) by Spacing Between Slices, else Slice Thickness, else 1 mm: nibabel's
rule for one slice. Without Image Orientation, Image Position and Pixel
Spacing (a radiograph, a secondary capture) the three features are empty.

The features are float32: geometry that float32 cannot hold (a position of 1e300 mm, a step
that overflows) is ConversionError(invalid_value), never a record of an infinite affine.

Pure functions of numbers: no header is read here (transforms.dicom.metadata
reads the header; transforms.series.volumes orders the slices).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from dcm2tfrecord.dataset import features as record_format, reasons
from dcm2tfrecord.transforms.errors import ConversionError

POSITION = "dicom/image_position_patient"
ORIENTATION = "dicom/image_orientation_patient"
AFFINE = record_format.AFFINE

FEATURES = {
    POSITION: {"dtype": "float", "shape": [-1],
               "description": "Image Position (Patient) of each slice, LPS mm, 3 per slice in record order"},
    ORIENTATION: {"dtype": "float", "shape": [-1],
                  "description": "Image Orientation (Patient): row then column direction cosines "
                                 "(6 per slice when slices differ)"},
    AFFINE: {"dtype": "float", "shape": [-1],
             "description": "4x4 row-major, voxel index [k, j, i, 1] -> LPS mm; empty without "
                            "position, orientation and pixel spacing (docs/DICOM.md, Geometry)"},
}

# --spacing (transforms.images.spacing): what the record was before it was resampled, so that a
# prediction on its grid can be put back on the source's (reader.geometry.to_original_grid)
ORIGINAL_SHAPE = record_format.ORIGINAL_SHAPE
ORIGINAL_SPACING = "dicom/original_spacing"
ORIGINAL_AFFINE = "dicom/original_affine"
PIXEL_SPACING = record_format.PIXEL_SPACING
SLICE_SPACING = record_format.SLICE_SPACING

SPACING_FEATURES = {
    ORIGINAL_SHAPE: {"dtype": "int64", "shape": [-1],
                     "description": "--spacing: [depth, height, width] of the source before resampling"},
    ORIGINAL_SPACING: {"dtype": "float", "shape": [-1],
                       "description": "--spacing: the source's voxel spacing before resampling, mm, "
                                      "[depth, height, width] order (slice step, row, column); 0 unknown"},
    ORIGINAL_AFFINE: {"dtype": "float", "shape": [-1],
                      "description": "--spacing: dicom/affine before resampling (4x4 row-major, voxel "
                                     "[k, j, i, 1] of the source -> LPS mm); empty without geometry"},
}

# --crop (transforms.images.crop): the box the record was cut to, in the source's grid (with
# dicom/original_* above, which then describe the source before the crop and any resampling)
CROP_BOX = record_format.CROP_BOX
CROP_FEATURES = {
    CROP_BOX: {"dtype": "int64", "shape": [-1],
               "description": "--crop: the box the record was cut to, [k0, k1, j0, j1, i0, i1] half-open in "
                              "the source's grid (dicom/original_shape); the whole grid when nothing was cut"},
}


def floats(value, count: int) -> tuple[float, ...]:
    """``count`` finite floats from a DICOM multi-value, or () when it is not that."""
    try:
        if value is None or isinstance(value, (str, bytes)):
            return ()
        out = tuple(float(v) for v in value)
    except (TypeError, ValueError):
        return ()
    if len(out) != count or not all(map(math.isfinite, out)):
        return ()
    return out


# Image Orientation (Patient) read as absent unless its two vectors are unit length and normal
# to each other within this (rounded cosines are 1e-5 off; 0\0\0\0\0\0 of a secondary capture
# or an anonymiser is no orientation)
ORIENTATION_TOLERANCE = 1e-2


def orientation(value) -> tuple[float, ...]:
    """Image Orientation (Patient) as 6 floats, or () when it is not two unit, orthogonal
    direction cosine vectors (``floats`` and ORIENTATION_TOLERANCE)."""
    cosines = floats(value, 6)
    if not cosines:
        return ()
    rx, ry, rz, cx, cy, cz = cosines      # plain floats: a record's probe reads this once or more
    if abs(math.sqrt(rx * rx + ry * ry + rz * rz) - 1) > ORIENTATION_TOLERANCE \
            or abs(math.sqrt(cx * cx + cy * cy + cz * cz) - 1) > ORIENTATION_TOLERANCE \
            or abs(rx * cx + ry * cy + rz * cz) > ORIENTATION_TOLERANCE:
        return ()
    return cosines


def _unit(vector: Sequence[float]) -> Optional[list[float]]:
    """A direction cosine vector at unit length: files store them rounded (0.9272, -0.3746 is
    1.0000125 long: 0.003 mm across 512 pixels of 0.43 mm), as dcm2niix normalises them."""
    x, y, z = (float(v) for v in vector)
    length = math.sqrt(x * x + y * y + z * z)
    return [x / length, y / length, z / length] if length > 0 and math.isfinite(length) else None


def _cross(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]


def normal(orientation: Sequence[float]) -> np.ndarray:
    """The slice normal: row cosines x column cosines (each at unit length)."""
    row, col = _unit(orientation[:3]), _unit(orientation[3:6])
    if row is None or col is None:
        return np.zeros(3)
    return np.asarray(_cross(row, col))


def affine(orientation: Sequence[float], positions: Sequence[Sequence[float]],
           pixel_spacing: Sequence[float], single_spacing: float = 1.0) -> Optional[np.ndarray]:
    """The 4x4 LPS affine of a record (module docstring), or None without its geometry.

    ``positions`` are the slices' Image Positions in record order; ``pixel_spacing`` is
    DICOM's (row spacing, column spacing); ``single_spacing`` the slice step of a record of
    one slice (or of slices that all share one position).
    """
    if len(orientation) != 6 or len(pixel_spacing) != 2 or not positions:
        return None
    row, col = _unit(orientation[:3]), _unit(orientation[3:6])
    if row is None or col is None:
        return None
    first = [float(v) for v in positions[0]]
    step: list[float] = []
    if len(positions) > 1:
        n = len(positions) - 1
        step = [(float(b) - a) / n for a, b in zip(first, positions[-1])]
    if not any(step):
        step = [v * single_spacing for v in _cross(row, col)]
    rs, cs = float(pixel_spacing[0]), float(pixel_spacing[1])
    return np.array([[step[0], col[0] * rs, row[0] * cs, first[0]],
                     [step[1], col[1] * rs, row[1] * cs, first[1]],
                     [step[2], col[2] * rs, row[2] * cs, first[2]],
                     [0.0, 0.0, 0.0, 1.0]])


def single_slice_spacing(spacing_between, thickness) -> float:
    """The slice step of one slice: Spacing Between Slices, else Slice Thickness, else 1 mm."""
    for value in (spacing_between, thickness):
        if len(value) and math.isfinite(value[0]) and float(value[0]) > 0:
            return float(value[0])
    return 1.0


_FEATURE_NAMES = {POSITION: "Image Position (Patient)", ORIENTATION: "Image Orientation (Patient)",
                  AFFINE: "the affine"}


def _vector(values, feature: str = AFFINE) -> np.ndarray:
    """``values`` as the float32 a geometry feature holds; ConversionError(invalid_value) when one
    is not finite there: a position of 1e300 mm is a float64 but past float32's 3.4e38, and a
    record whose geometry is +-inf places nothing (an overflow is refused, never printed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.asarray(values, dtype=np.float32).reshape(-1)
    if not np.isfinite(out).all():
        raise ConversionError(reasons.INVALID_VALUE,
                              f"{_FEATURE_NAMES.get(feature, feature)} is not finite as a record holds it "
                              f"(float32, at most {float(np.finfo(np.float32).max):.3g} mm): coordinates of "
                              f"{_largest(values):.3g} give the record no place in the patient")
    return out


def _largest(values) -> float:
    with np.errstate(over="ignore", invalid="ignore"):
        flat = np.abs(np.asarray(values, dtype=np.float64).reshape(-1))
    finite = flat[np.isfinite(flat)]
    return float(finite.max()) if len(finite) == len(flat) and len(flat) else float("inf")


def features(orientation: Sequence[float], positions: Sequence[Sequence[float]],
             pixel_spacing: Sequence[float], single_spacing: float = 1.0) -> dict:
    """The three geometry features of a record; each empty when unknown."""
    matrix = affine(orientation, positions, pixel_spacing, single_spacing)
    return {POSITION: _vector([x for p in positions for x in p], POSITION),
            ORIENTATION: _vector(orientation if len(orientation) == 6 else (), ORIENTATION),
            AFFINE: _vector(matrix if matrix is not None else [])}


def from_affine(matrix: np.ndarray, depth: int) -> dict:
    """The three geometry features of a record of ``depth`` slices whose 4 x 4 LPS affine is
    ``matrix`` (a NIfTI's, transforms.nifti.read): slice k's position is ``matrix @ [k, 0, 0, 1]``,
    the orientation the affine's column 2 (along a row) then column 1 (down a column), each at
    unit length (empty when one is zero)."""
    matrix = np.asarray(matrix, dtype=np.float64).reshape(4, 4)
    positions = [(matrix @ np.array([k, 0.0, 0.0, 1.0]))[:3] for k in range(depth)]
    row, col = _unit(matrix[:3, 2].tolist()), _unit(matrix[:3, 1].tolist())
    return {POSITION: _vector([x for p in positions for x in p], POSITION),
            ORIENTATION: _vector(row + col if row is not None and col is not None else (), ORIENTATION),
            AFFINE: _vector(matrix)}


def resized(features: dict, size: tuple[int, int], scaled: tuple[int, int], offset: tuple[int, int]) -> dict:
    """The geometry features of a record whose slices were resized (transforms.images.geometry):
    from ``size`` (rows, columns) to ``scaled`` and placed at ``offset`` (rows, columns) in the
    output (a pad's margin, a crop's negative start). Pixel centres map as Pillow resamples them:
    output row j' lies at input row (j' - offset + 0.5) * rows / scaled_rows - 0.5."""
    matrix = np.asarray(features.get(AFFINE, ()), dtype=np.float64)
    positions = np.asarray(features.get(POSITION, ()), dtype=np.float64).reshape(-1, 3)
    if matrix.size != 16:
        return features
    matrix = matrix.reshape(4, 4)
    sy, sx = scaled[0] / size[0], scaled[1] / size[1]
    cy, cx = (0.5 - offset[0]) / sy - 0.5, (0.5 - offset[1]) / sx - 0.5
    change = np.array([[1.0, 0, 0, 0], [0, 1 / sy, 0, cy], [0, 0, 1 / sx, cx], [0, 0, 0, 1]])
    out = dict(features)
    out[AFFINE] = _vector(matrix @ change)
    if len(positions):
        shift = cy * matrix[:3, 1] + cx * matrix[:3, 2]
        out[POSITION] = _vector(positions + shift, POSITION)
    return out


def voxel_spacing(features: dict) -> tuple[float, float, float]:
    """A record's voxel spacing, mm, ``(depth, height, width)``: the lengths of its affine's
    columns (slice step, row spacing, column spacing), else ``dicom/pixel_spacing`` (row, column)
    and ``dicom/slice_spacing``; 0.0 where unknown."""
    matrix = np.asarray(features.get(AFFINE, ()), dtype=np.float64)
    if matrix.size == 16:
        lengths = np.linalg.norm(matrix.reshape(4, 4)[:3, :3], axis=0)
        return float(lengths[0]), float(lengths[1]), float(lengths[2])
    pixel = np.asarray(features.get(PIXEL_SPACING, ()), dtype=np.float64).reshape(-1)
    step = np.asarray(features.get(SLICE_SPACING, ()), dtype=np.float64).reshape(-1)
    rows, columns = (float(pixel[0]), float(pixel[1])) if pixel.size == 2 else (0.0, 0.0)
    return (float(step[0]) if step.size else 0.0), rows, columns


def respaced(features: dict, size: Sequence[int], original: Sequence[float], scale: Sequence[float],
             target: Sequence[float], shape: Sequence[int], depth: bool) -> dict:
    """The geometry features of a record resampled by --spacing (transforms.images.spacing) from
    ``size`` voxels of ``original`` spacing to ``shape`` voxels of ``target`` spacing (both
    ``(depth, height, width)``), output voxel ``n`` lying at source index ``n * scale`` along each
    axis (``depth``: whether the slices were resampled too): the affine's columns scaled, its first
    voxel's centre and its directions kept; each slice's position from it; ``dicom/pixel_spacing``
    (and, resampling the slices, ``dicom/slice_spacing``) the target's; and the source's shape,
    spacing and affine as ``dicom/original_*``, which undo it."""
    out = dict(features)
    matrix = np.asarray(features.get(AFFINE, ()), dtype=np.float64)
    if ORIGINAL_SHAPE not in features:      # else --crop kept them: the source before both steps
        out[ORIGINAL_SHAPE] = np.asarray([int(n) for n in size], dtype=np.int64)
        out[ORIGINAL_SPACING] = _vector(original, ORIGINAL_SPACING)
        out[ORIGINAL_AFFINE] = _vector(matrix if matrix.size == 16 else [], ORIGINAL_AFFINE)
    if matrix.size == 16:
        changed = matrix.reshape(4, 4) @ np.diag([float(scale[0]), float(scale[1]), float(scale[2]), 1.0])
        out[AFFINE] = _vector(changed)
        if depth:
            out[POSITION] = _vector([x for k in range(int(shape[0]))
                                     for x in (changed @ np.array([k, 0.0, 0.0, 1.0]))[:3]], POSITION)
    if np.asarray(features.get(PIXEL_SPACING, ())).size == 2:
        out[PIXEL_SPACING] = _vector([target[1], target[2]], PIXEL_SPACING)
    if depth and SLICE_SPACING in features:
        out[SLICE_SPACING] = _vector([target[0]], SLICE_SPACING)
    return out


def cropped(features: dict, size: Sequence[int], box: Sequence[int]) -> dict:
    """The geometry features of a record of ``size`` voxels ``(depth, height, width)`` cut by
    --crop (transforms.images.crop) to ``box`` ``(k0, k1, j0, j1, i0, i1)``: the affine's first
    voxel moved to the box's (``affine @ [k0, j0, i0, 1]``), its columns kept; the slices'
    positions cut to ``k0:k1`` and moved in-plane by ``j0`` rows and ``i0`` columns; and the
    source's shape, spacing and affine as ``dicom/original_*`` with the box as ``dicom/crop_box``,
    which undo it (reader.geometry.to_original_grid)."""
    out = dict(features)
    matrix = np.asarray(features.get(AFFINE, ()), dtype=np.float64)
    k0, k1, j0, j1, i0, i1 = (int(n) for n in box)
    out[ORIGINAL_SHAPE] = np.asarray([int(n) for n in size], dtype=np.int64)
    out[ORIGINAL_SPACING] = _vector(voxel_spacing(features), ORIGINAL_SPACING)
    out[ORIGINAL_AFFINE] = _vector(matrix if matrix.size == 16 else [], ORIGINAL_AFFINE)
    out[CROP_BOX] = np.asarray([k0, k1, j0, j1, i0, i1], dtype=np.int64)
    if matrix.size != 16:
        return out
    matrix = matrix.reshape(4, 4)
    moved = matrix.copy()
    moved[:, 3] = matrix @ np.array([k0, j0, i0, 1.0])
    out[AFFINE] = _vector(moved)
    positions = np.asarray(features.get(POSITION, ()), dtype=np.float64).reshape(-1, 3)
    if len(positions):
        if len(positions) == int(size[0]):
            positions = positions[k0:k1]
        out[POSITION] = _vector(positions + j0 * matrix[:3, 1] + i0 * matrix[:3, 2], POSITION)
    return out


def spacing_along_normal(features: dict) -> float:
    """The slice step of a record's affine along its slice normal (mm), 0.0 for one slice or
    without an affine."""
    matrix = np.asarray(features.get(AFFINE, ()), dtype=np.float64)
    positions = np.asarray(features.get(POSITION, ()), dtype=np.float64).reshape(-1, 3)
    if matrix.size != 16 or len(positions) < 2:
        return 0.0
    matrix = matrix.reshape(4, 4)
    direction = np.cross(matrix[:3, 2], matrix[:3, 1])
    length = float(np.linalg.norm(direction))
    return abs(float(np.dot(matrix[:3, 0], direction / length))) if length > 0 else 0.0


def one_slice(features: dict, k: int) -> dict:
    """The geometry features of slice ``k`` alone, from a record's (``--frames split`` of a
    file whose positions are known slice by slice: a Siemens mosaic)."""
    positions = np.asarray(features[POSITION], dtype=np.float32).reshape(-1, 3)
    if len(positions) <= 1:
        return features
    out = dict(features)
    out[POSITION] = positions[k]
    matrix = np.asarray(features[AFFINE], dtype=np.float64)
    if matrix.size == 16:
        matrix = matrix.reshape(4, 4).copy()
        matrix[:, 3] = matrix @ np.array([k, 0.0, 0.0, 1.0])
        out[AFFINE] = _vector(matrix)
    return out


# ---------------------------------------------------------------- even spacing

# Two slice steps are the same when they differ by at most GAP_RELATIVE of the step or
# GAP_ABSOLUTE mm, whichever is larger (docs/DICOM.md, "Slice spacing"). The floor sits above
# the rounding of positions written with two decimals (+-0.005 mm each, so +-0.01 mm a step);
# the relative part keeps a thin slice's check as strict as a thick one's, far below a missing
# slice (a step 100 % longer) or any overlap vendors reconstruct with.
GAP_RELATIVE = 0.01
GAP_ABSOLUTE = 0.02   # mm


def step_tolerance(step_mm: float) -> float:
    return max(GAP_ABSOLUTE, GAP_RELATIVE * abs(step_mm))


def even_runs(positions: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """Positions in slice order -> the ``[start, stop)`` ranges of its evenly spaced runs.

    The series' step is its median step (the 3-D vector from one position to the next whose
    length is the median); a step that differs from it by more than ``step_tolerance`` breaks
    the series there. Slices left alone between breaks that step evenly among themselves (a
    second spacing) are joined into a run of their own. A tilted gantry's steps carry the same
    in-plane offset each time and stay one run; a slice off the line breaks it.
    """
    points = np.asarray(positions, float).reshape(-1, 3)
    n = len(points)
    if n <= 2:
        return [(0, n)] if n else []
    steps = np.diff(points, axis=0)
    lengths = np.linalg.norm(steps, axis=1)
    reference = steps[int(np.argsort(lengths, kind="stable")[len(lengths) // 2])]
    tolerance = step_tolerance(float(np.linalg.norm(reference)))
    regular = np.linalg.norm(steps - reference, axis=1) <= tolerance
    runs: list[tuple[int, int]] = []
    start = 0
    for i, ok in enumerate(regular):
        if not ok:
            runs.append((start, i + 1))
            start = i + 1
    runs.append((start, n))
    return _join_singles(runs, steps)


def _join_singles(runs: list[tuple[int, int]], steps: np.ndarray) -> list[tuple[int, int]]:
    """Consecutive one-slice runs joined while their steps equal each other (``joined`` marks a
    run made so; a run the median made is never extended)."""
    out: list[list] = []      # [start, stop, joined]
    for start, stop in runs:
        if stop - start == 1 and out and out[-1][1] == start:
            first, last, joined = out[-1]
            if last - first == 1 or joined:
                reference = steps[first]
                if np.linalg.norm(steps[start - 1] - reference) <= step_tolerance(float(np.linalg.norm(reference))):
                    out[-1] = [first, stop, True]
                    continue
        out.append([start, stop, False])
    return [(a, b) for a, b, _ in out]
