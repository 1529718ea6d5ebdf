"""The tf.data parse specs of one split (features, dtypes, static shapes), decided once from dataset.json.

The manifest lists per split the stored dtypes and the shapes present
(``[depth, height, width, channels]``), and per feature its dtype and shape.
From these the reader knows ahead of reading whether a split takes the fast
path (one shape, one dtype, raw pixels: one ``decode_raw`` per batch and a
static element spec) and which dimensions it can declare.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
from dcm2tfrecord.reader.tfquiet import tf

from dcm2tfrecord.dataset.features import DTYPE, IMAGE_RAW, LABEL
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.reader.layout import (DEFAULT_LABEL, MASK_FEATURES, MISSING, REQUIRED, SHAPE_FEATURES, Layout)

_TF_DTYPES = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
_MISSING = MISSING
_DEFAULT_LABEL = DEFAULT_LABEL


def _feature(name: str, description: Mapping):
    kind = description.get("dtype", "bytes")
    if kind not in _TF_DTYPES:
        raise ValueError(f"feature {name!r}: dtype {kind!r} is not bytes, int64 or float")
    dtype = _TF_DTYPES[kind]
    shape = [int(x) if x is not None else -1 for x in description.get("shape", [])]
    if any(x < 0 for x in shape):
        # Variable length: a RaggedTensor [batch, None] after the batched parse.
        return tf.io.RaggedFeature(dtype)
    if name in REQUIRED:
        return tf.io.FixedLenFeature(shape, dtype)
    # Optional per record (DICOM metadata absent from images, tags absent from a file).
    default = np.full(shape, _MISSING[kind], dtype=dtype.as_numpy_dtype if kind != "bytes" else object)
    return tf.io.FixedLenFeature(shape, dtype, default_value=default.tolist() if shape else _MISSING[kind])


def label_spec(manifest: Manifest) -> tf.io.FixedLenFeature:
    """int64 class index, float, or a multi-hot int64 vector, as dataset.json declares."""
    return _feature(LABEL, manifest.feature(LABEL, _DEFAULT_LABEL))


def parse_spec(manifest: Manifest, layout: Layout, output: str, masks: bool = False) -> dict:
    """The ``parse_example`` spec: what ``output`` returns plus what decoding needs (with
    ``masks``, the mask features and, unless one reshape decodes the batch, the shape)."""
    features = dict(manifest.features)
    features.setdefault(LABEL, _DEFAULT_LABEL)
    if output == "dict":
        names = set(features) | set(REQUIRED)
    elif layout.vectorized:
        names = {IMAGE_RAW, LABEL}
    else:
        names = {IMAGE_RAW, LABEL, *SHAPE_FEATURES}
        if len(layout.stored_dtypes) > 1:
            names.add(DTYPE)
    if masks:
        names |= set(MASK_FEATURES)
    spec = {}
    for name in sorted(names):
        description = features.get(name, {"dtype": "int64" if name in SHAPE_FEATURES else "bytes",
                                          "shape": []})
        spec[name] = label_spec(manifest) if name == LABEL else _feature(name, description)
    return spec
