"""Series volumes: slices of one SeriesInstanceUID stacked in anatomical order.

Slices are ordered by their position along the slice normal, the cross
product of the row and column direction cosines of Image Orientation
(Patient) (PS3.3 C.7.6.2.1.1), projected from Image Position (Patient);
without positions, by Instance Number. A series that would stack wrongly
fails with a reason instead of being stacked silently.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.hashing import record_id
from dcm2tfrecord.transforms.values import ProbedRecord

_ORIENTATION_TOLERANCE = 1e-3
_POSITION_TOLERANCE = 1e-3   # mm


def _normal(orientation: Sequence[float] | np.ndarray) -> np.ndarray:
    row, col = np.asarray(orientation[:3], float), np.asarray(orientation[3:6], float)
    return np.cross(row, col)


def order_slices(slices: Sequence[ProbedRecord]) -> tuple[list[ProbedRecord], float]:
    """(slices in anatomical order, slice spacing in mm or 0.0 when unknown)."""
    shapes = {(s.spec.height, s.spec.width, s.spec.channels, s.spec.dtype, s.spec.depth) for s in slices}
    if len(shapes) > 1:
        raise ConversionError(reasons.SERIES_MIXED_SHAPES,
                              f"slices differ in shape/dtype: {sorted(shapes)[:4]}")
    infos = [s.slice_info for s in slices if s.slice_info is not None]
    complete = len(infos) == len(slices)     # then infos[k] is slices[k]'s
    have_geometry = complete and all(len(i.orientation) == 6 and len(i.position) == 3 for i in infos)
    if have_geometry:
        first = np.asarray(infos[0].orientation)
        for info in infos[1:]:
            if np.abs(np.asarray(info.orientation) - first).max() > _ORIENTATION_TOLERANCE:
                raise ConversionError(reasons.SERIES_MIXED_ORIENTATION,
                                      f"slices have different Image Orientation (Patient): "
                                      f"{list(first)} vs {list(info.orientation)}")
        normal = _normal(first)
        keyed = sorted(((float(np.dot(normal, i.position)), s.source.rel_path, s)
                        for i, s in zip(infos, slices)), key=lambda t: (t[0], t[1]))
        positions = np.array([k[0] for k in keyed])
        gaps = np.diff(positions)
        if len(gaps) and gaps.min() < _POSITION_TOLERANCE:
            duplicate = keyed[int(np.argmin(gaps))][1]
            raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                  f"two slices at the same position ({duplicate} and its neighbour)")
        spacing = float(np.median(gaps)) if len(gaps) else 0.0
        return [k[2] for k in keyed], spacing
    if complete and all(i.instance is not None for i in infos):
        numbers = [i.instance for i in infos]
        if len(set(numbers)) != len(numbers):
            raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                  "no slice positions and repeated Instance Numbers")
        return [s for _, _, s in sorted(((i.instance, s.source.rel_path, s) for i, s in zip(infos, slices)),
                                        key=lambda t: (t[0], t[1]))], 0.0
    raise ConversionError(reasons.SERIES_UNORDERED,
                          "slices have neither Image Position/Orientation (Patient) nor Instance Numbers")


def build_volume_record(series_key: str, slices: Sequence[ProbedRecord], salt: str) -> ProbedRecord:
    """One record standing for a whole series; its members are the ordered slice files."""
    ordered, spacing = order_slices(slices)
    first = ordered[0]
    spec = dataclasses.replace(first.spec, depth=sum(s.spec.depth for s in ordered))
    return dataclasses.replace(first, record_id=record_id(f"series:{series_key}", salt), spec=spec,
                               members=tuple(s.source for s in ordered), slice_spacing=spacing)


def volume_records(series_key: str, slices: Sequence[ProbedRecord], salt: str) -> list[ProbedRecord]:
    """The records of one series: its single-frame slices stacked into one volume
    (build_volume_record), or the stack records of the one Enhanced multi-frame file that
    makes the series, unchanged: its frames are ordered already (transforms.dicom.functional_groups).
    Several Enhanced files, or Enhanced and classic files, in one series fail as series_enhanced."""
    enhanced = [s for s in slices if s.stacks]
    if not enhanced:
        return [build_volume_record(series_key, slices, salt)]
    files = sorted({s.source.rel_path for s in slices})
    if len(enhanced) == len(slices) and len(files) == 1:
        return list(slices)
    raise ConversionError(reasons.SERIES_ENHANCED,
                          f"the series holds {len({s.source.rel_path for s in enhanced})} Enhanced multi-frame "
                          f"file(s) and {len({s.source.rel_path for s in slices if not s.stacks})} single-frame "
                          f"file(s): an Enhanced file is a volume (or several) already and is not stacked with "
                          f"others; convert them with --unit file")
