"""Leak-free splits: a deterministic function of a keyed hash of the group key.

All records of one group (patient, study, series) hash to the same point in
[0, 1) and so land in the same split; the point depends on the group key
alone, so a patient never moves when new data arrives in a later run.
"""
from __future__ import annotations

import hashlib
import hmac
from typing import Optional, Sequence

from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.errors import OptionError
from dcm2tfrecord.dataset.names import check_component as check_split_name
from dcm2tfrecord.transforms.record_model import Identifiers

_SPLIT_KEY = b"dcm2tfrecord/split/v1"


class SplitBy(StrEnum):
    """``--split_by``: the group kept in one split (its key: :data:`_FALLBACK`)."""
    PATIENT = "patient"
    STUDY = "study"
    SERIES = "series"
    RECORD = "record"


_FALLBACK = {SplitBy.PATIENT: ("patient_id", "study_uid", "series_uid"),
             SplitBy.STUDY: ("study_uid", "series_uid"),
             SplitBy.SERIES: ("series_uid",),
             SplitBy.RECORD: ()}


class SplitSpecError(OptionError, ValueError):
    pass


def parse_splits(text: str) -> tuple[tuple[str, float], ...]:
    """``train=0.8,validation=0.1,test=0.1`` -> ordered (name, fraction) pairs summing to 1."""
    pairs = []
    for part in text.split(","):
        name, sep, value = part.rpartition("=")   # a name may hold "=" (a fraction never does)
        name = name.strip()
        if not sep or not name:
            raise SplitSpecError(f"--splits: {part!r} is not NAME=FRACTION "
                                 "(e.g. train=0.8,validation=0.1,test=0.1)")
        try:
            check_split_name(name, "--splits")
        except ValueError as exc:
            raise SplitSpecError(str(exc)) from None
        try:
            fraction = float(value)
        except ValueError:
            raise SplitSpecError(f"--splits: {value!r} for {name} is not a number") from None
        if not 0 <= fraction <= 1:
            raise SplitSpecError(f"--splits: {name}={fraction} must lie in [0, 1]")
        pairs.append((name, fraction))
    names = [n for n, _ in pairs]
    if len(set(names)) != len(names):
        raise SplitSpecError(f"--splits: a split is named twice in {text!r}")
    total = sum(f for _, f in pairs)
    if abs(total - 1.0) > 1e-6:
        raise SplitSpecError(f"--splits fractions sum to {total:g}, not 1: {text!r}")
    return tuple(pairs)


def splits_text(pairs: Sequence[tuple[str, float]]) -> str:
    """(name, fraction) pairs as ``--splits`` writes them: :func:`parse_splits` reads them back."""
    return ",".join(f"{name}={fraction}" for name, fraction in pairs)


def group_key(split_by: str, ids: Optional[Identifiers], record_id: str) -> str:
    """The key whose records must share a split.

    A record missing the identifier falls back to the next finer one (a DICOM
    without Patient ID is grouped by study), and finally to itself.
    """
    if ids is not None:
        for field in _FALLBACK[SplitBy(split_by)]:
            value = getattr(ids, field)
            if value:
                return f"{field}:{value}"
    return f"record:{record_id}"


def split_point(key: str) -> float:
    digest = hmac.new(_SPLIT_KEY, key.encode("utf-8"), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") / float(1 << 64)


def assign_split(key: str, fractions: Sequence[tuple[str, float]]) -> str:
    point, edge = split_point(key), 0.0
    for name, fraction in fractions:
        edge += fraction
        if point < edge:
            return name
    return [name for name, fraction in fractions if fraction > 0][-1]
