"""DICOM Segmentation (SEG) masks on the grid of the image volume they segment.

A Segmentation (SOP Class 1.2.840.10008.5.1.4.1.1.66.4, BINARY or FRACTIONAL, and the
Label Map Segmentation 1.2.840.10008.5.1.4.1.1.66.7) is a multi-frame object whose frames
are segments x planes of the image it was drawn on, each frame naming the image slice it
segments (Derivation Image Sequence > Source Image Sequence) and/or where it lies (Plane
Position (Patient)). Writers omit frames without content, so a SEG usually holds fewer
planes than the image has slices, in any order.

Three pure functions, no Beam:

- ``segment_info``: each segment's number, raw label, category and type codes and
  algorithm type, from the header alone (no pixel data is read or decoded);
- ``referenced``: the Series and SOP Instance UIDs the SEG references and its Frame of
  Reference UID: what a pipeline joins the SEG to its image series on (header alone);
- ``masks_on_grid``: the masks, ``[segments, k, j, i]``, on a ``Grid`` (transforms.masks.grid): the image volume as
  a record holds it (its slices in record order, transforms.series.volumes; rows j,
  columns i, as docs/DICOM.md "Geometry" and transforms.dicom.patient_space describe).

Alignment (``masks_on_grid``): by the SOP Instance UID each frame names, when the grid has
its slices' UIDs (all different) and every frame names exactly one source image (the
pixels through highdicom's ``Segmentation.get_pixels_by_source_instance``); otherwise by
each frame's Image Position (Patient), matched to the grid's slice positions within
``POSITION_TOLERANCE_MM`` (3-D distance). Slices the SEG has no frame for are zeros. Masks
are never resampled: a SEG that does not lie on the image's grid is refused with a reason
(docs/CONVERTING.md):

- ``mask_grid_mismatch``: its Rows/Columns, Pixel Spacing or Image Orientation (Patient)
  differ from the image's, its frames say their spatial locations were not preserved, a
  frame placed by UID lies elsewhere than the slice it names;
- ``frame_of_reference_mismatch`` (placing by position): its Frame of Reference UID is not
  the image's;
- ``mask_unreferenced``: a frame segments a slice the grid does not have (by UID, or a
  position no slice has), or names no slice and has no position to place it by;
- ``mask_invalid``: not a Segmentation, or one whose segments or frames are not described
  as PS3.3 C.8.20 requires (no Segment Sequence, a frame without its segment, two frames of
  one segment on one slice).

Values: BINARY and LABELMAP masks are ``bool``. FRACTIONAL masks are the fraction itself,
``float32`` in [0, 1] (the stored value / Maximum Fractional Value, exactly that division in
float32), so that a probability or occupancy map keeps its information; with
``fractional_threshold=t`` they are ``bool``, ``fraction >= t`` (e.g. 0.5).

Raw segment labels can hold whatever the annotator typed (even a patient's name): they are
returned for class mapping and never put in an error message.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, BinaryIO, Optional, Sequence, Union

import numpy as np
import pydicom
from pydicom.errors import InvalidDicomError

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks.grid import Grid

SEG_STORAGE = "1.2.840.10008.5.1.4.1.1.66.4"
LABEL_MAP_SEG_STORAGE = "1.2.840.10008.5.1.4.1.1.66.7"
SOP_CLASSES = (SEG_STORAGE, LABEL_MAP_SEG_STORAGE)
BINARY, FRACTIONAL, LABELMAP = "BINARY", "FRACTIONAL", "LABELMAP"

POSITION_TOLERANCE_MM = 1e-3       # a frame lies on a slice when their positions are this close
ORIENTATION_TOLERANCE = 1e-3       # per direction cosine (transforms.series.volumes groups slices so)
SPACING_TOLERANCE = 1e-4           # relative, per Pixel Spacing value
_NOT_PRESERVED = ("NO", "REORIENTED_ONLY")   # Spatial Locations Preserved: the pixels moved

Source = Union[pydicom.Dataset, str, "os.PathLike[str]", BinaryIO]


@dataclasses.dataclass(frozen=True)
class Code:
    """A coded concept: (code value, coding scheme designator, code meaning)."""
    value: str
    scheme: str
    meaning: str


@dataclasses.dataclass(frozen=True)
class Segment:
    """One segment of a SEG (Segment Sequence item, PS3.3 C.8.20.2)."""
    number: int                    # Segment Number (1, 2, ...): what the frames refer to
    label: str                     # Segment Label as written: raw text, for class mapping only
    category: Optional[Code]       # Segmented Property Category Code
    type: Optional[Code]           # Segmented Property Type Code
    algorithm_type: str            # Segment Algorithm Type: MANUAL, SEMIAUTOMATIC or AUTOMATIC
    algorithm_name: str = ""       # Segment Algorithm Name, where given


@dataclasses.dataclass(frozen=True)
class Referenced:
    """What a SEG was drawn on: the keys that join it to its image series."""
    series_uids: tuple[str, ...]      # Referenced Series Sequence's Series Instance UIDs
    instance_uids: tuple[str, ...]    # the SOP Instance UIDs it references (series list and frames)
    frame_of_reference_uid: str       # "" when absent
    study_uid: str = ""               # the SEG's Study Instance UID (its images')


@dataclasses.dataclass(frozen=True)
class _Frame:
    number: int                                  # 1-based, as DICOM counts frames
    segment: Optional[int]                       # Referenced Segment Number; None in a LABELMAP
    position: Optional[tuple[float, ...]]        # Image Position (Patient)
    sources: tuple[str, ...]                     # the SOP Instance UIDs it was derived from
    preserved: tuple[str, ...]                   # their Spatial Locations Preserved values


# ---------------------------------------------------------------- reading


def _dataset(source: Source, header_only: bool) -> pydicom.Dataset:
    if isinstance(source, pydicom.Dataset):
        ds = source
    else:
        try:
            ds = pydicom.dcmread(source, stop_before_pixels=header_only)
        except OSError as error:
            why = error.strerror or type(error).__name__
            raise ConversionError(reasons.UNREADABLE, f"the segmentation could not be read ({why})") from error
        except (InvalidDicomError, EOFError, ValueError) as error:
            raise ConversionError(reasons.INVALID_DICOM,
                                  f"the segmentation does not parse as DICOM ({type(error).__name__})") from error
    sop_class = str(ds.get("SOPClassUID", ""))
    if sop_class not in SOP_CLASSES:
        raise ConversionError(reasons.MASK_INVALID,
                              f"not a DICOM Segmentation: SOP Class UID {sop_class or '(absent)'}, not "
                              f"{SEG_STORAGE} (Segmentation) or {LABEL_MAP_SEG_STORAGE} (Label Map Segmentation)")
    return ds


def _text(item: Any, keyword: str) -> str:
    value = item.get(keyword)
    return "" if value is None else str(value)


def _code(item: Any, keyword: str) -> Optional[Code]:
    sequence = item.get(keyword)
    if not sequence:
        return None
    code = sequence[0]
    value = _text(code, "CodeValue") or _text(code, "LongCodeValue") or _text(code, "URNCodeValue")
    return Code(value, _text(code, "CodingSchemeDesignator"), _text(code, "CodeMeaning"))


_ONCE = "_dcm2tfrecord_once"        # on a SEG parsed by load: what is read from it once, not per record


def once(parsed: Any, key: Any, compute: Any) -> Any:
    """``compute()``, once per SEG parsed by ``load`` (kept by a worker for every record of its
    series, transforms.masks.annotation_cache): its segments, its frames, the grids it was
    checked against, its segments' classes; so that each record of a series of many slices costs
    what it draws, not the whole SEG's segments and frames again. Any other source: computed
    each time (a Dataset a caller may still change)."""
    memo = getattr(parsed, "__dict__", {}).get(_ONCE) if isinstance(parsed, pydicom.Dataset) else None
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def segmentation_type(source: Source) -> str:
    """BINARY, FRACTIONAL or LABELMAP (Segmentation Type; a Label Map Segmentation is LABELMAP)."""
    ds = _dataset(source, header_only=True)
    kind = _text(ds, "SegmentationType").upper()
    if str(ds.SOPClassUID) == LABEL_MAP_SEG_STORAGE:
        kind = LABELMAP
    if kind not in (BINARY, FRACTIONAL, LABELMAP):
        raise ConversionError(reasons.MASK_INVALID,
                              f"Segmentation Type {kind or '(absent)'}: not BINARY, FRACTIONAL or LABELMAP")
    return kind


def segment_info(source: Source) -> list[Segment]:
    """The SEG's segments by ascending Segment Number, from the header alone (no pixel
    data read); ``source`` is a pydicom Dataset, a path or a binary file object."""
    return list(once(source, "segments", lambda: _segment_info(source)))


def segment_labels(source: Source) -> list[tuple[int, str]]:
    """(Segment Number, Segment Label) of each segment by ascending number, with segment_info's
    refusals: what mapping classes and drawing need, without reading each segment's codes
    (pydicom parses a code sequence per segment: half the cost of 10,000 declared segments)."""
    return list(once(source, "labels", lambda: [(s.number, s.label) for s in _segment_info(source, False)]))


def _segment_info(source: Source, codes: bool = True) -> list[Segment]:
    ds = _dataset(source, header_only=True)
    items = ds.get("SegmentSequence")
    if not items:
        raise ConversionError(reasons.MASK_INVALID, "the segmentation has no Segment Sequence (0062,0002)")
    out = []
    for index, item in enumerate(items):
        number = item.get("SegmentNumber")
        try:
            number = int(number)
        except (TypeError, ValueError):
            number = None
        if number is None:
            raise ConversionError(reasons.MASK_INVALID,
                                  f"Segment Sequence item {index + 1} has no Segment Number (0062,0004)")
        if not codes:
            out.append(Segment(number, _text(item, "SegmentLabel"), None, None, ""))
            continue
        out.append(Segment(number, _text(item, "SegmentLabel"),
                           _code(item, "SegmentedPropertyCategoryCodeSequence"),
                           _code(item, "SegmentedPropertyTypeCodeSequence"),
                           _text(item, "SegmentAlgorithmType"), _text(item, "SegmentAlgorithmName")))
    numbers = [s.number for s in out]
    if len(set(numbers)) != len(numbers):
        repeated = sorted({n for n in numbers if numbers.count(n) > 1})
        raise ConversionError(reasons.MASK_INVALID, f"Segment Number(s) {repeated} given to more than one segment")
    return sorted(out, key=lambda s: s.number)


def _add(seen: dict[str, None], value: Any) -> None:
    if value:
        seen.setdefault(str(value), None)


def _frame_items(ds: pydicom.Dataset) -> tuple[Any, Sequence[Any]]:
    shared = ds.get("SharedFunctionalGroupsSequence")
    per_frame = ds.get("PerFrameFunctionalGroupsSequence") or []
    return (shared[0] if shared else None), per_frame


def _group(frame: Any, shared: Any, keyword: str) -> Any:
    """A functional group's first item: the frame's own, else the shared one, else None."""
    for holder in (frame, shared):
        if holder is not None:
            sequence = holder.get(keyword)
            if sequence:
                return sequence[0]
    return None


def _sources(frame: Any, shared: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The SOP Instance UIDs one frame was derived from, and their Spatial Locations Preserved."""
    uids: list[str] = []
    preserved: list[str] = []
    for holder in (frame, shared):
        if holder is None or not holder.get("DerivationImageSequence"):
            continue
        for derivation in holder.DerivationImageSequence:
            for item in derivation.get("SourceImageSequence") or []:
                if item.get("ReferencedSOPInstanceUID"):
                    uids.append(str(item.ReferencedSOPInstanceUID))
                    preserved.append(_text(item, "SpatialLocationsPreserved").upper())
        break                                  # the frame's own derivation, else the shared one
    return tuple(uids), tuple(preserved)


def referenced(source: Source) -> Referenced:
    """The image series and instances the SEG was drawn on and its Frame of Reference UID,
    from the header alone: the Referenced Series Sequence's series and instances, then any
    further instances its frames' Source Image Sequences name, each once, in file order."""
    ds = _dataset(source, header_only=True)
    series: dict[str, None] = {}
    instances: dict[str, None] = {}
    for item in ds.get("ReferencedSeriesSequence") or []:
        _add(series, item.get("SeriesInstanceUID"))
        for instance in item.get("ReferencedInstanceSequence") or []:
            _add(instances, instance.get("ReferencedSOPInstanceUID"))
    shared, per_frame = _frame_items(ds)
    for frame in per_frame or [None]:
        for uid in _sources(frame, shared)[0]:
            _add(instances, uid)
    return Referenced(tuple(series), tuple(instances), _text(ds, "FrameOfReferenceUID"), _text(ds, "StudyInstanceUID"))


def _floats(item: Any, keyword: str, count: int) -> Optional[tuple[float, ...]]:
    if item is None or item.get(keyword) is None:
        return None
    try:
        values = tuple(float(v) for v in item.get(keyword))
    except (TypeError, ValueError):
        return None
    return values if len(values) == count and all(np.isfinite(values)) else None


def _frames(ds: pydicom.Dataset, kind: str) -> list[_Frame]:
    shared, per_frame = _frame_items(ds)
    count = int(ds.get("NumberOfFrames") or 1)
    if len(per_frame) != count:
        raise ConversionError(reasons.MASK_INVALID,
                              f"{len(per_frame)} Per-Frame Functional Groups for {count} frames (Number of Frames)")
    out = []
    for index, frame in enumerate(per_frame):
        segment = None
        if kind != LABELMAP:
            identification = _group(frame, shared, "SegmentIdentificationSequence")
            segment = identification.get("ReferencedSegmentNumber") if identification is not None else None
            if segment is None:
                raise ConversionError(reasons.MASK_INVALID,
                                      f"frame {index + 1} names no segment (Segment Identification Sequence)")
        plane = _group(frame, shared, "PlanePositionSequence")
        uids, preserved = _sources(frame, shared)
        out.append(_Frame(index + 1, None if segment is None else int(segment),
                          _floats(plane, "ImagePositionPatient", 3), uids, preserved))
    return out


# ---------------------------------------------------------------- checks


def _mismatch(message: str) -> ConversionError:
    return ConversionError(reasons.MASK_GRID_MISMATCH, message + ": a SEG of another image or of a resampled one "
                                                                 "(masks are never resampled)")


def _check_grid(ds: pydicom.Dataset, frames: Sequence[_Frame], grid: Grid) -> None:
    rows, columns = int(ds.get("Rows") or 0), int(ds.get("Columns") or 0)
    if (rows, columns) != (grid.rows, grid.columns):
        raise _mismatch(f"the SEG's frames are {rows} x {columns} pixels (Rows x Columns), the image's slices "
                        f"{grid.rows} x {grid.columns}")
    shared, per_frame = _frame_items(ds)
    for index, frame in enumerate(per_frame):
        orientation = _floats(_group(frame, shared, "PlaneOrientationSequence"), "ImageOrientationPatient", 6)
        if orientation is not None and grid.orientation:
            worst = float(np.max(np.abs(np.subtract(orientation, grid.orientation))))
            if worst > ORIENTATION_TOLERANCE:
                raise _mismatch(f"the SEG's frame {index + 1} has Image Orientation (Patient) "
                                f"{[round(v, 6) for v in orientation]}, the image "
                                f"{[round(float(v), 6) for v in grid.orientation]}")
        spacing = _floats(_group(frame, shared, "PixelMeasuresSequence"), "PixelSpacing", 2)
        if spacing is not None and grid.pixel_spacing:
            ours = np.asarray(grid.pixel_spacing, float)
            if np.any(np.abs(np.subtract(spacing, ours)) > SPACING_TOLERANCE * np.maximum(np.abs(ours), 1e-9)):
                raise _mismatch(f"the SEG's frame {index + 1} has Pixel Spacing {[round(v, 6) for v in spacing]} mm, "
                                f"the image {[round(float(v), 6) for v in ours]} mm")
        if shared is not None and frame.get("PlaneOrientationSequence") is None \
                and frame.get("PixelMeasuresSequence") is None:
            break                                # shared by every frame: checked once
    moved = [f for f in frames if any(p in _NOT_PRESERVED for p in f.preserved)]
    if moved:
        raise _mismatch(f"{len(moved)} of the SEG's frames (e.g. frame {moved[0].number}) say Spatial Locations "
                        f"Preserved {next(p for p in moved[0].preserved if p in _NOT_PRESERVED)}: their pixels do "
                        f"not lie where the source image's do")


def _slices_by_uid(frames: Sequence[_Frame], grid: Grid, part: bool = False) -> Optional[list[int]]:
    """Each frame's slice k by the SOP Instance UID it names (-1 for a slice of the series
    outside a ``part`` grid), or None when that cannot place them."""
    if not grid.instance_uids or len(set(grid.instance_uids)) != len(grid.instance_uids):
        return None
    if any(len(f.sources) != 1 for f in frames):
        return None
    index = {uid: k for k, uid in enumerate(grid.instance_uids)}
    missing = [f for f in frames if f.sources[0] not in index]
    if missing and not part:
        raise ConversionError(reasons.MASK_UNREFERENCED,
                              f"{len(missing)} of the SEG's {len(frames)} frames (e.g. frame {missing[0].number}) "
                              f"segment a slice that is not among the image's {grid.depth}: a SEG of another "
                              f"series, or of slices left out of this volume")
    slices = [index.get(f.sources[0], -1) for f in frames]
    if grid.positions:
        for frame, k in zip(frames, slices):
            if frame.position is None or k < 0:
                continue
            distance = float(np.linalg.norm(np.subtract(frame.position, grid.positions[k])))
            if distance > POSITION_TOLERANCE_MM:
                raise _mismatch(f"the SEG's frame {frame.number} lies {distance:.4g} mm from the image slice it "
                                f"names (slice {k} in record order)")
    return slices


def _slices_by_position(ds: pydicom.Dataset, frames: Sequence[_Frame], grid: Grid, part: bool = False) -> list[int]:
    """Each frame's slice k by its Image Position (Patient), within POSITION_TOLERANCE_MM (-1
    for a frame on no slice of a ``part`` grid)."""
    if not grid.positions:
        raise ConversionError(reasons.MASK_UNREFERENCED,
                              "the SEG's frames do not each name one slice of the image (Source Image Sequence) "
                              "and the image grid has no slice positions to place them by")
    ours = _text(ds, "FrameOfReferenceUID")
    if ours and grid.frame_of_reference_uid and ours != grid.frame_of_reference_uid:
        raise ConversionError(reasons.FRAME_OF_REFERENCE_MISMATCH,
                              "the SEG's Frame of Reference UID is not the image's: its frame positions are in "
                              "another coordinate system (pair it with the series it was drawn on)")
    unplaced = [f for f in frames if f.position is None]
    if unplaced:
        raise ConversionError(reasons.MASK_UNREFERENCED,
                              f"{len(unplaced)} of the SEG's frames (e.g. frame {unplaced[0].number}) have no Image "
                              f"Position (Patient) and do not name one slice of the image")
    slices = np.asarray(grid.positions, float)
    placed = np.asarray([f.position for f in frames], float)
    nearest = np.empty(len(frames), int)
    distance = np.empty(len(frames))
    for start in range(0, len(frames), 256):                    # frames x slices x 3 stays small
        block = np.linalg.norm(placed[start:start + 256, None, :] - slices[None, :, :], axis=2)
        nearest[start:start + 256] = block.argmin(axis=1)
        distance[start:start + 256] = block.min(axis=1)
    off = np.flatnonzero(distance > POSITION_TOLERANCE_MM)
    if part:
        nearest[off] = -1
    elif off.size:
        first = int(off[0])
        raise ConversionError(reasons.MASK_UNREFERENCED,
                              f"{off.size} of the SEG's {len(frames)} frames (e.g. frame {frames[first].number}, "
                              f"{distance[first]:.4g} mm from the nearest slice) lie on no slice of the image "
                              f"(positions matched within {POSITION_TOLERANCE_MM:g} mm)")
    return [int(k) for k in nearest]


# ---------------------------------------------------------------- declared sizes

MAX_FRAMES = 1 << 20               # frames a SEG may declare: far beyond any series' slices x segments


def check_declared(ds: pydicom.Dataset) -> None:
    """mask_invalid, in one line, for a SEG whose declared size its file cannot hold: Number of
    Frames beyond MAX_FRAMES or not that of its Per-Frame Functional Groups, Rows or Columns not
    positive, or Pixel Data shorter than Number of Frames x Rows x Columns x Bits Allocated
    (native) or than one item per frame (encapsulated). Checked before highdicom is asked to
    read it, which allocates for the declared frames first (2^31 - 1 frames: a 16 GB list)."""
    try:
        count, rows, columns = (int(ds.get(keyword) or default) for keyword, default in
                                (("NumberOfFrames", 1), ("Rows", 0), ("Columns", 0)))
        bits = int(ds.get("BitsAllocated") or 1)
    except (TypeError, ValueError):
        raise ConversionError(reasons.MASK_INVALID, "the segmentation's Number of Frames, Rows, Columns or Bits "
                                                    "Allocated is not an integer") from None
    if not 1 <= count <= MAX_FRAMES or rows < 1 or columns < 1 or bits not in (1, 8, 16):
        raise ConversionError(reasons.MASK_INVALID,
                              f"the segmentation declares {count} frames of {rows} x {columns} pixels, "
                              f"{bits} bits allocated (at most {MAX_FRAMES} frames of 1, 8 or 16 bits)")
    per_frame = ds.get("PerFrameFunctionalGroupsSequence")
    if per_frame is not None and len(per_frame) != count:
        raise ConversionError(reasons.MASK_INVALID,
                              f"{len(per_frame)} Per-Frame Functional Groups for {count} frames (Number of Frames)")
    element = ds.get_item("PixelData") if "PixelData" in ds else None
    if element is None:
        return
    held = len(element.value or b"")
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    if syntax is not None and syntax.is_encapsulated:
        needed, what = 8 * count, f"one item per frame ({8 * count} bytes)"
    else:
        needed = (count * rows * columns * bits + 7) // 8
        what = f"{count} x {rows} x {columns} x {bits} bits ({needed} bytes)"
    if held < needed:
        raise ConversionError(reasons.MASK_INVALID,
                              f"the segmentation's Pixel Data holds {held} bytes, its declared frames need {what}")


# ---------------------------------------------------------------- pixels


def _highdicom(ds: pydicom.Dataset, owned: bool) -> Any:
    import highdicom                     # imported on first use: the metadata functions need only pydicom

    if isinstance(ds, highdicom.seg.Segmentation):
        return ds                        # parsed once (load) and reused
    try:
        return highdicom.seg.Segmentation.from_dataset(ds, copy=not owned)
    except (AttributeError, KeyError, ValueError, TypeError, IndexError) as error:
        raise ConversionError(reasons.MASK_INVALID,
                              f"highdicom cannot read the segmentation ({type(error).__name__}): its functional "
                              f"groups or dimension index are not those of a valid SEG") from error


# What a pruned copy leaves out and sets anew; every other element is the SEG's own (shared, never changed).
_PRUNED = ("SegmentSequence", "PerFrameFunctionalGroupsSequence", "NumberOfFrames", "PixelData")


def _frame_bytes(ds: pydicom.Dataset, count: int, numbers: Sequence[int]) -> bytes:
    """The Pixel Data of frames ``numbers`` (1-based) of ``ds``, in that order: encapsulated
    frames as they are; native frames cut out of the packed bits (BINARY frames of an odd
    size do not start on a byte: unpacked only over the bytes each frame spans)."""
    from pydicom.encaps import encapsulate, generate_frames
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    if syntax is not None and syntax.is_encapsulated:
        stored = list(generate_frames(ds.PixelData, number_of_frames=count))
        return encapsulate([stored[n - 1] for n in numbers])
    data = ds.PixelData
    bits = int(ds.Rows) * int(ds.Columns) * int(ds.get("BitsAllocated") or 1)
    if bits % 8 == 0:
        size = bits // 8
        return b"".join(data[(n - 1) * size:n * size] for n in numbers)
    parts = []
    for n in numbers:
        first = (n - 1) * bits
        span = np.frombuffer(data[first // 8:(first + bits + 7) // 8], np.uint8)
        parts.append(np.unpackbits(span, bitorder="little")[first % 8:first % 8 + bits])
    packed = np.packbits(np.concatenate(parts), bitorder="little").tobytes()
    return packed + b"\0" * (len(packed) % 2)          # Pixel Data is of even length


def _only_segments(ds: pydicom.Dataset, frames: Sequence[_Frame], numbers: Sequence[int]
                   ) -> tuple[pydicom.Dataset, dict[int, int]]:
    """A BINARY or FRACTIONAL SEG cut down to segments ``numbers`` and their frames, with
    {frame number in ``ds``: frame number in the copy}: what highdicom then reads (its
    Segment Sequence checked item by item, its frame index built frame by frame) costs the
    segments the class map maps, not those declared (10,000 segments: 24 s of CPU whole)."""
    wanted = set(numbers)
    keep = [f.number for f in frames if f.segment in wanted]
    if not keep:
        return ds, {}
    if len(keep) == len(frames) and len(ds.SegmentSequence) == len(wanted):
        return ds, {n: n for n in keep}
    copy = pydicom.Dataset()
    for element in ds:
        if element.keyword not in _PRUNED:
            copy.add(element)
    copy.file_meta = ds.file_meta
    copy.SegmentSequence = [item for item in ds.SegmentSequence if int(item.SegmentNumber) in wanted]
    per_frame = ds.PerFrameFunctionalGroupsSequence
    copy.PerFrameFunctionalGroupsSequence = [per_frame[n - 1] for n in keep]
    copy.NumberOfFrames = len(keep)
    copy.PixelData = _frame_bytes(ds, len(frames), keep)
    copy["PixelData"].VR = ds["PixelData"].VR
    return copy, {n: i for i, n in enumerate(keep, start=1)}


def _highdicom_of(ds: pydicom.Dataset, frames: Sequence[_Frame], numbers: Sequence[int], owned: bool
                  ) -> tuple[Any, Optional[dict[int, int]]]:
    """highdicom's Segmentation of ``ds`` cut down to segments ``numbers`` (_only_segments) and
    the frames' numbers in it; (None, None) when no frame holds any of them."""
    pruned, renumber = _only_segments(ds, frames, numbers)
    if not renumber:
        return None, None
    return _highdicom(pruned, owned or pruned is not ds), renumber


def _beyond_segments(frame: int, value: int, described: Sequence[int]) -> ConversionError:
    return ConversionError(reasons.MASK_INVALID,
                           f"frame {frame} of the label map holds the value {value}, beyond its segments "
                           f"(Segment Numbers {min(described)}..{max(described)}): each value of a label map "
                           f"names a segment of its Segment Sequence")


def _check_label_values(seg: Any, frames: Sequence[_Frame], described: Sequence[int]) -> None:
    """mask_invalid, naming the value and its frame, for the first label map frame holding a value
    no segment describes (read frame by frame: only once highdicom has refused to map one)."""
    highest = max(described)
    for frame in frames:
        stored = np.asarray(seg.get_stored_frame(frame.number))
        if stored.size and int(stored.max()) > highest:
            raise _beyond_segments(frame.number, int(stored.max()), described)


def _by_source_instance(seg: Any, grid: Grid, numbers: Sequence[int], kind: str = BINARY,
                        frames: Sequence[_Frame] = (), described: Sequence[int] = ()) -> np.ndarray:
    """[segments, k, j, i] stored values (0/1, or the fractional integers) through highdicom."""
    try:
        pixels = seg.get_pixels_by_source_instance(
            list(grid.instance_uids), segment_numbers=list(numbers), ignore_spatial_locations=True,
            assert_missing_frames_are_empty=True, rescale_fractional=False)
    except IndexError as error:            # highdicom maps a label map's values through a table of its segments
        if kind == LABELMAP and described:
            _check_label_values(seg, frames, described)
        raise ConversionError(reasons.MASK_INVALID,
                              f"highdicom cannot index the segmentation's frames by source image "
                              f"({type(error).__name__})") from error
    except (KeyError, ValueError, RuntimeError) as error:
        raise ConversionError(reasons.MASK_INVALID,
                              f"highdicom cannot index the segmentation's frames by source image "
                              f"({type(error).__name__})") from error
    return np.moveaxis(pixels, 3, 0)


def _by_position(seg: Any, kind: str, frames: Sequence[_Frame], slices: Sequence[int], grid: Grid,
                 numbers: Sequence[int], described: Sequence[int] = (),
                 renumber: Optional[dict[int, int]] = None) -> np.ndarray:
    """[segments, k, j, i] stored values (0/1, or the fractional integers), frame by frame
    (``renumber``: a frame's number in ``seg`` when it holds only some of them, _only_segments)."""
    channel = {n: c for c, n in enumerate(numbers)}
    out = np.zeros((len(numbers), grid.depth, grid.rows, grid.columns), np.uint16 if kind == FRACTIONAL else np.uint8)
    filled: dict[tuple[int, int], int] = {}
    for frame, k in zip(frames, slices):
        if kind == LABELMAP:
            targets = list(channel.items())
        else:
            targets = [(n, c) for n, c in channel.items() if n == frame.segment]
        if not targets or k < 0:                 # k < 0: a slice of the series outside a part grid
            continue
        stored = np.asarray(seg.get_stored_frame(frame.number if renumber is None else renumber[frame.number]))
        if kind == LABELMAP and described and stored.size and int(stored.max()) > max(described):
            raise _beyond_segments(frame.number, int(stored.max()), described)
        for number, c in targets:
            if (c, k) in filled:
                raise ConversionError(reasons.MASK_INVALID,
                                      f"frames {filled[(c, k)]} and {frame.number} both hold segment {number} on "
                                      f"slice {k}")
            filled[(c, k)] = frame.number
            out[c, k] = (stored == number) if kind == LABELMAP else stored
    return out


def load(fileobj: BinaryIO) -> Any:
    """A SEG file parsed whole by pydicom, checked against what it declares, for a caller that
    places one SEG on many grids (the records of one series, transforms.masks.annotation_cache):
    ``masks_on_grid`` builds highdicom's Segmentation of it once, of the segments asked for
    (``once``). highdicom's frame index is an SQLite connection, usable only in the thread that
    built it: the cache keeps a SEG per thread."""
    try:
        read = pydicom.dcmread(fileobj, force=True)      # the probe found it a SEG: no preamble needed
    except (OSError, InvalidDicomError, EOFError, ValueError) as error:
        raise ConversionError(reasons.INVALID_DICOM,
                              f"the segmentation does not parse as DICOM ({type(error).__name__})") from error
    ds = _dataset(read, header_only=False)
    check_declared(ds)
    object.__setattr__(ds, _ONCE, {})        # kept by a worker and never changed: read once (once)
    return ds


def check_placement(source: Source, grid: Grid) -> None:
    """Whether every frame of the SEG lies on a slice of ``grid``, by masks_on_grid's rules and
    with its refusals: the series as a whole, when its slices or frames are separate records
    (--unit file), each given its part with ``masks_on_grid(..., part=True)``. The header
    alone is read; a grid without positions checks only the frames that name their source
    (placing the others is left to each part)."""
    ds = _dataset(source, header_only=True)
    frames = _frames(ds, segmentation_type(ds))
    if _slices_by_uid(frames, grid) is None and grid.positions:
        _slices_by_position(ds, frames, grid)


def frames_on_slices(source: Source, grid: Grid) -> Optional[dict[int, tuple[int, ...]]]:
    """check_placement, telling where the frames lie: slice k of ``grid`` -> the numbers of the
    SEG's frames on it (a frame placed by position lies on every slice at its position: the
    volumes of a 4-D series share them); None when the grid cannot place them (no positions,
    and frames that do not each name one of its slices). Slices without a frame are not keys."""
    ds = _dataset(source, header_only=True)
    frames = _frames(ds, segmentation_type(ds))
    slices = _slices_by_uid(frames, grid)
    on: dict[int, list[int]] = {}
    if slices is not None:
        for frame, k in zip(frames, slices):
            on.setdefault(k, []).append(frame.number)
    elif grid.positions:
        nearest = _slices_by_position(ds, frames, grid)
        positions = np.asarray(grid.positions, float)
        alike = {k: np.flatnonzero(np.linalg.norm(positions - positions[k], axis=1) <= POSITION_TOLERANCE_MM)
                 for k in set(nearest)}
        for frame, k in zip(frames, nearest):
            for same in alike[k]:
                on.setdefault(int(same), []).append(frame.number)
    else:
        return None
    return {k: tuple(numbers) for k, numbers in on.items()}


def masks_on_grid(source: Source, grid: Grid, segment_numbers: Optional[Sequence[int]] = None,
                  fractional_threshold: Optional[float] = None, max_voxels: Optional[int] = None,
                  part: bool = False) -> np.ndarray:
    """The SEG's masks on ``grid``: ``[segments, k, j, i]``, segments in ``segment_numbers``'
    order (default: every segment by ascending number, as ``segment_info`` lists them, but a
    Label Map's background segment 0, the complement of the others, which is never returned).

    ``bool`` for BINARY and LABELMAP SEGs; ``float32`` fractions in [0, 1] for FRACTIONAL
    ones, ``bool`` (``fraction >= fractional_threshold``) when a threshold is given. Slices
    without a frame of a segment are zeros. Alignment and refusals: the module docstring.
    ``max_voxels`` bounds segments x k x j x i (too_many_pixels beyond it) before any decode.
    ``part``: the grid is part of the image the SEG was drawn on (one slice record of a series,
    one frame of a split file), whose placement the caller checked (check_placement): frames
    on slices outside it are left out, not refused.
    """
    grid.check()
    owned = not isinstance(source, pydicom.Dataset)
    ds = _dataset(source, header_only=False)
    if "PixelData" not in ds:
        raise ConversionError(reasons.MASK_INVALID, "the segmentation has no Pixel Data")
    kind = segmentation_type(ds)
    described = [number for number, _ in segment_labels(ds)]
    # a label map's segment 0 is its background, the complement of the others (highdicom's rule)
    known = [n for n in described if not (kind == LABELMAP and n == 0)]
    numbers = known if segment_numbers is None else [int(n) for n in segment_numbers]
    unknown = sorted(set(numbers) - set(known))
    if unknown or not numbers:
        raise ValueError(f"segment numbers {unknown or '(none)'}: the SEG's segments are {known}")
    voxels = len(numbers) * grid.depth * grid.rows * grid.columns
    if max_voxels is not None and voxels > max_voxels:
        raise ConversionError(reasons.TOO_MANY_PIXELS,
                              f"{len(numbers)} segments x {grid.depth} x {grid.rows} x {grid.columns} = {voxels} mask "
                              f"voxels > {max_voxels}")
    frames = once(ds, "frames", lambda: _frames(ds, kind))
    strays = [f for f in frames if f.segment is not None and f.segment not in described]
    if strays:
        raise ConversionError(reasons.MASK_INVALID,
                              f"frame {strays[0].number} holds segment {strays[0].segment}, which the Segment "
                              f"Sequence does not describe")
    once(ds, ("grid", grid.rows, grid.columns, grid.orientation, grid.pixel_spacing),
         lambda: _check_grid(ds, frames, grid))
    slices = _slices_by_uid(frames, grid, part)
    once(ds, "declared", lambda: check_declared(ds))
    if kind == LABELMAP:       # one frame per slice, each holding every segment: nothing to leave out
        seg, renumber = once(ds, ("highdicom",), lambda: (_highdicom(ds, owned), None))
    else:                      # highdicom reads the segments asked for, not the ones declared
        seg, renumber = once(ds, ("highdicom", tuple(sorted(numbers))),
                             lambda: _highdicom_of(ds, frames, numbers, owned))
    if seg is None:            # no frame holds any of them: nothing is drawn
        dtype = np.uint16 if kind == FRACTIONAL else np.uint8
        stored = np.zeros((len(numbers), grid.depth, grid.rows, grid.columns), dtype)
    elif slices is not None:
        stored = _by_source_instance(seg, grid, numbers, kind, frames, described)
    else:
        stored = _by_position(seg, kind, frames, _slices_by_position(ds, frames, grid, part), grid, numbers,
                              described, renumber)
    if kind != FRACTIONAL:
        return stored > 0
    maximum = int(ds.get("MaximumFractionalValue") or 0)
    if maximum < 1:
        raise ConversionError(reasons.MASK_INVALID, "a FRACTIONAL segmentation without a Maximum Fractional Value")
    fractions = stored.astype(np.float32) / np.float32(maximum)
    return fractions if fractional_threshold is None else fractions >= np.float32(fractional_threshold)
