"""Value-of-interest windowing, PS3.3 C.11.2.1.2 (Window Center/Width, VOI LUT).

Windowing maps modality values (e.g. Hounsfield units) to display values:
the output is uint8 (0..255) or uint16 (0..65535), and MONOCHROME1 images
(PS3.3 C.7.6.3.1.2: minimum value is white) are inverted so that bright
always means dense.
"""
from __future__ import annotations

import enum
from typing import Optional

import numpy as np
from pydicom.dataset import Dataset


class WindowBits(enum.IntEnum):
    """``--window_bits``: the output of a window, uint8 or uint16 (:func:`apply_window`)."""
    EIGHT = 8
    SIXTEEN = 16


# Common radiology presets: (center, width) in Hounsfield units.
PRESETS = {
    "lung": (-600.0, 1500.0),
    "mediastinum": (50.0, 350.0),
    "bone": (400.0, 1800.0),
    "brain": (40.0, 80.0),
    "abdomen": (40.0, 400.0),
    "liver": (60.0, 160.0),
}


def parse_window(text: str) -> tuple[float, float] | str:
    """``"C,W"`` -> (center, width); a preset name stays a name. Raises ValueError."""
    name = text.strip().lower()
    if name in PRESETS:
        return name
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"--window {text!r}: expected CENTER,WIDTH or one of {', '.join(PRESETS)}")
    try:
        center, width = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"--window {text!r}: CENTER and WIDTH must be numbers, or use a preset "
                         f"({', '.join(PRESETS)})") from None
    if width < 1:
        raise ValueError(f"--window {text!r}: width must be >= 1")
    return center, width


def linear_window(values: np.ndarray, center: float, width: float, bits: int = 8) -> np.ndarray:
    """PS3.3 C.11.2.1.2.1, LINEAR:

    x <= c - 0.5 - (w-1)/2        -> y_min
    x >  c - 0.5 + (w-1)/2        -> y_max
    else y = ((x - (c - 0.5)) / (w - 1) + 0.5) * (y_max - y_min) + y_min
    rounded to the nearest integer.
    """
    y_max = (1 << bits) - 1
    x = values.astype(np.float64)
    if width <= 1:
        y = np.where(x < center - 0.5, 0.0, float(y_max))
    else:
        y = ((x - (center - 0.5)) / (width - 1) + 0.5) * y_max
        y = np.where(x <= center - 0.5 - (width - 1) / 2, 0.0, y)
        y = np.where(x > center - 0.5 + (width - 1) / 2, float(y_max), y)
    return np.clip(np.rint(y), 0, y_max).astype(np.uint8 if bits == 8 else np.uint16)


def _first(value) -> float:
    try:
        return float(value[0])
    except TypeError:
        return float(value)


def file_window(ds: Dataset) -> Optional[tuple[float, float]]:
    """The dataset's first Window Center/Width pair, if any."""
    center, width = ds.get("WindowCenter"), ds.get("WindowWidth")
    if center is None or width is None or center == "" or width == "":
        return None
    return _first(center), _first(width)


def resolve_window(ds: Dataset, requested) -> tuple[str, Optional[tuple[float, float]]]:
    """Which VOI to apply: ("explicit"|"preset"|"lut"|"file"|"auto", (center, width))."""
    if isinstance(requested, str):
        return "preset", PRESETS[requested]
    if requested is not None:
        return "explicit", tuple(requested)
    if "VOILUTSequence" in ds:
        return "lut", None
    found = file_window(ds)
    if found is not None:
        return "file", found
    return "auto", None


def apply_window(values: np.ndarray, ds: Dataset, requested, bits: int = 8) -> tuple[np.ndarray, dict]:
    """Windowed display values and a description of the window used."""
    source, window = resolve_window(ds, requested)
    if source == "lut":
        from pydicom.pixels import apply_voi_lut
        descriptor = ds.VOILUTSequence[0].LUTDescriptor
        lut_bits = int(descriptor[2]) or 16
        mapped = apply_voi_lut(values, ds, index=0, prefer_lut=True).astype(np.float64)
        top = float((1 << lut_bits) - 1)
        y_max = (1 << bits) - 1
        out: np.ndarray = np.clip(np.rint(mapped / top * y_max), 0, y_max).astype(np.uint8 if bits == 8 else np.uint16)
        used = {"source": "lut", "center": 0.0, "width": 0.0}
    else:
        if source == "auto":
            lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
            window = ((lo + hi + 1) / 2, max(hi - lo + 1, 2.0))
        assert window is not None     # resolve_window: a window for every source but lut and auto
        out = linear_window(values, window[0], window[1], bits)
        used = {"source": source, "center": float(window[0]), "width": float(window[1])}
    if str(ds.get("PhotometricInterpretation", "")).upper() == "MONOCHROME1":
        out = (np.iinfo(out.dtype).max - out).astype(out.dtype)
    return out, used
