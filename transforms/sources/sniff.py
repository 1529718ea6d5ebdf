"""Deciding what a file is from its first bytes, then its name."""
from __future__ import annotations

import posixpath

from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.nifti import read as nifti

# the record kinds a source may be (dataset/features.py's RecordKind), and the two verdicts that are not
DICOM = RecordKind.DICOM
IMAGE = RecordKind.IMAGE
NIFTI = RecordKind.NIFTI      # NIfTI-1 / NIfTI-2, .nii or .nii.gz (transforms.nifti.read)
MAYBE_DICOM = "maybe_dicom"   # no preamble: try pydicom with force=True
OTHER = "other"

# DICOM's preamble and magic end at byte 132; NIfTI-1's magic lies at byte 344 (544 bytes show
# either NIfTI version's, and a .nii.gz's head inflates far enough): one read either way
HEAD_BYTES = max(132, nifti.HEAD_BYTES)

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
    """Classifies a file as DICOM, raster image, NIfTI, possibly DICOM, or other."""
    if len(head) >= 132 and head[128:132] == b"DICM":
        return DICOM
    if nifti.looks_like_nifti(head, path):
        return NIFTI
    if any(head.startswith(magic) for magic in _IMAGE_MAGIC):
        return IMAGE
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return IMAGE
    ext = extension(path)
    if ext in DICOM_EXTENSIONS or ext == "" or ext[1:].isdigit():
        return MAYBE_DICOM
    if ext in IMAGE_EXTENSIONS:
        return IMAGE   # let Pillow say what is wrong with it
    if path.lower().endswith(nifti.SUFFIXES):
        return NIFTI   # let the NIfTI reader say what is wrong with it
    return OTHER
