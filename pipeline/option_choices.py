"""The fixed choices of convert options, one enum each.

Each is a ``StrEnum`` (``WindowBits`` an ``IntEnum``): a member equals, prints and
serialises as its value, so dataset.json records the same strings as before, and
code comparing with a plain string (``settings.compression == "gzip"``) keeps
working. The choices that transforms/ owns as tuples (resize modes, label keys,
split groupings) are checked against those tuples and the pixel encodings against
dataset/features.py's, when this module loads; ``Compression`` is defined beside the
container adapters (dataset/file_adapters.py), which hold it to their registry.
"""
from __future__ import annotations

import enum
import sys

from dcm2tfrecord.dataset import features
from dcm2tfrecord.dataset.file_adapters import Compression  # noqa: F401 - beside its adapters, re-exported
from dcm2tfrecord.transforms.images.geometry import RESIZE_MODES
from dcm2tfrecord.transforms.labels.table import LABEL_KEYS
# defined beside the masks they shape, referred to here
from dcm2tfrecord.transforms.masks.settings import MaskLayout, MissingMask  # noqa: F401
from dcm2tfrecord.transforms.splits.assign import SPLIT_BY

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:   # the converter supports 3.10 (setup.py): enum.StrEnum as 3.11 defines it
    class StrEnum(str, enum.Enum):
        """Members are strings, and print and format as their value."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(str(self), spec)


class Duplicates(StrEnum):
    SKIP = "skip"
    KEEP = "keep"


class DicomValues(StrEnum):
    MODALITY = "modality"
    STORED = "stored"
    WINDOW = "window"


class WindowBits(enum.IntEnum):
    EIGHT = 8
    SIXTEEN = 16


class ResizeMode(StrEnum):
    STRETCH = "stretch"
    PAD = "pad"
    CROP = "crop"


class Channels(StrEnum):
    KEEP = "keep"
    ONE = "1"
    THREE = "3"


class PixelEncoding(StrEnum):
    RAW = "raw"
    PNG = "png"


class Frames(StrEnum):
    STACK = "stack"
    SPLIT = "split"


class Unit(StrEnum):
    FILE = "file"
    SERIES = "series"


class SeriesGaps(StrEnum):
    FAIL = "fail"
    SPLIT = "split"


class Series4d(StrEnum):
    SPLIT = "split"
    STACK = "stack"


class LabelKey(StrEnum):
    PATH = "path"
    SOP_INSTANCE_UID = "sop_instance_uid"
    SERIES_INSTANCE_UID = "series_instance_uid"
    STUDY_INSTANCE_UID = "study_instance_uid"
    PATIENT_ID = "patient_id"


class LabelKeyCase(StrEnum):
    EXACT = "exact"
    FOLD = "fold"


class MissingLabel(StrEnum):
    SKIP = "skip"
    ERROR = "error"
    UNLABELED = "unlabeled"


class SplitBy(StrEnum):
    PATIENT = "patient"
    STUDY = "study"
    SERIES = "series"
    RECORD = "record"


class Progress(StrEnum):
    AUTO = "auto"
    BAR = "bar"
    LOG = "log"
    NONE = "none"


def values(choices: type[enum.Enum]) -> tuple:
    """The plain values of an enum's members, in declaration order."""
    return tuple(member.value for member in choices)


# the owners of these choices: transforms' tuples, and dataset/features.py's
for _enum, _owned in ((ResizeMode, RESIZE_MODES), (LabelKey, LABEL_KEYS), (SplitBy, SPLIT_BY),
                      (PixelEncoding, features.PIXEL_ENCODINGS)):
    if values(_enum) != tuple(_owned):
        raise TypeError(f"{_enum.__name__} {values(_enum)} disagrees with its owner's {tuple(_owned)}")
