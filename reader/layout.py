"""A split's record layout from dataset.json, without TensorFlow.

What ``reader.load`` (through ``reader.parse_spec``) and ``reader.RandomAccess``
both need to know before reading: the stored dtypes, the common dtype images
come out in, whether records are volumes, the shape all records share.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from dcm2tfrecord.dataset import masks
from dcm2tfrecord.dataset.features import (CHANNELS, DEPTH, DTYPE, ENCODING_RAW, HEIGHT, IMAGE_RAW, LABEL,
                                           MASK_CHANNELS, MASK_DTYPE, MASK_RAW, SHAPE_FEATURES,
                                           WIDTH)
from dcm2tfrecord.dataset.manifest import Manifest, SplitEntry

__all__ = ["DEFAULT_LABEL", "IMAGE_ENCODINGS", "MASK_FEATURES", "MISSING", "RAW", "REQUIRED", "SHAPE_FEATURES",
           "Layout", "common_dtype", "mask_classes", "mask_dtype", "require_masks", "split_layout"]

RAW = ENCODING_RAW
IMAGE_ENCODINGS = ("png", "jpeg")

# Features every record carries; the reader fails loudly when one is missing.
REQUIRED = (IMAGE_RAW, LABEL, DEPTH, HEIGHT, WIDTH, CHANNELS, DTYPE)
MISSING = {"bytes": b"", "int64": -1, "float": float("nan")}
DEFAULT_LABEL = {"dtype": "int64", "shape": []}
# A --class_map record's mask: [depth, height, width, mask_channels] of mask_dtype.
MASK_FEATURES = (MASK_RAW, MASK_DTYPE, MASK_CHANNELS)


@dataclasses.dataclass(frozen=True)
class Layout:
    """Record layout of one split."""
    split: str
    stored_dtypes: tuple[str, ...]
    dtype: str                                # dtype images come out in, before any conversion
    volume: bool                              # any record with depth > 1: images are 5-D
    fixed_shape: Optional[tuple[int, ...]]    # (depth, height, width, channels) shared by all
    known_dims: tuple[Optional[int], ...]     # static sizes the manifest guarantees, else None
    encoding: str
    num_records: int

    @property
    def batchable(self) -> bool:
        """Records stack into a batch without padding."""
        return self.fixed_shape is not None

    @property
    def vectorized(self) -> bool:
        """One ``decode_raw`` decodes a whole batch: one shape, one dtype, raw pixels."""
        return self.batchable and len(self.stored_dtypes) == 1 and self.encoding == RAW

    def image_shape(self) -> list[Optional[int]]:
        """Per-record image shape: ``[d, h, w, c]`` for volumes, else ``[h, w, c]``."""
        dims = list(self.known_dims)
        return dims if self.volume else dims[1:]

    def variable_size_error(self, shapes: list) -> ValueError:
        return ValueError(
            f"split {self.split!r} holds images of several shapes [depth, height, width, "
            f"channels] (e.g. {shapes[:3]}) and cannot be stacked into "
            "batches: convert with --resize HxW so that all records share one size (with "
            "--channels 1|3 for mixed gray/colour, --frames split for volumes of several "
            "depths), or load with pad=True (zero-padded to the largest image of each batch) "
            "or batch_size=1")


def common_dtype(dtypes) -> str:
    """The stored dtype, or for mixed splits the smallest dtype that holds all values exactly."""
    dtypes = list(dtypes)
    if not dtypes:
        return "uint8"
    return np.result_type(*[np.dtype(d) for d in dtypes]).name


def _known_dims(entry: SplitEntry) -> tuple[Optional[int], ...]:
    """Static (depth, height, width, channels) where the manifest guarantees them.

    The listed shapes are a capped sample when there are several, so apart from
    a single shape only ``max_depth`` (over all records) fixes a dimension.
    """
    if entry.fixed_shape and entry.shapes:
        return tuple(entry.shapes[0])
    return (1 if entry.max_depth == 1 else None, None, None, None)


def split_layout(manifest: Manifest, split: str, entry: SplitEntry) -> Layout:
    encoding = str(manifest.feature(IMAGE_RAW).get("encoding", RAW))
    if encoding != RAW and encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"image_raw encoding {encoding!r} is not one this reader decodes "
                         f"({RAW}, {', '.join(IMAGE_ENCODINGS)})")
    stored = entry.dtypes or ("uint8",)
    fixed = tuple(entry.shapes[0]) if entry.fixed_shape and entry.shapes else None
    volume = entry.max_depth > 1
    if volume and encoding == "jpeg":
        raise ValueError(f"split {split!r} holds volumes, which {encoding} encoding cannot store")
    return Layout(split=split, stored_dtypes=stored, dtype=common_dtype(stored), volume=volume,
                  fixed_shape=fixed, known_dims=_known_dims(entry), encoding=encoding,
                  num_records=entry.num_records)


def mask_classes(manifest: Manifest) -> list[str]:
    """dataset.json's ``mask_classes``, index 1 first: label_map value ``i`` is ``mask_classes[i - 1]``
    (0 background), binary channel ``c`` is ``mask_classes[c]``; empty without masks."""
    return list(manifest.mask_classes or ())


def require_masks(manifest: Manifest, dataset_dir: str) -> None:
    """A one-line ValueError when the dataset's records hold no masks."""
    if not manifest.has_masks:
        raise ValueError(f"{dataset_dir} has no masks (dataset.json declares no {MASK_RAW!r} feature): "
                         "masks=True needs a dataset converted with --unit series --class_map FILE")


def mask_dtype(manifest: Manifest) -> str:
    """The dtype masks come out in: uint8, unless 256 classes or more may make label maps uint16
    (binary masks of so many classes, uint8 as stored, then read as uint16 too; dataset/masks.py)."""
    return masks.read_dtype(len(mask_classes(manifest)))
