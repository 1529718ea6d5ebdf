"""Resizing and channel conversion on (D, H, W, C) arrays of any dtype.

Downsampling uses area averaging (Pillow's BOX filter on float32 planes), so
thin structures are averaged rather than aliased; upsampling is bilinear.
Integer outputs are rounded and clipped back into their dtype.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np
from PIL import Image

from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.transforms.record_model import ImageSpec


class ResizeMode(StrEnum):
    """``--resize_mode``: how an image meets the --resize size (:func:`resize`)."""
    STRETCH = "stretch"
    PAD = "pad"         # keep the aspect, pad
    CROP = "crop"       # keep the aspect, centre crop


class Channels(StrEnum):
    """``--channels`` (:func:`convert_channels`)."""
    KEEP = "keep"
    ONE = "1"           # RGB -> BT.601 luma
    THREE = "3"         # gray repeated


# ITU-R BT.601 luma, the weights Pillow uses for RGB -> L.
_LUMA = np.array([0.299, 0.587, 0.114])


def parse_resize(text: str) -> tuple[int, int]:
    parts = text.lower().replace(" ", "").split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"--resize {text!r}: expected HEIGHTxWIDTH, e.g. 512x512")
    if not all(int(p) > 0 for p in parts):
        raise ValueError(f"--resize {text!r}: height and width must be at least 1, e.g. 512x512")
    return int(parts[0]), int(parts[1])


def _scaled_size(height: int, width: int, target: tuple[int, int], mode: str) -> tuple[int, int]:
    th, tw = target
    if mode == ResizeMode.STRETCH:
        return th, tw
    scale = min(th / height, tw / width) if mode == ResizeMode.PAD else max(th / height, tw / width)
    return max(1, round(height * scale)), max(1, round(width * scale))


def plan_spec(spec: ImageSpec, resize: Optional[tuple[int, int]], channels: str) -> ImageSpec:
    """The spec after geometry: what the record will hold."""
    out = spec
    if resize is not None:
        out = dataclasses.replace(out, height=resize[0], width=resize[1])
    if channels != Channels.KEEP:
        out = dataclasses.replace(out, channels=int(channels))
        if int(channels) == 1 and spec.channels == 3 and np.dtype(spec.dtype).kind in "iu":
            out = dataclasses.replace(out, dtype=spec.dtype)
    return out


def _resize_plane(plane: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    height, width = size
    image = Image.fromarray(plane.astype(np.float32), mode="F")
    downsampling = height <= plane.shape[0] and width <= plane.shape[1]
    method = Image.Resampling.BOX if downsampling else Image.Resampling.BILINEAR
    return np.asarray(image.resize((width, height), method), dtype=np.float32)


def _cast_like(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        # float64: float32 rounds 2**32 - 1 up to 2**32, which no uint32 holds
        return np.clip(np.rint(values.astype(np.float64)), info.min, info.max).astype(dtype)
    return values.astype(dtype)


def placement(size: tuple[int, int], target: tuple[int, int], mode: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the scaled size, where it lies in the output: (top, left), negative for a crop) of a
    ``size`` image resized to ``target`` (what ``resize`` does, for the record's affine)."""
    if tuple(size) == tuple(target):
        return tuple(size), (0, 0)  # type: ignore[return-value]
    sh, sw = _scaled_size(size[0], size[1], target, mode)
    th, tw = target
    if mode == ResizeMode.PAD:
        return (sh, sw), ((th - sh) // 2, (tw - sw) // 2)
    if mode == ResizeMode.CROP:
        return (sh, sw), (-((sh - th) // 2), -((sw - tw) // 2))
    return (sh, sw), (0, 0)


def resize(arr: np.ndarray, target: tuple[int, int], mode: str = ResizeMode.STRETCH) -> np.ndarray:
    """(D, H, W, C) -> (D, th, tw, C); pad fills with the image minimum, crop is centred."""
    depth, height, width, channels = arr.shape
    if (height, width) == tuple(target):
        return arr
    sh, sw = _scaled_size(height, width, target, mode)
    scaled = np.empty((depth, sh, sw, channels), dtype=np.float32)
    for d in range(depth):
        for c in range(channels):
            scaled[d, :, :, c] = _resize_plane(arr[d, :, :, c], (sh, sw))
    th, tw = target
    if mode == ResizeMode.PAD:
        fill = float(arr.min()) if arr.size else 0.0
        out = np.full((depth, th, tw, channels), fill, dtype=np.float32)
        top, left = (th - sh) // 2, (tw - sw) // 2
        out[:, top:top + sh, left:left + sw, :] = scaled
    elif mode == ResizeMode.CROP:
        top, left = (sh - th) // 2, (sw - tw) // 2
        out = scaled[:, top:top + th, left:left + tw, :]
    else:
        out = scaled
    return np.ascontiguousarray(_cast_like(out, arr.dtype))


def resize_nearest(arr: np.ndarray, target: tuple[int, int], mode: str = ResizeMode.STRETCH) -> np.ndarray:
    """``resize`` for a mask: nearest neighbour (class indices never blend), on the same placement
    (``placement``), a pad filled with 0 (background)."""
    depth, height, width, channels = arr.shape
    if (height, width) == tuple(target):
        return arr
    (sh, sw), (top, left) = placement((height, width), target, mode)
    scaled = np.empty((depth, sh, sw, channels), dtype=arr.dtype)
    for d in range(depth):
        for c in range(channels):
            plane = Image.fromarray(arr[d, :, :, c].astype(np.int32), mode="I")
            scaled[d, :, :, c] = np.asarray(plane.resize((sw, sh), Image.Resampling.NEAREST)).astype(arr.dtype)
    th, tw = target
    out = np.zeros((depth, th, tw, channels), dtype=arr.dtype)
    rows = slice(max(top, 0), max(top, 0) + min(sh, th))
    cols = slice(max(left, 0), max(left, 0) + min(sw, tw))
    src_rows = slice(max(-top, 0), max(-top, 0) + min(sh, th))
    src_cols = slice(max(-left, 0), max(-left, 0) + min(sw, tw))
    out[:, rows, cols, :] = scaled[:, src_rows, src_cols, :]
    return np.ascontiguousarray(out)


def convert_channels(arr: np.ndarray, channels: str) -> np.ndarray:
    """'keep', '1' (RGB -> BT.601 luma) or '3' (gray repeated)."""
    if channels == Channels.KEEP or arr.shape[-1] == int(channels):
        return arr
    if channels == Channels.ONE:
        luma = np.tensordot(arr[..., :3].astype(np.float64), _LUMA, axes=([-1], [0]))[..., None]
        return np.ascontiguousarray(_cast_like(luma, arr.dtype))
    return np.ascontiguousarray(np.repeat(arr[..., :1], 3, axis=-1))
