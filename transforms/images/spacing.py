"""``--spacing X,Y,Z``: resampling a record's ``(D, H, W, C)`` pixels and its mask to a target
voxel spacing (mm), as nnU-Net prepares its training data.

Spacings here are in the array's axis order, ``(depth, height, width)``: the step between
slices, between rows (DICOM's row spacing, Y) and between columns (column spacing, X);
:func:`parse_spacing` reads the option's ``X,Y,Z`` and :func:`axis_order` turns it around.

The output grid keeps the first voxel's centre and the axis directions: output voxel ``n``
along an axis lies at input index ``n * target / spacing`` (so the new spacing is exactly the
target), and the grid has ``round(size * spacing / target)`` voxels (at least 1) along it
(:func:`planned_shape`), which covers the input's extent to within half a voxel; a sample past
the last input voxel takes the nearest edge value. SciPy (``scipy.ndimage``) interpolates,
never code of ours:

- an image (:func:`resample_image`) with a third-order spline, computed in float and cast
  back to its dtype (integers rounded and clipped to the dtype's range); when the data are
  anisotropic (a slice step at least :data:`ANISOTROPY` times the larger in-plane spacing,
  nnU-Net's rule, of the input or of the target) each slice is resampled in-plane with order 3
  and the slices are then resampled along the slice axis by nearest neighbour (nnU-Net's
  ``resample_data_or_seg`` with ``order_z=0``);
- a mask (:func:`resample_mask`) class by class, as nnU-Net does: for each class ``c > 0`` the
  indicator ``mask == c`` is resampled linearly (order 1; in-plane only, then nearest along the
  slices, when anisotropic), and each voxel takes the class of the largest, or background where
  no class reaches 0.5: no class is invented, none blends into another. A mask of one channel per
  class (``--mask_layout binary``) has each channel resampled so and thresholded at 0.5.

``--spacing auto`` takes the target from the dataset as nnU-Net v2's planner does
(:func:`auto_spacing`, ``ExperimentPlanner.determine_fullres_target_spacing``): the per-axis
median of the volume records' spacings, the coarsest axis of an anisotropic dataset brought
down to its 10th percentile.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Iterable, Optional, Sequence

import numpy as np

from dcm2tfrecord.transforms.images.geometry import _cast_like
from dcm2tfrecord.transforms.record_model import ImageSpec

ANISOTROPY = 3.0       # nnU-Net's ANISO_THRESHOLD: slice step / in-plane spacing
IMAGE_ORDER = 3        # the image's spline order (nnU-Net's)
MASK_ORDER = 1         # a class indicator's (nnU-Net's order for segmentations)
THRESHOLD = 0.5        # a class holds a voxel whose resampled indicator reaches this

AUTO = "auto"          # --spacing auto: the target from the dataset (auto_spacing)
AUTO_RULE = "nnunetv2_fullres_target_spacing"   # how dataset.json names the rule auto_spacing applies
LOW_PERCENTILE = 10.0  # nnU-Net: the anisotropic axis' target, a percentile of its spacings
FLOOR_STEP = 1e-5      # nnU-Net: that target never below the other axes' (their largest + this)

Spacing = tuple[float, float, float]


def parse_spacing(text: str):
    """``--spacing X,Y,Z`` (mm: column spacing, row spacing, slice step) -> ``(x, y, z)``, or
    ``auto`` -> :data:`AUTO` (the target taken from the dataset, :func:`auto_spacing`);
    ValueError naming the option and the fix when it is neither."""
    if str(text).strip().lower() == AUTO:
        return AUTO
    parts = [p.strip() for p in str(text).split(",")]
    example = "e.g. 1,1,1 or 0.8,0.8,2.5, or auto"
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        raise ValueError(f"--spacing {text!r}: expected three numbers X,Y,Z in mm, {example}") from None
    if len(values) != 3:
        raise ValueError(f"--spacing {text!r}: expected three numbers X,Y,Z in mm, {example}")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"--spacing {text!r}: each spacing must be a positive finite number of mm, {example}")
    return values[0], values[1], values[2]


@dataclasses.dataclass(frozen=True)
class AutoSpacing:
    """What :func:`auto_spacing` chose: ``target`` ``(x, y, z)`` mm (None: no record to take it
    from), the per-axis ``median`` it started from, how many ``records`` it was taken from, whether
    the coarsest axis was brought down (``anisotropic``), and whether those records were slices
    (``from_slices``: no volume record; their in-plane medians, the slice axis unused)."""
    target: Optional[Spacing] = None
    median: Optional[Spacing] = None
    records: int = 0
    anisotropic: bool = False
    from_slices: bool = False

    def manifest_entry(self) -> dict:
        """dataset.json's ``auto_spacing`` object (dataset.manifest.AUTO_SPACING)."""
        return {"option": AUTO, "rule": AUTO_RULE, "target_mm": None if self.target is None else list(self.target),
                "median_mm": None if self.median is None else list(self.median), "records": self.records,
                "anisotropic": self.anisotropic, "from_slices": self.from_slices}


def auto_spacing(samples: Iterable[tuple[Sequence[float], Sequence[int]]],
                 threshold: float = ANISOTROPY) -> AutoSpacing:
    """``--spacing auto``: nnU-Net v2's full-resolution target spacing
    (``ExperimentPlanner.determine_fullres_target_spacing``) of the volumes' ``(spacing, shape)``,
    each in array order ``(depth, height, width)`` (mm; voxels); the answer in the option's
    ``(x, y, z)``. The target is the per-axis median (``np.percentile(.., 50, axis=0)``); where
    its coarsest axis is more than ``threshold`` times the others' largest (anisotropic spacing)
    and the median shape along it times ``threshold`` is below the others' smallest (anisotropic
    voxels), that axis' target is the 10th percentile of its spacings instead, raised to the
    others' largest + 1e-5 when below it. Percentiles of the sorted samples: the answer does not
    depend on their order (nor on Beam's bundles)."""
    rows = sorted((tuple(float(v) for v in s), tuple(int(n) for n in shape)) for s, shape in samples)
    if not rows:
        return AutoSpacing()
    spacings = np.asarray([s for s, _ in rows], dtype=np.float64)
    shapes = np.asarray([shape for _, shape in rows], dtype=np.float64)
    target = np.percentile(spacings, 50, axis=0)
    median = target.copy()
    sizes = np.percentile(shapes, 50, axis=0)
    worst = int(np.argmax(target))
    others = [i for i in range(len(target)) if i != worst]
    other_spacing = max(float(target[i]) for i in others)
    aniso_spacing = target[worst] > threshold * other_spacing
    aniso_voxels = sizes[worst] * threshold < min(float(sizes[i]) for i in others)
    if aniso_spacing and aniso_voxels:
        low = float(np.percentile(spacings[:, worst], LOW_PERCENTILE))
        target[worst] = max(other_spacing, low) + FLOOR_STEP if low < other_spacing else low
    xyz = axis_order(tuple(float(v) for v in target))
    return AutoSpacing(target=xyz, median=axis_order(tuple(float(v) for v in median)), records=len(rows),
                       anisotropic=bool(aniso_spacing and aniso_voxels))


def auto_spacing_of_slices(in_plane: Iterable[Sequence[float]]) -> AutoSpacing:
    """``--spacing auto`` with no volume record: the slices' in-plane ``(row, column)`` spacings'
    medians, the slice axis (unused: a slice is resampled in-plane only) set to their larger."""
    rows = sorted(tuple(float(v) for v in s) for s in in_plane)
    if not rows:
        return AutoSpacing()
    row, column = (float(v) for v in np.percentile(np.asarray(rows, dtype=np.float64), 50, axis=0))
    target = (column, row, max(row, column))
    return AutoSpacing(target=target, median=target, records=len(rows), from_slices=True)


def with_target(settings, chosen: Optional[AutoSpacing]):
    """The DecodeSettings a step resamples with: with --spacing auto, the run's ``chosen`` target
    in place of ``auto`` (None where it found no record: nothing to resample); else ``settings``."""
    if settings.spacing != AUTO:
        return settings
    return dataclasses.replace(settings, spacing=None if chosen is None else chosen.target)


def axis_order(xyz: Sequence[float]) -> Spacing:
    """``(x, y, z)`` as the option gives it -> ``(depth, height, width)`` order ``(z, y, x)``."""
    return float(xyz[2]), float(xyz[1]), float(xyz[0])


def planned_shape(shape: Sequence[int], spacing: Sequence[float], target: Sequence[float]) -> tuple[int, ...]:
    """Per axis ``round(size * spacing / target)``, at least 1 (nnU-Net's new shape)."""
    return tuple(max(1, int(round(int(n) * float(s) / float(t)))) for n, s, t in zip(shape, spacing, target))


def plan_in_plane(spec: ImageSpec, rows_columns: Sequence[float], target_xyz: Sequence[float]) -> ImageSpec:
    """The spec of a record resampled in-plane from its pixel spacing ``(row, column)`` mm
    (what the probe plans from a header: shards are planned from it)."""
    target = axis_order(target_xyz)
    _, height, width = planned_shape((1, spec.height, spec.width), (1.0, rows_columns[0], rows_columns[1]),
                                     (1.0, target[1], target[2]))
    return dataclasses.replace(spec, height=height, width=width)


def plan_depth(spec: ImageSpec, step: float, target_xyz: Sequence[float]) -> ImageSpec:
    """The spec of a volume of ``spec.depth`` slices ``step`` mm apart resampled along them (one
    slice, or an unknown step, keeps its depth)."""
    if spec.depth <= 1 or not step > 0:
        return spec
    return dataclasses.replace(spec, depth=planned_shape((spec.depth,), (step,), (axis_order(target_xyz)[0],))[0])


def anisotropic(spacing: Sequence[float], target: Sequence[float]) -> bool:
    """Whether the slice axis is resampled apart (nnU-Net's rule): the slice step of the input,
    else of the target, is at least ANISOTROPY times its larger in-plane spacing."""
    return any(float(s[0]) >= ANISOTROPY * max(float(s[1]), float(s[2])) for s in (spacing, target))


def _affine(volume: np.ndarray, scale: Sequence[float], shape: Sequence[int], order: int) -> np.ndarray:
    """``volume`` (float) sampled at input index ``n * scale`` along each axis, edge values beyond."""
    from scipy import ndimage
    return ndimage.affine_transform(volume, np.asarray(scale, dtype=np.float64), output_shape=tuple(shape),
                                    order=order, mode="nearest", output=np.float32)


def _slice_index(spacing: Sequence[float], target: Sequence[float], shape: Sequence[int],
                 depth: int) -> Optional[np.ndarray]:
    """None when a ``depth``-slice volume is resampled in 3-D; else (resampled slice by slice: the
    depth kept, or the data anisotropic) the input slice each output slice copies, by nearest
    neighbour: output slice ``n`` is input slice ``floor(n * scale + 0.5)`` clamped to the input's,
    what scipy's order 0 with mode nearest picks (the position clamped, then rounded half up)."""
    scale = float(target[0]) / float(spacing[0])
    if shape[0] == depth and scale == 1.0:
        return np.arange(depth, dtype=np.intp)
    if not anisotropic(spacing, target):
        return None
    index = np.floor(np.arange(shape[0], dtype=np.float64) * scale + 0.5)
    return np.clip(index, 0, depth - 1).astype(np.intp)


def _in_plane(volume: np.ndarray, slices: np.ndarray, scale: Sequence[float], shape: Sequence[int],
              order: int) -> np.ndarray:
    """The ``slices`` of a ``(D, H, W)`` float volume, each resampled in-plane with ``order``."""
    planes = np.empty((len(slices), shape[1], shape[2]), dtype=np.float32)
    for n, d in enumerate(slices):
        planes[n] = _affine(volume[d], scale[1:], shape[1:], order)
    return planes


def _resample_volume(volume: np.ndarray, spacing: Sequence[float], target: Sequence[float],
                     shape: Sequence[int], order: int) -> np.ndarray:
    """One ``(D, H, W)`` float volume onto the target grid: in 3-D with ``order``, or, when the
    depth stays or the data are anisotropic, slice by slice in-plane with ``order`` and then
    along the slices by nearest neighbour (whole slices copied, :func:`_slice_index`; a slice
    no output slice copies is not resampled)."""
    scale = [float(t) / float(s) for s, t in zip(spacing, target)]
    index = _slice_index(spacing, target, shape, volume.shape[0])
    if index is None:
        return _affine(volume, scale, shape, order)
    used, position = np.unique(index, return_inverse=True)
    planes = _in_plane(volume, used, scale, shape, order)
    if len(used) == len(index) and np.array_equal(used, index):
        return planes
    return np.take(planes, position.reshape(-1), axis=0)


def resample_image(arr: np.ndarray, spacing: Sequence[float], target: Sequence[float],
                   shape: Optional[Sequence[int]] = None) -> np.ndarray:
    """``(D, H, W, C)`` pixels of voxel ``spacing`` (mm, ``(depth, height, width)``) onto the grid
    of ``target`` spacing and ``shape`` (default :func:`planned_shape`): each channel by a
    third-order spline (scipy.ndimage), computed in float32 and cast back to ``arr``'s dtype,
    integers rounded and clipped to the dtype's range; anisotropic data in-plane, then by
    nearest neighbour along the slices (module docstring)."""
    shape = tuple(shape) if shape is not None else planned_shape(arr.shape[:3], spacing, target)
    if tuple(arr.shape[:3]) == shape and tuple(map(float, spacing)) == tuple(map(float, target)):
        return arr
    out = np.empty(shape + (arr.shape[3],), dtype=np.float32)
    for c in range(arr.shape[3]):
        out[..., c] = _resample_volume(arr[..., c].astype(np.float32), spacing, target, shape, IMAGE_ORDER)
    if arr.dtype == np.float32:
        return out
    if arr.dtype.kind in "iu" and arr.dtype.itemsize <= 2:
        # geometry._cast_like's values without its float64 copy: float32 holds every integer of
        # these dtypes and their bounds exactly, so its rint and clip are float64's
        info = np.iinfo(arr.dtype)
        return np.clip(np.rint(out, out=out), info.min, info.max, out=out).astype(arr.dtype)
    return np.ascontiguousarray(_cast_like(out, arr.dtype))


def resample_mask(mask: np.ndarray, spacing: Sequence[float], target: Sequence[float],
                  shape: Optional[Sequence[int]] = None) -> np.ndarray:
    """A ``(D, H, W, C)`` mask onto the grid of :func:`resample_image`, nnU-Net's way: one channel
    of class indices (0 background) class by class, the class whose linearly resampled indicator
    is largest where it reaches 0.5, background elsewhere; several channels (one a class, 0 or 1)
    each resampled so and thresholded at 0.5. Only classes present in the input come out."""
    shape = tuple(shape) if shape is not None else planned_shape(mask.shape[:3], spacing, target)
    if tuple(mask.shape[:3]) == shape and tuple(map(float, spacing)) == tuple(map(float, target)):
        return mask
    out = np.zeros(shape + (mask.shape[3],), dtype=mask.dtype)
    index = _slice_index(spacing, target, shape, mask.shape[0])
    position: Optional[np.ndarray] = None       # the voted slice each output slice copies (None: all, in order)
    if index is not None:
        # slice by slice: each class voted on the in-plane grid of the slices that are copied,
        # then whole slices copied (the vote is voxel by voxel: the same as voting after the copy)
        used, inverse = np.unique(index, return_inverse=True)
        if not np.array_equal(used, index):
            position = inverse.reshape(-1)
        grid = (len(used),) + tuple(shape[1:])
        scale = [float(t) / float(s) for s, t in zip(spacing, target)]

        def resample(indicator: np.ndarray) -> np.ndarray:
            return _in_plane(indicator, used, scale, grid, MASK_ORDER)
    else:
        grid = tuple(shape)

        def resample(indicator: np.ndarray) -> np.ndarray:
            return _resample_volume(indicator, spacing, target, shape, MASK_ORDER)
    for c in range(mask.shape[3]):
        channel = mask[..., c]
        voted = np.zeros(grid, dtype=mask.dtype)
        if mask.shape[3] > 1:
            voted[...] = resample((channel != 0).astype(np.float32)) >= THRESHOLD
        else:
            best = np.zeros(grid, dtype=np.float32)
            for value in _values(channel):
                if value == 0:
                    continue
                weight = resample((channel == value).astype(np.float32))
                wins = (weight >= THRESHOLD) & (weight > best)
                voted[wins] = value
                best = np.maximum(best, np.where(weight >= THRESHOLD, weight, 0.0))
        out[..., c] = voted if position is None else np.take(voted, position, axis=0)
    return np.ascontiguousarray(out)


def _values(channel: np.ndarray) -> np.ndarray:
    """The values a mask channel holds, ascending (np.unique's, without its sort for small unsigned
    dtypes: a count of each value)."""
    if channel.dtype.kind == "u" and channel.dtype.itemsize <= 2:
        return np.flatnonzero(np.bincount(channel.reshape(-1))).astype(channel.dtype)
    return np.unique(channel)
