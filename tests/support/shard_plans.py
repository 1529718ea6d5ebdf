"""The pipeline's shard planning run in plain Python (transforms/planning/test_shards.py,
test_shards_property.py): records of given sizes, and their plan bucket by bucket."""
from dcm2tfrecord.transforms.planning.shards import (ORDER, assign_entries, bucket_of_order, bucket_starts,
                                                     dense_index, entry_record, layout, occupied_cuts,
                                                     over_max, planning_entry)
from dcm2tfrecord.transforms.values import ImageSpec, ProbedRecord, SourceFile


def _records(sizes):
    out = []
    for i, size in enumerate(sizes):
        spec = ImageSpec(1, 1, int(size), 1, "uint8")
        out.append(ProbedRecord(SourceFile(f"/a/{i}", f"{i}", 1, 0.0), f"{i:032x}", "image", spec))
    return out


def _bucket_of(record) -> int:
    return bucket_of_order(planning_entry(record)[1][ORDER])


def _assign(records, start, lay):
    """(shard index, record) for one bucket's records, through the pipeline's planning entries."""
    for index, entry in assign_entries([planning_entry(r)[1] for r in records], start, lay):
        yield index, entry_record(entry)


def _plan(records, bounds):
    """The pipeline's planning, run in plain Python bucket by bucket: shards of the capped
    count, fine cuts where one of those holds two or more records above the maximum, occupied
    cuts numbered densely. Returns the layout as written and {shard index: records}."""
    total = sum(r.planned_bytes for r in records)
    lay = layout(total, len(records), max(r.planned_bytes for r in records), bounds,
                 min_record_bytes=min(r.planned_bytes for r in records))
    buckets = {}
    for r in records:
        buckets.setdefault(("train", _bucket_of(r)), []).append(r)
    starts = bucket_starts([(k, sum(r.planned_bytes for r in v)) for k, v in buckets.items()])

    def cut(split_layout):
        by_cut = {}
        for key, recs in buckets.items():
            for index, r in _assign(recs, starts[key], split_layout):
                by_cut.setdefault(index, []).append(r)
        return by_cut

    by_cut = cut(lay)
    sizes = [(("train", i), (sum(r.planned_bytes for r in v), len(v))) for i, v in by_cut.items()]
    if "train" in over_max(sizes, bounds):
        by_cut = cut(lay.fine())
    occupied = occupied_cuts(("train", c) for c in by_cut)["train"]
    shards = {dense_index(c, occupied): recs for c, recs in by_cut.items()}
    return lay.with_occupied(occupied), shards
