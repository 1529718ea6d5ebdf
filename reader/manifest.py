"""Reading dataset.json (local or gs://) through TensorFlow's file system layer."""
from __future__ import annotations

import json

import tensorflow as tf

MANIFEST_NAME = "dataset.json"


def info(dataset_dir: str) -> dict:
    """The parsed dataset.json of ``dataset_dir``."""
    path = tf.io.gfile.join(dataset_dir, MANIFEST_NAME)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path} not found: {dataset_dir} is not a finished dcm2tfrecord dataset "
            "(dataset.json is written last, when a conversion commits)")
    with tf.io.gfile.GFile(path, "r") as handle:
        return json.load(handle)


def split_entry(manifest: dict, split: str) -> dict:
    try:
        return manifest["splits"][split]
    except KeyError:
        known = ", ".join(sorted(manifest["splits"])) or "none"
        raise ValueError(f"split {split!r} not in dataset (splits: {known})") from None


def shard_paths(dataset_dir: str, manifest: dict, split: str) -> list[str]:
    """Shard files from the manifest, never from a glob: stale files are not read."""
    return [tf.io.gfile.join(dataset_dir, s["file"]) for s in split_entry(manifest, split)["shards"]]
