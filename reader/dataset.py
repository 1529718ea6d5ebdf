"""The fast path: shard shuffle, parallel interleave, batch, vectorized parse, prefetch."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import tensorflow as tf

from reader.manifest import info, shard_paths, split_entry

AUTOTUNE = tf.data.AUTOTUNE


_SCALARS = ("height", "width", "channels", "depth")


def _label_spec(manifest: dict) -> tf.io.FixedLenFeature:
    """int64 class index, float, or a multi-hot vector, as dataset.json declares."""
    label = manifest.get("features", {}).get("label", {"dtype": "int64", "shape": []})
    dtype = tf.float32 if label["dtype"] == "float" else tf.int64
    return tf.io.FixedLenFeature(label["shape"], dtype)


def _spec(manifest: dict) -> dict:
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
            "dtype": tf.io.FixedLenFeature([], tf.string),
            "id": tf.io.FixedLenFeature([], tf.string),
            "label": _label_spec(manifest)}
    spec.update({k: tf.io.FixedLenFeature([], tf.int64) for k in _SCALARS})
    return spec


def _common_dtype(dtypes: list[str]) -> str:
    """The stored dtype, or for mixed datasets the smallest one that holds all exactly."""
    if not dtypes:
        return "uint8"
    return np.result_type(*[np.dtype(d) for d in dtypes]).name


def _is_volume(entry: dict) -> bool:
    return entry.get("max_depth", 1) > 1


_BITCAST = {"uint32": "int32", "uint64": "int64"}


def _decode_raw(raw, dtype: str):
    """decode_raw, plus the unsigned 32/64-bit dtypes it lacks (bitcast from signed)."""
    if dtype in _BITCAST:
        return tf.bitcast(tf.io.decode_raw(raw, _BITCAST[dtype]), dtype)
    return tf.io.decode_raw(raw, dtype)


def _decode_one(raw, dtype_name, shape, stored: list[str], out_dtype: str):
    """Decodes one record whose dtype is only known at run time."""
    out = tf.dtypes.as_dtype(out_dtype)
    if len(stored) == 1:
        return tf.reshape(tf.cast(_decode_raw(raw, stored[0]), out), shape)
    branches = [lambda d=d: tf.cast(_decode_raw(raw, d), out) for d in stored]
    index = tf.argmax(tf.cast(tf.equal(tf.constant(stored), dtype_name), tf.int32))
    return tf.reshape(tf.switch_case(tf.cast(index, tf.int32), branches), shape)


def parse_fn(dataset_dir: str, split: str = "train", output: str = "tuple") -> Callable:
    """The batched parse function ``load`` uses: serialized [B] -> (images, labels).

    For datasets where every record has one shape and dtype, the whole batch
    is parsed with one ``parse_example`` and decoded with one ``decode_raw``.
    """
    manifest = info(dataset_dir)
    return _make_parse(manifest, split_entry(manifest, split), output)


def _make_parse(manifest: dict, entry: dict, output: str) -> Callable:
    stored = list(entry["dtypes"])
    out_dtype = _common_dtype(stored)
    volume = _is_volume(entry)
    fixed = entry["fixed_shape"] and len(stored) == 1
    spec = _spec(manifest)

    def finish(features, images):
        if output == "dict":
            features = dict(features)
            features.pop("image_raw")
            features["image"] = images
            return features
        return images, features["label"]

    if fixed:
        shape = entry["shapes"][0] if volume else entry["shapes"][0][1:]

        def parse_batch(serialized):
            features = tf.io.parse_example(serialized, spec)
            pixels = _decode_raw(features["image_raw"], stored[0])
            return finish(features, tf.reshape(pixels, [-1] + list(shape)))
        return parse_batch

    def parse_single(serialized):
        features = tf.io.parse_single_example(serialized, spec)
        shape = tf.stack([features["depth"], features["height"], features["width"],
                          features["channels"]])
        image = _decode_one(features["image_raw"], features["dtype"], shape, stored, out_dtype)
        if not volume:
            image = image[0]
        return finish(features, image)
    return parse_single


def load(dataset_dir: str, split: str = "train", batch_size: int = 32, shuffle: bool = True,
         seed: Optional[int] = None, *, repeat: bool = False, drop_remainder: bool = False,
         output: str = "tuple", pad: bool = False, shuffle_buffer: int = 1024,
         cycle_length: Optional[int] = None, deterministic: Optional[bool] = None) -> tf.data.Dataset:
    """A tf.data.Dataset of ``(image, label)`` batches (or dicts with ``output="dict"``).

    Images are ``[batch, height, width, channels]``, or ``[batch, depth, height,
    width, channels]`` for datasets holding volumes, in their stored dtype
    (mixed-dtype datasets: the smallest dtype holding all values). Unlabeled
    records have label -1. Order is not deterministic unless ``seed`` or
    ``deterministic=True`` is given.
    """
    if output not in ("tuple", "dict"):
        raise ValueError("output must be 'tuple' or 'dict'")
    manifest = info(dataset_dir)
    entry = split_entry(manifest, split)
    files = shard_paths(dataset_dir, manifest, split)
    if deterministic is None:
        deterministic = seed is not None or not shuffle
    fixed = entry["fixed_shape"] and len(entry["dtypes"]) == 1
    if not fixed and len(entry["shapes"]) > 1 and batch_size > 1 and not pad:
        raise ValueError(
            f"split {split!r} holds images of {len(entry['shapes'])}+ different shapes "
            f"(e.g. {entry['shapes'][:3]}) and cannot be batched: convert with "
            "--resize HxW, or load with pad=True or batch_size=1")
    ds = tf.data.Dataset.from_tensor_slices(tf.constant(files, dtype=tf.string))
    if shuffle:
        ds = ds.shuffle(max(len(files), 1), seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    compression = "GZIP" if manifest.get("options", {}).get("compression") == "gzip" else ""
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, compression_type=compression),
                       cycle_length=cycle_length or min(max(len(files), 1), 16),
                       num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    parse = _make_parse(manifest, entry, output)
    options = tf.data.Options()
    options.deterministic = deterministic
    if fixed:
        ds = ds.batch(batch_size, drop_remainder=drop_remainder).map(
            parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    else:
        ds = ds.map(parse, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
        if pad:
            ds = ds.padded_batch(batch_size, drop_remainder=drop_remainder)
        else:
            ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    return ds.with_options(options).prefetch(AUTOTUNE)
