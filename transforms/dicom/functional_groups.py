"""Enhanced multi-frame DICOM: the functional groups read frame by frame (PS3.3 C.7.6.16).

An Enhanced (or Legacy Converted Enhanced) CT, MR or PET object keeps what a
single-frame file holds at its top level -- rescale, window, position,
orientation, pixel spacing -- in functional group macros: once for all frames
in the Shared Functional Groups Sequence, or frame by frame in the Per-frame
Functional Groups Sequence (whose item overrides the shared one). This module
lifts, for every frame, the attributes of the macros in ``MACROS`` out of
those sequences into a flat ``{keyword: value}`` (``frame_attributes``), makes
from each a small Dataset that the single-frame value mapping reads as it
reads a classic file (``value_views``), and orders the frames into stacks
(``plan_stacks``). Pure functions of the header: no pixel is read here.

A file is planned as one record per stack. Frames belong to one stack when
they agree on Stack ID, Temporal Position Index, the non-spatial Dimension
Index Values, Effective Echo Time, Diffusion b-value and Image Orientation;
within a stack they are ordered along the slice normal (as ``--unit series``
orders single-frame slices), else by In-Stack Position Number, else kept as
stored when no frame has any geometry. See docs/DICOM.md, "Enhanced
multi-frame".
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
from pydicom.datadict import tag_for_keyword
from pydicom.dataset import Dataset

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.errors import ConversionError

GROUPS = ("SharedFunctionalGroupsSequence", "PerFrameFunctionalGroupsSequence")

# functional group macro (its sequence keyword) -> the attributes lifted from its item
MACROS = {
    "PixelValueTransformationSequence": ("RescaleSlope", "RescaleIntercept", "RescaleType",
                                         "ModalityLUTSequence"),
    "FrameVOILUTSequence": ("WindowCenter", "WindowWidth", "VOILUTFunction", "VOILUTSequence"),
    "PlanePositionSequence": ("ImagePositionPatient",),
    "PlaneOrientationSequence": ("ImageOrientationPatient",),
    "PixelMeasuresSequence": ("PixelSpacing", "SliceThickness", "SpacingBetweenSlices"),
    "FrameContentSequence": ("StackID", "InStackPositionNumber", "TemporalPositionIndex",
                             "DimensionIndexValues"),
    "MREchoSequence": ("EffectiveEchoTime",),
    "MRDiffusionSequence": ("DiffusionBValue", "DiffusionDirectionality"),
}
# attributes lifted from a sequence nested in a macro's item: (macro, nested sequence) -> keywords
# (an Enhanced MR keeps a frame's gradient in MR Diffusion > Diffusion Gradient Direction)
NESTED_MACROS = {
    ("MRDiffusionSequence", "DiffusionGradientDirectionSequence"): ("DiffusionGradientOrientation",),
}
# what the value mapping of one frame reads: the Image Pixel module, then these
PIXEL_KEYWORDS = ("Modality", "SamplesPerPixel", "PhotometricInterpretation", "Rows", "Columns",
                  "BitsAllocated", "BitsStored", "HighBit", "PixelRepresentation")
VALUE_KEYWORDS = ("RescaleSlope", "RescaleIntercept", "RescaleType", "ModalityLUTSequence",
                  "WindowCenter", "WindowWidth", "VOILUTFunction", "VOILUTSequence")
# Dimension Index Pointers that say where a frame lies in its stack, not which stack it is in:
# In-Stack Position Number, Image Position (Patient), Instance Number, Slice Location; and
# Stack ID and Temporal Position Index, which the stack key holds already
_IN_STACK_POINTERS = {0x00209057, 0x00200032, 0x00200013, 0x00201041}
_NOT_STACK_POINTERS = _IN_STACK_POINTERS | {0x00209056, 0x00209128}
# a Dimension Index Pointer's name in a stack's label (others are "dimension")
_POINTER_NAMES = {0x00209056: "stack", 0x00209128: "temporal", 0x00189082: "echo", 0x00189087: "b"}
_ORIENTATION_DECIMALS = 3
_POSITION_TOLERANCE = 1e-3   # mm, as transforms.series.volumes


# Segmentations (binary or fractional, and label maps) have functional groups too, but their
# frames are segments x positions and their values labels: converted as before, frames as
# stored, no functional group read (see docs/DICOM.md)
SEGMENTATION_CLASSES = {"1.2.840.10008.5.1.4.1.1.66.4", "1.2.840.10008.5.1.4.1.1.66.7"}


def present(ds) -> bool:
    """Whether ``ds`` is an image whose functional groups are applied: an Enhanced or Legacy
    Converted Enhanced object, not a Segmentation."""
    if not any(ds.get(group) is not None for group in GROUPS):
        return False
    return str(ds.get("SOPClassUID", "") or "").strip() not in SEGMENTATION_CLASSES


# The most frames an Enhanced file may have (docs/DICOM.md, "Enhanced multi-frame"): its
# per-frame functional groups are parsed into some 15 KB of memory per frame, and each of its
# records reads the whole file; a file of more fails as too_many_frames, before they are parsed
MAX_FRAMES = 50_000
# and the most bytes its Per-frame Functional Groups Sequence may take in the file (a Number of
# Frames may understate the items): 1.3 KB for each of MAX_FRAMES frames, a few GB parsed
MAX_PER_FRAME_BYTES = 64 << 20
_NUMBER_OF_FRAMES, _SOP_CLASS = 0x00280008, 0x00080016


def check_frame_count(values: dict, per_frame_bytes: int = 0) -> None:
    """Raises TOO_MANY_FRAMES for an Enhanced file of more than MAX_FRAMES frames, or whose
    Per-frame Functional Groups Sequence takes ``per_frame_bytes`` > MAX_PER_FRAME_BYTES, from
    ``values`` (int tag -> converted value: transforms.dicom.record_elements.convert_needed_elements',
    before it converts that sequence). A Segmentation, whose functional groups are not read,
    is not counted."""
    if str(values.get(_SOP_CLASS, "") or "").strip() in SEGMENTATION_CLASSES:
        return
    if per_frame_bytes > MAX_PER_FRAME_BYTES:
        raise ConversionError(reasons.TOO_MANY_FRAMES,
                              f"Per-frame Functional Groups Sequence of {per_frame_bytes / (1 << 20):.1f} MiB: "
                              f"one of more than {MAX_PER_FRAME_BYTES >> 20} MiB is not read")
    try:
        frames = int(values.get(_NUMBER_OF_FRAMES) or 1)
    except (TypeError, ValueError):
        return          # invalid_value, where it is read
    _check_limit(frames)


def _check_limit(frames: int) -> None:
    if frames > MAX_FRAMES:
        raise ConversionError(reasons.TOO_MANY_FRAMES,
                              f"Number of Frames is {frames}: an Enhanced multi-frame image of more than "
                              f"{MAX_FRAMES} frames is not converted (its per-frame functional groups are not read)")


def _frames(ds) -> int:
    try:
        frames = int(ds.get("NumberOfFrames", 1) or 1)
    except (TypeError, ValueError) as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"NumberOfFrames: {exc}") from exc
    _check_limit(frames)
    return frames


_MACRO_TAGS = tuple((tag_for_keyword(macro), tuple((keyword, tag_for_keyword(keyword)) for keyword in keywords))
                    for macro, keywords in MACROS.items())
_NESTED_TAGS = tuple((tag_for_keyword(macro), tag_for_keyword(nested),
                      tuple((keyword, tag_for_keyword(keyword)) for keyword in keywords))
                     for (macro, nested), keywords in NESTED_MACROS.items())
_MODALITY_LUT_TAG = tag_for_keyword("ModalityLUTSequence")


def _lift(item: Dataset, out: dict) -> None:
    """The macros' attributes of one functional group item into ``out``, by tag (the items of
    a 1000-frame file are read once each, converting only the macros listed)."""
    elements = item._dict
    for macro_tag, keywords in _MACRO_TAGS:
        if macro_tag is None or macro_tag not in elements:
            continue
        macro_items = item[macro_tag].value
        if not macro_items:
            continue
        first = macro_items[0]
        for keyword, tag in keywords:
            if tag in first._dict:
                value = first[tag].value
                if value is not None and value != "":
                    out[keyword] = value
    for macro_tag, nested_tag, keywords in _NESTED_TAGS:
        if macro_tag is None or nested_tag is None or macro_tag not in elements or not item[macro_tag].value:
            continue
        first = item[macro_tag].value[0]
        if nested_tag not in first._dict or not first[nested_tag].value:
            continue
        inner = first[nested_tag].value[0]
        for keyword, tag in keywords:
            if tag in inner._dict:
                value = inner[tag].value
                if value is not None and value != "":
                    out[keyword] = value
    # a Modality LUT given in the group item itself rather than in its transformation macro
    if _MODALITY_LUT_TAG is not None and _MODALITY_LUT_TAG in elements and item[_MODALITY_LUT_TAG].value:
        out["ModalityLUTSequence"] = item[_MODALITY_LUT_TAG].value


# the frames' attributes are kept on the Per-frame (else the Shared) Functional Groups Sequence
# they were lifted from, as (shared sequence, frame count, result): they live as long as the
# parsed header does (transforms.dicom.pixels keeps those of files written as several records)
_KEPT = "_dcm2tfrecord_frame_attributes"


def frame_attributes(ds) -> list[dict]:
    """For every frame, in stored order, the attributes its functional groups give it.

    Top-level attributes come first (an Enhanced IOD has none of these there,
    but a converted file may), then the shared groups, then the frame's own
    per-frame item. A Per-frame Functional Groups Sequence must hold one item
    per frame.
    """
    frames = _frames(ds)
    shared, per_frame = ds.get("SharedFunctionalGroupsSequence"), ds.get("PerFrameFunctionalGroupsSequence")
    holder = per_frame if per_frame is not None else shared
    kept = getattr(holder, _KEPT, None)
    if kept is not None and kept[0] is shared and kept[1] == frames:
        return kept[2]     # the same sequence objects: probe and write read them several times
    result = _frame_attributes(ds, frames)
    if holder is not None:
        try:
            setattr(holder, _KEPT, (shared, frames, result))
        except AttributeError:      # not a pydicom Sequence: not kept
            pass
    return result


def _frame_attributes(ds, frames: int) -> list[dict]:
    try:
        base = {}
        for keyword in VALUE_KEYWORDS + ("ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing",
                                         "SliceThickness", "SpacingBetweenSlices"):
            value = ds.get(keyword)
            if value is not None and value != "":
                base[keyword] = value
        shared = ds.get("SharedFunctionalGroupsSequence") or ()
        if shared:
            _lift(shared[0], base)
        per_frame = ds.get("PerFrameFunctionalGroupsSequence")
        if per_frame is None:
            return [base] * frames
        if len(per_frame) != frames:
            raise ConversionError(reasons.INVALID_VALUE,
                                  f"Per-frame Functional Groups Sequence has {len(per_frame)} items for "
                                  f"{frames} frames")
        out = []
        for item in per_frame:
            attrs = dict(base)
            _lift(item, attrs)
            out.append(attrs)
        return out
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE,
                              f"functional groups do not parse: {type(exc).__name__}: {exc}") from exc


def value_views(ds) -> Optional[list[Dataset]]:
    """Per frame, a Dataset holding the Image Pixel module and that frame's rescale, Modality
    LUT and VOI: what transforms.dicom.pixels.map_values and spec.modality_dtype read.
    None for a file without functional groups. Frames with equal values share one view."""
    if not present(ds):
        return None
    pixel = {k: ds.get(k) for k in PIXEL_KEYWORDS if ds.get(k) is not None}
    views: dict = {}
    out = []
    for attrs in frame_attributes(ds):
        values = tuple((k, attrs[k]) for k in VALUE_KEYWORDS if k in attrs)
        # a LUT sequence is told apart by identity (its repr does not show its items)
        key = tuple((k, id(v) if k.endswith("Sequence") else repr(v)) for k, v in values)
        view = views.get(key)
        if view is None:
            view = views[key] = Dataset()
            for keyword, value in list(pixel.items()) + list(values):
                setattr(view, keyword, value)
        out.append(view)
    return out


# ---------------------------------------------------------------- stacks


@dataclasses.dataclass(frozen=True)
class Stack:
    """The frames of one Enhanced file that make one record, in record order."""
    index: int                 # 0, 1, ... in the file (the first one accounts for the file)
    label: str                 # "" when the file holds one stack; else e.g. "temporal=2"
    frames: tuple[int, ...]    # stored frame indices (0-based), in record order
    spacing: float = 0.0       # mm between consecutive frames along the slice normal; 0.0 unknown

    def __reduce__(self):
        return Stack, (self.index, self.label, self.frames, self.spacing)


def _floats(value) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in value) if value is not None else ()
    except (TypeError, ValueError):
        return ()


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None if value is None else str(value)
    return int(number) if number.is_integer() else number


def _dimension_pointers(ds) -> list[int]:
    pointers = []
    for item in ds.get("DimensionIndexSequence") or ():
        try:
            pointers.append(int(item.get("DimensionIndexPointer")))
        except (TypeError, ValueError):
            pointers.append(0)
    return pointers


def _orientation_key(attrs: dict) -> tuple:
    orientation = _floats(attrs.get("ImageOrientationPatient"))
    return ("orientation", tuple(round(v, _ORIENTATION_DECIMALS) + 0.0 for v in orientation) or None)


def _gradient_key(attrs: dict):
    gradient = _floats(attrs.get("DiffusionGradientOrientation"))
    return tuple(round(v, _ORIENTATION_DECIMALS) + 0.0 for v in gradient) or None


def _stack_key(attrs: dict, pointers: list[int]) -> tuple:
    """What a frame shares with the other frames of its stack, as (name, value) pairs, from its
    attributes (Stack ID, Temporal Position Index, echo, b-value and gradient) and the
    non-spatial Dimension Index Values other than those of Stack ID and Temporal Position."""
    key = [("stack", str(attrs.get("StackID", "") or "").strip() or None),
           ("temporal", _number(attrs.get("TemporalPositionIndex"))),
           ("echo", _number(attrs.get("EffectiveEchoTime"))),
           ("b", _number(attrs.get("DiffusionBValue"))),
           ("gradient", _gradient_key(attrs))]
    values = attrs.get("DimensionIndexValues")
    if values is not None and pointers:
        values = list(values) if not isinstance(values, (int, float)) else [values]
        other = tuple(int(v) for p, v in zip(pointers, values) if p not in _NOT_STACK_POINTERS)
        key.append(("dimension", other or None))
    key.append(_orientation_key(attrs))
    return tuple(key)


def _dimension_key(attrs: dict, pointers: list[int]) -> Optional[tuple]:
    """A frame's stack from its Dimension Index Values alone (and its orientation): the values
    of every pointer that does not place a frame within its stack (_IN_STACK_POINTERS); None
    where the frame has no such values, or not one per pointer."""
    values = attrs.get("DimensionIndexValues")
    if values is None:
        return None
    values = list(values) if not isinstance(values, (int, float)) else [values]
    if len(values) != len(pointers):
        return None
    key: list[tuple] = []
    other: list[int] = []
    try:
        for pointer, value in zip(pointers, values):
            if pointer in _IN_STACK_POINTERS:
                continue
            name = _POINTER_NAMES.get(pointer)
            if name is not None and all(name != n for n, _ in key):
                key.append((name, int(value)))
            else:
                other.append(int(value))
    except (TypeError, ValueError):
        return None
    key.append(("dimension", tuple(other) or None))
    key.append(_orientation_key(attrs))
    return tuple(key)


def _sortable(key: tuple) -> tuple:
    """Stacks in a stable order: absent first, numbers by value, then text, tuples by their items."""
    def rank(value):
        if value is None:
            return (0, 0.0, "")
        if isinstance(value, (int, float)):
            return (1, float(value), "")
        if isinstance(value, tuple):
            return (2, 0.0, "") + tuple(rank(v) for v in value)
        return (3, 0.0, str(value))
    return tuple(rank(value) for _, value in key)


def _order(frames: list[int], attrs: list[dict], what: str) -> tuple[tuple[int, ...], float]:
    """One stack's frames along the slice normal, by In-Stack Position, or as stored."""
    positions = [patient_space.floats(attrs[i].get("ImagePositionPatient"), 3) for i in frames]
    orientations = [patient_space.orientation(attrs[i].get("ImageOrientationPatient")) for i in frames]
    if all(len(p) == 3 for p in positions) and all(len(o) == 6 for o in orientations):
        first = np.asarray(orientations[0])
        normal = np.cross(first[:3], first[3:])
        keyed = sorted((float(np.dot(normal, p)), i) for p, i in zip(positions, frames))
        distances = np.array([d for d, _ in keyed])
        gaps = np.diff(distances)
        if len(gaps) and gaps.min() < _POSITION_TOLERANCE:
            at = int(np.argmin(gaps))
            raise ConversionError(reasons.FRAMES_UNORDERED,
                                  f"{what}frames {keyed[at][1] + 1} and {keyed[at + 1][1] + 1} lie at the same "
                                  f"position along the slice normal and no Stack ID, Temporal Position "
                                  f"Index, echo, b-value or dimension index tells them apart")
        by_index = dict(zip(frames, positions))
        runs = patient_space.even_runs([by_index[i] for _, i in keyed])
        if len(runs) > 1:
            at = runs[0][1] - 1
            spacing = float(np.median(gaps))
            raise ConversionError(reasons.FRAMES_UNEVEN_SPACING,
                                  f"{what}frames not evenly spaced: a step of {gaps[at]:.2f} mm between frames "
                                  f"{keyed[at][1] + 1} ({distances[at]:.2f} mm along the slice normal) and "
                                  f"{keyed[at + 1][1] + 1} ({distances[at + 1]:.2f} mm), where the frames are "
                                  f"{spacing:.2f} mm apart (tolerance {patient_space.step_tolerance(spacing):.2f} "
                                  f"mm); --frames split converts each frame as a record of its own")
        return tuple(i for _, i in keyed), float((distances[-1] - distances[0]) / (len(distances) - 1)) \
            if len(distances) > 1 else 0.0
    if any(positions) or any(orientations):
        raise ConversionError(reasons.FRAMES_UNORDERED,
                              f"{what}some frames have a Plane Position/Orientation and others not")
    numbers = [_number(attrs[i].get("InStackPositionNumber")) for i in frames]
    if all(isinstance(n, int) for n in numbers):
        if len(set(numbers)) != len(numbers):
            raise ConversionError(reasons.FRAMES_UNORDERED,
                                  f"{what}no frame positions and repeated In-Stack Position Numbers")
        return tuple(i for _, i in sorted(zip(numbers, frames))), 0.0
    if any(n is not None for n in numbers):
        raise ConversionError(reasons.FRAMES_UNORDERED,
                              f"{what}some frames have an In-Stack Position Number and others not")
    return tuple(frames), 0.0


def check_positions(attrs: Sequence[dict], frames: Optional[Sequence[int]] = None) -> None:
    """Raises INVALID_VALUE for a frame whose Image Position (Patient) is given but is not three
    finite numbers (a NaN, an infinity, two values): such a frame lies nowhere, and would
    otherwise be taken for one without a position. ``frames``: the file's indices of ``attrs``
    (default: all the file's frames, in order), so the message names the file's frame."""
    for n, frame in zip(range(len(attrs)) if frames is None else frames, attrs):
        value = frame.get("ImagePositionPatient")
        if value is not None and not patient_space.floats(value, 3):
            try:
                shown = str(value) if isinstance(value, (str, bytes)) else "\\".join(str(v) for v in value)
            except TypeError:       # one number
                shown = str(value)
            which = f"of frame {n + 1}" if frames is None else f"(the file's frame number {n + 1})"
            raise ConversionError(reasons.INVALID_VALUE,
                                  f"Image Position (Patient) {which} is {shown[:80]!r}: not three "
                                  f"finite numbers")


def split_stack(ds) -> tuple[Stack, ...]:
    """The file as --frames split plans it: its frames as stored, one stack, no order found
    (each frame is a record of its own; frames that cannot be ordered or are unevenly spaced
    convert). Positions are not checked here but frame by frame (record_metadata): a frame of
    a NaN position fails alone, the file's other frames are written."""
    attrs = frame_attributes(ds)
    return (Stack(index=0, label="", frames=tuple(range(len(attrs)))),)


def plan_stacks(ds, attrs: Optional[Sequence[dict]] = None) -> tuple[Stack, ...]:
    """The file's stacks, each with its frames in record order; raises FRAMES_UNORDERED.

    Where the file has a Dimension Index Sequence with a pointer that tells stacks apart
    (anything but In-Stack Position, Image Position, Instance Number, Slice Location)
    and every frame carries one Dimension Index Value per pointer, the stacks and their
    order are the dimension index's; Stack ID, Temporal Position Index, echo, b-value and
    gradient then tell frames apart only where the dimension index leaves two at one
    position. Where both ways give the same stacks, they keep the labels of the
    attributes (record ids unchanged). Without a usable dimension index, the attributes
    and any non-spatial Dimension Index Values make the stacks.
    """
    attrs = list(frame_attributes(ds) if attrs is None else attrs)
    check_positions(attrs)
    pointers = _dimension_pointers(ds)
    old = _groups([_stack_key(frame, pointers) for frame in attrs])
    dimension_keys = [_dimension_key(frame, pointers) for frame in attrs] \
        if any(p not in _IN_STACK_POINTERS for p in pointers) else []
    if not dimension_keys or any(k is None for k in dimension_keys):
        return _stacks(old, attrs)
    by_dimension = _groups(dimension_keys)
    if {tuple(v) for v in old.values()} == {tuple(v) for v in by_dimension.values()}:
        return _stacks(old, attrs)
    try:
        return _stacks(by_dimension, attrs)
    except ConversionError as exc:
        if exc.reason != reasons.FRAMES_UNORDERED:
            raise
    # the dimension index leaves frames at one position: the attributes tell them apart
    old_keys = [_stack_key(frame, pointers) for frame in attrs]
    return _stacks(_groups([d + o for d, o in zip(dimension_keys, old_keys)]), attrs)  # type: ignore[operator]


def _groups(keys: list) -> dict:
    groups: dict = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return groups


def _stacks(groups: dict, attrs: list[dict]) -> tuple[Stack, ...]:
    keys = sorted(groups, key=_sortable)
    varying = [n for n, (name, _) in enumerate(keys[0]) if len({k[n][1] for k in keys}) > 1]
    stacks = []
    for index, key in enumerate(keys):
        label = " ".join(f"{key[n][0]}={_label_value(key[n][1])}" for n in varying)
        what = f"stack {label}: " if label else ""
        frames, spacing = _order(groups[key], attrs, what)
        stacks.append(Stack(index=index, label=label, frames=frames, spacing=spacing))
    return tuple(stacks)


def _label_value(value) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------- record metadata


def _vector(value) -> Optional[tuple[float, ...]]:
    if value is None:
        return None
    try:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            return (float(value),)
        return tuple(float(v) for v in value)
    except (TypeError, ValueError):
        return None


def _per_record(values: list, dedupe: bool = True) -> np.ndarray:
    """One value when every frame of the record has the same, else one per frame, in record order."""
    if not values or any(v is None for v in values):
        return np.asarray([], dtype=np.float32)
    if dedupe and all(v == values[0] for v in values):
        values = values[:1]
    return np.asarray([x for v in values for x in v], dtype=np.float32)


def record_metadata(metadata: dict, ds, frames: Sequence[int], windows: Sequence[dict],
                    spacing: float) -> dict:
    """``metadata`` (metadata.metadata of the file) with what the functional groups say of the
    record's frames: rescale, pixel measures, window, position and orientation.

    A value shared by every frame of the record is written once; values that differ are
    written once per frame, in record order (``dicom/rescale_intercept`` of an 8-frame
    stack with alternating intercepts holds 8 numbers). ``dicom/image_position_patient``
    holds 3 numbers per frame, ``dicom/image_orientation_patient`` 6 (once when shared),
    ``dicom/affine`` the record's (transforms.dicom.patient_space) when every frame has a
    position and all share one orientation.
    """
    attrs = frame_attributes(ds)
    chosen = [attrs[i] for i in frames]
    check_positions(chosen, frames)         # a --frames split frame's own (a stack's: at probe)
    out = dict(metadata)
    for keyword, name in (("RescaleSlope", "rescale_slope"), ("RescaleIntercept", "rescale_intercept"),
                          ("PixelSpacing", "pixel_spacing"), ("SliceThickness", "slice_thickness"),
                          ("SpacingBetweenSlices", "spacing_between_slices")):
        values = [_vector(a.get(keyword)) for a in chosen]
        if any(v is not None for v in values):
            out[f"dicom/{name}"] = _per_record(values)
    positions = [patient_space.floats(a.get("ImagePositionPatient"), 3) for a in chosen]
    orientations = [patient_space.orientation(a.get("ImageOrientationPatient")) for a in chosen]
    pixel_spacing = patient_space.floats(chosen[0].get("PixelSpacing"), 2) if chosen else ()
    out[patient_space.POSITION] = _per_record([p or None for p in positions], dedupe=False)
    out[patient_space.ORIENTATION] = _per_record([o or None for o in orientations])
    geometry = all(positions) and orientations and all(o == orientations[0] for o in orientations)
    if geometry:
        single = spacing or patient_space.single_slice_spacing(
            _vector(chosen[0].get("SpacingBetweenSlices")) or (), _vector(chosen[0].get("SliceThickness")) or ())
        out[patient_space.AFFINE] = patient_space.features(orientations[0], positions, pixel_spacing,
                                                            single)[patient_space.AFFINE]
    else:
        out[patient_space.AFFINE] = np.asarray([], dtype=np.float32)
    pairs = [(w["center"], w["width"]) for w in windows if w and w.get("source") != "lut" and "center" in w]
    if pairs and len(pairs) == len(windows):
        out["dicom/window"] = _per_record(pairs)
    if spacing:
        out["dicom/slice_spacing"] = np.asarray([spacing], dtype=np.float32)
    return out
