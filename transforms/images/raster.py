"""PNG, JPEG, BMP, TIFF, GIF and WebP through Pillow.

Grayscale stays one channel, colour becomes RGB (alpha dropped), 16-bit
PNGs stay uint16. Only the first frame of animated or multi-page files is
converted.
"""
from __future__ import annotations

from typing import BinaryIO

import numpy as np
from PIL import Image

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.record_model import ImageSpec

# We enforce --max_pixels ourselves, from the header, before any allocation.
Image.MAX_IMAGE_PIXELS = None

_GRAY_UINT8 = {"L", "1", "LA", "La"}
_GRAY_WIDE = {"I;16": "uint16", "I;16L": "uint16", "I;16B": "uint16", "I;16N": "uint16",
              "I": "int32", "F": "float32"}


def target_mode(image: Image.Image) -> tuple[str, str, int]:
    """(Pillow mode to convert to, numpy dtype, channels) for an opened image."""
    mode = image.mode
    if mode in _GRAY_WIDE:
        return mode, _GRAY_WIDE[mode], 1
    if mode in _GRAY_UINT8:
        return "L", "uint8", 1
    if mode == "P" and image.palette is not None and image.palette.mode == "L":
        return "L", "uint8", 1
    return "RGB", "uint8", 3


def open_image(fileobj: BinaryIO) -> Image.Image:
    try:
        return Image.open(fileobj)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_IMAGE, f"Pillow cannot open it: {exc}") from exc


def image_spec(image: Image.Image) -> ImageSpec:
    _, dtype, channels = target_mode(image)
    width, height = image.size
    return ImageSpec(depth=1, height=height, width=width, channels=channels, dtype=dtype)


def to_array(image: Image.Image) -> np.ndarray:
    """Decodes the first frame into a (1, H, W, C) little-endian array."""
    mode, dtype, channels = target_mode(image)
    try:
        image.seek(0)
        image.load()
        converted = image if image.mode == mode else image.convert(mode)
        arr = np.asarray(converted)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_IMAGE, f"decoding failed: {exc}") from exc
    arr = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<"))
    return arr.reshape(1, arr.shape[0], arr.shape[1], channels)


def decode_image(fileobj: BinaryIO) -> np.ndarray:
    return to_array(open_image(fileobj))
