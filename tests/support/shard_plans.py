"""The pipeline's shard planning run in plain Python (transforms/planning/test_shards.py,
test_shards_property.py): records of given sizes, and their plan bucket by bucket."""
from dcm2tfrecord.transforms.hashing import ORDER_KEY_SPACE
from dcm2tfrecord.transforms.planning.shards import (assign_entries, bucket_of_order, bucket_starts, dense_index,
                                                     entry_order, entry_planned_bytes, entry_record, layout,
                                                     make_entry, occupied_cuts, over_max, planning_entry)
from dcm2tfrecord.transforms.record_model import ImageSpec, ProbedRecord, SourceFile


def _records(sizes):
    out = []
    for i, size in enumerate(sizes):
        spec = ImageSpec(1, 1, int(size), 1, "uint8")
        out.append(ProbedRecord(SourceFile(f"/a/{i}", f"{i}", 1, 0.0), f"{i:032x}", "image", spec))
    return out


def _bucket_of(record) -> int:
    return bucket_of_order(entry_order(planning_entry(record)[1]))


def _assign(records, start, lay):
    """(shard index, record) for one bucket's records, through the pipeline's planning entries."""
    for index, entry in assign_entries([planning_entry(r)[1] for r in records], start, lay):
        yield index, entry_record(entry)


def _plan(records, bounds):
    """The pipeline's planning, run in plain Python bucket by bucket: shards of the capped
    count, fine cuts where one of those holds two or more records above the maximum, occupied
    cuts numbered densely. Returns the layout as written and {shard index: records}."""
    lay, shards = _plan_entries([planning_entry(r)[1] for r in records], bounds)
    return lay, {index: [entry_record(e) for e in entries] for index, entries in shards.items()}


def _plan_in_order(sizes, bounds):
    """_plan of entries of these planned bytes in this order (their order keys ascending,
    spread over the key space, so in several buckets): the planner fed any order, not only
    the one the hash of some ids makes. Returns the layout and {shard index: sizes}."""
    n = len(sizes)
    entries = [make_entry(k * ORDER_KEY_SPACE // n, f"{k:032x}", int(size)) for k, size in enumerate(sizes)]
    lay, shards = _plan_entries(entries, bounds)
    return lay, {index: [entry_planned_bytes(e) for e in es] for index, es in shards.items()}


def _plan_entries(entries, bounds):
    """_plan on planning entries (transforms.planning.shards.planning_entry's)."""
    sizes = [entry_planned_bytes(e) for e in entries]
    lay = layout(sum(sizes), len(entries), max(sizes), bounds, min_record_bytes=min(sizes))
    buckets = {}
    for e in entries:
        buckets.setdefault(("train", bucket_of_order(entry_order(e))), []).append(e)
    starts = bucket_starts([(k, sum(entry_planned_bytes(e) for e in v)) for k, v in buckets.items()])

    def cut(split_layout):
        by_cut = {}
        for key, es in buckets.items():
            for index, e in assign_entries(es, starts[key], split_layout):
                by_cut.setdefault(index, []).append(e)
        return by_cut

    by_cut = cut(lay)
    shard_sizes = [(("train", i), (sum(entry_planned_bytes(e) for e in v), len(v))) for i, v in by_cut.items()]
    if "train" in over_max(shard_sizes, bounds):
        by_cut = cut(lay.fine())
    occupied = occupied_cuts(("train", c) for c in by_cut)["train"]
    shards = {dense_index(c, occupied): es for c, es in by_cut.items()}
    return lay.with_occupied(occupied), shards
