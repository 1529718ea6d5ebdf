"""The dicom/* features: the allowlist of non-identifying attributes written, the
identifiers written only hashed, --keep_tags, and their schema in dataset.json."""
from __future__ import annotations

import functools

import numpy as np
from pydicom.dataset import Dataset

from dcm2tfrecord.transforms.dicom import patient_space, volume_features
from dcm2tfrecord.transforms.dicom.syntax import transfer_syntax
from dcm2tfrecord.transforms.settings import DecodeSettings

# Non-identifying attributes written by default (PS3.15 Annex E keeps these).
ALLOWED_TEXT = ("Modality", "BodyPartExamined", "Manufacturer", "ManufacturerModelName",
                "PhotometricInterpretation", "ViewPosition", "Laterality", "ImageLaterality")
ALLOWED_NUMBERS = ("PixelSpacing", "ImagerPixelSpacing", "SliceThickness", "SpacingBetweenSlices",
                   "KVP", "BitsStored", "RescaleSlope", "RescaleIntercept")
IDENTIFIERS = {"patient_id": "PatientID", "study_uid": "StudyInstanceUID",
               "series_uid": "SeriesInstanceUID", "sop_uid": "SOPInstanceUID",
               "accession": "AccessionNumber"}


@functools.lru_cache(maxsize=1024)
def _snake(keyword: str) -> str:
    out = []
    for i, ch in enumerate(keyword):
        if ch.isupper() and i and (not keyword[i - 1].isupper() or
                                   (i + 1 < len(keyword) and keyword[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _floats(values) -> np.ndarray:
    """A float32 array: encodes as FloatList even when empty, keeping one schema."""
    return np.asarray(values, dtype=np.float32).reshape(-1)


def _numbers(ds: Dataset, keyword: str) -> np.ndarray:
    try:
        value = ds.get(keyword)
        if value is None or value == "":
            return _floats([])
        if isinstance(value, (list, tuple)) or hasattr(value, "__iter__") and not isinstance(value, str):
            return _floats([float(v) for v in value])
        return _floats([float(value)])
    except Exception:
        return _floats([])


# How ``metadata`` reads each feature's value.
_TEXT, _NUMBERS, _SYNTAX, _WINDOW, _EMPTY, _HASHED, _GEOMETRY, _SERIES = range(8)


def _features(keep_tags: tuple[str, ...]) -> list:
    """The one definition of the dicom/* features ``metadata`` writes, in its order: (key,
    how its value is read, the keyword read, its schema in dataset.json)."""
    return ([(f"dicom/{_snake(k)}", _TEXT, k, {"dtype": "bytes", "shape": []}) for k in ALLOWED_TEXT]
            + [(f"dicom/{_snake(k)}", _NUMBERS, k, {"dtype": "float", "shape": [-1]})
               for k in ALLOWED_NUMBERS]
            + [("dicom/transfer_syntax", _SYNTAX, None, {"dtype": "bytes", "shape": []}),
               ("dicom/window", _WINDOW, None,
                {"dtype": "float", "shape": [-1],
                 "description": "[center, width] applied with --dicom_values window"}),
               ("dicom/slice_spacing", _EMPTY, None,
                {"dtype": "float", "shape": [-1],
                 "description": "spacing between slices along the slice normal, mm; empty when "
                                "unknown or one slice"})]
            + [(key, _GEOMETRY, None, schema) for key, schema in patient_space.FEATURES.items()]
            + [(key, _SERIES, None, schema) for key, schema in volume_features.FEATURES.items()]
            + [(f"dicom/{name}_hash", _HASHED, keyword,
                {"dtype": "bytes", "shape": [],
                 "description": "HMAC-SHA256 with --id_salt, hex; empty if absent"})
               for name, keyword in IDENTIFIERS.items()]
            + [(f"dicom/{keyword}", _TEXT, keyword,
                {"dtype": "bytes", "shape": [], "description": "--keep_tags"}) for keyword in keep_tags])


def file_geometry(ds) -> dict:
    """The geometry features of a file's record as its top level gives them (patient_space):
    one position, for a single slice or a classic multi-frame file; a Siemens mosaic's are
    each tile slice's (transforms.dicom.mosaic)."""
    orientation = patient_space.orientation(ds.get("ImageOrientationPatient"))
    spacing = patient_space.floats(ds.get("PixelSpacing"), 2)
    positions = [p for p in slice_positions(ds) if p]
    out = patient_space.features(orientation, positions, spacing, single_slice_spacing(ds))
    if len(positions) <= 1 and _frames(ds) > 1:
        # a classic multi-frame file (cine, NM, RT dose) gives one position for all its frames:
        # where frames 1.. lie is not in its header, so no affine (an Enhanced file's frames are
        # placed by functional_groups.record_metadata)
        out[patient_space.AFFINE] = _floats([])
    return out


def _frames(ds) -> int:
    try:
        return int(ds.get("NumberOfFrames") or 1)
    except (TypeError, ValueError):
        return 1


def single_slice_spacing(ds) -> float:
    """A one-slice record's slice step: Spacing Between Slices, else Slice Thickness, else 1 mm."""
    return patient_space.single_slice_spacing(_numbers(ds, "SpacingBetweenSlices"), _numbers(ds, "SliceThickness"))


def slice_positions(ds, depth: int = 1) -> list[tuple[float, ...]]:
    """Image Position (Patient) of each of a file's ``depth`` slices as its top level gives
    them: the one position of a single slice, each tile slice's of a Siemens mosaic
    (transforms.dicom.mosaic); [()] * depth where the file does not say."""
    from dcm2tfrecord.transforms.dicom import mosaic    # it imports record_elements, which imports this module
    layout = mosaic.mosaic_layout(ds)
    if layout is not None:
        positions: list[tuple[float, ...]] = list(mosaic.slice_positions(ds, layout))
        return positions if positions else [()] * max(depth, layout.images)
    position = patient_space.floats(ds.get("ImagePositionPatient"), 3)
    if depth == 1 and position:
        return [position]
    return [()] * depth


@functools.lru_cache(maxsize=64)
def _plan(keep_tags: tuple[str, ...]) -> tuple:
    """(key, how, keyword) of each feature ``metadata`` writes, in its order."""
    return tuple((key, how, keyword) for key, how, keyword, _ in _features(keep_tags))


def metadata_feature_names(keep_tags: tuple[str, ...] = ()) -> dict:
    """The dicom/* feature schema, as dataset.json lists it: ``metadata``'s features."""
    return {key: schema for key, _, _, schema in _features(tuple(keep_tags))}


def metadata_keys(settings: DecodeSettings) -> tuple[str, ...]:
    """The keys ``metadata`` returns, in its order (the DICOM shortcut carries values only)."""
    return tuple(key for key, _, _ in _plan(tuple(settings.keep_tags)))


def metadata(ds: Dataset, settings: DecodeSettings, window: dict) -> dict:
    """Allowlisted, non-identifying attributes under ``dicom/``; identifiers only hashed."""
    from dcm2tfrecord.transforms.hashing import identifier_hash
    out: dict = {}
    geometry = series = None
    for key, how, keyword in _plan(tuple(settings.keep_tags)):
        if how == _TEXT:
            try:
                out[key] = str(ds.get(keyword, "") or "")
            except Exception:
                out[key] = ""
        elif how == _NUMBERS:
            out[key] = _numbers(ds, keyword)
        elif how == _SYNTAX:
            out[key] = transfer_syntax(ds)
        elif how == _WINDOW:
            out[key] = _floats([window["center"], window["width"]] if window else [])
        elif how == _EMPTY:
            out[key] = _floats([])
        elif how == _GEOMETRY:
            if geometry is None:
                geometry = file_geometry(ds)
            out[key] = geometry[key]
        elif how == _SERIES:
            if series is None:
                series = volume_features.of_file(ds)
            out[key] = series[key]
        else:
            try:
                value = str(ds.get(keyword, "") or "").strip()
            except Exception:
                value = ""
            out[key] = identifier_hash(value, settings.id_salt) if value else ""
    return out
