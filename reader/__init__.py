"""tf.data input pipeline for datasets written by dcm2tfrecord.

Imports TensorFlow only: a training job installs this without Beam.

    ds = reader.load("/data/ct_tfr", split="train", batch_size=32)
    meta = reader.info("/data/ct_tfr")       # dataset.json, plus num_records(),
                                             # steps_per_epoch(), class_names, element_spec
"""
from reader.dataset import load, parse_fn
from reader.manifest import DatasetInfo, info

__all__ = ["load", "info", "parse_fn", "DatasetInfo"]
