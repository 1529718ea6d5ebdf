"""dataset/masks.py: the mask dtype and channel rule, owned once, and asked by the writer, the reader
and TFDS's metadata instead of each restating it."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.dataset import masks
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.reader import layout as reader_layout


@pytest.mark.parametrize("classes,label_map,binary", [(1, "uint8", "uint8"), (255, "uint8", "uint8"),
                                                       (256, "uint16", "uint8"), (300, "uint16", "uint8")])
def test_the_dtype_of_a_mask_by_layout_and_class_count(classes, label_map, binary):
    assert masks.mask_dtype(masks.LABEL_MAP, classes) == label_map
    assert masks.mask_dtype(masks.BINARY, classes) == binary
    assert masks.stored_dtypes(classes) == {label_map, binary}
    # read in the widest it may be stored in, whatever the layout
    assert masks.read_dtype(classes) == label_map


def test_the_channels_of_a_mask_by_layout_and_class_count():
    assert masks.mask_channels(masks.LABEL_MAP, 7) == 1 and masks.mask_channels(masks.BINARY, 7) == 7
    assert masks.known_channels(masks.BINARY, 7) == 7 and masks.known_channels(None, 7) is None
    assert masks.known_channels("something else", 7) is None
    assert masks.shared_channels(1) == 1 and masks.shared_channels(2) is None


def _manifest(classes: int) -> Manifest:
    return Manifest(splits={}, mask_classes=tuple(f"c{i}" for i in range(classes)))


@pytest.mark.parametrize("classes", [1, 255, 256])
def test_the_reader_and_the_writer_follow_the_rule(classes):
    from dcm2tfrecord.transforms.masks.classes import Canvas
    assert reader_layout.mask_dtype(_manifest(classes)) == masks.read_dtype(classes)
    for layout in masks.LAYOUTS:
        drawn = Canvas((1, 2, 2), classes, layout).array
        assert drawn.dtype == np.dtype(masks.mask_dtype(layout, classes))
        assert drawn.shape[-1] == masks.mask_channels(layout, classes)
