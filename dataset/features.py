"""The default record layout (docs/ARCHITECTURE.md, "Record format").

``image_raw``/``label``/``height``/``width``/``channels`` keep the classic
layout, so a textbook ``parse_single_example`` reader works on 8-bit output;
``depth``, ``dtype``, ``encoding``, ``id`` and ``dicom/*`` extend it.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dcm2tfrecord.dataset.example import encode_example_parts

FORMAT_VERSION = 1
ENCODING_RAW = "raw"

CORE_FEATURES = {
    "image_raw": {"dtype": "bytes", "shape": [], "encoding": ENCODING_RAW,
                  "description": "pixels, little-endian, row-major [depth, height, width, channels]"},
    "label": {"dtype": "int64", "shape": [], "description": "class index, -1 when unlabeled"},
    "height": {"dtype": "int64", "shape": []},
    "width": {"dtype": "int64", "shape": []},
    "channels": {"dtype": "int64", "shape": []},
    "depth": {"dtype": "int64", "shape": [], "description": "frames or slices; 1 for 2-D"},
    "dtype": {"dtype": "bytes", "shape": [], "description": "numpy dtype name of image_raw"},
    "encoding": {"dtype": "bytes", "shape": [], "description": "raw"},
    "id": {"dtype": "bytes", "shape": [], "description": "keyed hash of the source path"},
    "format": {"dtype": "bytes", "shape": [], "description": "dicom or image"},
}
SOURCE_PATH_FEATURE = {"dtype": "bytes", "shape": [], "description": "--keep_source_path"}


def _label_feature(label):
    """int -> Int64List, float -> FloatList, multi-hot tuple -> Int64List of the vector."""
    if isinstance(label, tuple):
        return np.asarray(label, dtype=np.int64)
    if isinstance(label, float):
        return float(label)
    return int(label)


def serialize_record(pixels: np.ndarray, record_id: str, kind: str, label=-1,
                     metadata: Mapping[str, object] | None = None) -> bytes:
    """One serialized tf.train.Example for a (D, H, W, C) pixel array."""
    return b"".join(serialize_record_parts(pixels, record_id, kind, label, metadata))


def serialize_record_parts(pixels: np.ndarray, record_id: str, kind: str, label=-1,
                           metadata: Mapping[str, object] | None = None) -> list:
    """:func:`serialize_record`'s bytes as parts (``encode_example_parts``): the pixels
    stay a view of ``pixels``, uncopied, for the shard writer to frame and write."""
    depth, height, width, channels = pixels.shape
    features: dict = {
        "image_raw": pixels.data.cast("B"),     # memoryview(pixels)
        "label": _label_feature(label),
        "height": height,
        "width": width,
        "channels": channels,
        "depth": depth,
        "dtype": pixels.dtype.newbyteorder("=").name,
        "encoding": ENCODING_RAW,
        "id": record_id,
        "format": kind,
    }
    if metadata:
        features.update(metadata)
    return encode_example_parts(features)
