"""How a record gets its label (and, with --split_column, its split): pure rules.

Each function returns the labelled record or an Outcome saying why it has
none; the Beam steps (transforms.labels.steps) only route the results.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional, Union

from dataset.names import BadName, check_component as check_split_name
from dataset import reasons
from transforms.labels.table import LabelRow, dir_label
from dataset.results import Outcome
from transforms.values import ProbedRecord

Result = Union[ProbedRecord, Outcome]


def join_key(record: ProbedRecord, label_key: str) -> str:
    """The value of ``--label_key`` for a record: its path under the --input root, or a raw UID."""
    if label_key == "path":
        return record.source.rel_path
    ids = record.ids
    if ids is None:
        return ""
    return {"sop_instance_uid": ids.sop_uid, "series_instance_uid": ids.series_uid,
            "study_instance_uid": ids.study_uid, "patient_id": ids.patient_id}[label_key]


def missing(record: ProbedRecord, settings, space, why: str) -> Result:
    """A record without a usable label, as --missing_label says: unlabeled (-1), skipped or failed."""
    if settings.missing_label == "unlabeled":
        return dataclasses.replace(record, label=space.unlabeled())
    status = reasons.SKIPPED if settings.missing_label == "skip" else reasons.FAILED
    return Outcome(record.source.uri, status, "labels", reasons.MISSING_LABEL, why)


def labelled(record: ProbedRecord, raw: str, split: Optional[str], space, settings) -> Result:
    """The record with ``raw`` encoded in the label space (and its split from --split_column)."""
    try:
        label = space.encode(raw)
    except (ValueError, IndexError) as exc:
        return Outcome(record.source.uri, reasons.FAILED, "labels", reasons.INVALID_LABEL,
                       f"label {raw!r} is not a valid {space.kind} label: {exc}")
    if settings.split_column:
        try:   # a split name becomes part of shard file names: never a path of its own
            check_split_name(split or "", f"{settings.split_column} value for this record")
        except BadName as exc:
            return Outcome(record.source.uri, reasons.FAILED, "labels", reasons.INVALID_SPLIT, str(exc))
        return dataclasses.replace(record, label=label, split=split)
    return dataclasses.replace(record, label=label)


def join_rows(key: str, rows: Iterable[LabelRow], records: Iterable[ProbedRecord], space,
              settings) -> list[Result]:
    """The records sharing one join key with the (at most one) CSV row of that key."""
    rows = list(rows)
    results: list[Result] = []
    for record in records:
        if not key:
            results.append(missing(record, settings, space, f"record has no {settings.label_key}"))
        elif not rows or not rows[0].value:
            results.append(missing(record, settings, space,
                                   f"no label for {settings.label_key} in --labels"))
        else:
            results.append(labelled(record, rows[0].value, rows[0].split, space, settings))
    return results


def label_from_folder(record: ProbedRecord, space, settings) -> Result:
    """--labels_from_dirs: the class is the record's parent folder name."""
    name = dir_label(record.source.rel_path)
    return (labelled(record, name, None, space, settings) if name
            else missing(record, settings, space, "file is not inside a class folder"))
