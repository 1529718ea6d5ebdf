"""RTSTRUCT regions of interest, rasterised onto the grid of the image series they were drawn on.

An RT Structure Set (PS3.3 A.19) draws each ROI as planar polygons in patient space (LPS mm,
C.7.6.2.1.1): the Structure Set ROI Sequence (3006,0020) lists the ROIs (ROI Number, ROI Name,
Referenced Frame of Reference UID); the ROI Contour Sequence (3006,0039) holds each ROI's contours
(Contour Geometric Type (3006,0042), Contour Data (3006,0050) as x\\y\\z triplets and, optionally, the
Contour Image Sequence (3006,0016) naming the image a contour lies on). ``rasterise`` turns them into
boolean masks ``[roi, k, j, i]`` on an image volume's grid: the record's ``[depth, height, width]``,
whose ``dicom/affine`` maps ``[k, j, i, 1]`` to LPS mm (transforms.dicom.patient_space; docs/DICOM.md,
"Geometry"). Pure functions of a parsed header: no Beam, no file access.

The rules, one contour at a time:

- **Its slice.** The slice normal n is the grid's row x column cosines. A contour belongs to the
  slice its Contour Image Sequence's Referenced SOP Instance UID names, when the grid carries the
  slices' UIDs and holds that one; else to the slice nearest its plane (its points' mean projection
  on n). Either way every point must lie within half the slice spacing of that slice along n (the
  median step between the grid's slices; a grid of one slice: ``Grid.slice_spacing``, else 1 mm as
  in transforms.dicom.patient_space): a contour beyond that, off the series' slabs or across
  several slices (drawn on a reformat), is on no image of the grid and fails as
  ``contour_off_grid``, naming its ROI number (never its name: names can hold patient names).
- **Its pixels.** Each point p goes to the slice's (row, column) coordinates with the inverse of
  the in-plane part of the affine: row = (p - P_k) . c / row spacing, column = (p - P_k) . r /
  column spacing, with P_k that slice's own Image Position (a tilted gantry's in-plane shift is
  kept), r and c the row and column cosines (Image Orientation (Patient)), the spacings Pixel
  Spacing's two values. Pixel (j, i)'s centre is row j, column i. The coordinates are snapped to
  1/256 pixel: contours made from masks (rt-utils, OpenCV's findContours, many auto-contouring
  exports) run through the centres of a region's edge pixels, and come back through float32
  affines and decimal strings a few millionths of a pixel off them, which would make every edge
  pixel a coin toss; the snap moves no point more than 1/512 pixel, and makes every test of the
  fill below exact.
- **Inside.** transforms.masks.polygons fills each slice's contours by scanline in exact
  fixed-point arithmetic on those 1/256-pixel coordinates, and says of each pixel centre of their
  bounding box whether it is outside, inside, or on a contour's path (a vertex or an edge).
  C.8.8.6.3: "Points in space lying along the path defined by the contour are considered to be
  part of the ROI", so a pixel centre on any contour's path is in the ROI. Elsewhere a pixel is in the ROI when an odd
  number of the ROI's contours on that slice enclose it (exclusive or, the even-odd rule): the
  standard's rule for contours of type CLOSEDPLANAR_XOR (C.8.8.6.3, "the XOR technique": the
  contours are combined by a geometric exclusive disjunction, in any order), and the reading that
  plastimatch, platipy and dcmrtstruct2nii give nested CLOSED_PLANAR contours: a contour inside
  another is a hole, a contour inside the hole an island; a union would fill every hole. A keyhole
  contour (C.8.8.6.3's other technique: one polygon that reaches the inner outline through an
  arbitrarily narrow channel) is one polygon and needs no rule. Two CLOSED_PLANAR contours of one
  ROI that overlap without nesting cancel where they overlap: that is what XOR says.
- **Ignored.** ROIs the caller does not ask for (``roi_numbers``; transforms.masks.annotation asks
  only for those its class map names) are neither read nor checked. POINT, OPEN_PLANAR and
  OPEN_NONPLANAR contours (C.8.8.6.1: markers, lines and applicator paths) enclose no area and
  draw nothing. An ROI without contours is an empty mask.
  Contour Slab Thickness and Contour Offset Vector (C.8.8.6.2) are not applied: each contour
  marks the one image it lies on. Parts of a contour outside the image's rows and columns are
  cut off at its edge.
- **Frames of reference.** Contour Data lie in the ROI's Referenced Frame of Reference; when the
  grid names its image's Frame of Reference UID and an ROI's differs, the masks would be in
  another coordinate system: ``frame_of_reference_mismatch``.

``roi_info`` and ``referenced`` read only metadata: what a caller maps ROIs to classes by (their
raw names, returned, never logged) and what a pipeline joins the structure set to its image
series on.
"""
from __future__ import annotations

import dataclasses
import functools
import io
import math
import struct
from typing import Any, Optional, Sequence

import numpy as np
from pydicom.dataelem import RawDataElement
from pydicom.filereader import data_element_generator

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks.grid import Grid
from dcm2tfrecord.transforms.masks import polygons as polygons_

RT_STRUCTURE_SET_STORAGE = "1.2.840.10008.5.1.4.1.1.481.3"
CLOSED = ("CLOSED_PLANAR", "CLOSEDPLANAR_XOR")        # C.8.8.6.1: the types that enclose an area
SNAP = 256.0                                          # pixel coordinates snapped to 1/SNAP pixel
_MAX_COORDINATE = 1 << 20                             # pixels: fixed-point products stay in int64
_MAX_MM = 1e9                                         # |Contour Data| beyond it: no patient's (1000 km)
_CONTOUR_DATA = 0x30060050
_CONTOUR_IMAGES = 0x30060016                          # Contour Image Sequence
_REFERENCED_SOP_INSTANCE_UID = 0x00081155
_SINGLE_SLICE_SPACING = 1.0                           # mm; patient_space's step for a record of one slice
_PLANE_TOLERANCE = 1e-4                               # mm beyond half the slice spacing (decimal strings)


@dataclasses.dataclass(frozen=True)
class Roi:
    """One ROI of a structure set (Structure Set ROI Sequence), metadata only."""
    number: int                        # ROI Number (3006,0022): what contours reference
    name: str                          # ROI Name (3006,0026), raw: for class mapping, never logged
    frame_of_reference_uid: str        # Referenced Frame of Reference UID (3006,0024)
    contours: int                      # items in its ROI Contour Sequence item's Contour Sequence
    interpreted_type: str = ""         # RT ROI Interpreted Type (3006,00A4): ORGAN, PTV, ... when given


@dataclasses.dataclass(frozen=True)
class Referenced:
    """What a structure set was drawn on: the keys a pipeline joins it to its image series by."""
    series_uids: tuple[str, ...]       # Referenced Frame of Reference > RT Referenced Study > Series
    frame_of_reference_uid: str        # the (first) Referenced Frame of Reference Sequence item's
    sop_instance_uids: tuple[str, ...]  # the images named by Contour Image Sequences, first seen first
    study_uids: tuple[str, ...] = ()   # RT Referenced Study Sequence's Referenced SOP Instance UIDs


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _items(ds: Any, keyword: str) -> list:
    value = ds.get(keyword) if ds is not None else None
    return list(value) if value else []


def _roi_number(item: Any, keyword: str, where: str) -> int:
    value = item.get(keyword)
    try:
        return int(value)
    except (TypeError, ValueError):
        reason, why = (reasons.MISSING_ATTRIBUTE, "absent") if value is None else (reasons.INVALID_VALUE,
                                                                                   "not an integer")
        raise ConversionError(reason, f"RTSTRUCT: {where} has no usable {keyword} ({why}); the structure set "
                                      "is malformed: re-export it") from None


def _check_structure_set(ds: Any) -> None:
    sop_class = _text(ds.get("SOPClassUID"))
    if sop_class and sop_class != RT_STRUCTURE_SET_STORAGE:
        raise ConversionError(reasons.INVALID_VALUE,
                              f"not an RT Structure Set: SOP Class UID {sop_class} (an RTSTRUCT is "
                              f"{RT_STRUCTURE_SET_STORAGE})")
    if "StructureSetROISequence" not in ds:
        raise ConversionError(reasons.MISSING_ATTRIBUTE,
                              "RTSTRUCT without a Structure Set ROI Sequence (3006,0020): it names no ROI; "
                              "re-export the structure set")


class StructureSet:
    """A parsed structure set with its ROIs and its contours indexed once (by ROI number, then
    contour index): what a worker keeps for a series' records (transforms.masks.annotation_cache),
    so that each slice record of ``--unit file`` reads only the contours placed on it, not every
    contour of the set (200,000 contours on 100 slices did not finish). Every function of this
    module taking a structure set takes one of these or a pydicom Dataset."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    @functools.cached_property
    def contours(self) -> dict[int, list]:
        return _contour_sequences(self.dataset)

    @functools.cached_property
    def rois(self) -> list[Roi]:
        return _roi_info(self.dataset, self.contours)

    @functools.cached_property
    def frame_of_reference_uid(self) -> str:
        return referenced(self.dataset, images=False).frame_of_reference_uid


def indexed(ds: Any) -> StructureSet:
    """``ds`` as a StructureSet (itself when it is one)."""
    return ds if isinstance(ds, StructureSet) else StructureSet(ds)


def _unwrapped(ds: Any) -> Any:
    return ds.dataset if isinstance(ds, StructureSet) else ds


def _contour_sequences(ds: Any) -> dict[int, list]:
    """ROI number -> its contours (Contour Sequence items), from the ROI Contour Sequence."""
    out: dict[int, list] = {}
    for index, item in enumerate(_items(ds, "ROIContourSequence")):
        number = _roi_number(item, "ReferencedROINumber", f"ROI Contour Sequence item {index + 1}")
        out.setdefault(number, []).extend(_items(item, "ContourSequence"))
    return out


def roi_info(ds: Any) -> list[Roi]:
    """The structure set's ROIs in Structure Set ROI Sequence order: number, raw name, frame of
    reference, contour count (and RT ROI Interpreted Type where RT ROI Observations give one)."""
    if isinstance(ds, StructureSet):
        return ds.rois
    return _roi_info(ds, _contour_sequences(ds))


def _roi_info(ds: Any, contours: dict[int, list]) -> list[Roi]:
    _check_structure_set(ds)
    interpreted: dict[int, str] = {}
    for item in _items(ds, "RTROIObservationsSequence"):
        try:
            interpreted.setdefault(int(item.get("ReferencedROINumber")), _text(item.get("RTROIInterpretedType")))
        except (TypeError, ValueError):
            continue                                  # an observation only adds a type; never fails the set
    out = []
    for index, item in enumerate(_items(ds, "StructureSetROISequence")):
        number = _roi_number(item, "ROINumber", f"Structure Set ROI Sequence item {index + 1}")
        out.append(Roi(number, _text(item.get("ROIName")), _text(item.get("ReferencedFrameOfReferenceUID")),
                       len(contours.get(number, ())), interpreted.get(number, "")))
    return out


def referenced(ds: Any, images: bool = True) -> Referenced:
    """The series, frame of reference and images the structure set references (metadata only;
    ``images`` False leaves ``sop_instance_uids`` empty and the contours unread: a structure set
    of a 200-slice CT holds thousands of contour items, ~0.5 s to parse)."""
    ds = _unwrapped(ds)
    _check_structure_set(ds)
    series: list[str] = []
    studies: list[str] = []
    uids: list[str] = []

    def add(values: list[str], value: Any) -> None:
        text = _text(value)
        if text and text not in values:
            values.append(text)

    frames = _items(ds, "ReferencedFrameOfReferenceSequence")
    for frame in frames:
        for study in _items(frame, "RTReferencedStudySequence"):
            add(studies, study.get("ReferencedSOPInstanceUID"))
            for ref_series in _items(study, "RTReferencedSeriesSequence"):
                add(series, ref_series.get("SeriesInstanceUID"))
                for image in _items(ref_series, "ContourImageSequence") if images else ():
                    add(uids, image.get("ReferencedSOPInstanceUID"))
    for roi in _items(ds, "ROIContourSequence") if images else ():
        for contour in _items(roi, "ContourSequence"):
            for image in _items(contour, "ContourImageSequence"):
                add(uids, image.get("ReferencedSOPInstanceUID"))
    frame_uid = _text(frames[0].get("FrameOfReferenceUID")) if frames else ""
    if not frame_uid:                                  # older sets: only the ROIs name their frame
        frame_uid = next((_text(item.get("ReferencedFrameOfReferenceUID"))
                          for item in _items(ds, "StructureSetROISequence")
                          if _text(item.get("ReferencedFrameOfReferenceUID"))), "")
    return Referenced(tuple(series), frame_uid, tuple(uids), tuple(studies))


@dataclasses.dataclass(frozen=True)
class _Plane:
    """The grid in the numbers rasterising needs."""
    positions: np.ndarray          # [k, 3]
    row_cos: np.ndarray            # direction of increasing column index
    col_cos: np.ndarray            # direction of increasing row index
    normal: np.ndarray
    heights: np.ndarray            # [k] each slice's position along the normal
    half_spacing: float            # mm along the normal a contour may lie from its slice
    row_spacing: float
    column_spacing: float
    rows: int
    columns: int
    by_uid: dict


def _plane(grid: Grid, in_plane: bool = True, join: bool = False) -> _Plane:
    """The grid's numbers; without ``in_plane`` only its slices' (positions, orientation, UIDs):
    enough to place contours on slices (assign_contours), not to draw them. ``join``: the grid
    is a whole series the contours are placed on (assign_contours), whose 4-D volumes may share
    positions when every slice has its UID."""
    cosines = patient_space.orientation(grid.orientation)
    spacing = patient_space.floats(grid.pixel_spacing, 2) if in_plane else (0.0, 0.0)
    positions = np.asarray(grid.positions, float)
    rows, columns = int(grid.rows), int(grid.columns)
    if not cosines:
        raise ConversionError(reasons.INVALID_VALUE, "image grid: Image Orientation (Patient) is not two unit, "
                                                     "orthogonal direction cosine vectors; masks need it")
    if in_plane and (not spacing or min(spacing) <= 0):
        raise ConversionError(reasons.INVALID_VALUE, "image grid: Pixel Spacing is not two positive numbers; "
                                                     "masks need it")
    if positions.ndim != 2 or positions.shape[1:] != (3,) or not len(positions) \
            or not np.isfinite(positions).all():
        raise ConversionError(reasons.INVALID_VALUE, "image grid: slice positions must be one finite "
                                                     "(x, y, z) per slice, at least one")
    if in_plane and (rows <= 0 or columns <= 0):
        raise ConversionError(reasons.INVALID_VALUE, f"image grid: {rows} rows x {columns} columns")
    uids = [_text(u) for u in grid.instance_uids]
    if uids and len(uids) != len(positions):
        raise ConversionError(reasons.INVALID_VALUE, f"image grid: {len(uids)} SOP Instance UIDs for "
                                                     f"{len(positions)} slice positions")
    row_cos = np.asarray(cosines[:3]) / np.linalg.norm(cosines[:3])
    col_cos = np.asarray(cosines[3:]) / np.linalg.norm(cosines[3:])
    normal = patient_space.normal(cosines)
    heights = positions @ normal
    if len(heights) > 1:
        steps = np.diff(np.sort(heights))
        if join and uids and all(uids):
            # a 4-D series' volumes share positions: contours are placed by the slice they name
            steps = steps[steps > _PLANE_TOLERANCE] if (steps > _PLANE_TOLERANCE).any() else steps
        step = float(np.median(steps))
        if step <= 0:
            raise ConversionError(reasons.INVALID_VALUE, "image grid: slices share positions along the normal; "
                                                         "a mask grid needs one slice per position")
    else:
        step = float(grid.slice_spacing) if grid.slice_spacing and grid.slice_spacing > 0 else _SINGLE_SLICE_SPACING
    return _Plane(positions, row_cos, col_cos, normal, heights, step / 2, float(spacing[0]), float(spacing[1]),
                  rows, columns, {u: k for k, u in enumerate(uids) if u})


def _contour_values(contour: Any) -> Optional[np.ndarray]:
    """Contour Data (3006,0050) as floats, read from the element's bytes where pydicom has not
    converted them yet (a DS value per coordinate as a Python object costs ~4 us; a structure
    set of a 200-slice CT holds over a million); None for values that are not numbers."""
    element = contour.get_item(_CONTOUR_DATA) if hasattr(contour, "get_item") else None
    raw = getattr(element, "value", None)
    if isinstance(raw, (bytes, bytearray)):
        text = bytes(raw).rstrip(b"\0 ")
        if not text:
            return np.zeros(0)
        try:
            return np.array(text.split(b"\\"), dtype=float)
        except ValueError:
            return None
    data = contour.get("ContourData")
    try:
        return np.asarray([float(v) for v in (data or ())], float)
    except (TypeError, ValueError):
        return None


def _points(contour: Any, roi: int, index: int) -> Optional[np.ndarray]:
    """A closed contour's points [n, 3], or None for a contour that draws nothing."""
    kind = _text(contour.get("ContourGeometricType")).upper()
    if kind not in CLOSED:
        return None                                   # POINT / OPEN_PLANAR / OPEN_NONPLANAR: no area
    points = _contour_values(contour)
    if points is None:
        points = np.asarray([math.nan])
    if not len(points):
        return None                                   # an empty contour item encloses nothing
    if len(points) % 3 or not np.isfinite(points).all():
        raise ConversionError(reasons.INVALID_VALUE,
                              f"RTSTRUCT ROI {roi}: contour {index + 1}'s Contour Data (3006,0050) is not finite "
                              f"x\\y\\z triplets ({len(points)} values); re-export the structure set")
    if np.abs(points).max() > _MAX_MM:            # refused before any product could overflow (numpy would warn)
        raise ConversionError(reasons.MASK_INVALID,
                              f"RTSTRUCT ROI {roi}: contour {index + 1}'s Contour Data (3006,0050) reach "
                              f"{np.abs(points).max():.3g} mm from the origin (more than {_MAX_MM:g} mm): no "
                              "patient's coordinates; re-export the structure set")
    return points.reshape(-1, 3)


def _image_uids(contour: Any) -> list[str]:
    """The Referenced SOP Instance UIDs of a contour's Contour Image Sequence (3006,0016). Read
    from the sequence's bytes with pydicom's element reader where pydicom has not parsed it
    yet and its items have defined lengths (pydicom makes a Dataset of each item, ~0.1 ms; a
    structure set of a 200-slice CT has thousands); else through the parsed sequence."""
    element = contour.get_item(_CONTOUR_IMAGES) if hasattr(contour, "get_item") else None
    raw = getattr(element, "value", None)
    if isinstance(raw, (bytes, bytearray)) and isinstance(element, RawDataElement):
        uids, pos = [], 0
        while pos + 8 <= len(raw):
            group, number, length = struct.unpack_from("<HHI" if element.is_little_endian else ">HHI", raw, pos)
            if (group, number) != (0xFFFE, 0xE000) or length == 0xFFFFFFFF or pos + 8 + length > len(raw):
                break                                 # not the simple layout: let pydicom parse it
            for item in data_element_generator(io.BytesIO(raw[pos + 8:pos + 8 + length]), element.is_implicit_VR,
                                               element.is_little_endian):
                if item.tag == _REFERENCED_SOP_INSTANCE_UID and isinstance(item.value, bytes):
                    uids.append(item.value.decode("ascii", "replace").strip("\0 "))
            pos += 8 + length
        else:
            return uids
    return [_text(image.get("ReferencedSOPInstanceUID")) for image in _items(contour, "ContourImageSequence")]


def _slice_of(points: np.ndarray, contour: Any, plane: _Plane, roi: int, index: int) -> int:
    heights = points @ plane.normal
    k: Optional[int] = None
    for uid in _image_uids(contour) if plane.by_uid else ():
        k = plane.by_uid.get(uid)
        if k is not None:
            break
    which = f"slice {k}, the image it references" if k is not None else "the nearest slice"
    if k is None:
        k = int(np.argmin(np.abs(plane.heights - float(heights.mean()))))
        if plane.by_uid and np.count_nonzero(np.abs(plane.heights - plane.heights[k]) <= _PLANE_TOLERANCE) > 1:
            raise ConversionError(reasons.CONTOUR_OFF_GRID,
                                  f"RTSTRUCT ROI {roi}: contour {index + 1} names no slice of the image series, and "
                                  f"its position is shared by several (the volumes of a 4-D series): it cannot be "
                                  f"placed on one")
    off = float(np.max(np.abs(heights - plane.heights[k])))
    if off > plane.half_spacing + _PLANE_TOLERANCE:
        spread = float(heights.max() - heights.min())
        across = f"; its points span {spread:.2f} mm along it" if spread > plane.half_spacing else ""
        raise ConversionError(reasons.CONTOUR_OFF_GRID,
                              f"RTSTRUCT ROI {roi}: contour {index + 1} lies {off:.2f} mm along the slice normal "
                              f"from {which} (slices {2 * plane.half_spacing:.2f} mm apart{across}): it is on no "
                              "slice of the image series; check that the structure set was drawn on this series")
    return k


def _pixel_coordinates(points: np.ndarray, k: int, plane: _Plane) -> np.ndarray:
    """[n, 2] (row, column) coordinates of ``points`` on slice k, snapped to 1/SNAP pixel."""
    with np.errstate(over="ignore", invalid="ignore"):     # beyond int64's reach: refused by placed, quietly
        offset = points - plane.positions[k]
        coords = np.stack([offset @ plane.col_cos / plane.row_spacing,
                           offset @ plane.row_cos / plane.column_spacing], axis=1)
        return np.round(coords * SNAP) / SNAP


def fill(mask: np.ndarray, polygons: Sequence[np.ndarray]) -> Optional[tuple[slice, slice]]:
    """Set in ``mask`` (bool [rows, columns], in place) the pixels ``polygons`` (each [n, 2]
    (row, column) pixel coordinates on the 1/SNAP grid) enclose or pass through, by the rule of
    the module docstring (transforms.masks.polygons); the window of ``mask`` it drew in (their
    bounding box within the image), None when that holds no pixel centre."""
    fixed = [np.rint(c * SNAP).astype(np.int64) for c in polygons]
    corners = np.concatenate(fixed)
    scale = polygons_.SCALE
    low = np.maximum(-(-corners.min(axis=0) // scale), 0)
    high = np.minimum(corners.max(axis=0) // scale, np.asarray(mask.shape) - 1)
    if (high < low).any():
        return None                                   # between pixel centres, or beyond the image's
    window = (slice(int(low[0]), int(high[0]) + 1), slice(int(low[1]), int(high[1]) + 1))
    mask[window] |= polygons_.fill(mask[window].shape, [f - low * scale for f in fixed])
    return window


def _check_in_image(coords: np.ndarray, plane: _Plane, number: int, index: int, where: str) -> None:
    """contour_off_grid for a contour wholly outside its slice's rows and columns; invalid_value
    for one reaching beyond what the fixed-point fill can hold."""
    if not _in_image(coords, plane):
        raise ConversionError(reasons.CONTOUR_OFF_GRID,
                              f"RTSTRUCT ROI {number}: contour {index + 1} lies on {where} but wholly outside "
                              f"its {plane.rows} x {plane.columns} pixels; check that the structure set was "
                              "drawn on this series")
    if not np.isfinite(coords).all() or np.abs(coords).max() > _MAX_COORDINATE:
        raise ConversionError(reasons.INVALID_VALUE,
                              f"RTSTRUCT ROI {number}: contour {index + 1} reaches {np.abs(coords).max():.0f} "
                              f"pixels from its slice's first pixel (more than {_MAX_COORDINATE}): its "
                              "Contour Data are not in this series' millimetres; re-export the structure set")


def _in_image(coords: np.ndarray, plane: _Plane) -> bool:
    """Whether the polygon's bounding box meets the image's extent (its pixels' outer edges)."""
    low, high = coords.min(axis=0), coords.max(axis=0)
    return bool(high[0] >= -0.5 and high[1] >= -0.5 and low[0] <= plane.rows - 0.5 and low[1] <= plane.columns - 0.5)


def _closed_contours(ds: Any, grid: Grid, roi_numbers: Optional[Sequence[int]],
                     chosen: Optional[set[tuple[int, int]]] = None):
    """(ROI number, contour index, contour item, points [n, 3]) of every closed contour of the
    ROIs ``roi_numbers`` (default: roi_info's order), each ROI's frame of reference checked
    against the grid's first; and the ROI numbers. ``chosen``: only these (ROI number, contour
    index), looked up in the structure set's index: the others are not read."""
    structure_set = indexed(ds)
    rois = {roi.number: roi for roi in structure_set.rois}
    numbers = list(rois) if roi_numbers is None else [int(n) for n in roi_numbers]
    contours = structure_set.contours
    fallback_frame = structure_set.frame_of_reference_uid
    wanted: dict[int, list[int]] = {}
    for number, index in sorted(chosen or ()):
        wanted.setdefault(number, []).append(index)
    image_frame = _text(grid.frame_of_reference_uid)

    def each():
        for number in numbers:
            if number not in rois:
                raise ConversionError(reasons.INVALID_VALUE, f"RTSTRUCT: no ROI number {number} in its Structure "
                                                             f"Set ROI Sequence (it has {sorted(rois)})")
            frame = rois[number].frame_of_reference_uid or fallback_frame
            if image_frame and frame and frame != image_frame:
                raise ConversionError(reasons.FRAME_OF_REFERENCE_MISMATCH,
                                      f"RTSTRUCT ROI {number} lies in Frame of Reference {frame}, the image series "
                                      f"in {image_frame}: its contours are in another coordinate system; pair the "
                                      "structure set with the series it was drawn on (or register them first)")
            items = contours.get(number, ())
            if chosen is None:
                indices: Sequence[int] = range(len(items))
            else:
                indices = [i for i in wanted.get(number, ()) if 0 <= i < len(items)]
            for index in indices:
                points = _points(items[index], number, index)
                if points is not None:
                    yield number, index, items[index], points
    return each(), numbers


def assign_contours(ds: Any, grid: Grid, roi_numbers: Optional[Sequence[int]] = None) -> dict[int, tuple]:
    """Slice k of ``grid`` -> the ``(ROI number, contour index)`` of each closed contour on it,
    by ``placed``'s rules (its slice, its frame of reference) and with its refusals
    (``contour_off_grid``, ``frame_of_reference_mismatch``). Reads the grid's slices only
    (positions, orientation, SOP Instance UIDs; not Pixel Spacing, Rows or Columns): a series
    whose slices are separate records (--unit file) is placed once, and each record drawn
    with ``placed(..., on_slice=...)``. Where the grid has its Pixel Spacing, rows and columns,
    a contour wholly outside them is refused here too (``contour_off_grid``, as ``placed``
    refuses it for the volume): the whole series fails, as its volume would with --unit series,
    not the one slice it lies on. Slices without a contour are not keys."""
    in_plane = bool(grid.pixel_spacing) and grid.rows > 0 and grid.columns > 0
    plane = _plane(grid, in_plane=in_plane, join=True)
    found, _ = _closed_contours(ds, grid, roi_numbers)
    out: dict[int, list] = {}
    for number, index, contour, points in found:
        k = _slice_of(points, contour, plane, number, index)
        if in_plane:
            _check_in_image(_pixel_coordinates(points, k, plane), plane, number, index,
                            f"slice {k} of the image series")
        out.setdefault(k, []).append((number, index))
    return {k: tuple(pairs) for k, pairs in out.items()}


Placed = dict[int, dict[int, list[np.ndarray]]]    # ROI number -> slice k -> its polygons (pixel coordinates)


def placed(ds: Any, grid: Grid, roi_numbers: Optional[Sequence[int]] = None,
           on_slice: Optional[Sequence[tuple[int, int]]] = None,
           among: Optional[Sequence[tuple[int, int]]] = None) -> Placed:
    """Every closed contour of the ROIs ``roi_numbers`` (default: all, ``roi_info`` order) on its
    slice of ``grid``, as (row, column) pixel coordinates snapped to 1/SNAP pixel: the checks of
    the module docstring made and no pixel drawn yet (``fill`` draws them, one slice at a time).
    ConversionError: ``contour_off_grid`` for a closed contour on no slice of the grid (or
    wholly outside its rows and columns), ``frame_of_reference_mismatch`` for an ROI in another
    frame of reference than the grid's, ``invalid_value`` / ``missing_attribute`` for a malformed
    structure set or grid.

    ``on_slice``: the grid is one slice of a series the caller placed the contours on
    (``assign_contours``); exactly these ``(ROI number, contour index)`` are on it, and no other.
    ``among``: the grid is several slices of such a series (a volume of a series that
    ``--series_gaps split`` or ``--series_4d split`` made several records of); these contours
    lie on it, each placed on its slice, and no other.
    """
    plane = _plane(grid)
    chosen = None if on_slice is None else {(int(n), int(i)) for n, i in on_slice}
    if chosen is not None and len(plane.positions) != 1:
        raise ValueError(f"on_slice draws onto a grid of one slice, not {len(plane.positions)}")
    # the contours to read: on_slice's, or among's (each on its own slice), else all of them
    kept = chosen if chosen is not None else None if among is None else {(int(n), int(i)) for n, i in among}
    found, numbers = _closed_contours(ds, grid, roi_numbers, kept)
    out: Placed = {number: {} for number in numbers}
    for number, index, contour, points in found:
        k = _slice_of(points, contour, plane, number, index) if chosen is None else 0
        coords = _pixel_coordinates(points, k, plane)
        _check_in_image(coords, plane, number, index,
                        f"slice {k} of the image series" if chosen is None else "its slice of the image series")
        out[number].setdefault(k, []).append(coords)
    return out


def rasterise(ds: Any, grid: Grid, roi_numbers: Optional[Sequence[int]] = None,
              on_slice: Optional[Sequence[tuple[int, int]]] = None) -> np.ndarray:
    """Boolean masks [roi, k, j, i] of the structure set's ROIs on ``grid`` (module docstring),
    in ``roi_numbers``' order (default: ``roi_info``'s); ``on_slice`` and the errors of ``placed``."""
    contours = placed(ds, grid, roi_numbers, on_slice)
    plane = _plane(grid)
    masks = np.zeros((len(contours), len(plane.positions), plane.rows, plane.columns), bool)
    for r, on_k in enumerate(contours.values()):
        for k, polygons in on_k.items():
            fill(masks[r, k], polygons)
    return masks
