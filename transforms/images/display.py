"""Display-ready uint8 pixels from stored values, for previews (``dcm2tfrecord preview``).

Values that are not display-ready (DICOM modality or stored values, 16-bit
and float images) go through an automatic window from the 1st to the 99th
percentile of the image; MONOCHROME1 is inverted (PS3.3 C.7.6.3.1.2) unless
the converter windowed it already.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dcm2tfrecord.dataset.features import CHANNELS, DTYPE, FORMAT, SHAPE_FEATURES, RecordKind

PERCENTILES = (1.0, 99.0)


def text(value) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def display_image(image: np.ndarray, record: Mapping, windowed: bool = False) -> np.ndarray:
    """One record as a displayable ``[h, w, 3]`` uint8 array.

    ``image`` is ``[h, w, c]`` or ``[d, h, w, c]`` (zero-padded in mixed
    splits: the record's own depth/height/width/channels crop it). ``windowed``:
    the converter applied a VOI window already (--dicom_values window).
    """
    pixels = shown_slice(image, record, int(record.get(CHANNELS, 0)))
    if pixels.shape[-1] >= 3:
        pixels = pixels[..., :3]                                  # RGB; alpha dropped
    else:
        pixels = pixels[..., :1]
    stored = text(record.get(DTYPE, pixels.dtype.name)) or pixels.dtype.name
    grayscale_dicom = text(record.get(FORMAT, b"")) == RecordKind.DICOM and pixels.shape[-1] == 1
    if stored == "uint8" and (windowed or not grayscale_dicom):
        out = pixels.astype(np.uint8)
    elif windowed and stored == "uint16":
        out = (pixels.astype(np.float64) / 257.0).round().astype(np.uint8)
    else:
        out = auto_window(pixels)
    photometric = text(record.get("dicom/photometric_interpretation", b"")).upper()
    if photometric == "MONOCHROME1" and not windowed:
        out = 255 - out
    return np.repeat(out, 3, axis=-1) if out.shape[-1] == 1 else out


def shown_slice(pixels: np.ndarray, record: Mapping, channels: int) -> np.ndarray:
    """The ``[h, w, c]`` a preview shows of ``pixels`` (``[h, w, c]`` or ``[d, h, w, c]``, an
    image or its mask): a volume's middle slice, cropped to the record's own height and width
    and to ``channels`` (zero-padded in mixed splits)."""
    depth, height, width, _ = (int(record.get(k, 0)) for k in SHAPE_FEATURES)
    pixels = np.asarray(pixels)
    if pixels.ndim == 4:
        pixels = pixels[max(depth, 1) // 2]                       # the middle slice
    return pixels[:height or None, :width or None, :channels or None]


def auto_window(pixels: np.ndarray) -> np.ndarray:
    """Percentile window to uint8: the 1st..99th percentile spread over 0..255."""
    values = pixels.astype(np.float64)
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return np.zeros(pixels.shape, np.uint8)
    low, high = np.percentile(finite, PERCENTILES)
    if high <= low:
        low, high = finite.min(), finite.max()
    if high <= low:
        return np.full(pixels.shape, 128 if finite.size else 0, np.uint8)
    scaled = (np.nan_to_num(values, nan=low) - low) * (255.0 / (high - low))
    return np.clip(scaled, 0, 255).round().astype(np.uint8)
