"""Shard planning: counts within bounds, sizes within bounds, no gaps, no global state."""
import numpy as np
import pytest

from dcm2tfrecord.transforms.settings import MB, ShardBounds
from dcm2tfrecord.transforms.planning.shards import (bucket_starts, choose_num_shards, entry_order, for_planning,
                                        planning_entry)
from tests.support.shard_plans import _assign, _bucket_of, _plan, _records


def test_small_split_is_one_shard():
    bounds = ShardBounds.from_mb(256, 100, 500)
    assert choose_num_shards(50 * MB, MB, bounds) == 1


def test_default_bounds_at_archive_scale():
    bounds = ShardBounds.from_mb(256, 100, 500)
    total = 8 * 1024 * 1024 * MB   # 8 TB of 512 KB slices
    n = choose_num_shards(total, 512 * 1024, bounds)
    assert 100 * MB <= total / n <= 500 * MB
    assert abs(total / n - 256 * MB) < MB


@pytest.mark.parametrize("seed", range(4))
def test_planned_shards_respect_bounds_and_have_no_gaps(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(20_000, 400_000, size=400)
    bounds = ShardBounds.from_mb(2, 1, 3)
    lay, shards = _plan(_records(sizes), bounds)
    assert sorted(shards) == list(range(lay.num_shards))
    for recs in shards.values():
        size = sum(r.planned_bytes for r in recs)
        assert bounds.min_bytes <= size <= bounds.max_bytes


def test_every_record_planned_exactly_once():
    records = _records(np.full(1000, 10_000))
    lay, shards = _plan(records, ShardBounds.from_mb(1, 0.5, 2))
    planned = [r.record_id for recs in shards.values() for r in recs]
    assert sorted(planned) == sorted(r.record_id for r in records)


@pytest.mark.parametrize("seed", range(3))
def test_buckets_do_not_change_the_shards(seed):
    """Bucketing only splits the work: the shards are those of one global sort of the split."""
    rng = np.random.default_rng(seed)
    records = _records(rng.integers(20_000, 400_000, size=600))
    bounds = ShardBounds.from_mb(2, 1, 3)
    lay, shards = _plan(records, bounds)
    one_bucket = dict.fromkeys(range(lay.num_shards))
    for index, r in _assign(records, 0, lay):
        one_bucket[index] = (one_bucket[index] or []) + [r]
    assert {i: sorted(r.record_id for r in recs) for i, recs in shards.items()} == \
        {i: sorted(r.record_id for r in recs) for i, recs in one_bucket.items()}
    assert len({_bucket_of(r) for r in records}) > lay.num_shards     # several buckets per shard


def test_for_planning_keeps_what_planning_and_writing_use():
    from dcm2tfrecord.transforms.record_model import Identifiers, SliceInfo
    import dataclasses
    record = dataclasses.replace(_records([100])[0], ids=Identifiers("p", "st", "se", "sop"),
                                 slice_info=SliceInfo(position=(1.0, 2.0, 3.0)), label=3, split="test")
    slim = for_planning(record, seed=5)
    assert slim.ids is None and slim.slice_info is None and slim.order is not None
    assert dataclasses.replace(slim, ids=record.ids, slice_info=record.slice_info, order=None) == record
    assert for_planning(slim, seed=5) is slim
    assert entry_order(planning_entry(slim, 5)[1]) == entry_order(planning_entry(record, 5)[1]) == slim.order


def test_huge_record_never_leaves_an_empty_shard():
    sizes = [10_000] * 50 + [5 * MB]
    lay, shards = _plan(_records(sizes), ShardBounds.from_mb(1, 0.5, 8))
    assert sorted(shards) == list(range(lay.num_shards))


def test_bucket_starts_are_prefix_sums_per_split():
    starts = bucket_starts([(("train", 2), 5), (("train", 0), 3), (("test", 1), 7), (("train", 1), 4)])
    assert starts == {("train", 0): 0, ("train", 1): 3, ("train", 2): 7, ("test", 1): 0}


def test_skewed_50kb_and_8mb_records_stay_within_default_bounds():
    rng = np.random.default_rng(7)
    sizes = np.where(rng.random(6000) < 0.8, 50 * 1024, 8 * MB)   # ~9.6 GB planned
    bounds = ShardBounds.from_mb(256, 100, 500)
    lay, shards = _plan(_records(sizes), bounds)
    assert lay.num_shards > 30
    assert sorted(shards) == list(range(lay.num_shards))
    for recs in shards.values():
        size = sum(r.planned_bytes for r in recs)
        assert bounds.min_bytes <= size <= bounds.max_bytes
