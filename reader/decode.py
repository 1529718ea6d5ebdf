"""Batched parsing: serialized records ``[batch]`` -> images (and labels, or all features;
with ``masks``, the --class_map masks as well).

The fast path parses a whole batch with one ``tf.io.parse_example`` and
decodes all pixels with one ``tf.io.decode_raw`` into a tensor whose shape
is known before reading. Splits with several shapes or dtypes, or with
PNG/JPEG-encoded pixels, are decoded record by record inside the batch
(``tf.map_fn``), cast to a common dtype and zero-padded to the batch's
largest image.
"""
from __future__ import annotations

import functools
from typing import Callable, Mapping, Optional

from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.reader.tfquiet import tf

from dcm2tfrecord.dataset.features import DTYPE, IMAGE_RAW, LABEL, MASK_CHANNELS, MASK_DTYPE, MASK_RAW, SHAPE_FEATURES
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.reader.parse_spec import parse_spec
from dcm2tfrecord.reader.layout import Layout, mask_classes, mask_dtype

# decode_raw has no unsigned 32/64-bit output: decode the signed type of the
# same width and reinterpret the bits.
_BITCAST = {"uint32": tf.int32, "uint64": tf.int64}


def decode_raw(raw: tf.Tensor, dtype: str) -> tf.Tensor:
    """``tf.io.decode_raw`` (little-endian) for every dtype the converter writes."""
    if dtype in _BITCAST:
        return tf.bitcast(tf.io.decode_raw(raw, _BITCAST[dtype]), tf.as_dtype(dtype))
    return tf.io.decode_raw(raw, tf.as_dtype(dtype))


@functools.lru_cache(maxsize=1)
def xla_available() -> bool:
    """Whether this TensorFlow build compiles functions with XLA on the CPU."""
    try:
        probe = tf.function(lambda x: tf.cast(x, tf.float32) * 0.5, jit_compile=True)
        with tf.device("/CPU:0"):
            return bool(probe(tf.ones([2], tf.uint8))[0] == 0.5)
    except Exception:      # a build without XLA, or one that cannot compile here
        return False


def conversion(stored: str, dtype=None, scale: Optional[float] = None,
               fuse: bool = False) -> Optional[Callable]:
    """``images -> cast(images, dtype) * scale``; None when images stay as stored.

    ``scale`` alone converts to float32 (``scale=1/255`` maps uint8 to [0, 1]).
    With ``fuse`` (for batches of one static shape: XLA compiles once per batch
    shape) cast and multiply run as one XLA kernel: one pass over the output
    instead of two, which halves the cost of the conversion on the CPU.
    """
    if dtype is None and scale is None:
        return None
    target = tf.as_dtype(dtype) if dtype is not None else tf.float32
    if scale is not None and not target.is_floating:
        raise ValueError(f"scale needs a floating dtype, not {target.name}")
    if target == tf.as_dtype(stored) and scale is None:
        return None

    if fuse and scale is not None and xla_available():
        return _fused_conversion(target.name, float(scale))
    return functools.partial(_convert, target=target, scale=scale)


def _convert(images, target, scale):
    images = tf.cast(images, target)
    return images * tf.constant(scale, target) if scale is not None else images


@functools.lru_cache(maxsize=16)
def _fused_conversion(target: str, scale: float) -> Callable:
    """One XLA function per (dtype, scale), shared by every ``load``: compiled once per
    batch shape in a process, not again for each new dataset (70-100 ms each)."""
    return tf.function(functools.partial(_convert, target=tf.as_dtype(target), scale=scale),
                       jit_compile=True)


_PNG_SAMPLES = {"int8": tf.uint8, "int16": tf.uint16}     # signed dtypes: PNG holds their bits unsigned


def _decode_png(raw: tf.Tensor, stored: str) -> tf.Tensor:
    """A PNG record's samples in ``stored`` (dataset/png.py: signed ones bitcast back)."""
    image = tf.io.decode_png(raw, channels=0, dtype=_PNG_SAMPLES.get(stored, tf.as_dtype(stored)))
    return tf.bitcast(image, tf.as_dtype(stored)) if stored in _PNG_SAMPLES else image


def _decode_pixels(raw: tf.Tensor, encoding: str, stored: str) -> tf.Tensor:
    """A record's samples, flat or as decoded, in ``stored``."""
    if encoding == "raw":
        return decode_raw(raw, stored)
    if encoding == "png":    # depth * height rows: the reshape below restores [d, h, w, c]
        return _decode_png(raw, stored)
    return tf.io.decode_jpeg(raw, channels=0)


def _decode_record(layout: Layout, raw, shape, dtype_name) -> tf.Tensor:
    """One record as ``[d, h, w, c]`` in the layout's common dtype."""
    out = tf.as_dtype(layout.dtype)
    stored = list(layout.stored_dtypes)
    if len(stored) == 1 or layout.encoding == "jpeg":
        return tf.reshape(tf.cast(_decode_pixels(raw, layout.encoding, stored[0]), out), shape)
    branches = [lambda d=d: tf.cast(tf.reshape(_decode_pixels(raw, layout.encoding, d), [-1]), out)
                for d in stored]
    index = tf.argmax(tf.cast(tf.equal(tf.constant(stored), dtype_name), tf.int32), output_type=tf.int32)
    return tf.reshape(tf.switch_case(index, branches), shape)


def _decode_each(layout: Layout, features: Mapping) -> tf.Tensor:
    """Record by record, zero-padded to the largest ``[d, h, w, c]`` of the batch."""
    shapes = tf.stack([tf.cast(features[k], tf.int32)
                       for k in SHAPE_FEATURES], axis=1)    # [B, 4]
    target = tf.reduce_max(shapes, axis=0)
    raw = features[IMAGE_RAW]
    dtype_names = features.get(DTYPE, tf.fill(tf.shape(raw), layout.stored_dtypes[0]))

    def one(args):
        raw_one, shape, dtype_name = args
        image = _decode_record(layout, raw_one, shape, dtype_name)
        return tf.pad(image, tf.stack([tf.zeros([4], tf.int32), target - tf.shape(image)], axis=1))

    spec = tf.TensorSpec([None] * 4, tf.as_dtype(layout.dtype))
    images = tf.map_fn(one, (raw, shapes, dtype_names), fn_output_signature=spec)
    return images if layout.volume else images[:, 0]


def _mask_values(raw: tf.Tensor, dtype_names: tf.Tensor, out: str) -> tf.Tensor:
    """``decode_raw`` of mask bytes (one record's, or a batch's of one length) in the dtype the
    records name, as ``out``; a record naming another dtype fails the batch, saying so."""
    if out == "uint8":
        named = tf.reduce_all(tf.equal(dtype_names, "uint8"))
        check = tf.debugging.Assert(named, ["mask_dtype is not uint8:", dtype_names], summarize=4)
        with tf.control_dependencies([check]):
            return tf.io.decode_raw(raw, tf.uint8)
    first = tf.reshape(dtype_names, [-1])[0]
    named = tf.reduce_all(tf.equal(dtype_names, first)) & (tf.equal(first, "uint8") | tf.equal(first, "uint16"))
    check = tf.debugging.Assert(named, ["mask_dtype is not one uint8 or uint16:", dtype_names], summarize=4)
    with tf.control_dependencies([check]):
        return tf.switch_case(tf.cast(tf.equal(first, "uint16"), tf.int32),
                              [lambda: tf.cast(tf.io.decode_raw(raw, tf.uint8), tf.uint16),
                               lambda: tf.io.decode_raw(raw, tf.uint16)])


def _decode_masks(layout: Layout, features: Mapping, out: str) -> tf.Tensor:
    """The batch's masks, ``[batch, (depth,) height, width, mask_channels]``: one decode and reshape
    where images take one, else record by record, zero-padded (background) as images are."""
    if layout.vectorized:
        values = _mask_values(features[MASK_RAW], features[MASK_DTYPE], out)          # [B, n]
        channels = tf.cast(features[MASK_CHANNELS][:1], tf.int32)
        return tf.reshape(values, tf.concat([tf.shape(values)[:1], layout.image_shape()[:-1], channels], 0))
    shapes = tf.stack([tf.cast(features[k], tf.int32) for k in (*SHAPE_FEATURES[:3], MASK_CHANNELS)],
                      axis=1)                                                           # [B, 4]
    target = tf.reduce_max(shapes, axis=0)

    def one(args):
        raw, shape, dtype_name = args
        mask = tf.reshape(_mask_values(raw, dtype_name, out), shape)
        return tf.pad(mask, tf.stack([tf.zeros([4], tf.int32), target - shape], axis=1))

    spec = tf.TensorSpec([None] * 4, tf.as_dtype(out))
    masks = tf.map_fn(one, (features[MASK_RAW], shapes, features[MASK_DTYPE]), fn_output_signature=spec)
    return masks if layout.volume else masks[:, 0]


def batch_parser(manifest: Manifest, layout: Layout, output: str = "tuple", dtype=None,
                 scale: Optional[float] = None, masks: bool = False) -> Callable:
    """``serialized [batch] -> (images, labels)``, or a dict of all features with ``image``;
    with ``masks``, ``(images, masks, labels)``, or the dict with ``mask`` for ``mask_raw``.

    Masks keep their stored dtype (``dtype`` and ``scale`` convert images only), in the
    image's shape but for the channels: ``mask_channels``.
    """
    if output not in ("tuple", "dict"):
        raise ValueError(f"output must be 'tuple' or 'dict', not {output!r}")
    spec = parse_spec(manifest, layout, output, masks)
    convert = conversion(layout.dtype, dtype, scale, fuse=layout.vectorized)
    image_shape = layout.image_shape()
    mask_out = mask_dtype(manifest)
    # one class: one channel in either --mask_layout (dataset/masks.py)
    mask_shape = image_shape[:-1] + [mask_format.shared_channels(len(mask_classes(manifest)))]

    rest_spec = {name: feature for name, feature in spec.items() if name != IMAGE_RAW}

    def parse(serialized, pixels=None):
        """``pixels``: the batch's image bytes already decoded, ``[batch, n]`` of the stored
        dtype (vectorized layouts: the encrypted reader's hand-off), ``serialized`` the records
        without their ``image_raw``."""
        features = tf.io.parse_example(serialized, spec if pixels is None else rest_spec)
        if layout.vectorized:
            if pixels is None:
                pixels = decode_raw(features[IMAGE_RAW], layout.stored_dtypes[0])
            images = tf.reshape(pixels, [serialized.shape[0] or -1] + image_shape)
        else:
            images = _decode_each(layout, features)
            images.set_shape([serialized.shape[0]] + image_shape)
        if convert is not None:
            images = convert(images)
        if masks:
            mask_batch = _decode_masks(layout, features, mask_out)
            mask_batch.set_shape([serialized.shape[0]] + mask_shape)
        if output == "tuple":
            return (images, mask_batch, features[LABEL]) if masks else (images, features[LABEL])
        features = dict(features)
        features.pop(IMAGE_RAW, None)
        features["image"] = images
        if masks:
            del features[MASK_RAW]
            features["mask"] = mask_batch
        return features
    return parse
