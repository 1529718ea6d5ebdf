"""Shard sizes stay within bounds; the same input gives byte-identical output on any runner."""
import filecmp
import os

import pytest

import reader
from tests.conftest import SAMPLE_OPTIONS, run_convert, write_png_archive

MB = 1 << 20


@pytest.fixture(scope="module")
def rgb_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("rgb30") / "archive"
    write_png_archive(root, count=150, height=256, width=256, channels=3, seed=11)
    return str(root)


def test_every_shard_within_small_bounds(rgb_archive, tmp_path):
    summary = run_convert(rgb_archive, tmp_path / "out", target_shard_mb=2, min_shard_mb=1,
                          max_shard_mb=3)
    manifest = reader.info(str(tmp_path / "out"))
    split = manifest["splits"]["train"]
    assert split["num_records"] == 150
    assert split["num_bytes"] > 28 * MB
    assert len(split["shards"]) >= 10
    for shard in split["shards"]:
        size = os.path.getsize(tmp_path / "out" / shard["file"])
        assert size == shard["num_bytes"]
        assert 1 * MB <= size <= 3 * MB, (shard["file"], size)
    assert summary["splits"]["train"]["shards"] == len(split["shards"])
    names = [s["file"] for s in split["shards"]]
    n = len(names)
    assert names == [f"train-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]


def _tree(path):
    return sorted(f for f in os.listdir(path) if not f.startswith("."))


def test_in_memory_and_multi_process_runs_are_byte_identical(sample_archive, sample_dataset, tmp_path):
    out = tmp_path / "multi"
    run_convert(sample_archive, out, beam_args=["--direct_running_mode=multi_processing",
                                                "--direct_num_workers=2"],
                **SAMPLE_OPTIONS)
    assert _tree(out) == _tree(sample_dataset)
    match, mismatch, errors = filecmp.cmpfiles(sample_dataset, out, _tree(out), shallow=False)
    assert mismatch == [] and errors == []
    assert "dataset.json" in match and "errors.jsonl" in match


def test_existing_dataset_is_not_replaced_without_overwrite(rgb_archive, tmp_path):
    from pipeline.options import UsageError
    small = dict(target_shard_mb=8, min_shard_mb=1, max_shard_mb=64)
    run_convert(rgb_archive, tmp_path / "out", **small)
    with pytest.raises(UsageError, match="--overwrite"):
        run_convert(rgb_archive, tmp_path / "out", **small)
    run_convert(rgb_archive, tmp_path / "out", overwrite=True, **small)
    assert reader.info(str(tmp_path / "out"))["counts"]["written"] == 150
