"""dataset/png.py: a record's pixels as one PNG image, read back by NumPy alone and by
independent decoders (imagecodecs, Pillow, tf.io.decode_png)."""
from __future__ import annotations

import io

import imagecodecs
import numpy as np
import pytest
from PIL import Image

from dcm2tfrecord.dataset import png

SHAPES = [(1, 5, 7, 1), (1, 4, 3, 3), (3, 6, 5, 1), (1, 2, 2, 2), (2, 3, 4, 4), (1, 1, 1, 1)]


def _random(dtype: str, shape, seed=0) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)


def _bits(pixels: np.ndarray) -> np.ndarray:
    """What a PNG decoder returns for them: the unsigned samples, frames stacked as rows."""
    d, h, w, c = pixels.shape
    return pixels.view(np.uint16 if pixels.itemsize == 2 else np.uint8).reshape(d * h, w, c)


@pytest.mark.parametrize("dtype", png.DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_every_dtype_and_channel_count_round_trips_and_other_decoders_agree(dtype, shape):
    import tensorflow as tf
    pixels = _random(dtype, shape)
    data = png.encode(pixels)
    back = png.decode(data, shape, dtype)
    assert back.dtype == np.dtype(dtype) and np.array_equal(back, pixels)
    bits = _bits(pixels)
    assert np.array_equal(imagecodecs.png_decode(data).reshape(bits.shape), bits)
    decoded = tf.io.decode_png(data, channels=0, dtype=tf.uint16 if pixels.itemsize == 2 else tf.uint8)
    assert np.array_equal(decoded.numpy(), bits)
    if shape[-1] == 1 or pixels.itemsize == 1:          # Pillow reads 16-bit colour as 8-bit
        with Image.open(io.BytesIO(data)) as image:
            assert np.array_equal(np.asarray(image).reshape(bits.shape).astype(bits.dtype), bits)


def test_the_same_pixels_give_the_same_bytes_whatever_their_byte_order_or_layout():
    pixels = _random("int16", (2, 8, 9, 1), seed=3)
    data = png.encode(pixels)
    assert png.encode(pixels.astype(">i2")) == data
    assert png.encode(np.asfortranarray(pixels)) == data
    assert data.startswith(png.SIGNATURE) and data.endswith(b"IEND\xaeB`\x82")


@pytest.mark.parametrize("dtype, channels, said", [
    ("float32", 1, "float32"), ("uint32", 1, "uint32"), ("int64", 1, "int64"), ("bool", 1, "bool"),
    ("uint8", 5, "5 channels"),
])
def test_what_no_png_holds_is_refused_naming_why(dtype, channels, said):
    pixels = np.zeros((1, 2, 2, channels), dtype)
    assert said in png.refusal(pixels.dtype, channels)
    with pytest.raises(png.NotEncodable, match=said):
        png.encode(pixels)


def test_a_damaged_or_mismatched_png_is_a_value_error_saying_what():
    pixels = _random("uint16", (1, 6, 4, 1))
    data = png.encode(pixels)
    with pytest.raises(ValueError, match="6x4|4x6"):
        png.decode(data, (1, 4, 6, 1), "uint16")
    with pytest.raises(ValueError, match="8-bit|16-bit"):
        png.decode(data, (1, 6, 4, 1), "uint8")
    with pytest.raises(ValueError, match="cut short"):
        png.decode(data[:-30], (1, 6, 4, 1), "uint16")
    flipped = bytearray(data)
    flipped[40] ^= 0xFF                       # inside IDAT
    with pytest.raises(ValueError, match="CRC"):
        png.decode(bytes(flipped), (1, 6, 4, 1), "uint16")
    with pytest.raises(ValueError, match="signature"):
        png.decode(b"GIF89a" + data[6:], (1, 6, 4, 1), "uint16")
    with pytest.raises(ValueError, match="float32"):
        png.decode(data, (1, 6, 4, 1), "float32")


@pytest.mark.parametrize("mode, dtype, channels", [("L", "uint8", 1), ("RGB", "uint8", 3), ("I;16", "uint16", 1)])
def test_another_writers_png_is_left_to_an_image_library(mode, dtype, channels):
    """Pillow's writer picks its own filters per row (not just Up): decode says it is another
    tool's (RandomAccess then reads it with Pillow, as before --pixel_encoding png)."""
    pixels = _random(dtype, (1, 9, 11, channels), seed=5)
    image = Image.fromarray(pixels[0, :, :, 0] if channels == 1 else pixels[0])
    assert image.mode == mode
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", optimize=True)
    with pytest.raises(png.ForeignPng, match="row filters"):
        png.decode(buffer.getvalue(), pixels.shape, dtype)
