"""The fixed choices of convert options: each enum is defined beside the code that implements it,
and named here for the option table (pipeline.options.table).

Each is a ``StrEnum`` (dataset/choices.py; ``WindowBits`` an ``IntEnum``): a member equals,
prints and serialises as its value, so dataset.json and the Flex Template record the same
strings as before, and code comparing with a plain string keeps working. ``Compression`` is
defined beside the container adapters (dataset/file_adapters.py), which hold it to their
registry; ``MaskLayout`` and ``MissingMask`` beside the masks (transforms/masks/settings.py).
"""
from __future__ import annotations

from dcm2tfrecord.dataset.bricks import VolumeCodec
from dcm2tfrecord.dataset.choices import values
from dcm2tfrecord.dataset.features import PixelEncoding
from dcm2tfrecord.dataset.file_adapters import Compression
from dcm2tfrecord.pipeline.progress import Progress
from dcm2tfrecord.transforms.dicom.spec import DicomValues
from dcm2tfrecord.transforms.dicom.voi import WindowBits
from dcm2tfrecord.transforms.images.crop import Crop
from dcm2tfrecord.transforms.images.geometry import Channels, ResizeMode
from dcm2tfrecord.transforms.images.intensity import Intensity
from dcm2tfrecord.transforms.labels.join import MissingLabel
from dcm2tfrecord.transforms.labels.table import LabelKey, LabelKeyCase
from dcm2tfrecord.transforms.masks.settings import MaskLayout, MissingMask
from dcm2tfrecord.transforms.records.probe import Frames
from dcm2tfrecord.transforms.records.steps import Duplicates
from dcm2tfrecord.transforms.series.volumes import Series4d, SeriesGaps, Unit
from dcm2tfrecord.transforms.splits.assign import SplitBy

__all__ = ["Channels", "Compression", "Crop", "DicomValues", "Duplicates", "Frames", "Intensity", "LabelKey",
           "LabelKeyCase", "MaskLayout", "MissingLabel", "MissingMask", "PixelEncoding", "Progress", "ResizeMode",
           "Series4d", "SeriesGaps", "SplitBy", "Unit", "VolumeCodec", "WindowBits", "values"]
