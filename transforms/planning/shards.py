"""Shard planning on metadata: how many shards, and which record goes where.

Records are laid out in one global order (a keyed hash of their id) and cut
into shards by cumulative planned bytes: shard i holds the records whose
start offset falls in [i*T/n, (i+1)*T/n), T the split's planned bytes. Each
shard is then T/n +- one record, so choosing n keeps every shard inside
[min, max]. The cumulative offsets are computed without any step holding a
whole split: records are first grouped into hash buckets (contiguous ranges
of the order key), bucket sizes are summed, and prefix sums over buckets give
each bucket's start.

The bucket count is fixed (PLANNING_BUCKETS per split), not derived from the
shard count: a record's bucket is then known before the split's totals are,
so keying records by bucket needs no side input and adds no stage boundary.
Offsets do not depend on how the order is cut into buckets, so neither do
the shards.

Large records. A shard holding two or more records is at most ceil(T/n) - 1
bytes plus its last record. Capping n at T/largest (so that every cut holds a
record start, and the ``-of-n`` names have no gap) can let such a shard pass
the maximum once the largest record passes max/3 (records of 401 and 1600
bytes under a 2000-byte maximum: one cut, one 2001-byte shard; 500, 998,
1000, 500 under 2000: two cuts, a 2498-byte shard). Whether it does depends
on the order, so the shards of the capped count are summed first (a combine,
one number per shard); only a split where one of them holds two or more
records above the maximum is cut into the finer ``fine_cuts`` intervals
instead, few enough bytes each that no shard of two or more records passes
the maximum in any order (fine_num_cuts). Some fine cuts may hold no record
start; the occupied cuts of a split (at most one number per shard, a side
input) are numbered densely (``dense_index``), so the names stay contiguous.
The maximum wins over the minimum there. Every other split keeps the capped
count's shards, byte for byte (every cut occupied, numbering the identity).
"""
from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Iterable, Iterator

from dcm2tfrecord.transforms.hashing import ORDER_KEY_SPACE, order_key
from dcm2tfrecord.transforms.settings import ShardBounds
from dcm2tfrecord.transforms.record_codec import (get_value, pack_record, put_value, put_varint, read_varint,
                                                 unpack_record)
from dcm2tfrecord.transforms.record_model import ProbedRecord, replaced

# Hash buckets per split: the side input of bucket starts holds at most this many
# numbers per split (~2.5 MB); a bucket of a 16 M record split holds ~250 records.
# The shards do not depend on the count: PlanShards takes another (``buckets``), as tests
# do to put many records of a small archive in each bucket.
PLANNING_BUCKETS = 1 << 16


@dataclasses.dataclass(frozen=True)
class SplitLayout:
    """Totals for one split, computed by a combiner before planning."""
    total_bytes: int
    num_records: int
    max_record_bytes: int
    num_shards: int          # the cuts of the order (assign_entries), as written once counted
    min_shards_requested: int = 1
    min_record_bytes: int = 1
    # the finer cuts used instead where a shard of num_shards cuts would hold two or more
    # records above the maximum (fine_layout); equal to num_shards where that cannot happen
    fine_cuts: int = 0

    @property
    def min_shards_honoured(self) -> bool:
        return self.num_shards >= self.min_shards_requested

    def fine(self) -> "SplitLayout":
        """The layout that cuts the order into fine_cuts intervals."""
        return dataclasses.replace(self, num_shards=self.fine_cuts or self.num_shards)

    def with_occupied(self, occupied: tuple) -> "SplitLayout":
        """The layout as written: one shard per occupied cut."""
        return dataclasses.replace(self, num_shards=len(occupied))


def choose_num_shards(total_bytes: int, max_record_bytes: int, bounds: ShardBounds) -> int:
    """Shard count nearest the target size that keeps every shard within bounds.

    A shard is T/n +- one record, so n must satisfy
    T/n + r <= max  and  T/n - r >= min. A split below the minimum is one shard.
    Where no n satisfies both, a split within the maximum is one shard (exactly
    T, inside both bounds); else the maximum wins. n never exceeds T/r, so every
    shard interval holds at least one record start: no empty shard, no gap in
    the ``-of-n`` names. That cap can let a shard of two or more records pass
    the maximum once the largest record passes max/3; see fine_num_cuts.
    """
    return min(_bounded_num_shards(total_bytes, max_record_bytes, bounds),
               max(1, total_bytes // max(max_record_bytes, 1)))


def fine_num_cuts(n: int, total_bytes: int, max_record_bytes: int, min_record_bytes: int,
                  bounds: ShardBounds) -> int:
    """n where n cuts keep every shard of two or more records within the maximum in any order
    (``keeps_max``); else the fewest cuts that do (keeping it is monotone in n, and cuts of at
    most max(max - r + 1, smallest record) bytes always do), or the target's count if more.
    The maximum wins over the minimum there."""
    if keeps_max(n, total_bytes, max_record_bytes, min_record_bytes, bounds):
        return n
    low = n
    high = max(1, -(-total_bytes // max(bounds.max_bytes - max_record_bytes + 1,
                                        min_record_bytes, 1)))
    while low + 1 < high:
        middle = (low + high) // 2
        if keeps_max(middle, total_bytes, max_record_bytes, min_record_bytes, bounds):
            high = middle
        else:
            low = middle
    return max(high, _bounded_num_shards(total_bytes, max_record_bytes, bounds))


def keeps_max(n: int, total_bytes: int, max_record_bytes: int, min_record_bytes: int,
              bounds: ShardBounds) -> bool:
    """Whether n cuts keep every shard of two or more records within the maximum, in any order.

    A cut's records before its last one start less than T/n apart: at most w = ceil(T/n) - 1
    bytes, and at most w // smallest of them (none: every record alone). A shard is then at
    most those plus its last record, and at most the whole split."""
    before_last = -(-total_bytes // n) - 1
    records_before = before_last // max(min_record_bytes, 1)
    if records_before == 0:
        return True
    largest_shard = min(total_bytes,
                        min(before_last, records_before * max_record_bytes) + max_record_bytes)
    return largest_shard <= bounds.max_bytes


def _bounded_num_shards(total_bytes: int, max_record_bytes: int, bounds: ShardBounds) -> int:
    if total_bytes <= bounds.min_bytes:
        return 1
    n = max(1, round(total_bytes / bounds.target_bytes))
    if n == 1 and total_bytes <= bounds.max_bytes:
        return 1
    room_max = bounds.max_bytes - max_record_bytes
    room_min = bounds.min_bytes + max_record_bytes
    lowest = math.ceil(total_bytes / room_max) if room_max > 0 else n
    highest = math.floor(total_bytes / room_min) if room_min > 0 else n
    if lowest <= highest:
        return min(max(n, lowest), highest)
    if total_bytes <= bounds.max_bytes:   # one shard holds the split exactly, within both bounds
        return 1
    return max(1, lowest)


def layout(total_bytes: int, num_records: int, max_record_bytes: int,
           bounds: ShardBounds, min_shards: int = 1, min_record_bytes: int = 1) -> SplitLayout:
    """The split's shard count; ``min_shards`` raises it while shards stay >= the minimum size.
    Also the finer cuts for the case where that count lets a shard pass the maximum."""
    n = choose_num_shards(total_bytes, max_record_bytes, bounds)
    if min_shards > n:
        room = bounds.min_bytes + max_record_bytes
        most = min(total_bytes // max(room, 1), total_bytes // max(max_record_bytes, 1))
        n = max(n, min(min_shards, int(most)))
    n, smallest = max(n, 1), max(min_record_bytes, 1)
    return SplitLayout(total_bytes, num_records, max_record_bytes, n, min_shards, smallest,
                       fine_num_cuts(n, total_bytes, max_record_bytes, smallest, bounds))


def for_planning(record: ProbedRecord, seed: int = 0) -> ProbedRecord:
    """The record as planning and writing need it: its order key computed once, and
    without the raw identifiers and slice geometry (used before planning only: duplicate,
    label and split keys, series volumes), which would otherwise cross every shuffle."""
    if record.order is not None and record.ids is None and record.slice_info is None:
        return record                                       # done before (ConvertArchive)
    return replaced(record, ids=None, slice_info=None,
                    order=order_key(record.record_id, seed))


def bucket_of_order(order: int, buckets: int = PLANNING_BUCKETS) -> int:
    return order * buckets // ORDER_KEY_SPACE


# A planning entry: what the planning shuffles move per record, one bytes value
#   order key (8 bytes, big endian: bytes order is key order) + planned bytes (varint)
#   + record id (a tagged value) + the record (transforms.record_codec, without those two).
# Planning reads the first three (entry_order, entry_planned_bytes, entry_sort_key); the record
# is decoded once, in front of the writer (entry_record). One bytes object rather than a tuple:
# Beam's local runner holds every GroupByKey's values decoded, and a bytes object is its data
# plus 33 bytes, where a tuple of two ints, a string and bytes took ~220 bytes more
# (docs/SCALE.md, "Bytes per record, step by step").
_ORDER_BYTES = 8


def make_entry(order: int, record_id: str, planned_bytes: int, packed: bytes = b"") -> bytes:
    """An entry from its parts; ``packed``: pack_record(record, {"order": ..., "record_id": ...})."""
    out = bytearray(order.to_bytes(_ORDER_BYTES, "big"))
    put_varint(out, planned_bytes)
    put_value(out, record_id)
    out += packed
    return bytes(out)


def planning_entry(record: ProbedRecord, seed: int = 0) -> tuple[str, bytes]:
    """(split, entry) of a record (see for_planning)."""
    record = for_planning(record, seed)
    order, rid = record.order, record.record_id
    assert order is not None
    return record.split, make_entry(order, rid, record.planned_bytes,
                                    pack_record(record, {"order": order, "record_id": rid}))


def entry_order(entry: bytes) -> int:
    return int.from_bytes(entry[:_ORDER_BYTES], "big")


def entry_planned_bytes(entry: bytes) -> int:
    return read_varint(entry, _ORDER_BYTES)[0]


def entry_sort_key(entry: bytes) -> tuple[bytes, str]:
    """Sorts entries as (order key, record id) would."""
    pos = read_varint(entry, _ORDER_BYTES)[1]
    return entry[:_ORDER_BYTES], get_value(entry, pos)[0]


def entry_record(entry: bytes) -> ProbedRecord:
    rid, pos = get_value(entry, read_varint(entry, _ORDER_BYTES)[1])
    return unpack_record(entry, {"order": entry_order(entry), "record_id": rid}, pos)


def bucket_starts(bucket_bytes: Iterable[tuple[tuple[str, int], int]]) -> dict:
    """{(split, bucket): cumulative planned bytes of all earlier buckets}."""
    by_split: dict = {}
    for (split, bucket), size in bucket_bytes:
        by_split.setdefault(split, []).append((bucket, size))
    starts = {}
    for split, sizes in by_split.items():
        offset = 0
        for bucket, size in sorted(sizes):
            starts[(split, bucket)] = offset
            offset += size
    return starts


def assign_entries(entries: Iterable[bytes], start: int,
                   split_layout: SplitLayout) -> Iterator[tuple[int, bytes]]:
    """(shard index, entry) for one bucket's entries, given the bucket's start offset:
    in (order key, record id) order, shard ``offset * n // total`` (the cut; its index as
    written is its rank among the occupied cuts, see dense_index)."""
    n, total = split_layout.num_shards, max(split_layout.total_bytes, 1)
    offset = start
    for entry in sorted(entries, key=entry_sort_key):
        yield min(n - 1, offset * n // total), entry
        offset += entry_planned_bytes(entry)


def over_max(shard_sizes: Iterable[tuple[tuple[str, int], tuple[int, int]]],
             bounds: ShardBounds) -> frozenset:
    """Splits with a shard of two or more records above the maximum, from
    ((split, shard), (planned bytes, records)) of every shard: those are cut finely instead."""
    return frozenset(split for (split, _), (size, count) in shard_sizes
                     if count > 1 and size > bounds.max_bytes)


def occupied_cuts(keys: Iterable[tuple[str, int]]) -> dict:
    """{split: sorted cuts holding a record start}, from the (split, cut) of every shard."""
    by_split: dict = {}
    for split, cut in keys:
        by_split.setdefault(split, set()).add(cut)
    return {split: tuple(sorted(cuts)) for split, cuts in by_split.items()}


def dense_index(cut: int, occupied: tuple) -> int:
    """A shard's index: its cut's rank among the split's occupied cuts (the identity where
    every cut is occupied), so that the ``-of-n`` names have no gap."""
    return bisect.bisect_left(occupied, cut)
