"""tf.data input pipeline for datasets written by dcm2tfrecord.

Imports TensorFlow only: a training job installs this without Beam.
"""
from reader.dataset import load, parse_fn
from reader.manifest import info

__all__ = ["load", "info", "parse_fn"]
