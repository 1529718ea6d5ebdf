"""verify, the training view (issue 44): each record against the ``--intensity``, ``--crop`` and
``--spacing`` dataset.json's options record (convert's transforms/images/ wrote them).

- ``--intensity zscore``: ``intensity/mean`` and ``intensity/std`` hold one value per channel,
  and the image is float32;
- ``--intensity ct``: the same, with ``intensity/clip_low`` and ``intensity/clip_high``, and all
  four equal (as float32) to dataset.json's ``fingerprint``, which every record shares;
- ``--crop`` (any mode but off): ``dicom/crop_box`` ``[k0, k1, j0, j1, i0, i1]`` is a non-empty
  box inside ``dicom/original_shape`` ``[depth, height, width]``;
- ``--spacing X,Y,Z`` (three numbers), or ``--spacing auto`` with the target the job chose
  (dataset.json's ``auto_spacing`` ``target_mm``): the record's spacing (its ``dicom/affine``'s
  column lengths, ``dicom/pixel_spacing`` and ``dicom/slice_spacing`` where present) equals the
  target within :data:`SPACING_TOLERANCE_MM`; a record of one slice in-plane only (its slice step
  is the source's).

Each problem is one line ending in the fix: convert the inputs again with the option, so that
the record is what dataset.json says the dataset holds. Only dataset.json's options and the
record's own features are read: nothing of transforms/ (this layer imports none of it).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from dcm2tfrecord.dataset.features import (AFFINE, CHANNELS, CROP_BOX, DEPTH, DTYPE, INTENSITY_CLIP_HIGH,
                                           INTENSITY_CLIP_LOW, INTENSITY_MEAN, INTENSITY_STD, ORIGINAL_SHAPE,
                                           PIXEL_SPACING, SLICE_SPACING)
from dcm2tfrecord.dataset.manifest import Manifest

SPACING_TOLERANCE_MM = 1e-4
ZSCORE = "zscore"                   # --intensity's values whose records this checks
CT = "ct"
ZSCORE_DTYPE = "float32"
# --intensity ct: each feature and the fingerprint's statistic it holds
CT_FEATURES = ((INTENSITY_CLIP_LOW, "percentile_00_5"), (INTENSITY_CLIP_HIGH, "percentile_99_5"),
               (INTENSITY_MEAN, "mean"), (INTENSITY_STD, "std"))
CROP_OFF = ("off", "none", "")      # --crop's values that cut nothing
AUTO = "auto"                       # --spacing auto: its target is dataset.json's auto_spacing target_mm


def _target(value) -> Optional[tuple[float, float, float]]:
    """``--spacing X,Y,Z`` as ``(depth, height, width)`` mm (Z, Y, X), or None when it is not three
    positive numbers (unset, or one the job chose itself)."""
    if not isinstance(value, str):
        return None
    try:
        x, y, z = (float(part) for part in value.split(","))
    except ValueError:
        return None
    if not all(math.isfinite(v) and v > 0 for v in (x, y, z)):
        return None
    return z, y, x


@dataclasses.dataclass(frozen=True)
class ViewRule:
    """The training view dataset.json's options record: what every record must show of it."""
    intensity: Optional[str] = None             # --intensity zscore or ct
    fingerprint: Optional[dict] = None          # ct: dataset.json's fingerprint
    crop: Optional[str] = None                  # --crop's mode, when it cut
    spacing: Optional[str] = None               # --spacing as given, when three numbers
    target: Optional[tuple] = None              # its (depth, height, width) mm

    @classmethod
    def of(cls, manifest: Manifest) -> Optional["ViewRule"]:
        """The rule of a dataset converted with any of the three options, else None."""
        options = manifest.options if isinstance(manifest.options, dict) else {}
        crop = options.get("crop")
        crop = str(crop) if crop is not None and str(crop) not in CROP_OFF else None
        spacing = options.get("spacing")
        target = _target(spacing)
        chosen = (manifest.auto_spacing or {}).get("target_mm") if spacing == AUTO else None
        if isinstance(chosen, list) and len(chosen) == 3:     # --spacing auto: the target the job chose
            target = _target(",".join(str(v) for v in chosen))
        scheme = options.get("intensity")
        rule = cls(intensity=scheme if scheme in (ZSCORE, CT) else None, crop=crop,
                   spacing=spacing if target else None, target=target,
                   fingerprint=dict(manifest.fingerprint or {}) if scheme == CT else None)
        return rule if rule.intensity or rule.crop or rule.target else None

    def required(self) -> frozenset:
        """The features this rule reports as missing itself (the schema check leaves them)."""
        return frozenset(((INTENSITY_MEAN, INTENSITY_STD) if self.intensity else ())
                         + ((INTENSITY_CLIP_LOW, INTENSITY_CLIP_HIGH) if self.intensity == CT else ())
                         + ((CROP_BOX, ORIGINAL_SHAPE) if self.crop else ()))


def _floats(features: dict, name: str) -> Optional[np.ndarray]:
    """A float feature's values, or None (absent, or of another kind: the schema check's to say)."""
    kind, values = features.get(name, (None, []))
    return np.asarray(list(values), dtype=np.float64) if kind == "float" else None


def _single_int(features: dict, name: str) -> Optional[int]:
    kind, values = features.get(name, (None, []))
    return int(values[0]) if kind == "int64" and len(values) == 1 else None


def _fix(flag: str) -> str:
    return f"convert the inputs again with {flag}, as dataset.json records"


def check_view(features: dict, rule: ViewRule) -> list[str]:
    """One decoded record's problems against ``rule``, one line each."""
    problems: list[str] = []
    if rule.intensity:
        problems.extend(_check_intensity(features, rule))
    if rule.crop:
        problems.extend(_check_crop(features, rule.crop))
    if rule.target:
        problems.extend(_check_spacing(features, rule.spacing, rule.target))
    return problems


def _check_intensity(features: dict, rule: ViewRule) -> list[str]:
    flag = f"--intensity {rule.intensity}"
    fix = _fix(flag)
    problems = []
    channels = _single_int(features, CHANNELS)
    names = [name for name, _ in CT_FEATURES] if rule.intensity == CT else [INTENSITY_MEAN, INTENSITY_STD]
    for name in names:
        kind, values = features.get(name, (None, []))
        if name not in features:
            problems.append(f"feature {name!r} is missing: {flag} keeps one per channel; {fix}")
        elif kind != "float" or (channels is not None and len(values) != channels):
            problems.append(f"feature {name!r} holds {len(values)} {kind or 'empty'} value(s), {flag} "
                            f"keeps one float per channel ({channels}); {fix}")
    if rule.intensity == CT and not problems:
        problems.extend(_check_fingerprint(features, rule.fingerprint or {}, fix))
    kind, values = features.get(DTYPE, (None, []))
    dtype = bytes(values[0]).decode("utf-8", "replace") if kind == "bytes" and len(values) == 1 else "?"
    if dtype != ZSCORE_DTYPE:
        problems.append(f"image dtype {dtype}, {flag} writes {ZSCORE_DTYPE}; {fix}")
    return problems


def _check_fingerprint(features: dict, fingerprint: dict, fix: str) -> list[str]:
    """--intensity ct: the record's clip bounds, mean and std are dataset.json's fingerprint's."""
    if not fingerprint:
        return [f"dataset.json has no fingerprint, which --intensity ct records; {fix}"]
    for name, statistic in CT_FEATURES:
        expected = np.asarray(fingerprint.get(statistic) or [], dtype=np.float32)
        found = np.asarray(list(features[name][1]), dtype=np.float32)
        if expected.shape != found.shape or not np.array_equal(expected, found):
            return [f"feature {name!r} is {found.tolist()}, dataset.json's fingerprint {statistic} "
                    f"{expected.tolist()}: the record was normalised with another fingerprint; {fix}"]
    return []


def _check_crop(features: dict, mode: str) -> list[str]:
    fix = _fix(f"--crop {mode}")
    missing = [name for name in (CROP_BOX, ORIGINAL_SHAPE) if name not in features]
    if missing:
        return [f"feature {name!r} is missing: --crop {mode} keeps the box and the source's shape; {fix}"
                for name in missing]
    (box_kind, box), (shape_kind, shape) = (features[name] for name in (CROP_BOX, ORIGINAL_SHAPE))
    if box_kind != "int64" or shape_kind != "int64":
        return []       # the schema check names a feature of the wrong kind
    box, shape = [int(n) for n in box], [int(n) for n in shape]
    if len(box) != 6 or len(shape) != 3 or not all(0 <= box[2 * a] < box[2 * a + 1] <= shape[a] for a in range(3)):
        return [f"{CROP_BOX} {box} is not a box [k0, k1, j0, j1, i0, i1] inside {ORIGINAL_SHAPE} {shape} "
                f"(0 <= start < end <= size on each axis); {fix}"]
    return []


def _check_spacing(features: dict, spacing: Optional[str], target: tuple) -> list[str]:
    """The record's spacing, per source of it, against ``target`` ``(depth, height, width)``."""
    fix = _fix(f"--spacing {spacing}")
    depth = _single_int(features, DEPTH) or 1
    axes = (0, 1, 2) if depth > 1 else (1, 2)          # a slice record: resampled in-plane only
    found: list[tuple[str, list]] = []                 # (source, [(axis, mm)])
    matrix = _floats(features, AFFINE)
    if matrix is not None and matrix.size == 16:
        lengths = np.linalg.norm(matrix.reshape(4, 4)[:3, :3], axis=0)
        found.append((f"{AFFINE}'s column lengths", [(a, float(lengths[a])) for a in axes]))
    pixel = _floats(features, PIXEL_SPACING)
    if pixel is not None and pixel.size == 2:
        found.append((PIXEL_SPACING, [(1, float(pixel[0])), (2, float(pixel[1]))]))
    step = _floats(features, SLICE_SPACING)
    if depth > 1 and step is not None and step.size == 1:
        found.append((SLICE_SPACING, [(0, float(step[0]))]))
    if not found:
        return [f"the record holds no spacing ({AFFINE}, {PIXEL_SPACING}) to hold to --spacing {spacing}; {fix}"]
    names = ("slice step", "row", "column")
    for source, values in found:
        wrong = [(a, mm) for a, mm in values if not abs(mm - target[a]) <= SPACING_TOLERANCE_MM]
        if wrong:
            got = ", ".join(f"{names[a]} {mm:.6g} mm (target {target[a]:.6g})" for a, mm in wrong)
            return [f"spacing from {source}: {got}, not --spacing {spacing} within {SPACING_TOLERANCE_MM:g} mm; "
                    f"{fix}"]
    return []
