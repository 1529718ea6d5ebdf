"""Labels: reading a labels CSV, deciding the label kind, encoding label values.

The join key is a raw identifier (relative path, SOP/Series/Study Instance
UID or Patient ID). It is used to join inside the pipeline and is never
written: records carry only the encoded label.
"""
from __future__ import annotations

import csv
import dataclasses
import posixpath
import unicodedata
from typing import Iterable, Iterator, Optional, Sequence, Union

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.errors import OptionError
from dcm2tfrecord.dataset.results import Outcome


class LabelKey(StrEnum):
    """``--label_key``: the CSV column joined to records (path: relative to the --input root)."""
    PATH = "path"
    SOP_INSTANCE_UID = "sop_instance_uid"
    SERIES_INSTANCE_UID = "series_instance_uid"
    STUDY_INSTANCE_UID = "study_instance_uid"
    PATIENT_ID = "patient_id"


class LabelKeyCase(StrEnum):
    """``--label_key_case``: keys match as written (:func:`exact_key`), or ignoring case."""
    EXACT = "exact"
    FOLD = "fold"


MAX_CLASSES = 100_000
MULTI_SEPARATOR = "|"

LabelValue = Union[int, float, tuple]


@dataclasses.dataclass(frozen=True)
class LabelRow:
    key: str                 # the CSV cell as written (blanks kept: they may be part of a name)
    value: str
    split: Optional[str]
    line: int


# ------------------------------------------------- the one key normalization

def exact_key(text: str, fold_case: bool = False) -> str:
    """A join key as both sides are compared (CSV cells and record keys alike): Unicode NFC
    (macOS and many tools write file names decomposed, NFD), without leading ``./``, and
    case-folded only with ``--label_key_case fold``. Blanks are kept: a file may really be
    named ``"b.png "``."""
    text = unicodedata.normalize("NFC", text)
    while text.startswith("./"):
        text = text[2:]
    return text.casefold() if fold_case else text


def loose_key(text: str, fold_case: bool = False) -> str:
    """The exact key without blanks around it: what the join groups by. A row and a record
    whose exact keys differ only by surrounding blanks are matched when neither has an exact
    partner (see transforms.labels.join.match_rows)."""
    return exact_key(text.strip(), fold_case)


@dataclasses.dataclass(frozen=True)
class LabelSpace:
    """What the label column holds, decided once over all rows.

    kind: "int" (integers stay as they are), "float", "class" (strings mapped
    to indices in sorted order) or "multi" (``a|b|c`` -> multi-hot).
    """
    kind: str
    class_names: tuple[str, ...] = ()

    def encode(self, raw: str) -> LabelValue:
        raw = raw.strip()
        if self.kind == "int":
            return int(raw)
        if self.kind == "float":
            return float(raw)
        if self.kind == "class":
            return _index(self.class_names, raw)
        tokens = {t.strip() for t in raw.split(MULTI_SEPARATOR) if t.strip()}
        return tuple(1 if name in tokens else 0 for name in self.class_names)

    def feature(self) -> dict:
        if self.kind == "float":
            return {"dtype": "float", "shape": [], "description": "float label, NaN when unlabeled"}
        if self.kind == "multi":
            return {"dtype": "int64", "shape": [len(self.class_names)],
                    "description": "multi-hot over class_names; all -1 when unlabeled"}
        return {"dtype": "int64", "shape": [], "description": "class index, -1 when unlabeled"}

    def unlabeled(self) -> LabelValue:
        if self.kind == "float":
            return float("nan")
        if self.kind == "multi":
            return tuple(-1 for _ in self.class_names)
        return -1


def _index(names: Sequence[str], value: str) -> int:
    import bisect
    i = bisect.bisect_left(names, value)
    if i == len(names) or names[i] != value:
        raise ValueError(value)
    return i


FIELD_SIZE_LIMIT = 16 << 20     # bytes in one CSV cell (Python's csv default is 128 KiB)


class LabelFileError(OptionError, ValueError):
    """The labels CSV cannot be used at all (missing column, unreadable)."""


def parse_label_csv(lines: Iterable[str], uri: str, key_column: str, label_column: str,
                    split_column: Optional[str] = None) -> Iterator[Union[LabelRow, Outcome]]:
    """Yields a LabelRow per usable row and an Outcome per malformed one (by line).

    ``lines`` is any iterable of text lines (an open file streams: a CSV of
    20 million rows is never held whole).
    """
    csv.field_size_limit(FIELD_SIZE_LIMIT)
    rows = csv.reader(lines)
    try:
        header = next(rows)
    except StopIteration:
        raise LabelFileError(f"{uri}: the labels CSV is empty") from None
    header = check_header(header, uri)
    wanted = [key_column, label_column] + ([split_column] if split_column else [])
    missing = [c for c in wanted if c not in header]
    if missing:
        raise LabelFileError(f"{uri}: column(s) {missing} not in header {header}")
    pos = {name: header.index(name) for name in wanted}
    for row in rows:
        line = rows.line_num
        if any("\0" in cell for cell in row):
            raise LabelFileError(f"{uri}: line {line} holds a NUL byte; a labels CSV is text: "
                                 "save it again as UTF-8 CSV")
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield Outcome(f"{uri}:{line}", reasons.REJECTED, "labels", reasons.MALFORMED_LABEL_ROW,
                          f"line {line}: {len(row)} fields, header has {len(header)}")
            continue
        key = row[pos[key_column]]
        if not key.strip():
            yield Outcome(f"{uri}:{line}", reasons.REJECTED, "labels", reasons.MALFORMED_LABEL_ROW,
                          f"line {line}: empty {key_column}")
            continue
        split = row[pos[split_column]].strip() if split_column else None
        yield LabelRow(key=key, value=row[pos[label_column]].strip(), split=split or None, line=line)


def _parses(convert, value: str) -> bool:
    try:
        convert(value)
        return True
    except ValueError:
        return False


class LabelSpaceAccumulator:
    """Mergeable summary of label values: are they all ints, all floats, which strings."""

    def __init__(self, multi: bool):
        self.multi = multi
        self.all_int = True
        self.all_float = True
        self.values: set = set()

    def add(self, value: str) -> "LabelSpaceAccumulator":
        if not value:
            return self
        if self.multi:
            self.values.update(t.strip() for t in value.split(MULTI_SEPARATOR) if t.strip())
        else:
            self.all_int = self.all_int and _parses(int, value)
            self.all_float = self.all_float and _parses(float, value)
            if not self.all_float:
                self.values.add(value)
            elif len(self.values) < MAX_CLASSES:
                self.values.add(value)
        if len(self.values) > MAX_CLASSES and not (self.all_float and not self.multi):
            raise LabelFileError(f"more than {MAX_CLASSES} distinct label values")
        return self

    def merge(self, other: "LabelSpaceAccumulator") -> "LabelSpaceAccumulator":
        self.all_int &= other.all_int
        self.all_float &= other.all_float
        self.values |= other.values
        return self

    def result(self) -> LabelSpace:
        if self.multi:
            return LabelSpace("multi", tuple(sorted(self.values)))
        if self.values and self.all_int:
            return LabelSpace("int")
        if self.values and self.all_float:
            return LabelSpace("float")
        return LabelSpace("class", tuple(sorted(self.values)))


def check_header(header: Sequence[str], uri: str) -> list[str]:
    """The header's column names (blanks around them dropped); LabelFileError when a name
    is given twice (which of the two columns would count?) or holds a NUL byte."""
    names = [h.strip() for h in header]
    if any("\0" in name for name in names):
        raise LabelFileError(f"{uri}: the header holds a NUL byte; a labels CSV is text: save it "
                             "again as UTF-8 CSV")
    seen: set = set()
    repeated = []
    for n in filter(None, names):
        if n in seen:
            repeated.append(n)
        seen.add(n)
    if repeated:
        raise LabelFileError(f"{uri}: column {repeated[0]!r} appears more than once in the header "
                             f"{names[:20]}; give each column one name")
    return names


def read_header(lines: Iterable[str], uri: str = "the labels CSV") -> list[str]:
    """The header's column names ([] for an empty file); LabelFileError as check_header says."""
    try:
        return check_header(next(csv.reader(lines)), uri)
    except StopIteration:
        return []


def dir_label(rel_path: str) -> str:
    """ImageNet layout: the class is the name of the file's parent folder."""
    parent = posixpath.dirname(rel_path)
    return posixpath.basename(parent) if parent else ""


def first_row(rows: Iterable[LabelRow], uri: str) -> tuple[LabelRow, list[Outcome]]:
    """Rows sharing one key: the first line labels; every later line is a rejected row
    (a duplicate when it says the same, malformed when it contradicts the first)."""
    ordered = sorted(rows, key=lambda r: r.line)
    first, rejected = ordered[0], []
    for extra in ordered[1:]:
        same = (extra.value, extra.split) == (first.value, first.split)
        rejected.append(Outcome(
            f"{uri}:{extra.line}", reasons.REJECTED, "labels",
            reasons.DUPLICATE_LABEL_ROW if same else reasons.MALFORMED_LABEL_ROW,
            f"line {extra.line}: key already labelled at line {first.line}"
            + ("" if same else f" with {first.value!r}; this line's {extra.value!r} is ignored")))
    return first, rejected


# ------------------------------------------------- keeping bulk rows out of shuffles

def key_hash(key: bytes) -> int:
    """64-bit hash of a raw join key (its shuffle-key bytes), stable within one process
    only (both passes over a CSV run in the same process)."""
    return hash(key) & 0xFFFF_FFFF_FFFF_FFFF


def repeated_hashes(hashes) -> frozenset:
    """The 64-bit key hashes that occur more than once (8 bytes a row while counting;
    the result holds only repeated keys, plus the rare hash collision, which is harmless:
    such a key merely takes the exact, shuffled path)."""
    import numpy as np
    arr = np.sort(np.frombuffer(hashes, dtype=np.uint64))
    if len(arr) < 2:
        return frozenset()
    return frozenset(int(h) for h in np.unique(arr[1:][arr[1:] == arr[:-1]]))


class KeyFilter:
    """A Bloom filter over record join keys (fixed 1 MiB, 4 hashes): a CSV row whose key
    it does not contain certainly labels no record. False positives only let a row through
    to the exact join."""
    BITS = 1 << 23
    HASHES = 4

    def __init__(self, bits: Optional[bytes] = None):
        self.bits = bytearray(bits) if bits is not None else bytearray(self.BITS // 8)

    @classmethod
    def _positions(cls, key: bytes):
        import hashlib
        digest = hashlib.blake2b(key, digest_size=4 * cls.HASHES).digest()
        return [int.from_bytes(digest[4 * i:4 * i + 4], "little") % cls.BITS
                for i in range(cls.HASHES)]

    def add(self, key: bytes) -> "KeyFilter":
        for p in self._positions(key):
            self.bits[p >> 3] |= 1 << (p & 7)
        return self

    def merge(self, other: "KeyFilter") -> "KeyFilter":
        merged = int.from_bytes(self.bits, "little") | int.from_bytes(other.bits, "little")
        self.bits = bytearray(merged.to_bytes(len(self.bits), "little"))
        return self

    def __contains__(self, key: bytes) -> bool:
        return all(self.bits[p >> 3] & (1 << (p & 7)) for p in self._positions(key))
