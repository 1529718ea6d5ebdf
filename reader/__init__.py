"""Readers for datasets written by dcm2tfrecord.

``load`` is the tf.data input pipeline (imports TensorFlow, never Beam);
``RandomAccess`` reads records by index into NumPy arrays, for PyTorch, JAX
or Grain, and imports neither TensorFlow nor Beam::

    from dcm2tfrecord import reader

    ds = reader.load("/data/ct_tfr", split="train", batch_size=32)
    ds = reader.load("/data/ct_tfr", options=reader.ReadOptions(split="train", seed=1))
    meta = reader.info("/data/ct_tfr")       # dataset.json, plus num_records(),
                                             # steps_per_epoch(), class_names, element_spec
    records = reader.RandomAccess("/data/ct_tfr", "train")    # len(), [i] -> dict of arrays
    val = reader.load("/data/ct_tfr", split="train[-10%:]")   # TFDS split slicing (reader.splits)
    for images, labels in reader.as_numpy(val): ...          # NumPy batches
    lps = reader.geometry.affine(records[0])                 # voxel [k, j, i] -> LPS mm
    loader = reader.torch_loader(records, 32, seed=0)        # or reader.grain_loader(records, 32)
    patches = reader.PatchSampler("/data/ct_tfr", "train", size=(96, 96, 96))   # [i] -> image, mask patch
    batches = reader.patches("/data/ct_tfr", "train", (96, 96, 96), batch_size=2)  # tf.data

TensorFlow is imported on first use of ``load``, ``info``, ``parse_fn``,
``as_numpy`` or ``DatasetInfo``, not by ``from dcm2tfrecord import reader``.
"""
from dcm2tfrecord.dataset.errors import CorruptDataError, Dcm2TfrecordError, FormatError
from dcm2tfrecord.dataset.manifest import ManifestError
from dcm2tfrecord.dataset.versions import DamagedLatest
from dcm2tfrecord.reader import geometry, intensity
from dcm2tfrecord.reader.options import ReadOptions
from dcm2tfrecord.reader.loaders import RecordSampler, grain_loader, numpy_collate, torch_loader
from dcm2tfrecord.reader.random_access import CorruptIndexError, CorruptRecordError, RandomAccess
from dcm2tfrecord.reader.schedule import ElasticSampler
from dcm2tfrecord.reader.patch_sampler import PatchSampler, grain_patches, patches, torch_patches

__all__ = ["load", "info", "parse_fn", "as_numpy", "DatasetInfo", "ReadOptions", "RandomAccess",
           # RandomAccess in PyTorch and Grain without their defaults' costs (import torch or
           # grain when called, not before)
           "torch_loader", "numpy_collate", "grain_loader", "RecordSampler",
           "ElasticSampler",   # a rank's share of a global order: resume on another world size
           # balanced, seeded, resumable image and mask patches (NumPy; tf.data, torch, Grain fronts)
           "PatchSampler", "patches", "torch_patches", "grain_patches",
           "geometry",      # a record's affine in NIfTI's and ITK's conventions, 4-D records' volumes
           "intensity",     # a record's intensities back from convert --intensity zscore
           # what the readers raise: a dataset.json that does not parse (ManifestError), a
           # LATEST naming no committed version (DamagedLatest), damaged shard or index bytes
           # (CorruptRecordError, CorruptIndexError); their groups; the base of them all
           "ManifestError", "DamagedLatest", "CorruptRecordError", "CorruptIndexError",
           "FormatError", "CorruptDataError", "Dcm2TfrecordError"]

_LAZY = {"load": ".tfdata", "parse_fn": ".tfdata", "as_numpy": ".arrays",
         "info": ".manifest", "DatasetInfo": ".manifest"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
