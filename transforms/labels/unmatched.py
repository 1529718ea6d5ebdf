"""Labels CSV rows that label nothing: counted, sampled, listed in a file of their own.

A labels CSV may hold millions of rows for files this run does not convert (a CSV of the
whole hospital against one study's archive). Each used to become an Outcome carried to
the commit and a line of errors.jsonl: a million rows took 279 s and 3.6 GB (issue 35,
item 9). Now the rows no record can have (transforms.labels.table.KeyFilter) are written,
as they are read and in line order, to a part file of their own, and only a count and the
first rows travel on; the few rows the join itself leaves over travel as they are. The
commit (:func:`commit_unmatched`) merges both by line into
``unmatched_label_rows.jsonl`` (dataset/names.py UNMATCHED_ROWS_NAME) and puts the first
:data:`SAMPLE` of them into errors.jsonl. Memory stays bounded by the rows the join sees,
never by the CSV.
"""
from __future__ import annotations

import dataclasses
import heapq
import json
import uuid
from typing import IO, Iterable, Iterator, Optional, Sequence

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.files import create_output, incomplete_file, remove_output_file, rename_output
from dcm2tfrecord.dataset.manifest import unmatched_rows_block
from dcm2tfrecord.dataset.names import UNMATCHED_ROWS_NAME, incomplete_name
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.transforms.labels.join import unmatched
from dcm2tfrecord.transforms.labels.table import LabelKey, LabelRow

SAMPLE = 100      # unmatched rows written to errors.jsonl (the first, by line); all are in the file


@dataclasses.dataclass(frozen=True)
class UnmatchedRows:
    """Rows of the labels CSV that label nothing.

    ``part``: a temp file under ``.incomplete/`` holding ``count`` rows as
    :func:`row_line` writes them, in line order (None: the rows are all in ``first``);
    ``first``: the first of them by line, at most SAMPLE when there is a part, each with
    whether records whose key differs from the row's only by blanks exist (``near``)."""
    count: int
    first: tuple[tuple[LabelRow, bool], ...]
    part: Optional[str] = None


def row_line(row: LabelRow, settings) -> str:
    """One line of the unmatched-rows file: the CSV line and, where the key is a path (as
    errors.jsonl names input files), the key; a patient id or UID is not repeated."""
    item: dict = {"line": row.line}
    if settings.label_key == LabelKey.PATH:
        item["key"] = row.key
    return json.dumps(item, ensure_ascii=False, sort_keys=True) + "\n"


class PartWriter:
    """The rows a read rejects, streamed to a part file (opened at the first row)."""

    def __init__(self, settings):
        self.settings = settings
        self.count = 0
        self.first: list = []
        self.path: Optional[str] = None
        self._handle: Optional[IO[bytes]] = None

    def add(self, row: LabelRow) -> None:
        if self._handle is None:
            out = self.settings.output_dir
            self.path = FileSystems.join(out, incomplete_name(UNMATCHED_ROWS_NAME, uuid.uuid4().hex))
            self._handle = create_output(out, self.path, "application/jsonl")
        self._handle.write(row_line(row, self.settings).encode("utf-8", "surrogateescape"))
        self.count += 1
        if len(self.first) < SAMPLE:
            self.first.append((row, False))

    def close(self) -> Optional[UnmatchedRows]:
        if self._handle is None:
            return None
        self._handle.close()
        return UnmatchedRows(self.count, tuple(self.first), self.path)


def _line_of(text: bytes) -> int:
    return int(json.loads(text)["line"])


def _part_lines(path: str) -> Iterator[tuple[int, bytes]]:
    with FileSystems.open(path) as handle:
        for text in handle:
            yield _line_of(text), text


def commit_unmatched(items: Sequence[UnmatchedRows], settings) -> tuple[int, list[Outcome]]:
    """Writes ``unmatched_label_rows.jsonl`` (every row of ``items`` by CSV line, streamed)
    and removes the parts; returns (how many rows, the Outcomes of the first SAMPLE).

    Without --labels it writes nothing, and removes the file an earlier run left there."""
    out = settings.output_dir
    final = FileSystems.join(out, UNMATCHED_ROWS_NAME)
    if not settings.labels_csv:
        remove_output_file(out, final)
        return 0, []
    parts = sorted(item.part for item in items if item.part)
    loose = sorted(((row.line, row_line(row, settings).encode("utf-8", "surrogateescape"))
                    for item in items if not item.part for row, _ in item.first))
    total = sum(item.count for item in items)
    with incomplete_file(final, out) as tmp:
        if len(parts) == 1 and not loose:
            rename_output(out, parts[0], tmp)   # the usual case: one CSV, nothing left by the join
            parts = []
        else:
            with create_output(out, tmp, "application/jsonl") as handle:
                for _, text in heapq.merge(loose, *(_part_lines(p) for p in parts)):
                    handle.write(text)
    for part in parts:
        remove_output_file(out, part)
    firsts: Iterable = heapq.merge(*(item.first for item in items), key=lambda pair: pair[0].line)
    sample = [unmatched(row, settings, near=near) for (row, near), _ in zip(firsts, range(SAMPLE))]
    return total, sample


def with_unmatched(manifest, rows: int, sampled: int):
    """dataset.json counting all ``rows`` unmatched rows (its errors.jsonl holds ``sampled``)
    and naming their file in ``labels.unmatched_rows``."""
    counts = dict(manifest.counts or {})
    rejected = dict(counts.get("label_rows_rejected") or {})
    if rows:
        rejected[reasons.UNMATCHED_LABEL_ROW] = rows
    counts["label_rows_rejected"] = dict(sorted(rejected.items()))
    labels = dict(manifest.labels or {})
    labels["unmatched_rows"] = unmatched_rows_block(rows, sampled)
    return dataclasses.replace(manifest, counts=counts, labels=labels)
