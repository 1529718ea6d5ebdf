"""How a record gets its label (and, with --split_column, its split): pure rules.

Each function returns the labelled record or the Outcomes (one per input file) saying why it has
none; the Beam steps (transforms.labels.steps) only route the results.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional, Union

from dcm2tfrecord.dataset.names import BadName, check_component as check_split_name
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.transforms.labels.table import LabelKey, LabelKeyCase, LabelRow, dir_label, exact_key
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.record_model import ProbedRecord

# A labelled record, or why it has none: one Outcome per input file it is made of (a
# --unit series volume is made of its slices, each counted as an input).
Result = Union[ProbedRecord, tuple[Outcome, ...]]


class MissingLabel(StrEnum):
    """``--missing_label``: a record without a usable label (:func:`missing`)."""
    SKIP = "skip"
    ERROR = "error"             # counted as failed
    UNLABELED = "unlabeled"     # written with the label -1


def _not_labelled(record: ProbedRecord, status: str, reason: str, message: str) -> tuple[Outcome, ...]:
    """One Outcome per source file of ``record``: matched = written + skipped + failed counts
    files, so a volume of N slices that gets no label is N inputs not written, not one."""
    if record.members:
        message = f"series of {len(record.members)} slices: {message}"
    return tuple(Outcome(source.uri, status, "labels", reason, message) for source in record.sources)


def join_key(record: ProbedRecord, label_key: str) -> str:
    """The value of ``--label_key`` for a record: its path under the --input root, or a raw UID."""
    if label_key == LabelKey.PATH:
        return record.source.rel_path
    ids = record.ids
    if ids is None:
        return ""
    return {LabelKey.SOP_INSTANCE_UID: ids.sop_uid, LabelKey.SERIES_INSTANCE_UID: ids.series_uid,
            LabelKey.STUDY_INSTANCE_UID: ids.study_uid, LabelKey.PATIENT_ID: ids.patient_id}[LabelKey(label_key)]


def missing(record: ProbedRecord, settings, space, why: str) -> Result:
    """A record without a usable label, as --missing_label says: unlabeled (-1), skipped or failed."""
    if settings.missing_label == MissingLabel.UNLABELED:
        return dataclasses.replace(record, label=space.unlabeled())
    status = reasons.SKIPPED if settings.missing_label == MissingLabel.SKIP else reasons.FAILED
    return _not_labelled(record, status, reasons.MISSING_LABEL, why)


def labelled(record: ProbedRecord, raw: str, split: Optional[str], space, settings) -> Result:
    """The record with ``raw`` encoded in the label space (and its split from --split_column)."""
    try:
        label = space.encode(raw)
    except (ValueError, IndexError) as exc:
        return _not_labelled(record, reasons.FAILED, reasons.INVALID_LABEL,
                             f"label {raw!r} is not a valid {space.kind} label: {exc}")
    if settings.split_column:
        try:   # a split name becomes part of shard file names: never a path of its own
            split = check_split_name(split or "", f"{settings.split_column} value for this record")
        except BadName as exc:
            return _not_labelled(record, reasons.FAILED, reasons.INVALID_SPLIT, str(exc))
        return dataclasses.replace(record, label=label, split=split)
    return dataclasses.replace(record, label=label)


@dataclasses.dataclass(frozen=True)
class Match:
    """A record and the CSV row that labels it (None: no row; ``why`` says so)."""
    record: ProbedRecord
    row: Optional[LabelRow]
    why: str = ""


def match_rows(rows: Iterable[LabelRow], records: Iterable[ProbedRecord],
               settings) -> tuple[list[Match], list[tuple[LabelRow, bool]]]:
    """The records and CSV rows sharing one loose key (``table.loose_key``) matched up.

    A record takes the row whose exact key (``table.exact_key``) equals its own; failing
    that, the one row of the group that no record matches exactly (keys that differ only
    by blanks around them); several such rows are ambiguous and label nothing. Every row
    that labels no record comes back, with whether records of its loose key exist (the
    ``near`` of :func:`unmatched`), to be counted as unmatched_label_row
    (transforms.labels.unmatched): no row is lost without a line.
    """
    fold = settings.label_key_case == LabelKeyCase.FOLD
    rows = sorted(rows, key=lambda r: r.line)
    records = list(records)
    by_exact = {exact_key(r.key, fold): r for r in rows}
    record_keys = [exact_key(join_key(record, settings.label_key), fold) for record in records]
    exact_keys = set(record_keys)
    loose = [r for r in rows if exact_key(r.key, fold) not in exact_keys]
    record_keys_unmatched = {key for key in record_keys if key.strip() and key not in by_exact}
    fallback = loose[0] if len(loose) == 1 and len(record_keys_unmatched) == 1 else None
    used: set = set()
    matches: list[Match] = []
    for record, key in zip(records, record_keys):
        if not key.strip():
            matches.append(Match(record, None, f"record has no {settings.label_key}"))
            continue
        row = by_exact.get(key, fallback)
        if row is None:
            why = (f"no label for {settings.label_key} in --labels" if not loose else
                   f"label rows (lines {', '.join(str(r.line) for r in loose[:5])}) and records differ "
                   f"in {settings.label_key} only by blanks around it, several ways: ambiguous")
            matches.append(Match(record, None, why))
            continue
        used.add(row.line)
        matches.append(Match(record, row))
    left = [(row, bool(records)) for row in rows if row.line not in used]
    return matches, left


def unmatched(row: LabelRow, settings, near: bool = False) -> Outcome:
    """The rejection of a CSV row that labels no record (unmatched_label_row). The key is
    shown: errors.jsonl names inputs on purpose, for the operator. ``near``: records whose
    key differs from the row's only by blanks around it exist (matched elsewhere or
    ambiguous)."""
    if settings.label_key == LabelKey.PATH:      # a path, as errors.jsonl names input files
        key = row.key if len(row.key) <= 200 else row.key[:200] + "..."
        what = f"no converted file under an --input root is {key!r}"
    else:                                  # a patient id or UID is not repeated here
        what = f"no converted record has this row's {settings.label_key}"
    hint = ("; records whose key differs only by blanks around it have rows of their own or are "
            "ambiguous" if near else "; the file may not exist, or was skipped or failed (see its "
            "own line), or --label_key/--label_key_case do not fit the CSV")
    return Outcome(f"{settings.labels_csv}:{row.line}", reasons.REJECTED, "labels",
                   reasons.UNMATCHED_LABEL_ROW, f"line {row.line}: {what}: this row labels nothing{hint}")


def encode_match(match: Match, space, settings) -> Result:
    """A matched record labelled (or the Outcome of why it has no label)."""
    if match.row is None:
        return missing(match.record, settings, space, match.why)
    if not match.row.value:
        return missing(match.record, settings, space, f"no label for {settings.label_key} in --labels")
    return labelled(match.record, match.row.value, match.row.split, space, settings)


def label_from_folder(record: ProbedRecord, space, settings) -> Result:
    """--labels_from_dirs: the class is the record's parent folder name."""
    name = dir_label(record.source.rel_path)
    return (labelled(record, name, None, space, settings) if name
            else missing(record, settings, space, "file is not inside a class folder"))


# ------------------------------------------------- the other slices of a --unit series volume

def slice_keys(record: ProbedRecord, label_key: str) -> tuple[str, ...]:
    """With ``--label_key path``, the paths of a volume's slices other than its first (the
    volume is labelled by its first slice's row, :func:`join_key`): a row naming one of
    them labels a slice of a converted volume, not nothing."""
    if label_key != LabelKey.PATH or not record.members:
        return ()
    return tuple(m.rel_path for m in record.members if m.rel_path != record.source.rel_path)


def rows_of_slices(left: list[tuple[LabelRow, bool]], slices: Iterable[str],
                   settings) -> tuple[list[LabelRow], list[tuple[LabelRow, bool]]]:
    """Of the rows the join left over (:func:`match_rows`), those whose exact key is a
    volume's other slice (``slices``, their paths), and the rest, still unmatched."""
    fold = settings.label_key_case == LabelKeyCase.FOLD
    keys = {exact_key(path, fold) for path in slices}
    used = [row for row, _ in left if exact_key(row.key, fold) in keys]
    return used, [(row, near) for row, near in left if exact_key(row.key, fold) not in keys]


def slice_split(row: LabelRow, settings) -> Optional[str]:
    """The --split_column value a volume's other slice's row gives (None: no column, or no
    value that could name a split): counted against the volume's group as a file's would be."""
    if not settings.split_column:
        return None
    try:
        return check_split_name(row.split or "", settings.split_column)
    except BadName:
        return None
