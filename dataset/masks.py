"""The mask format rule, owned once: a record's mask dtype and channel count from its layout and class count.

A ``--class_map`` record holds ``mask_raw``: ``[depth, height, width, mask_channels]`` of
``mask_dtype`` (dataset/features.py). Both follow from the layout (dataset.json's
``options.mask_layout``) and the number of classes (``mask_classes``):

- ``label_map``: one channel of class indices (0 background), uint8, uint16 past 255 classes;
- ``binary``: one uint8 channel of 0/1 per class.

The writer (transforms/masks/classes.Canvas), the reader (reader/layout.py), TFDS's metadata
(dataset/tfds_metadata.py) and ``verify`` (dataset/verify_records.py) all ask this module;
none restates the rule. The layout names are spelled here, as the format records them;
transforms/masks' ``MaskLayout`` choice takes its values from these.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

LABEL_MAP = "label_map"
BINARY = "binary"
LAYOUTS = (LABEL_MAP, BINARY)

LABEL_MAP_LIMIT = 256      # a label map of this many classes or more is uint16


def mask_dtype(layout: str, class_count: int) -> str:
    """The numpy dtype of a record's mask: label_map class indices in uint8 (uint16 past 255
    classes), binary channels in uint8."""
    return "uint16" if layout == LABEL_MAP and class_count >= LABEL_MAP_LIMIT else "uint8"


def mask_channels(layout: str, class_count: int) -> int:
    """The channels of a record's mask: one for a label map, one per class for binary masks."""
    return 1 if layout == LABEL_MAP else class_count


def stored_dtypes(class_count: int) -> set[str]:
    """The dtypes a mask of ``class_count`` classes may be stored in, whatever its layout."""
    return {mask_dtype(layout, class_count) for layout in LAYOUTS}


def read_dtype(class_count: int) -> str:
    """The one dtype masks of ``class_count`` classes are read in, whatever their layout: the widest
    they may be stored in (binary masks of 256 classes or more, uint8 as stored, read as uint16)."""
    return max(stored_dtypes(class_count), key=lambda name: int(name[4:]))


def known_channels(layout: Optional[str], class_count: int) -> Optional[int]:
    """The channels every mask of a dataset has, where its layout says (None: unknown layout)."""
    return mask_channels(layout, class_count) if layout in LAYOUTS else None


def shared_channels(class_count: int) -> Optional[int]:
    """The channels every mask has in either layout: one for one class, else unknown (None)."""
    return 1 if class_count == 1 else None


def class_voxels(mask: np.ndarray, klass: int) -> np.ndarray:
    """The voxels of class ``klass`` (1-based) of a mask ``[..., channels]`` as booleans ``[...]``,
    in either layout: one channel holds class indices (a label map, or binary masks of one class,
    whose 0/1 is the same thing), more channels hold one 0/1 channel per class."""
    if mask.shape[-1] == 1:
        return mask[..., 0] == klass
    return mask[..., klass - 1] != 0


def box(selected: np.ndarray) -> list[int]:
    """The half-open ``[k0, k1, j0, j1, i0, i1]`` of the true voxels of a ``[d, h, w]`` array; zeros
    when none is."""
    out: list[int] = []
    for axis in range(3):
        hits = np.flatnonzero(selected.any(axis=tuple(a for a in range(3) if a != axis)))
        if not hits.size:
            return [0] * 6
        out += [int(hits[0]), int(hits[-1]) + 1]
    return out
