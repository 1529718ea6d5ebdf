"""What a DICOM file will decode to, read from its header only.

The Image Pixel module (PS3.3 C.7.6.3) gives the geometry; the Modality LUT
module (PS3.3 C.11.1) gives the value range after rescale, from which the
stored dtype follows. Pixel data is never read here: pydicom defers large
values, so probing costs a header read even for a 1 GB multi-frame file.
"""
from __future__ import annotations

import math

from pydicom.dataset import Dataset

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.transforms.dicom import functional_groups, mosaic
from dcm2tfrecord.transforms.dicom.content import has_float_pixels
from dcm2tfrecord.transforms.dicom.elements import float_value, int_value
from dcm2tfrecord.transforms.dicom.voi import WindowBits
from dcm2tfrecord.transforms.dtypes import smallest_integer_dtype
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.record_model import ImageSpec
from dcm2tfrecord.transforms.settings import DecodeSettings

_REQUIRED = ("Rows", "Columns", "BitsAllocated")


def validate_pixel_module(ds: Dataset) -> None:
    """Rejects Image Pixel module values no real file has (PS3.3 C.7.6.3.1), before any use."""
    allocated = int_value(ds, "BitsAllocated")
    stored = int_value(ds, "BitsStored", allocated)
    checks = [
        (allocated in (1, 8, 16, 32, 64), f"Bits Allocated {allocated} is not 1, 8, 16, 32 or 64"),
        (1 <= stored <= allocated, f"Bits Stored {stored} outside 1..Bits Allocated ({allocated})"),
        (0 < int_value(ds, "Rows") <= 65535, f"Rows {int_value(ds, 'Rows')} outside 1..65535"),
        (0 < int_value(ds, "Columns") <= 65535, f"Columns {int_value(ds, 'Columns')} outside 1..65535"),
        (int_value(ds, "SamplesPerPixel", 1) in (1, 3, 4),
         f"Samples per Pixel {int_value(ds, 'SamplesPerPixel', 1)} is not 1, 3 or 4"),
        (int_value(ds, "PixelRepresentation", 0) in (0, 1),
         f"Pixel Representation {int_value(ds, 'PixelRepresentation', 0)} is not 0 or 1"),
        (0 < (int_value(ds, "NumberOfFrames", 1) or 1) <= 1_000_000,
         f"Number of Frames {int_value(ds, 'NumberOfFrames', 1)} is implausible"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConversionError(reasons.INVALID_VALUE, message)


def stored_range(ds: Dataset) -> tuple[int, int]:
    """Range of stored values from Bits Stored and Pixel Representation."""
    bits = int_value(ds, "BitsStored", int_value(ds, "BitsAllocated"))
    if int_value(ds, "PixelRepresentation", 0) == 1:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def modality_dtype(ds: Dataset) -> str:
    """dtype of the modality-LUT output, PS3.3 C.11.1.

    Rescale with integer slope and intercept keeps integers (CT in HU is
    int16); a fractional rescale needs float32; a Modality LUT Sequence maps
    into the LUT's bit depth. Colour images have no modality LUT. An Enhanced
    image's rescale is per frame (transforms.dicom.functional_groups): the
    dtype is the smallest exact over every frame's range.
    """
    views = None if has_float_pixels(ds) else functional_groups.value_views(ds)
    if not views:
        found = modality_range(ds)
        return found if isinstance(found, str) else smallest_integer_dtype(*found)
    ranges = [modality_range(view) for view in {id(v): v for v in views}.values()]
    floats = [r for r in ranges if isinstance(r, str)]
    if floats:
        return "float64" if "float64" in floats else "float32"
    return smallest_integer_dtype(min(r[0] for r in ranges), max(r[1] for r in ranges))


def modality_lut_bits(ds: Dataset) -> int:
    """The bits of a Modality LUT Sequence's (0028,3000) first item's entries (LUT Descriptor's
    third value); ConversionError(invalid_value) naming the attribute when the item, its LUT
    Descriptor (0028,3002: three numbers) or its LUT Data (0028,3006) is not there to use."""
    items = ds.get("ModalityLUTSequence") or []
    item = items[0] if len(items) else None
    descriptor = item.get("LUTDescriptor") if item is not None else None
    try:
        bits = int(descriptor[2]) if descriptor is not None and len(descriptor) == 3 else 0
    except (TypeError, ValueError):
        bits = 0
    if item is None or not 1 <= bits <= 16 or item.get("LUTData") in (None, b"", []):
        what = ("has no item" if item is None else
                "has no LUT Data (0028,3006)" if bits and item.get("LUTData") in (None, b"", []) else
                "has no usable LUT Descriptor (0028,3002): three numbers, the last the entries' bits (8 or 16)")
        raise ConversionError(reasons.INVALID_VALUE, f"the Modality LUT Sequence (0028,3000) {what}; the "
                                                     "stored values cannot be mapped to modality values: "
                                                     "re-export the file, or convert with --dicom_values stored")
    return bits


def modality_range(ds: Dataset):
    """The (lo, hi) integer range of the modality-LUT output, or the float dtype it needs."""
    if "FloatPixelData" in ds:
        return "float32"
    if "DoubleFloatPixelData" in ds:
        return "float64"
    lo: float       # ints, or integer-valued floats after a rescale
    hi: float
    lo, hi = stored_range(ds)
    if int_value(ds, "SamplesPerPixel", 1) == 1:
        if "ModalityLUTSequence" in ds:
            return (0, 255) if modality_lut_bits(ds) <= 8 else (0, 65535)
        if "RescaleSlope" in ds and "RescaleIntercept" in ds:
            slope = float_value(ds, "RescaleSlope", 1.0)
            intercept = float_value(ds, "RescaleIntercept", 0.0)
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
    return lo, hi


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


class DicomValues(StrEnum):
    """``--dicom_values``: which values a DICOM record holds (:func:`value_dtype_and_channels`,
    mapped by transforms.dicom.pixels.map_values)."""
    MODALITY = "modality"   # the modality LUT (e.g. Hounsfield units), exact dtype
    STORED = "stored"       # the raw stored values
    WINDOW = "window"       # a VOI window, to uint8 or uint16 (--window_bits)


def value_dtype_and_channels(ds: Dataset, settings: DecodeSettings) -> tuple[str, int]:
    """(dtype, channels) of the mapped values, by --dicom_values, before geometry."""
    samples = int_value(ds, "SamplesPerPixel", 1)
    photometric = str(ds.get("PhotometricInterpretation", "") or "").upper()
    if settings.dicom_values == DicomValues.STORED:
        return _stored_dtype(ds), samples
    if photometric == "PALETTE COLOR":
        return _palette_dtype(ds), 3
    if samples > 1:
        return _stored_dtype(ds), samples
    if settings.dicom_values == DicomValues.WINDOW:
        return ("uint8" if settings.window_bits == WindowBits.EIGHT else "uint16"), 1
    return modality_dtype(ds), 1


READ_LAYOUT: object = object()     # image_spec's default: the mosaic layout read from ``ds``


def image_spec(ds: Dataset, settings: DecodeSettings = DecodeSettings(),
               layout: object = READ_LAYOUT) -> ImageSpec:
    """Shape and dtype of the mapped values (all frames), before geometry.

    A Siemens mosaic's are those of its slices (transforms.dicom.mosaic): ``layout``,
    its mosaic.mosaic_layout (None: not a mosaic) where the caller has it, read here
    otherwise.
    """
    for keyword in _REQUIRED:
        int_value(ds, keyword)
    validate_pixel_module(ds)
    frames = int_value(ds, "NumberOfFrames", 1) or 1
    dtype, channels = value_dtype_and_channels(ds, settings)
    if layout is READ_LAYOUT:
        layout = mosaic.mosaic_layout(ds)
    if isinstance(layout, mosaic.Mosaic):
        return ImageSpec(depth=layout.images, height=layout.rows, width=layout.columns,
                         channels=channels, dtype=dtype)
    return ImageSpec(depth=frames, height=int_value(ds, "Rows"), width=int_value(ds, "Columns"),
                     channels=channels, dtype=dtype)
