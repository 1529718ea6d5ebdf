"""Mask outlines over a preview thumbnail (``dcm2tfrecord preview`` of a --class_map dataset).

A record's mask (``[d, h, w, mask_channels]``: one label-map channel of class indices, 0
background, or one 0/1 channel per class) becomes one region per class on the slice the
preview shows; each region is scaled to the thumbnail by nearest neighbour (so it stays on
the pixels of the image it annotates) and its boundary (the region less its 4-neighbour
erosion: an 8-connected line one thumbnail pixel wide, closed along the image's edge) is
painted in the class's colour. Colours are saturated, so never a grey an image could hold.
"""
from __future__ import annotations

import colorsys
from typing import Mapping, Sequence

import numpy as np

from dcm2tfrecord.dataset.features import MASK_CHANNELS
from dcm2tfrecord.transforms.images.display import shown_slice

# class 1, 2, ... : fixed, distinct, none grey; after these, hues a golden angle apart
PALETTE = ((255, 48, 48), (48, 220, 48), (64, 128, 255), (255, 210, 0), (230, 64, 230),
           (0, 220, 220), (255, 140, 0), (160, 96, 255), (150, 255, 120), (255, 110, 170))
_GOLDEN = 0.6180339887498949


def class_colour(index: int) -> tuple[int, int, int]:
    """The RGB colour of mask class ``index`` (0 = the first of ``mask_classes``), the same in every sheet."""
    if index < len(PALETTE):
        return PALETTE[index]
    hue = (index - len(PALETTE)) * _GOLDEN % 1.0
    value = (1.0, 0.8)[(index - len(PALETTE)) // 7 % 2]
    red, green, blue = colorsys.hsv_to_rgb(hue, 1.0, value)
    return round(red * 255), round(green * 255), round(blue * 255)


def class_regions(mask: np.ndarray, record: Mapping, classes: int) -> np.ndarray:
    """``[classes, h, w]`` bool: each class's pixels on the slice a preview shows of ``record``
    (``mask`` as the reader returns it: ``[h, w, c]`` or ``[d, h, w, c]``, maybe zero-padded).
    One channel is a label map (value ``i`` is class ``i - 1``); else channel ``c`` is class ``c``."""
    shown = shown_slice(mask, record, int(record.get(MASK_CHANNELS, 0)))
    if shown.shape[-1] == 1:
        return shown[None, ..., 0] == np.arange(1, classes + 1).reshape(classes, 1, 1)
    return np.moveaxis(shown[..., :classes] != 0, -1, 0)


def boundary(region: np.ndarray) -> np.ndarray:
    """The pixels of ``region`` ([h, w] bool) with a 4-neighbour outside it (or on the edge):
    the region XOR its erosion by a cross."""
    padded = np.pad(region, 1, constant_values=False)
    eroded = (padded[1:-1, 1:-1] & padded[:-2, 1:-1] & padded[2:, 1:-1]
              & padded[1:-1, :-2] & padded[1:-1, 2:])
    return region & ~eroded


def scaled(region: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``region`` ([h, w] bool) at ``size`` (width, height) by nearest neighbour, as Pillow
    places a thumbnail's pixels."""
    from PIL import Image
    width, height = size
    if region.shape == (height, width):
        return region
    image = Image.fromarray(region.astype(np.uint8) * 255)
    return np.asarray(image.resize((width, height), Image.Resampling.NEAREST)) > 0


def draw_outlines(thumbnail: np.ndarray, regions: Sequence[np.ndarray] | np.ndarray) -> np.ndarray:
    """``thumbnail`` ([H, W, 3] uint8) with the boundary of each region (at the image's size,
    scaled to the thumbnail's) in its class colour; the first class drawn last, on top."""
    out = np.array(thumbnail, dtype=np.uint8, copy=True)
    size = (out.shape[1], out.shape[0])
    for index in range(len(regions) - 1, -1, -1):
        region = np.asarray(regions[index], dtype=bool)
        if region.any():
            out[boundary(scaled(region, size))] = class_colour(index)
    return out
