"""Split specs (``"train[:10%]"``, ``"train+validation"``): the pure parser and planner of
reader.splits, then reader.load, RandomAccess and DatasetInfo on slices of a real dataset."""
from __future__ import annotations

import math

import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.reader import splits
from dcm2tfrecord.reader.splits import Piece, Slice
from tests.support import run_convert
from tests.support.reader_datasets import SMALL_SHARDS, archive  # noqa: F401  (fixture)

SIZES = {"train": 48, "validation": 10, "test": 5}


def _resolve(spec, sizes=SIZES):
    return [(s.split, s.start, s.stop) for s in splits.resolve(spec, sizes)]


@pytest.mark.parametrize("spec,want", [
    ("train", [("train", 0, 48)]),
    ("train[:10%]", [("train", 0, 5)]),                  # 4.8 rounds to 5
    ("train[10%:20%]", [("train", 5, 10)]),              # 4.8 -> 5, 9.6 -> 10
    ("train[-1000:]", [("train", 0, 48)]),               # clamped
    ("train[100:200]", [("train", 48, 48)]),             # clamped: nothing
    ("train[-10:-2]", [("train", 38, 46)]),
    ("train[-25%:]", [("train", 36, 48)]),
    ("train[12.5%:]", [("train", 6, 48)]),
    ("train[30:10]", [("train", 30, 10)]),               # stop before start: nothing
    ("train+validation", [("train", 0, 48), ("validation", 0, 10)]),
    ("train[:50%] + validation[:10]", [("train", 0, 24), ("validation", 0, 10)]),
    ("test[:50%]", [("test", 0, 2)]),                    # 2.5 rounds half to even, as TFDS
    ("test[:70%]", [("test", 0, 4)]),                    # 3.5 -> 4
    ("train[:]", [("train", 0, 48)]),
])
def test_specs_resolve_like_tfds(spec, want):
    assert _resolve(spec) == want


def test_percent_boundaries_round_to_the_closest_record_like_tfds():
    for n in (1, 5, 7, 48, 99, 1001):
        for pct in range(0, 101, 5):
            [(_, _, stop)] = _resolve(f"train[:{pct}%]", {"train": n})
            assert stop == int(round(pct * n / 100.0))
        cuts = [_resolve(f"train[{p}%:{p + 10}%]", {"train": n})[0] for p in range(0, 100, 10)]
        assert [c[1] for c in cuts[1:]] == [c[2] for c in cuts[:-1]]        # ten folds tile the split
        assert cuts[0][1] == 0 and cuts[-1][2] == n


def test_a_split_name_that_looks_like_a_spec_is_that_split():
    assert _resolve("a+b", {"a+b": 3, "a": 1}) == [("a+b", 0, 3)]


@pytest.mark.parametrize("spec,why", [
    ("", "empty"),
    ("train[abc]", "not a split name or split"),
    ("train[5%%:]", "not a record number or a percent"),
    ("train[5%%]", "not a split name or split"),
    ("train[::2]", "not a split name or split"),
    ("train[1:2:3]", "not a split name or split"),
    ("train[5]", "not a split name or split"),
    ("train[1.5:]", "whole numbers"),
    ("train[:150%]", "between -100% and 100%"),
    ("train[10:50%]", "both boundaries"),
    ("train+", "'' is not a split name"),
    ("train[:4shard]", "not a record number or a percent"),
    (7, "not a string"),
])
def test_malformed_specs_name_the_spec_and_the_accepted_forms(spec, why):
    with pytest.raises(ValueError) as error:
        splits.resolve(spec, SIZES)
    message = str(error.value)
    assert why in message and repr(spec) in message and "train[:10%]" in message, message


def test_an_unknown_split_in_a_spec_names_the_splits_there_are():
    with pytest.raises(ValueError, match=r"split 'tset' not in .* \(splits: test, train, validation\), "
                                         r"in split spec 'train\+tset\[:5\]'"):
        splits.resolve("train+tset[:5]", SIZES)


def test_pieces_cut_shards_at_the_slice_boundaries():
    records = {"train": [4, 3, 5], "validation": [10]}
    got = splits.pieces([Slice("train", 2, 9), Slice("validation", 0, 10), Slice("train", 12, 12)], records)
    assert got == [Piece("train", 0, 2, 2, 4), Piece("train", 1, 0, 3, 3), Piece("train", 2, 0, 2, 5),
                   Piece("validation", 0, 0, 10, 10)]
    assert [p.whole for p in got] == [False, True, False, True]
    assert sum(p.count for p in got) == 7 + 10


def _manifest(**splits_):
    return Manifest.from_json({"splits": splits_, "features": {}})


def _entry(records, shape=(1, 8, 8, 3), dtypes=("uint8",), fixed=True):
    return {"num_records": records, "num_bytes": records * 100, "dtypes": list(dtypes),
            "shapes": [list(shape)], "fixed_shape": fixed, "max_depth": shape[0], "shards": []}


def test_a_union_has_the_layout_of_its_splits_and_a_common_dtype():
    manifest = _manifest(train=_entry(40, dtypes=("uint8",)), validation=_entry(10, dtypes=("int16",)))
    entry = splits.selection_entry(manifest, "train+validation[:5]",
                                   splits.resolve("train+validation[:5]", {"train": 40, "validation": 10}))
    assert entry.num_records == 45 and entry.num_bytes == 4500
    assert entry.dtypes == ("int16", "uint8") and entry.fixed_shape
    whole = splits.selection_entry(manifest, "train", [Slice("train", 0, 40)])
    assert whole is manifest.splits["train"]


def test_a_union_of_splits_with_different_image_shapes_is_refused_by_name():
    manifest = _manifest(train=_entry(4), validation=_entry(4, shape=(1, 16, 16, 3)))
    with pytest.raises(ValueError, match=r"split 'train\+validation': a union needs splits whose images "
                                         r"share one shape, but 'train' holds images of 8x8x3 and "
                                         r"'validation' holds images of 16x16x3"):
        splits.selection_entry(manifest, "train+validation",
                               [Slice("train", 0, 4), Slice("validation", 0, 4)])


# --- end to end: the two-class archive of reader/test_tfdata, split 70/30 into small shards ---

@pytest.fixture(scope="module")
def two_splits(archive, tmp_path_factory):  # noqa: F811  (the fixture)
    out = tmp_path_factory.mktemp("two_splits") / "dataset"
    run_convert(archive, out, labels_from_dirs=True, splits="train=0.7,validation=0.3", **SMALL_SHARDS)
    return str(out)


def _ids(ds) -> list[str]:
    return [x.decode() for batch in ds for x in batch["id"].numpy()]


def _in_order(dataset, spec, **kwargs) -> list[str]:
    """The records of ``spec`` in stored order (one shard at a time, unshuffled)."""
    return _ids(reader.load(dataset, spec, batch_size=4, shuffle=False, cycle_length=1, output="dict",
                            **kwargs))


def test_the_fixture_has_shards_that_slices_cut(two_splits):
    meta = reader.info(two_splits)
    assert meta.split_names == ["train", "validation"]
    assert len(meta.shard_paths("train")) >= 4 and len(meta.shard_paths("validation")) >= 2


@pytest.mark.parametrize("spec", ["train[:10%]", "train[10%:20%]", "train[-7:]", "train[3:13]",
                                  "train[5:-5]", "validation[-50%:]", "train[100:200]"])
def test_a_slice_reads_the_records_at_its_positions_in_stored_order(two_splits, spec):
    meta = reader.info(two_splits)
    [s] = meta.slices(spec)
    everything = _in_order(two_splits, s.split)
    assert everything == [reader.RandomAccess(two_splits, s.split)[i]["id"].decode()
                          for i in range(len(everything))]
    want = everything[s.start:s.stop]
    assert _in_order(two_splits, spec) == want
    assert [r["id"].decode() for r in reader.RandomAccess(two_splits, spec)] == want
    assert meta.num_records(spec) == len(want) == sum(meta.shard_records(spec))
    ds = reader.load(two_splits, spec, batch_size=3)
    assert int(ds.cardinality()) == math.ceil(len(want) / 3) == meta.steps_per_epoch(spec, 3)
    assert sorted(_ids(reader.load(two_splits, spec, batch_size=3, output="dict"))) == sorted(want)


def test_halves_make_up_the_split_and_unions_concatenate(two_splits):
    train, validation = _in_order(two_splits, "train"), _in_order(two_splits, "validation")
    assert _in_order(two_splits, "train[:50%]+train[50%:]") == train
    assert _in_order(two_splits, "train+validation") == train + validation
    n = len(train)
    want = train[:int(round(n / 2))] + validation[:10]
    assert _in_order(two_splits, "train[:50%] + validation[:10]") == want
    assert reader.info(two_splits).num_records("train[:50%]+validation[:10]") == len(want)


def test_a_slice_holds_the_same_records_whatever_the_shuffle(two_splits):
    spec = "train[3:-4]+validation[:40%]"
    want = sorted(_in_order(two_splits, spec))
    for kwargs in (dict(seed=1), dict(seed=2), dict(seed=1, resumable=True), {}):
        ds = reader.load(two_splits, spec, batch_size=5, output="dict", **kwargs)
        assert sorted(_ids(ds)) == want, kwargs
        assert int(ds.cardinality()) == math.ceil(len(want) / 5)


def test_resuming_a_slice_yields_the_batches_of_the_uninterrupted_run(two_splits):
    spec, small = "train[5:-5]+validation[:50%]", dict(cycle_length=3, shuffle_buffer=4)
    per_epoch = reader.info(two_splits).num_records(spec)
    steps = 2 * per_epoch // 3 + 2
    load = dict(batch_size=3, seed=7, resumable=True, repeat=True, output="dict", **small)
    full = [[x.decode() for x in b["id"].numpy()] for b in reader.load(two_splits, spec, **load).take(steps)]
    flat = [r for b in full for r in b]
    assert len(full) == steps and sorted(flat[:per_epoch]) == sorted(_in_order(two_splits, spec))
    for k in (1, per_epoch // 3 - 1, per_epoch // 3 + 1):
        resumed = reader.load(two_splits, spec, start_step=k, **load).take(steps - k)
        assert [[x.decode() for x in b["id"].numpy()] for b in resumed] == full[k:], k


@pytest.mark.parametrize("pipelines", [2, 40], ids=["by-file", "by-record"])
@pytest.mark.parametrize("ordered", [False, True], ids=["interleave", "resumable"])
def test_input_pipelines_partition_a_slice(two_splits, pipelines, ordered):
    spec = "train[5:-5]+validation[:50%]"
    meta = reader.info(two_splits)
    seen = []
    for index in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index)
        extra = dict(seed=3, resumable=True) if ordered else {}
        ids = _ids(reader.load(two_splits, spec, batch_size=2, output="dict", input_context=context, **extra))
        assert len(ids) == meta.num_records(spec, context)
        seen += ids
    assert sorted(seen) == sorted(_in_order(two_splits, spec))
