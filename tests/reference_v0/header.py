# Frozen copy of transforms/dicom/header.py as of commit 006df5e (before the lean probe), kept
# only as the reference that tests/test_lean_probe.py compares the probe against.
# Not used by the pipeline; do not edit except to follow renamed imports.
"""What a DICOM file will decode to, read from its header only.

The Image Pixel module (PS3.3 C.7.6.3) gives the geometry; the Modality LUT
module (PS3.3 C.11.1) gives the value range after rescale, from which the
stored dtype follows. Pixel data is never read here: pydicom defers large
values, so probing costs a header read even for a 1 GB multi-frame file.
"""
from __future__ import annotations

import functools
import logging
import math
import warnings
from typing import BinaryIO, Optional

import numpy as np
import pydicom
from pydicom.dataelem import RawDataElement
from pydicom.dataset import Dataset
from pydicom.tag import Tag

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dtypes import smallest_integer_dtype
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.values import ImageSpec
from dcm2tfrecord.transforms.settings import DecodeSettings

PIXEL_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")
_DEFER_BYTES = 2048
_REQUIRED = ("Rows", "Columns", "BitsAllocated")
_PIXEL_DATA_TAG = Tag(0x7FE0, 0x0010)
# Pixel Data, Float Pixel Data, Double Float Pixel Data
_PIXEL_TAGS = {_PIXEL_DATA_TAG, Tag(0x7FE0, 0x0008), Tag(0x7FE0, 0x0009)}



def silence_pydicom() -> None:
    """Keeps pydicom's logging and warnings out of the run log (idempotent).

    pydicom logs and warns about every oddity it tolerates; what matters to a
    user ends up in errors.jsonl with a reason. Called by the steps that read
    DICOM (their ``setup``), never at import: importing this module changes
    nothing in the caller's process.
    """
    logging.getLogger("pydicom").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pydicom(\..*)?$")


def read_header(fileobj: BinaryIO) -> Dataset:
    """Parses every element, leaving large values (pixel data) unread on disk."""
    return read_header_and_pixel_element(fileobj)[0]


def read_header_and_pixel_element(fileobj: BinaryIO) -> tuple[Dataset, Optional[RawDataElement]]:
    """read_header, plus the raw (7FE0,0010) Pixel Data element as parsed, if deferred.

    The raw element records where its value lies in the file (``value_tell``)
    and its length, which lets transforms.dicom.native read native pixels
    straight from the file bytes at write time.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(fileobj, force=True, defer_size=_DEFER_BYTES)
    except Exception as exc:  # pydicom raises many types for a broken header
        raise ConversionError(reasons.INVALID_DICOM, f"header does not parse: {exc}") from exc
    raw = ds._dict.get(_PIXEL_DATA_TAG)
    if not (isinstance(raw, RawDataElement) and raw.value is None and raw.length):
        raw = None     # not deferred (small or empty): the general path handles it
    convert_all_elements(ds, skip_deferred_pixels=True)
    return ds, raw


# Raw elements whose conversion is a pure function of their own bytes: explicit,
# concrete VRs (no SQ, no UN, no ambiguous "US or SS"), public tags outside the
# Image Pixel group and Specific Character Set (whose conversion also sets state
# on the dataset). pydicom converts one of these from (tag, VR, length, value,
# endianness, implicitness) and the dataset's character set alone.
_PURE_VRS = frozenset("AE AS AT CS DA DS DT FD FL IS LO LT OB OD OF OL OV OW PN SH SL SS ST SV "
                      "TM UC UI UL UR US UT UV".split())
_CONVERTED: set = set()
_CONVERTED_MAX = 50_000
_CONVERTED_VALUE_MAX = 256


def _conversion_key(elem: RawDataElement, encoding) -> Optional[tuple]:
    """A key under which a successful conversion of ``elem`` may be remembered, or None."""
    tag, value = elem.tag, elem.value
    if elem.VR not in _PURE_VRS or value is None or len(value) > _CONVERTED_VALUE_MAX \
            or tag.group & 1 or tag.group in (0x0002, 0x0028) or tag == 0x00080005:
        return None
    return (int(tag), elem.VR, elem.length, bytes(value), elem.is_little_endian, elem.is_implicit_VR,
            encoding)


def convert_all_elements(ds: Dataset, skip_deferred_pixels: bool = False) -> None:
    """Converts every top-level element now, so a mangled VR or value fails here, classified.

    pydicom parses element values lazily, on first access; without this, an
    unknown VR would surface as NotImplementedError wherever the value is used.
    With ``skip_deferred_pixels`` (probing), pixel data values that pydicom
    deferred stay on disk: reading them would read the whole file (once more,
    re-opened by name) only to convert a byte string; the writer reads and
    checks them. Probing also skips an element whose exact bytes (same tag,
    VR, value, encoding) already converted without error in this process
    (see _conversion_key): the slices of a series share most of their
    header, and converting the same bytes again cannot fail differently. A
    skipped element is converted, with the same result, when it is read.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if not skip_deferred_pixels:
                for _ in ds:
                    pass
                return
            encoding = None
            for tag in sorted(ds._dict):
                elem = ds._dict[tag]
                if not isinstance(elem, RawDataElement):
                    continue
                if elem.value is None and elem.length and tag in _PIXEL_TAGS:
                    continue
                if encoding is None:
                    encoding = ds.original_character_set or ds._character_set
                    encoding = tuple(encoding) if isinstance(encoding, list) else encoding
                key = _conversion_key(elem, encoding)
                if key is not None and key in _CONVERTED:
                    continue   # the same bytes converted before: they convert again, when read
                ds[tag]
                if key is not None:
                    if len(_CONVERTED) >= _CONVERTED_MAX:
                        _CONVERTED.clear()
                    _CONVERTED.add(key)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"an element does not parse: "
                                                     f"{type(exc).__name__}: {exc}") from exc


def check_native_length(ds: Dataset) -> None:
    """Native pixel data must hold Rows x Columns x Frames x Samples x Bits Allocated.

    Shorter fails; pydicom tolerates (and strips) small excess padding, as do
    we, but more than a whole frame of excess means the header is wrong.
    """
    if "PixelData" not in ds or ds["PixelData"].is_undefined_length:
        return
    syntax = transfer_syntax(ds)
    if syntax and syntax not in NATIVE_SYNTAXES:
        return
    frame_bits = _int(ds, "Rows") * _int(ds, "Columns") * _int(ds, "SamplesPerPixel", 1) * \
        _int(ds, "BitsAllocated")
    frames = _int(ds, "NumberOfFrames", 1) or 1
    expected = (frame_bits * frames + 7) // 8
    actual = len(ds.PixelData or b"")
    frame_bytes = (frame_bits + 7) // 8
    if actual == 0:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH, f"pixel data is empty, {expected} bytes expected")
    if actual > expected + max(frame_bytes, 2):
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"pixel data is {actual} bytes, {actual - expected} more than Rows x Columns "
                              f"x Frames x Samples x Bits Allocated = {expected}: the header is wrong")


NATIVE_SYNTAXES = {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1", "1.2.840.10008.1.2.2",
                   "1.2.840.10008.1.2.1.99"}


def looks_like_dicom(ds: Dataset) -> bool:
    """True when a force-read dataset holds real DICOM elements, not noise."""
    try:
        tags = list(ds.keys())
    except Exception:
        return False
    if not tags:
        return False
    known = sum(1 for tag in tags if 0x0008 <= tag.group <= 0x7FE0 and tag.group % 2 == 0)
    return known >= 2 or any(tag.group in (0x0008, 0x0028) for tag in tags)


def has_pixel_data(ds: Dataset) -> bool:
    return any(keyword in ds for keyword in PIXEL_KEYWORDS)


def _int(ds: Dataset, keyword: str, default=None) -> int:
    try:
        value = ds.get(keyword, default)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}: {exc}") from exc
    if value is None or value == "":
        if default is None:
            raise ConversionError(reasons.MISSING_ATTRIBUTE, f"missing required element {keyword}")
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}={value!r}: {exc}") from exc


def _float(ds: Dataset, keyword: str, default: float) -> float:
    try:
        value = ds.get(keyword, None)
        return default if value is None or value == "" else float(value)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}: {exc}") from exc


def validate_pixel_module(ds: Dataset) -> None:
    """Rejects Image Pixel module values no real file has (PS3.3 C.7.6.3.1), before any use."""
    allocated = _int(ds, "BitsAllocated")
    stored = _int(ds, "BitsStored", allocated)
    checks = [
        (allocated in (1, 8, 16, 32, 64), f"Bits Allocated {allocated} is not 1, 8, 16, 32 or 64"),
        (1 <= stored <= allocated, f"Bits Stored {stored} outside 1..Bits Allocated ({allocated})"),
        (0 < _int(ds, "Rows") <= 65535, f"Rows {_int(ds, 'Rows')} outside 1..65535"),
        (0 < _int(ds, "Columns") <= 65535, f"Columns {_int(ds, 'Columns')} outside 1..65535"),
        (_int(ds, "SamplesPerPixel", 1) in (1, 3, 4),
         f"Samples per Pixel {_int(ds, 'SamplesPerPixel', 1)} is not 1, 3 or 4"),
        (_int(ds, "PixelRepresentation", 0) in (0, 1),
         f"Pixel Representation {_int(ds, 'PixelRepresentation', 0)} is not 0 or 1"),
        (0 < (_int(ds, "NumberOfFrames", 1) or 1) <= 1_000_000,
         f"Number of Frames {_int(ds, 'NumberOfFrames', 1)} is implausible"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConversionError(reasons.INVALID_VALUE, message)


def stored_range(ds: Dataset) -> tuple[int, int]:
    """Range of stored values from Bits Stored and Pixel Representation."""
    bits = _int(ds, "BitsStored", _int(ds, "BitsAllocated"))
    if _int(ds, "PixelRepresentation", 0) == 1:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def modality_dtype(ds: Dataset) -> str:
    """dtype of the modality-LUT output, PS3.3 C.11.1.

    Rescale with integer slope and intercept keeps integers (CT in HU is
    int16); a fractional rescale needs float32; a Modality LUT Sequence maps
    into the LUT's bit depth. Colour images have no modality LUT.
    """
    if "FloatPixelData" in ds:
        return "float32"
    if "DoubleFloatPixelData" in ds:
        return "float64"
    lo, hi = stored_range(ds)
    if _int(ds, "SamplesPerPixel", 1) == 1:
        if "ModalityLUTSequence" in ds:
            descriptor = ds.ModalityLUTSequence[0].LUTDescriptor
            return "uint8" if int(descriptor[2]) <= 8 else "uint16"
        if "RescaleSlope" in ds and "RescaleIntercept" in ds:
            slope = _float(ds, "RescaleSlope", 1.0)
            intercept = _float(ds, "RescaleIntercept", 0.0)
            if not (math.isfinite(slope) and math.isfinite(intercept)):
                raise ConversionError(reasons.INVALID_VALUE, f"rescale {slope}, {intercept} is not finite")
            if not (slope.is_integer() and intercept.is_integer()) or abs(slope) > 2 ** 31 \
                    or abs(intercept) > 2 ** 62:
                return "float32"
            lo, hi = sorted((lo * slope + intercept, hi * slope + intercept))
            if str(ds.get("Modality", "")).upper() == "CT":
                # Hounsfield units lie physically within int16 even when a
                # 16-bit signed stored range minus 1024 would not; a slice whose
                # values really exceed it decodes wider than planned, and the
                # shard writer refuses it (decoded_size_mismatch).
                lo, hi = max(lo, -32768), min(hi, 32767)
    return smallest_integer_dtype(lo, hi)


def _stored_dtype(ds: Dataset) -> str:
    if "FloatPixelData" in ds:
        return "float32"
    if "DoubleFloatPixelData" in ds:
        return "float64"
    return smallest_integer_dtype(*stored_range(ds))


def _palette_dtype(ds: Dataset) -> str:
    descriptor = ds.get("RedPaletteColorLookupTableDescriptor")
    bits = int(descriptor[2]) if descriptor is not None else 8
    return "uint8" if bits <= 8 else "uint16"


def value_dtype_and_channels(ds: Dataset, settings: DecodeSettings) -> tuple[str, int]:
    """(dtype, channels) of the mapped values, by --dicom_values, before geometry."""
    samples = _int(ds, "SamplesPerPixel", 1)
    photometric = str(ds.get("PhotometricInterpretation", "") or "").upper()
    if settings.dicom_values == "stored":
        return _stored_dtype(ds), samples
    if photometric == "PALETTE COLOR":
        return _palette_dtype(ds), 3
    if samples > 1:
        return _stored_dtype(ds), samples
    if settings.dicom_values == "window":
        return ("uint8" if settings.window_bits == 8 else "uint16"), 1
    return modality_dtype(ds), 1


def image_spec(ds: Dataset, settings: DecodeSettings = DecodeSettings()) -> ImageSpec:
    """Shape and dtype of the mapped values (all frames), before geometry."""
    for keyword in _REQUIRED:
        _int(ds, keyword)
    validate_pixel_module(ds)
    frames = _int(ds, "NumberOfFrames", 1) or 1
    dtype, channels = value_dtype_and_channels(ds, settings)
    return ImageSpec(depth=frames, height=_int(ds, "Rows"), width=_int(ds, "Columns"),
                     channels=channels, dtype=dtype)


def infer_transfer_syntax(ds: Dataset) -> None:
    """Files without (0002,0010): native pixel data is read the way the dataset was encoded."""
    meta = getattr(ds, "file_meta", None)
    if meta is not None and meta.get("TransferSyntaxUID"):
        return
    if "PixelData" not in ds or ds["PixelData"].is_undefined_length:
        return
    implicit, little = getattr(ds, "original_encoding", (None, None))
    if implicit is None:
        return
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import ExplicitVRBigEndian, ExplicitVRLittleEndian, ImplicitVRLittleEndian
    if meta is None:
        ds.file_meta = meta = FileMetaDataset()
    meta.TransferSyntaxUID = (ImplicitVRLittleEndian if implicit
                              else ExplicitVRLittleEndian if little else ExplicitVRBigEndian)


def transfer_syntax(ds: Dataset) -> str:
    meta = getattr(ds, "file_meta", None)
    uid = meta.get("TransferSyntaxUID", None) if meta is not None else None
    return str(uid) if uid else ""


def burned_in_annotation(ds: Dataset) -> bool:
    return str(ds.get("BurnedInAnnotation", "") or "").strip().upper() == "YES"


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


def metadata_feature_names(keep_tags: tuple[str, ...] = ()) -> dict:
    """The dicom/* feature schema, as dataset.json lists it."""
    out = {f"dicom/{_snake(k)}": {"dtype": "bytes", "shape": []} for k in ALLOWED_TEXT}
    out.update({f"dicom/{_snake(k)}": {"dtype": "float", "shape": [-1]} for k in ALLOWED_NUMBERS})
    out["dicom/transfer_syntax"] = {"dtype": "bytes", "shape": []}
    out["dicom/window"] = {"dtype": "float", "shape": [-1],
                           "description": "[center, width] applied with --dicom_values window"}
    out["dicom/slice_spacing"] = {"dtype": "float", "shape": [-1],
                                  "description": "--unit series: spacing between slices in mm"}
    for name in IDENTIFIERS:
        out[f"dicom/{name}_hash"] = {"dtype": "bytes", "shape": [],
                                     "description": "HMAC-SHA256 with --id_salt, hex; empty if absent"}
    for keyword in keep_tags:
        out[f"dicom/{keyword}"] = {"dtype": "bytes", "shape": [], "description": "--keep_tags"}
    return out


def metadata_keys(settings: DecodeSettings) -> tuple[str, ...]:
    """The keys ``metadata`` returns, in its order (the DICOM shortcut carries values only)."""
    return (tuple(f"dicom/{_snake(k)}" for k in ALLOWED_TEXT + ALLOWED_NUMBERS)
            + ("dicom/transfer_syntax", "dicom/window", "dicom/slice_spacing")
            + tuple(f"dicom/{name}_hash" for name in IDENTIFIERS)
            + tuple(f"dicom/{keyword}" for keyword in settings.keep_tags))


def metadata(ds: Dataset, settings: DecodeSettings, window: dict) -> dict:
    """Allowlisted, non-identifying attributes under ``dicom/``; identifiers only hashed."""
    from dcm2tfrecord.transforms.hashing import identifier_hash
    out: dict = {}
    for keyword in ALLOWED_TEXT:
        try:
            out[f"dicom/{_snake(keyword)}"] = str(ds.get(keyword, "") or "")
        except Exception:
            out[f"dicom/{_snake(keyword)}"] = ""
    for keyword in ALLOWED_NUMBERS:
        out[f"dicom/{_snake(keyword)}"] = _numbers(ds, keyword)
    out["dicom/transfer_syntax"] = transfer_syntax(ds)
    out["dicom/window"] = _floats([window["center"], window["width"]] if window else [])
    out["dicom/slice_spacing"] = _floats([])
    for name, keyword in IDENTIFIERS.items():
        try:
            value = str(ds.get(keyword, "") or "").strip()
        except Exception:
            value = ""
        out[f"dicom/{name}_hash"] = identifier_hash(value, settings.id_salt) if value else ""
    for keyword in settings.keep_tags:
        try:
            out[f"dicom/{keyword}"] = str(ds.get(keyword, "") or "")
        except Exception:
            out[f"dicom/{keyword}"] = ""
    return out
