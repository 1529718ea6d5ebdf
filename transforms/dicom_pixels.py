"""DICOM pixel decoding and the modality LUT.

pydicom decodes every transfer syntax its handlers and the pylibjpeg plugins
support; colour spaces are converted to RGB by pydicom (PS3.3 C.7.6.3.1.2).
The modality LUT (PS3.3 C.11.1: Rescale Slope/Intercept or Modality LUT
Sequence) is applied to grayscale images only, as the standard defines it.
"""
from __future__ import annotations

import warnings
from typing import BinaryIO

import numpy as np
import pydicom
from pydicom.dataset import Dataset
from pydicom.pixels import apply_modality_lut

from transforms import reasons
from transforms.dicom_header import image_spec
from transforms.dtypes import fit_integer_dtype
from transforms.errors import ConversionError


def _classify(exc: Exception) -> str:
    text = str(exc).lower()
    if "bytes of pixel data" in text or "length of the pixel data" in text or "expected length" in text:
        return reasons.PIXEL_DATA_LENGTH
    if isinstance(exc, AttributeError) and ("missing required element" in text or "has no" in text):
        return reasons.MISSING_ATTRIBUTE
    if "no pixel data decoders" in text or "not supported" in text or isinstance(exc, NotImplementedError):
        return reasons.UNSUPPORTED_TRANSFER_SYNTAX
    if "invalid literal" in text or "could not convert" in text:
        return reasons.INVALID_VALUE
    return reasons.DECODE_ERROR


def read_dataset(fileobj: BinaryIO) -> Dataset:
    try:
        return pydicom.dcmread(fileobj, force=True)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_DICOM, f"file does not parse: {exc}") from exc


def modality_values(ds: Dataset) -> np.ndarray:
    """Decoded pixels with the modality LUT applied, as pydicom computes them."""
    try:
        arr = ds.pixel_array
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(_classify(exc), f"{type(exc).__name__}: {exc}") from exc
    if int(ds.get("SamplesPerPixel", 1) or 1) == 1:
        arr = apply_modality_lut(arr, ds)
    return arr


def to_record_array(arr: np.ndarray, planned_dtype: str, depth: int, channels: int) -> np.ndarray:
    """Casts to the planned dtype (widening when needed) and reshapes to (D, H, W, C).

    Integer output must be exact: the rescaled values are checked, never rounded.
    The result is little-endian and C-contiguous.
    """
    dtype = planned_dtype
    if np.dtype(planned_dtype).kind in "iu":
        if arr.dtype.kind == "f":
            if not np.array_equal(arr, np.round(arr)):
                dtype = "float32"
            else:
                dtype = fit_integer_dtype(arr, planned_dtype)
        else:
            dtype = fit_integer_dtype(arr, planned_dtype)
    out = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<"))
    rows, cols = out.shape[-2:] if channels == 1 else out.shape[-3:-1]
    return out.reshape(depth, rows, cols, channels)


def decode_dicom(fileobj: BinaryIO) -> tuple[np.ndarray, Dataset]:
    """Reads one DICOM file into a (frames, rows, columns, samples) array."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = read_dataset(fileobj)
        spec = image_spec(ds)
        values = modality_values(ds)
    return to_record_array(values, spec.dtype, spec.depth, spec.channels), ds
