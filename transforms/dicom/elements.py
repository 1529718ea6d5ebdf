"""One header element read as a number, a missing or malformed value raised as a
classified ConversionError naming the keyword."""
from __future__ import annotations

from pydicom.dataset import Dataset

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError


def int_value(ds: Dataset, keyword: str, default=None) -> int:
    try:
        value = ds.get(keyword, default)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}: {exc}") from exc
    if value is None or value == "":
        if default is None:
            raise ConversionError(reasons.MISSING_ATTRIBUTE, f"missing required element {keyword}")
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}={value!r}: {exc}") from exc


def float_value(ds: Dataset, keyword: str, default: float) -> float:
    try:
        value = ds.get(keyword, None)
        return default if value is None or value == "" else float(value)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}: {exc}") from exc
