"""What a parsed DICOM dataset holds: real DICOM elements, pixel data (and of which
kind), a burned-in annotation. The facts the probe gates a file on, before planning."""
from __future__ import annotations

from pydicom.dataset import Dataset
from pydicom.tag import Tag

PIXEL_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")
PIXEL_DATA_TAG = Tag(0x7FE0, 0x0010)
# Pixel Data, Float Pixel Data, Double Float Pixel Data
PIXEL_TAGS = {PIXEL_DATA_TAG, Tag(0x7FE0, 0x0008), Tag(0x7FE0, 0x0009)}


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


def has_float_pixels(ds: Dataset) -> bool:
    return "FloatPixelData" in ds or "DoubleFloatPixelData" in ds


def has_pixel_data(ds: Dataset) -> bool:
    return any(keyword in ds for keyword in PIXEL_KEYWORDS)



def burned_in_annotation(ds: Dataset) -> bool:
    return str(ds.get("BurnedInAnnotation", "") or "").strip().upper() == "YES"
