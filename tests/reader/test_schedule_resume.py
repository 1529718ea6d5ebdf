"""reader.load(seed=S, start_step=k): exactly the batches an uninterrupted run yields from k on.

The two-class archive of reader/test_tfdata (48 records in 14 shards of
3-4), read with small cycles and shuffle windows so that resuming crosses
shard groups, windows and epoch ends.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from dcm2tfrecord.reader.schedule import Order
from dcm2tfrecord.dataset.tfrecord import parse_index
from tests.support.reader_datasets import RECORDS, archive, plain  # noqa: F401  (fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = dict(cycle_length=4, shuffle_buffer=7)


def _batches(ds, limit=None) -> list[list[str]]:
    out = []
    for i, batch in enumerate(ds):
        if limit is not None and i >= limit:
            break
        out.append([x.decode() for x in batch["id"].numpy()])
    return out


def _load(dataset, **kwargs):
    kwargs.setdefault("output", "dict")
    kwargs.setdefault("resumable", kwargs.get("seed") is not None)
    return reader.load(dataset, **kwargs)


@pytest.mark.parametrize("options", [dict(SMALL), {}], ids=["small-windows", "defaults"])
def test_resumed_runs_equal_the_uninterrupted_run_across_epochs(plain, options):  # noqa: F811
    steps = 40                                           # 5 records a batch: 200 records, 4+ epochs
    full = _batches(_load(plain, batch_size=5, seed=3, repeat=True, **options), steps)
    flat = [r for b in full for r in b]
    epochs = [flat[i:i + RECORDS] for i in range(0, 4 * RECORDS, RECORDS)]
    assert all(sorted(e) == sorted(epochs[0]) for e in epochs)          # each epoch: every record
    assert len({tuple(e) for e in epochs}) == 4                         # in a new order each time
    for k in (1, 4, 9, 10, 19, 33):                    # 9: the batch that crosses the first epoch end
        resumed = _batches(_load(plain, batch_size=5, seed=3, repeat=True, start_step=k, **options),
                           steps - k)
        assert resumed == full[k:], k


def test_the_order_is_a_function_of_seed_and_epoch_only(plain):  # noqa: F811
    ds = _load(plain, batch_size=8, seed=5, repeat=2, **SMALL)
    one, next_pass = _batches(ds), _batches(ds)
    two = _batches(_load(plain, batch_size=8, seed=5, repeat=2, **SMALL))
    other = _batches(_load(plain, batch_size=8, seed=6, repeat=2, **SMALL))
    assert one == two and one != other and len(one) == 12
    in_files = sorted(reader.RandomAccess(plain)[i]["id"].decode() for i in range(RECORDS))
    assert sorted(r for b in one[:6] for r in b) == in_files
    assert [r for b in one[:6] for r in b] != [reader.RandomAccess(plain)[i]["id"].decode()
                                               for i in range(RECORDS)]
    assert next_pass != one and sorted(map(sorted, next_pass)) != sorted(map(sorted, one))
    # step 12 is the first of the second iteration (a Keras epoch over repeat=2)
    assert _batches(_load(plain, batch_size=8, seed=5, repeat=2, start_step=12, **SMALL)) == next_pass
    assert _batches(_load(plain, batch_size=8, seed=5, repeat=2, start_step=7, **SMALL)) == one[7:]


def test_each_iteration_without_repeat_is_the_next_epoch_and_resumes_there(plain):  # noqa: F811
    ds = _load(plain, batch_size=5, seed=9, **SMALL)
    epochs = [_batches(ds) for _ in range(3)]            # what Keras does with epochs=3
    assert len(epochs[0]) == 10 and epochs[0] != epochs[1] != epochs[2]
    resumed = _load(plain, batch_size=5, seed=9, start_step=13, **SMALL)   # epoch 1, step 3
    assert _batches(resumed) == epochs[1][3:]
    assert _batches(resumed) == epochs[2]


def test_unshuffled_reads_resume_too(plain):  # noqa: F811
    full = _batches(_load(plain, batch_size=3, shuffle=False, cycle_length=4))
    order = Order(tuple(reader.info(plain).shard_records()), None, "train", 4)
    records = reader.RandomAccess(plain)
    starts = np.cumsum([0] + list(order.counts[:-1]))
    assert [r for b in full for r in b] == [records[int(starts[s]) + k]["id"].decode()
                                            for s, k in order.sequence(0)]
    assert _batches(_load(plain, batch_size=3, shuffle=False, cycle_length=4, start_step=5)) == full[5:]


@pytest.mark.parametrize("pipelines", [2, 16], ids=["by-file", "by-record"])
def test_each_input_pipeline_resumes_its_own_part(plain, pipelines):  # noqa: F811
    seen = []
    for index in range(pipelines):
        context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index)
        per_epoch = reader.info(plain).num_records("train", context)
        steps = per_epoch // 2 + 3                                    # into the next epoch
        full = _batches(_load(plain, batch_size=2, seed=4, repeat=True, input_context=context, **SMALL),
                        steps)
        assert len(full) == (steps if per_epoch else 0)   # 16 pipelines over shards of 3-4: 12 hold none
        for k in ((1, steps - 2) if index in (0, pipelines - 1) else ()):
            resumed = _load(plain, batch_size=2, seed=4, repeat=True, input_context=context,
                            start_step=k, **SMALL)
            assert _batches(resumed, steps - k) == full[k:], (index, k)
        seen += [r for b in full for r in b][:per_epoch]
    assert sorted(seen) == sorted(reader.RandomAccess(plain)[i]["id"].decode() for i in range(RECORDS))


def test_resuming_skips_records_without_reading_them(plain, tmp_path):  # noqa: F811
    """A corrupt record before the start, in a shard still open there, is never read."""
    copy = str(tmp_path / "dataset")
    shutil.copytree(plain, copy)
    order = Order(tuple(reader.info(copy).shard_records()), None, "train", 4)
    sequence = order.sequence(0)
    k = 10
    later = {shard for shard, _ in sequence[k:]}
    shard, record = next((s, r) for s, r in sequence[:k] if s in later)    # skipped, shard open
    path = reader.info(copy).shard_paths()[shard]
    offsets, sizes = parse_index(open(path + ".idx").read())
    with open(path, "r+b") as handle:
        handle.seek(int(offsets[record]) + int(sizes[record]) // 2)
        handle.write(b"\xff\x00\xff\x00")
    resumed = _batches(_load(copy, batch_size=1, shuffle=False, cycle_length=4, start_step=k))
    assert len(resumed) == RECORDS - k
    with pytest.raises(tf.errors.DataLossError):
        _batches(_load(copy, batch_size=1, shuffle=False, cycle_length=4))


def test_start_step_needs_an_order_that_depends_on_the_step_only(plain):  # noqa: F811
    with pytest.raises(ValueError, match="start_step needs a seed"):
        reader.load(plain, start_step=3)
    with pytest.raises(ValueError, match="start_step needs a seed"):
        reader.load(plain, seed=1, cache="memory", start_step=3)
    with pytest.raises(ValueError, match="resumable=True to the uninterrupted run"):
        reader.load(plain, seed=1, start_step=3)          # a seed alone: the previous, faster order
    with pytest.raises(ValueError, match="resumable=True needs a seed"):
        reader.load(plain, resumable=True)


def test_a_seed_alone_keeps_the_previous_order(plain):  # noqa: F811
    """Without resumable=True a seeded load is the pipeline of releases before start_step."""
    plain_seeded = _batches(reader.load(plain, batch_size=8, seed=3, output="dict"))
    assert plain_seeded == _batches(reader.load(plain, batch_size=8, seed=3, output="dict"))
    assert plain_seeded != _batches(_load(plain, batch_size=8, seed=3))


def _fit(dataset, work, total, kill_at):
    env = dict(os.environ, PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, os.path.join(REPO, "tests", "support", "keras_resume_script.py"),
                           dataset, str(work), str(total), str(kill_at)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_keras_fit_killed_mid_epoch_and_restarted_sees_the_batches_of_one_fit(plain, tmp_path):  # noqa: F811
    total = 30                             # 12 steps an epoch: the kill at 17 is inside epoch 2
    (tmp_path / "once").mkdir()
    (tmp_path / "killed").mkdir()
    once = _fit(plain, tmp_path / "once", total, kill_at=0)
    assert once.returncode == 0, once.stderr[-3000:]
    killed = _fit(plain, tmp_path / "killed", total, kill_at=17)
    assert killed.returncode == -9                                     # SIGKILL, mid-epoch
    lines_killed = (tmp_path / "killed" / "batches.log").read_text().splitlines()
    assert len(lines_killed) == 17                                     # checkpoint at 15
    restarted = _fit(plain, tmp_path / "killed", total, kill_at=0)
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    log_once = (tmp_path / "once" / "batches.log").read_text().splitlines()
    log_after = (tmp_path / "killed" / "batches.log").read_text().splitlines()
    assert len(log_once) == total
    assert log_after[:15] + log_after[17:] == log_once                 # what the weights saw
    np.testing.assert_allclose(np.load(tmp_path / "killed" / "final_kernel.npy"),
                               np.load(tmp_path / "once" / "final_kernel.npy"), rtol=1e-6)


def test_a_global_seed_does_not_change_the_order(plain):  # noqa: F811
    """keras.utils.set_random_seed(0) in one run and not in the other: the same batches."""
    before = _batches(_load(plain, batch_size=8, seed=3, **SMALL))
    tf.random.set_seed(0)
    try:
        assert _batches(_load(plain, batch_size=8, seed=3, **SMALL)) == before
    finally:
        tf.random.set_seed(None)


def _interleaved(shards, skips, counts, cycle, parallel):
    inputs = tf.data.Dataset.from_tensor_slices((np.array(shards, np.int64), np.array(skips, np.int64)))
    counts = tf.constant(counts, tf.int64)

    def records(shard, skip):
        return tf.data.Dataset.range(tf.gather(counts, shard)).skip(skip).map(lambda r: (shard, r))
    options = dict(num_parallel_calls=tf.data.AUTOTUNE, deterministic=True) if parallel else {}
    return [(int(s), int(r)) for s, r in
            inputs.interleave(records, cycle_length=cycle, block_length=1, **options).as_numpy_iterator()]


def test_the_order_is_tf_data_interleave_and_resumes_at_every_position():
    """Order replays tf.data's round robin (finished shards, empty ones, short last rounds)."""
    rng = np.random.default_rng(17)
    for case in range(12):
        counts = tuple(int(c) for c in rng.integers(0, 7, int(rng.integers(1, 9))))
        order = Order(counts, int(case) if case % 3 else None, "train", int(rng.integers(1, 6)))
        full = order.sequence(1)
        assert sorted(full) == [(s, r) for s, c in enumerate(counts) for r in range(c)]
        assert full == _interleaved(order.shard_order(1), [0] * len(counts), counts, order.cycle,
                                    parallel=bool(case % 2))
        for position in range(0, len(full) + 1, 1 if case % 4 == 0 else 4):
            shards, skips = order.inputs_from(1, position)
            assert _interleaved(shards, skips, counts, order.cycle, parallel=True) == full[position:], \
                (counts, order.cycle, position)


@pytest.mark.parametrize("repeat", [False, 2], ids=["epoch-per-iteration", "two-epochs-per-iteration"])
def test_resume_with_drop_remainder_counts_only_whole_batches(plain, repeat):  # noqa: F811
    """drop_remainder=True: a pass of 48 * epochs records is 48 * epochs // 5 steps, not one more;
    start_step counts those steps, so resuming at a pass end starts the next pass."""
    ds = _load(plain, batch_size=5, seed=4, drop_remainder=True, repeat=repeat, **SMALL)
    passes = [_batches(ds) for _ in range(3)]
    per_pass = RECORDS * (repeat or 1) // 5
    assert [len(p) for p in passes] == [per_pass] * 3
    assert reader.info(plain).steps_per_epoch("train", 5, drop_remainder=True) == RECORDS // 5
    full = [b for p in passes for b in p]
    for k in (1, per_pass - 1, per_pass, per_pass + 1, 2 * per_pass):
        resumed = _load(plain, batch_size=5, seed=4, drop_remainder=True, repeat=repeat, start_step=k,
                        **SMALL)
        got = _batches(resumed)
        while len(got) < len(full) - k:                # the next iterations: the next passes
            got += _batches(resumed)
        assert got == full[k:], k


def _context(pipelines, index):
    return tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index)


def _elastic(dataset, pipelines, global_batch, steps=None, **kwargs):
    """Each pipeline's batches of an elastic load: ``[pipeline][step] -> ids``."""
    return [_batches(_load(dataset, batch_size=global_batch // pipelines, elastic=True,
                           input_context=_context(pipelines, index), **kwargs), steps)
            for index in range(pipelines)]


def _global(per_pipeline) -> list[list[str]]:
    """The global batches the pipelines' batches make together (a step's union, sorted)."""
    steps = max(len(batches) for batches in per_pipeline)
    return [sorted(r for batches in per_pipeline if s < len(batches) for r in batches[s]) for s in range(steps)]


def test_an_elastic_run_resumes_exactly_on_another_number_of_pipelines(plain):  # noqa: F811
    """4 pipelines to step k, then 2 or 8 from k: the union of the batches is the
    uninterrupted single-pipeline run's, nothing repeated or skipped (global batch 8, across
    the end of epochs)."""
    steps, k = 15, 5                                            # 120 records: 2.5 epochs
    single = _batches(_load(plain, batch_size=8, seed=7, repeat=True, **SMALL), steps)
    assert _elastic(plain, 1, 8, steps, seed=7, repeat=True, **SMALL) == [single]
    four = _elastic(plain, 4, 8, k, seed=7, repeat=True, **SMALL)
    assert all(len(batches) == k for batches in four)
    assert _global(four) == [sorted(b) for b in single[:k]]
    for pipelines in (2, 8):
        resumed = _elastic(plain, pipelines, 8, steps - k, seed=7, repeat=True, start_step=k, **SMALL)
        assert all(len(batches[0]) == 8 // pipelines for batches in resumed)
        assert _global(four) + _global(resumed) == [sorted(b) for b in single], pipelines
    # and a 4-pipeline run resumed with 4 reads the same batches as its own uninterrupted run
    again = _elastic(plain, 4, 8, steps - k, seed=7, repeat=True, start_step=k, **SMALL)
    assert [b[:k] for b in _elastic(plain, 4, 8, steps, seed=7, repeat=True, **SMALL)] == four
    assert _global(again) == [sorted(b) for b in single[k:]]


@pytest.mark.parametrize("drop_remainder", [True, False], ids=["drop-remainder", "partial-last-batch"])
def test_an_elastic_pass_ends_as_the_single_pipeline_pass_does(plain, drop_remainder):  # noqa: F811
    """repeat=2: 96 records in global batches of 10. drop_remainder: every pipeline has the
    9 whole batches and no more; without it the last 6 records are shared as far as they go."""
    single = _batches(_load(plain, batch_size=10, seed=2, repeat=2, drop_remainder=drop_remainder))
    assert len(single) == (9 if drop_remainder else 10)
    for pipelines in (2, 5):
        per = _elastic(plain, pipelines, 10, seed=2, repeat=2, drop_remainder=drop_remainder)
        if drop_remainder:
            assert [len(batches) for batches in per] == [9] * pipelines
        assert _global(per) == [sorted(b) for b in single], pipelines
        resumed = _elastic(plain, pipelines, 10, seed=2, repeat=2, drop_remainder=drop_remainder, start_step=7)
        assert _global(resumed) == [sorted(b) for b in single[7:]], pipelines


def test_elastic_needs_an_order_that_is_a_function_of_the_step(plain):  # noqa: F811
    with pytest.raises(ValueError, match="elastic=True needs"):
        reader.load(plain, batch_size=2, seed=1, elastic=True)                 # not resumable
    with pytest.raises(ValueError, match="elastic=True needs"):
        reader.load(plain, batch_size=2, elastic=True)                         # shuffled, no seed
