"""Deciding what a file is from its first bytes, then its name."""
from __future__ import annotations

import posixpath

DICOM = "dicom"
IMAGE = "image"
MAYBE_DICOM = "maybe_dicom"   # no preamble: try pydicom with force=True
OTHER = "other"

HEAD_BYTES = 132

DICOM_EXTENSIONS = {".dcm", ".dicom", ".dic", ".ima"}
_IMAGE_MAGIC = (
    b"\x89PNG\r\n\x1a\n",   # PNG
    b"\xff\xd8\xff",        # JPEG
    b"BM",                  # BMP
    b"II*\x00", b"MM\x00*",  # TIFF
    b"GIF87a", b"GIF89a",
)
IMAGE_EXTENSIONS = {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".gif", ".webp"}


def extension(path: str) -> str:
    return posixpath.splitext(path)[1].lower()


def sniff(head: bytes, path: str) -> str:
    """Classifies a file as DICOM, raster image, possibly DICOM, or other."""
    if len(head) >= 132 and head[128:132] == b"DICM":
        return DICOM
    if any(head.startswith(magic) for magic in _IMAGE_MAGIC):
        return IMAGE
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return IMAGE
    ext = extension(path)
    if ext in DICOM_EXTENSIONS or ext == "" or ext[1:].isdigit():
        return MAYBE_DICOM
    if ext in IMAGE_EXTENSIONS:
        return IMAGE   # let Pillow say what is wrong with it
    return OTHER
