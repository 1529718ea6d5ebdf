"""What a DICOM file will decode to, read from its header only.

The Image Pixel module (PS3.3 C.7.6.3) gives the geometry; the Modality LUT
module (PS3.3 C.11.1) gives the value range after rescale, from which the
stored dtype follows. Pixel data is never read here: pydicom defers large
values, so probing costs a header read even for a 1 GB multi-frame file.
"""
from __future__ import annotations

import logging
import warnings
from typing import BinaryIO

import pydicom
from pydicom.dataset import Dataset

from transforms import reasons
from transforms.dtypes import smallest_integer_dtype
from transforms.errors import ConversionError
from transforms.records import ImageSpec

PIXEL_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")
_DEFER_BYTES = 2048
_REQUIRED = ("Rows", "Columns", "BitsAllocated")

# pydicom logs and warns about every oddity it tolerates; what matters to a
# user ends up in errors.jsonl with a reason, so its chatter stays out of the run log.
logging.getLogger("pydicom").setLevel(logging.CRITICAL)
warnings.filterwarnings("ignore", category=UserWarning, module=r"pydicom(\..*)?$")


def read_header(fileobj: BinaryIO) -> Dataset:
    """Parses every element, leaving large values (pixel data) unread on disk."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pydicom.dcmread(fileobj, force=True, defer_size=_DEFER_BYTES)
    except Exception as exc:  # pydicom raises many types for a broken header
        raise ConversionError(reasons.INVALID_DICOM, f"header does not parse: {exc}") from exc


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
            if not (slope.is_integer() and intercept.is_integer()):
                return "float32"
            lo, hi = sorted((lo * slope + intercept, hi * slope + intercept))
            if str(ds.get("Modality", "")).upper() == "CT":
                # Hounsfield units lie physically within int16 even when a
                # 16-bit signed stored range minus 1024 would not; a slice whose
                # values really exceed it is widened at decode, still exact.
                lo, hi = max(lo, -32768), min(hi, 32767)
    return smallest_integer_dtype(lo, hi)


def image_spec(ds: Dataset) -> ImageSpec:
    """Planned shape and dtype of the record this dataset becomes."""
    for keyword in _REQUIRED:
        _int(ds, keyword)
    samples = _int(ds, "SamplesPerPixel", 1)
    frames = _int(ds, "NumberOfFrames", 1) or 1
    return ImageSpec(depth=frames, height=_int(ds, "Rows"), width=_int(ds, "Columns"),
                     channels=samples, dtype=modality_dtype(ds))


def transfer_syntax(ds: Dataset) -> str:
    meta = getattr(ds, "file_meta", None)
    uid = meta.get("TransferSyntaxUID", None) if meta is not None else None
    return str(uid) if uid else ""


def metadata(ds: Dataset) -> dict:
    """Non-identifying acquisition metadata written under ``dicom/``.

    Nothing here names or dates a patient, study or institution.
    """
    out = {
        "dicom/modality": str(ds.get("Modality", "") or ""),
        "dicom/photometric_interpretation": str(ds.get("PhotometricInterpretation", "") or ""),
        "dicom/transfer_syntax": transfer_syntax(ds),
        "dicom/bits_stored": _int(ds, "BitsStored", _int(ds, "BitsAllocated", 0)),
        "dicom/rescale_slope": _float(ds, "RescaleSlope", 1.0),
        "dicom/rescale_intercept": _float(ds, "RescaleIntercept", 0.0),
    }
    try:
        spacing = ds.get("PixelSpacing", None)
        out["dicom/pixel_spacing"] = [float(v) for v in spacing] if spacing else [0.0, 0.0]
    except Exception:
        out["dicom/pixel_spacing"] = [0.0, 0.0]
    return out
