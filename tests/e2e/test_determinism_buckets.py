"""Same bytes with many records in each planning bucket, whatever the runner and workers.

The end-to-end archives elsewhere put about one record in each of the 65536
planning buckets, so the order inside a bucket (transforms.planning.shards.
assign_entries) is only unit-tested. Here PlanShards(buckets=3) (the count travels
with the graph to every worker process) puts ~20 records in each bucket of each
split; the shards must equal those of the default bucket count (the shards do
not depend on how the order is cut into buckets) under in_memory, multi_threading
and multi_processing, for the default options and a set that changes seed,
splits, compression, min_shards, resize and channels.
"""
from __future__ import annotations

import pytest

from tests.support import RUNNER_MODES, run_convert, write_png_archive
from tests.support.pinned import shard_hashes
from dcm2tfrecord.pipeline import graph
from dcm2tfrecord.transforms.planning.steps import PlanShards

BUCKETS = 3
OPTION_SETS = {
    "default": dict(target_shard_mb=0.004, min_shard_mb=0.002, max_shard_mb=0.02),
    "non_default": dict(target_shard_mb=0.003, min_shard_mb=0.001, max_shard_mb=0.02, seed=11,
                        splits="train=0.5,validation=0.3,test=0.2", compression="gzip", min_shards=3,
                        resize="10x12", resize_mode="pad", channels="3"),
}
MODES = RUNNER_MODES


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("buckets") / "in"
    for i, (height, width) in enumerate(((8, 8), (12, 9), (16, 20))):   # three record sizes
        write_png_archive(root / f"size{i}", 20, height, width, seed=i)
    return root


@pytest.fixture(scope="module")
def reference(archive, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    return {name: shard_hashes(_convert(archive, out / name, MODES["in_memory"], options))
            for name, options in OPTION_SETS.items()}


def _convert(archive, out, beam_args, options) -> str:
    run_convert(archive, out, beam_args=beam_args, **options)
    return str(out)


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("options", sorted(OPTION_SETS))
def test_many_records_per_bucket_give_the_same_bytes(archive, reference, tmp_path, monkeypatch, mode,
                                                     options):
    # the graph is built here: its PlanShards step takes the count, and its workers get it
    built: list = []

    def few_buckets(*args, **kwargs) -> PlanShards:
        built.append(PlanShards(*args, buckets=BUCKETS, **kwargs))
        return built[-1]

    monkeypatch.setattr(graph, "PlanShards", few_buckets)
    got = shard_hashes(_convert(archive, tmp_path / "out", MODES[mode], OPTION_SETS[options]))
    assert [step.buckets for step in built] == [BUCKETS]
    assert len(got) >= 6 and got == reference[options]
