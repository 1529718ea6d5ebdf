"""Split specs: TFDS's slicing syntax over the manifest's stored record order.

``"train[:10%]"``, ``"train[10%:20%]"``, ``"train[-1000:]"``,
``"train[100:200]"``, ``"train+validation"``, ``"train[:50%]+validation[:10]"``
select records by their position in a split as dataset.json stores it (its
shards in manifest order, each shard's records in file order), before any
shuffling: the same spec always names the same records, whatever the seed.
As in ``tfds.core.ReadInstruction`` (rounding "closest"), a percent boundary
is ``round(pct * n / 100)`` with Python's ``round`` (half to even), negative
boundaries count from the end and out-of-range ones clamp; a slice whose end
lies before its start selects nothing.

Pure functions of the spec and the manifest (no TensorFlow): ``resolve``
turns a spec into ``(split, start, stop)`` slices, ``pieces`` into the runs of
records each shard contributes, ``selection_entry`` into a manifest-like
entry (counts, dtypes, shapes) from which a union's layout is computed the
way a split's is.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional, Sequence

from dcm2tfrecord.dataset.manifest import Manifest, SplitEntry
from dcm2tfrecord.reader.layout import split_layout

FORMS = ("train", "train[:10%]", "train[10%:20%]", "train[-1000:]", "train[100:200]",
         "train+validation", "train[:50%]+validation[:10]")
_PART = re.compile(r"(?P<split>[\w.-]+)(?:\[(?P<start>[^\]:]*):(?P<stop>[^\]:]*)\])?")
_BOUNDARY = re.compile(r"(?P<value>-?\d+(?:\.\d+)?)(?P<percent>%?)")


@dataclasses.dataclass(frozen=True)
class Slice:
    """Records ``start .. stop - 1`` of ``split`` in its stored order."""
    split: str
    start: int
    stop: int

    @property
    def num_records(self) -> int:
        return max(self.stop - self.start, 0)


@dataclasses.dataclass(frozen=True)
class Piece:
    """Records ``start .. start + count - 1`` of shard ``shard`` (of ``size`` records) of ``split``."""
    split: str
    shard: int
    start: int
    count: int
    size: int

    @property
    def whole(self) -> bool:
        """The whole shard: read to its end, so a shard holding more records than the manifest
        says still fails the epoch instead of being cut short silently."""
        return self.start == 0 and self.count == self.size


SHOWN_CHARACTERS = 80


def shown(value) -> str:
    """``repr(value)`` cut to SHOWN_CHARACTERS: a message quotes a long spec without
    repeating it whole."""
    text = repr(value)
    if len(text) <= SHOWN_CHARACTERS:
        return text
    length = len(value) if isinstance(value, str) else len(text)
    return f"{text[:SHOWN_CHARACTERS]}... ({length} characters)"


def spec_error(spec, why: str) -> ValueError:
    return ValueError(f"split {shown(spec)}: {why}. Accepted forms: a split name, a slice of one "
                      f"(split[start:stop], whole records or percents, negative from the end), "
                      f"or a union of those joined by '+', e.g. {', '.join(map(repr, FORMS))}")


def _boundary(spec: str, text: str) -> tuple[Optional[float], bool]:
    """``(value, is_percent)`` of one slice boundary; ``(None, False)`` when omitted."""
    text = text.strip()
    if not text:
        return None, False
    match = _BOUNDARY.fullmatch(text)
    if not match:
        raise spec_error(spec, f"{shown(text)} is not a record number or a percent")
    percent = bool(match["percent"])
    value = float(match["value"])
    if not percent and not value.is_integer():
        raise spec_error(spec, f"{shown(text)}: record boundaries are whole numbers")
    if percent and abs(value) > 100:
        raise spec_error(spec, f"{shown(text)}: percents lie between -100% and 100%")
    return (value if percent else int(value)), percent


def parse(spec) -> tuple[tuple[str, Optional[float], Optional[float], bool], ...]:
    """``(split, start, stop, in_percent)`` per ``+``-joined part; omitted boundaries are None."""
    if not isinstance(spec, str):
        raise spec_error(spec, "not a string")
    if not spec.strip():
        raise spec_error(spec, "empty")
    parts = []
    for text in spec.split("+"):
        match = _PART.fullmatch(text.strip())
        if not match:
            raise spec_error(spec, f"{shown(text.strip())} is not a split name or split[start:stop]")
        (start, start_pct), (stop, stop_pct) = (_boundary(spec, match[k] or "") for k in ("start", "stop"))
        if start is not None and stop is not None and start_pct != stop_pct:
            raise spec_error(spec, "both boundaries of a slice are percents, or neither")
        parts.append((match["split"], start, stop, start_pct or stop_pct))
    return tuple(parts)


def _absolute(value, percent: bool, n: int, default: int) -> int:
    if value is None:
        return default
    position = int(round(value * n / 100.0)) if percent else int(value)
    if position < 0:
        position = max(n + position, 0)
    return min(position, n)


def resolve(spec, sizes: Mapping[str, int], where: str = "the dataset") -> tuple[Slice, ...]:
    """The slices ``spec`` names, given each split's record count.

    A name ``sizes`` holds is that whole split even when it looks like a spec.
    """
    if isinstance(spec, str) and spec in sizes:
        return (Slice(spec, 0, int(sizes[spec])),)
    out = []
    for split, start, stop, percent in parse(spec):
        if split not in sizes:
            known = ", ".join(sorted(sizes)) or "none"
            raise ValueError(f"split {shown(split)} not in {where} (splits: {known})"
                             + (f", in split spec {shown(spec)}" if split != spec else ""))
        n = int(sizes[split])
        out.append(Slice(split, _absolute(start, percent, n, 0), _absolute(stop, percent, n, n)))
    return tuple(out)


def canonical(spec) -> str:
    """The spec without blanks around its parts: the key of its seeded order (a plain split
    name is itself, so an unsliced split keeps the order it always had)."""
    return "+".join(part.strip() for part in spec.split("+")) if isinstance(spec, str) else spec


def pieces(slices: Sequence[Slice], shard_records: Mapping[str, Sequence[int]]) -> list[Piece]:
    """The non-empty runs of records each shard contributes, in slice order then shard order."""
    out = []
    for s in slices:
        first = 0
        for shard, size in enumerate(shard_records[s.split]):
            start, stop = max(s.start, first), min(s.stop, first + size)
            if start < stop:
                out.append(Piece(s.split, shard, start - first, stop - start, size))
            first += size
    return out


def selection_entry(manifest: Manifest, spec: str, slices: Sequence[Slice]) -> SplitEntry:
    """The manifest entry of ``spec``'s records: the split's own for a whole split, else one
    computed like it (record count, bytes pro rata, the stored dtypes and shapes of every split
    in it), so that layout, dtype and buffer sizes come out of the rules a split goes by.

    A union of splits whose images differ in shape is refused here, by name.
    """
    splits = manifest.splits
    if len(slices) == 1 and slices[0].num_records == splits[slices[0].split].num_records:
        return splits[slices[0].split]
    names = list(dict.fromkeys(s.split for s in slices))
    layouts = {name: split_layout(manifest, name, splits[name]) for name in names}
    first = layouts[names[0]]
    for name in names[1:]:
        other = layouts[name]
        if (other.volume, other.image_shape()) != (first.volume, first.image_shape()):
            raise ValueError(
                f"split {shown(spec)}: a union needs splits whose images share one shape, but "
                f"{names[0]!r} holds {_shape_text(first)} and {name!r} holds {_shape_text(other)}")
    entries = [splits[name] for name in names]
    shapes = [shape for entry in entries for shape in entry.shapes]
    fixed = all(entry.fixed_shape for entry in entries) and len(set(shapes)) == 1
    records = sum(s.num_records for s in slices)
    num_bytes = sum((splits[s.split].num_bytes or 0) * s.num_records
                    // max(splits[s.split].num_records, 1) for s in slices)
    return SplitEntry(num_records=records, num_bytes=num_bytes,
                      dtypes=tuple(sorted({d for entry in entries for d in entry.dtypes or ("uint8",)})),
                      shapes=tuple(dict.fromkeys(shapes)), fixed_shape=fixed,
                      max_depth=max(entry.max_depth for entry in entries))


def _shape_text(layout) -> str:
    dims = ["?" if d is None else str(d) for d in layout.image_shape()]
    return "images of " + "x".join(dims) if layout.batchable else "images of several sizes"
