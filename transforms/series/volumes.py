"""Series volumes: slices of one SeriesInstanceUID stacked in anatomical order.

Slices are ordered by their position along the slice normal, the cross
product of the row and column direction cosines of Image Orientation
(Patient) (PS3.3 C.7.6.2.1.1), projected from Image Position (Patient);
without positions, by Instance Number. A series that would stack wrongly
fails with a reason instead of being stacked silently (docs/DICOM.md,
"Slice spacing" and "4-D"):

- slices not evenly spaced (transforms.dicom.patient_space.even_runs) fail as
  series_missing_slices (a gap of whole slices) or series_uneven_spacing, each
  message naming the gap, its two slices and their positions; with
  ``--series_gaps split`` each evenly spaced run is a volume of its own;
- a localizer among the slices (another orientation, or Image Type LOCALIZER)
  fails as series_localizer; with ``--series_gaps split`` each orientation is
  planned on its own;
- slices repeating a position are the volumes of a 4-D series when their
  temporal position, trigger time, acquisition number, echo, b-value or gradient
  tell them apart (SliceInfo.volume_key), or, where the series has several
  positions, their Instance Numbers: ``--series_4d split`` makes a record of
  each volume, ``stack`` one record of all of them; otherwise (slices at a
  series' only position told apart by Instance Number alone included) they fail
  as series_duplicate_position;
- a position beyond what a record's float32 geometry holds (1e300 mm) fails the
  series as invalid_value, once copies of one slice there are told as repeated.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.hashing import record_id
from dcm2tfrecord.transforms.record_model import ProbedRecord, SliceInfo

_ORIENTATION_TOLERANCE = 1e-3
_POSITION_TOLERANCE = 1e-3   # mm: slices closer along the normal share a position
# volume_key names that must agree across one volume's slices (trigger times jitter from
# slice to slice; acquisition numbers may count slices): the others only order a position's slices
_DEFINING = ("temporal", "echo", "echo_time", "b", "gradient")


class Unit(StrEnum):
    """``--unit``: one record per file, or one volume per SeriesInstanceUID (this module)."""
    FILE = "file"
    SERIES = "series"


class SeriesGaps(StrEnum):
    """``--series_gaps``: slices not evenly spaced fail, or each evenly spaced run is a volume."""
    FAIL = "fail"
    SPLIT = "split"


class Series4d(StrEnum):
    """``--series_4d``: a 4-D series as a record per volume, or one record of every volume."""
    SPLIT = "split"
    STACK = "stack"


@dataclasses.dataclass(frozen=True)
class Volume:
    """One record of a series: its slices in record order."""
    members: tuple[ProbedRecord, ...]
    label: str = ""            # "" for the whole series; else e.g. "run=1 volume=2"
    spacing: float = 0.0       # mm between consecutive slices along the normal; 0.0 unknown
    volumes: int = 1           # volumes in the series (4-D)
    volume_index: int = 0      # -1: the record holds every volume (--series_4d stack)


def _info(record: ProbedRecord) -> SliceInfo:
    """A slice's geometry; plan_volumes reads it only after checking every slice has one."""
    assert record.slice_info is not None
    return record.slice_info


def _check_shapes(slices: Sequence[ProbedRecord]) -> None:
    shapes = {(s.spec.height, s.spec.width, s.spec.channels, s.spec.dtype, s.spec.depth) for s in slices}
    if len(shapes) > 1:
        raise ConversionError(reasons.SERIES_MIXED_SHAPES,
                              f"slices differ in shape/dtype: {sorted(shapes)[:4]}")


def _name(record: ProbedRecord) -> str:
    return record.source.rel_path or record.source.uri


def _by_instance(slices: Sequence[ProbedRecord]) -> Volume:
    infos = [s.slice_info for s in slices]
    if all(i is not None and i.instance is not None for i in infos):
        numbers = [i.instance for i in infos if i is not None]
        if len(set(numbers)) != len(numbers):
            raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                  "no slice positions and repeated Instance Numbers")
        ordered = sorted(slices, key=lambda s: (_info(s).instance, s.source.rel_path))
        return Volume(tuple(ordered))
    raise ConversionError(reasons.SERIES_UNORDERED,
                          "slices have neither Image Position/Orientation (Patient) nor Instance Numbers")


def _orientation_groups(slices: Sequence[ProbedRecord], gaps: str) -> list[list[ProbedRecord]]:
    """The slices by Image Orientation (Patient); more than one group fails unless split."""
    groups: list[tuple[np.ndarray, list[ProbedRecord]]] = []
    for record in slices:
        orientation = np.asarray(_info(record).orientation, float)
        for reference, members in groups:
            if np.abs(orientation - reference).max() <= _ORIENTATION_TOLERANCE:
                members.append(record)
                break
        else:
            groups.append((orientation, [record]))
    ordered = sorted((members for _, members in groups), key=lambda m: (-len(m), min(map(_name, m))))
    if len(ordered) == 1 or gaps == SeriesGaps.SPLIT:
        return ordered
    main, others = ordered[0], [r for group in ordered[1:] for r in group]
    main_orientation = [round(v, 4) for v in _info(main[0]).orientation]
    scouts = [r for r in others if _info(r).localizer] or \
        (others if len(others) <= 3 and len(main) >= 3 else [])
    if scouts:
        scout = sorted(scouts, key=_name)[0]
        said = "Image Type LOCALIZER, " if _info(scout).localizer else ""
        raise ConversionError(reasons.SERIES_LOCALIZER,
                              f"a localizer is among the slices: {_name(scout)} ({said}orientation "
                              f"{[round(v, 4) for v in _info(scout).orientation]}) and "
                              f"{len(others) - 1} other(s), among {len(main)} slices of orientation "
                              f"{main_orientation}; remove it, or --series_gaps split writes it as its own record")
    raise ConversionError(reasons.SERIES_MIXED_ORIENTATION,
                          f"slices have different Image Orientation (Patient): {len(main)} slices with "
                          f"{main_orientation}, {len(others)} with others (e.g. {_name(others[0])}: "
                          f"{[round(v, 4) for v in _info(others[0]).orientation]})")


def _volume_sort_key(record: ProbedRecord) -> tuple:
    """A position's slices in acquisition order: by Temporal Position Identifier, then Instance
    Number (the order dcm2niix writes a DWI's .bval in), then what tells them apart."""
    info = _info(record)
    key = dict(info.volume_key)
    temporal = key.get("temporal")
    return (temporal is not None, temporal or 0.0,
            info.instance is not None, info.instance if info.instance is not None else 0,
            tuple(info.volume_key), record.source.rel_path)


def _defining(record: ProbedRecord) -> tuple:
    return tuple((n, v) for n, v in _info(record).volume_key if n in _DEFINING)


def _mm(distance: float) -> str:
    """A distance along the normal as a message says it: 2 decimals, or 4 significant digits
    where it is beyond any patient (a hostile 1e300)."""
    return f"{distance:.2f}" if abs(distance) < 1e9 else f"{distance:.4g}"


def _volumes_at(cluster: list[ProbedRecord], where: str, by_instance: bool = True) -> list[ProbedRecord]:
    """One position's slices in acquisition order; raises when two cannot be told apart.
    ``by_instance``: whether Instance Number alone may tell volumes apart (not when the series
    has this one position: its slices are then copies of one slice, nothing says they are
    volumes of a 4-D series)."""
    cluster.sort(key=_volume_sort_key)
    keys = [(tuple(_info(r).volume_key), _info(r).instance if by_instance else None) for r in cluster]
    if len(set(keys)) != len(keys):
        twins = [r for r, k in zip(cluster, keys) if keys.count(k) > 1][:2]
        told = "Instance Number" if by_instance else \
            "Instance Number (the series' only position: Instance Numbers alone make no 4-D series)"
        raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                              f"repeated position: {_name(twins[0])} and {_name(twins[1])} both lie at "
                              f"{where}, and no temporal position, trigger "
                              f"time, acquisition number, echo, b-value, gradient or {told} tells "
                              f"them apart as volumes of a 4-D series")
    return cluster


def _line_up(clusters: list[list[ProbedRecord]]) -> list[list[ProbedRecord]]:
    """Each position's slices in the order of the first position's volumes: by what defines a
    volume (temporal position, echo, b-value, gradient) where that tells a position's slices
    apart, else by acquisition order alone; every slice of a volume must agree on it."""
    first = [_defining(r) for r in clusters[0]]
    if len(set(first)) == len(first) and all(first):
        out = []
        for cluster in clusters:
            by_key = {_defining(r): r for r in cluster}
            if set(by_key) != set(first):
                odd = sorted(set(by_key) ^ set(first))[0]
                raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                      f"repeated positions whose volumes do not line up: {_name(cluster[0])}'s "
                                      f"position has no volume with {odd} as {_name(clusters[0][0])}'s has, "
                                      f"or the other way round")
            out.append([by_key[k] for k in first])
        return out
    for v in range(len(clusters[0])):
        defining = {_defining(c[v]) for c in clusters}
        if len(defining) > 1:
            raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                  f"repeated positions whose volumes do not line up: volume {v} holds slices "
                                  f"with {sorted(defining)[0]} and {sorted(defining)[1]} (e.g. "
                                  f"{_name(clusters[0][v])} and {_name(clusters[-1][v])})")
    return clusters


# the largest coordinate a record's geometry holds (float32: patient_space._vector)
_MAX_COORDINATE = float(np.finfo(np.float32).max)


def _check_placeable(group: list[ProbedRecord]) -> None:
    """Raises when a slice's position lies beyond what a record's geometry holds (1e300 mm:
    a float64, no float32), before any distance between positions is measured (which would
    overflow): copies of one slice at one such position are series_duplicate_position, as
    anywhere; any other series there is invalid_value."""
    beyond = [r for r in group if not all(abs(v) <= _MAX_COORDINATE for v in _info(r).position)]
    if not beyond:
        return
    position = _info(beyond[0]).position
    if all(_info(r).position == position for r in group):
        _volumes_at(list(group), f"Image Position (Patient) {list(position)}", by_instance=False)
    raise ConversionError(reasons.INVALID_VALUE,
                          f"Image Position (Patient) of {_name(beyond[0])} {list(position)} lies beyond what a "
                          f"record's geometry holds (float32, at most {_MAX_COORDINATE:.3g} mm): the series has "
                          f"no place in the patient")


def _positions_and_volumes(group: list[ProbedRecord]) -> tuple[list[list[ProbedRecord]], np.ndarray]:
    """(the group's positions along the normal, each the list of its slices by volume; those
    distances). Raises series_duplicate_position when repeated positions are no 4-D series,
    series_missing_slices when a 4-D series' position lacks a volume."""
    normal = patient_space.normal(_info(group[0]).orientation)
    _check_placeable(group)
    keyed = sorted(((float(np.dot(normal, _info(r).position)), r) for r in group),
                   key=lambda t: (t[0], t[1].source.rel_path))
    clusters: list[list[ProbedRecord]] = []
    distances: list[float] = []
    for distance, record in keyed:
        if distances and distance - distances[-1] < _POSITION_TOLERANCE:
            clusters[-1].append(record)
        else:
            clusters.append([record])
            distances.append(distance)
    sizes = [len(c) for c in clusters]
    if set(sizes) == {1}:
        return clusters, np.asarray(distances)
    clusters = [_volumes_at(c, f"{_mm(d)} mm along the slice normal", len(clusters) > 1)
                for c, d in zip(clusters, distances)]
    if len(set(sizes)) > 1:
        common = max(set(sizes), key=lambda n: (sizes.count(n), n))
        odd, distance = next((c, d) for c, d in zip(clusters, distances) if len(c) != common)
        if common == 1:       # a slice again at a position of a 3-D series: a rescan, a copy
            raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                  f"repeated position: {' and '.join(_name(r) for r in odd[:3])} all lie at "
                                  f"{_mm(distance)} mm along the slice normal, where the series' other "
                                  f"positions hold one slice each")
        raise ConversionError(reasons.SERIES_MISSING_SLICES,
                              f"a 4-D series with slices missing: the position {distance:.2f} mm along the slice "
                              f"normal holds {len(odd)} volume(s) ({_name(odd[0])}), the others {common}")
    return _line_up(clusters), np.asarray(distances)


def _multi_slice_volumes(group: list[ProbedRecord], four_d: str) -> list[Volume]:
    """Files of several slices each (Siemens mosaics) in one series: each file is a volume (of
    a 4-D series when there are several), in acquisition order. Stacked only when every volume
    lies where the first does (a moved slab, PACE/MoCo, does not)."""
    ordered = sorted(group, key=_volume_sort_key)
    keys = [(tuple(_info(r).volume_key), _info(r).instance) for r in ordered]
    for (a, key_a), (b, key_b) in zip(zip(ordered, keys), zip(ordered[1:], keys[1:])):
        if key_a == key_b:
            raise ConversionError(reasons.SERIES_DUPLICATE_POSITION,
                                  f"{_name(a)} and {_name(b)} are volumes of one series that no temporal "
                                  f"position, acquisition number, echo, b-value, gradient or Instance Number "
                                  f"tells apart")
    count = len(ordered)
    if count == 1:
        return [Volume((ordered[0],))]
    if four_d == Series4d.STACK:
        first = np.asarray(_info(ordered[0]).position, float)
        moved = [r for r in ordered if np.linalg.norm(np.asarray(_info(r).position) - first) > _POSITION_TOLERANCE]
        if moved:
            raise ConversionError(reasons.SERIES_UNEVEN_SPACING,
                                  f"--series_4d stack: the series' volumes do not lie in one place ({_name(moved[0])} "
                                  f"is {np.linalg.norm(np.asarray(_info(moved[0]).position) - first):.3f} mm from "
                                  f"{_name(ordered[0])}): one record would give them one affine; --series_4d split "
                                  f"writes each with its own")
        return [Volume(tuple(ordered), "", 0.0, count, -1)]
    return [Volume((r,), f"volume={v}", 0.0, count, v) for v, r in enumerate(ordered)]


def _gap_error(clusters: list[list[ProbedRecord]], distances: np.ndarray,
               runs: list[tuple[int, int]]) -> ConversionError:
    """The first break between runs, told as missing slices or uneven spacing."""
    gaps = np.diff(distances)
    spacing = float(np.median(gaps))
    tolerance = patient_space.step_tolerance(spacing)
    end = runs[0][1]
    at = end - 1
    gap = float(gaps[at])
    a, b = clusters[at][0], clusters[at + 1][0]
    where = (f"between {_name(a)} ({distances[at]:.2f} mm along the slice normal) and {_name(b)} "
             f"({distances[at + 1]:.2f} mm)")
    advice = "; --series_gaps split writes each evenly spaced run as its own volume"
    breaks = [float(gaps[stop - 1]) for _, stop in runs[:-1]]
    whole = [round(g / spacing) for g in breaks] if spacing > 0 else []
    missing = sum(m - 1 for m in whole)
    # whole slices absent, and fewer than are there (else the pieces are apart, not holed)
    if whole and all(m >= 2 and abs(g - m * spacing) <= tolerance * m for g, m in zip(breaks, whole)) \
            and missing <= len(distances):
        return ConversionError(reasons.SERIES_MISSING_SLICES,
                               f"{missing} slice(s) missing from {len(distances) + missing}: a gap of {gap:.2f} mm "
                               f"({round(gap / spacing)} x the {spacing:.2f} mm spacing) {where}{advice}")
    if abs(gap - spacing) <= tolerance:
        return ConversionError(reasons.SERIES_UNEVEN_SPACING,
                               f"slices off one line: the step {where} is {spacing:.2f} mm along the normal "
                               f"but shifted in-plane beyond the {tolerance:.2f} mm tolerance{advice}")
    return ConversionError(reasons.SERIES_UNEVEN_SPACING,
                           f"uneven slice spacing: a gap of {gap:.2f} mm {where}, where the slices are "
                           f"{spacing:.2f} mm apart (tolerance {tolerance:.2f} mm){advice}")


def plan_volumes(slices: Sequence[ProbedRecord], gaps: str = SeriesGaps.FAIL,
                 four_d: str = Series4d.SPLIT) -> list[Volume]:
    """The volumes of one series of single-frame (or mosaic) files, each its slices in order."""
    _check_shapes(slices)
    slices = sorted(slices, key=lambda s: (s.source.rel_path, s.source.uri))   # not GroupByKey's order
    placed = [s for s in slices if s.slice_info is not None and len(s.slice_info.orientation) == 6
              and len(s.slice_info.position) == 3]
    if not placed:
        return [_by_instance(slices)]
    if len(placed) < len(slices):
        lacking = next(s for s in slices if s not in placed)
        raise ConversionError(reasons.SERIES_UNORDERED,
                              f"{len(slices) - len(placed)} of {len(slices)} slices have no Image Position and "
                              f"Orientation (Patient) (e.g. {_name(lacking)}): the series cannot be checked for gaps "
                              f"nor given an affine")
    out: list[Volume] = []
    groups = _orientation_groups(slices, gaps)
    if slices[0].spec.depth > 1:          # _check_shapes: every file holds as many slices
        for group in groups:
            out += _multi_slice_volumes(group, four_d)
        return out
    pieces = []
    for group in groups:
        clusters, distances = _positions_and_volumes(group)
        first = [_info(c[0]).position for c in clusters]
        runs = patient_space.even_runs(first)
        if len(runs) > 1 and gaps != SeriesGaps.SPLIT:
            raise _gap_error(clusters, distances, runs)
        pieces += [(clusters[start:stop], distances[start:stop]) for start, stop in runs]
    for run, (clusters, distances) in enumerate(pieces):
        volumes = len(clusters[0])
        spacing = float((distances[-1] - distances[0]) / (len(distances) - 1)) if len(distances) > 1 else 0.0
        head = [f"run={run}"] if len(pieces) > 1 else []
        if volumes > 1 and four_d == Series4d.SPLIT:
            out += [Volume(tuple(c[v] for c in clusters), " ".join(head + [f"volume={v}"]), spacing, volumes, v)
                    for v in range(volumes)]
        else:
            out.append(Volume(tuple(c[v] for v in range(volumes) for c in clusters), " ".join(head),
                              spacing, volumes, -1 if volumes > 1 else 0))
    return out


def build_volume_record(series_key: str, volume: Volume, salt: str) -> ProbedRecord:
    """One record standing for a volume (or the whole series); its members are the ordered slice files."""
    first = volume.members[0]
    spec = dataclasses.replace(first.spec, depth=sum(s.spec.depth for s in volume.members))
    name = f"series:{series_key}" + (f"#{volume.label}" if volume.label else "")
    return dataclasses.replace(first, record_id=record_id(name, salt), spec=spec,
                               members=tuple(s.source for s in volume.members), slice_spacing=volume.spacing,
                               volumes=volume.volumes, volume_index=volume.volume_index)


def stacked_enhanced(stacks: Sequence[ProbedRecord], salt: str) -> ProbedRecord:
    """--series_4d stack: the stack records of one Enhanced file as one record of all its
    volumes, one after the other along depth (their stacks in the file's order), under the file's
    own record id. Stacks that differ in orientation, or in how many frames they hold, are no
    volumes of one 4-D image: series_mixed_shapes."""
    ordered = sorted(stacks, key=lambda r: r.stacks[0].index)
    counts = {len(r.stacks[0].frames) for r in ordered}
    if len(counts) > 1 or any("orientation=" in r.stacks[0].label for r in ordered):
        raise ConversionError(reasons.SERIES_MIXED_SHAPES,
                              f"--series_4d stack: the file's {len(ordered)} stacks ("
                              f"{', '.join(r.stacks[0].label for r in ordered[:4])}) differ in frame count "
                              f"{sorted(counts)} or orientation: they are not the volumes of one 4-D image; "
                              f"convert it with --series_4d split")
    first = ordered[0]
    frames = tuple(f for r in ordered for f in r.stacks[0].frames)
    stack = dataclasses.replace(first.stacks[0], index=0, label="", frames=frames)
    return dataclasses.replace(first, record_id=record_id(first.source.rel_path, salt),
                               spec=dataclasses.replace(first.spec, depth=len(frames)), stacks=(stack,),
                               source_frames=0, volumes=len(ordered), volume_index=-1)


def volume_records(series_key: str, slices: Sequence[ProbedRecord], salt: str, gaps: str = SeriesGaps.FAIL,
                   four_d: str = Series4d.SPLIT) -> list[ProbedRecord]:
    """The records of one series: its single-frame slices stacked into volumes (plan_volumes),
    or the stack records of the one Enhanced multi-frame file that makes the series, unchanged:
    its frames are ordered already (transforms.dicom.functional_groups). Several Enhanced files,
    or Enhanced and classic files, in one series fail as series_enhanced."""
    enhanced = [s for s in slices if s.stacks]
    if not enhanced:
        return [build_volume_record(series_key, v, salt) for v in plan_volumes(slices, gaps, four_d)]
    files = sorted({s.source.rel_path for s in slices})
    if len(enhanced) == len(slices) and len(files) == 1:
        if four_d == Series4d.STACK and len(slices) > 1:
            return [stacked_enhanced(slices, salt)]
        return list(slices)
    raise ConversionError(reasons.SERIES_ENHANCED,
                          f"the series holds {len({s.source.rel_path for s in enhanced})} Enhanced multi-frame "
                          f"file(s) and {len({s.source.rel_path for s in slices if not s.stacks})} single-frame "
                          f"file(s): an Enhanced file is a volume (or several) already and is not stacked with "
                          f"others; convert them with --unit file")
