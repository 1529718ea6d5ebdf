"""Choosing the smallest numpy dtype that holds a value range exactly."""
from __future__ import annotations

import numpy as np

_INTEGER_LADDER = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64")


def smallest_integer_dtype(lo: float, hi: float) -> str:
    """Smallest integer dtype containing [lo, hi]; unsigned preferred at equal size."""
    for name in _INTEGER_LADDER:
        info = np.iinfo(name)
        if info.min <= lo and hi <= info.max:
            return name
    raise OverflowError(f"no integer dtype holds [{lo}, {hi}]")


def fit_integer_dtype(arr: np.ndarray, planned: str) -> str:
    """``planned`` if every value fits, else the smallest dtype that also holds the data.

    Headers can under-state the range (pixels with bits above Bits Stored);
    widening keeps the values exact instead of wrapping them silently.
    """
    if arr.size == 0 or arr.dtype == np.dtype(planned):    # every value of that dtype fits it
        return planned
    return fit_range(arr.min(), arr.max(), planned)


def fit_range(lo: float, hi: float, planned: str) -> str:
    """``planned`` if it holds [lo, hi], else the smallest dtype holding both."""
    info = np.iinfo(planned)
    if info.min <= lo and hi <= info.max:
        return planned
    return smallest_integer_dtype(min(lo, info.min), max(hi, info.max))
