"""``local_cache=``: a gs:// dataset (on the GCS emulator) read through a bounded local copy of
its shards (reader/shard_cache.py), by ``reader.load`` and ``RandomAccess``.

The two-class dataset of tests/support/reader_datasets.py (14 small shards) is uploaded to
the emulator; every read through the cache is compared with a read of the local original.
The cache's own counters say what was downloaded, evicted and fetched again."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.reader import shard_cache
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.reader_datasets import archive, plain  # noqa: F401  (fixtures)

PREFIX = "shard_cache/dataset"


@pytest.fixture(scope="module")
def remote(plain, gcs_emulator):  # noqa: F811
    gcs_emulator.upload_tree(plain, PREFIX)
    return gcs_emulator.url(PREFIX)


def _shards(plain) -> list[shard_cache.Shard]:  # noqa: F811
    with open(os.path.join(plain, "dataset.json")) as handle:
        manifest = json.load(handle)
    out = []
    for split in manifest["splits"].values():
        for shard in split["shards"]:
            assert shard["sha256"] and shard["num_bytes"]
            out.append(shard_cache.Shard(f"gs://{PREFIX}/{shard['file']}", shard["sha256"], shard["num_bytes"]))
    return out


def _uri(gcs_emulator, shard: shard_cache.Shard) -> str:  # noqa: F811
    return gcs_emulator.url(shard.uri[len("gs://"):])


def _ids(ds) -> list:
    return [bytes(i) for batch in ds for i in batch["id"].numpy()]


def _cached_bytes(directory: str) -> int:
    """Bytes in the cache directory now (a file the prefetcher evicts meanwhile counts 0)."""
    total = 0
    for entry in os.scandir(directory):
        if entry.name != shard_cache.LOCK_NAME:
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                pass
    return total


@pytest.mark.parametrize("order", [dict(shuffle=False), dict(seed=3, resumable=True)])
def test_load_reads_the_same_records_and_the_second_epoch_downloads_nothing(plain, remote, tmp_path,  # noqa: F811
                                                                          order):
    directory, limit = str(tmp_path / "cache"), 1 << 30
    options = dict(split="train", batch_size=5, output="dict", **order)
    want = _ids(reader.load(plain, **options))
    ds = reader.load(remote, local_cache=directory, local_cache_bytes=limit, **options)
    cache = shard_cache.shared(directory, limit)
    assert _ids(ds) == want
    shards = len(reader.info(plain).shard_paths("train"))
    assert cache.downloads == shards and cache.evictions == 0
    again = reader.load(remote, local_cache=directory, local_cache_bytes=limit, **options)
    assert _ids(again) == want                        # the first epoch again: all local now
    assert cache.downloads == shards


def test_a_limit_below_the_dataset_evicts_and_is_never_exceeded(plain, remote, tmp_path):  # noqa: F811
    sizes = sorted((s.size for s in _shards(plain)), reverse=True)
    limit = sum(sizes[:3])                             # one read, one opened ahead, room for one more
    directory = str(tmp_path / "cache")
    options = dict(split="train", batch_size=1, output="dict", seed=5, resumable=True, cycle_length=1)
    want = _ids(reader.load(plain, repeat=2, **options))
    cache = shard_cache.shared(directory, limit)
    got = []
    for batch in reader.load(remote, repeat=2, local_cache=directory, local_cache_bytes=limit, **options):
        got.append(bytes(batch["id"].numpy()[0]))
        assert _cached_bytes(directory) <= limit
    assert got == want
    assert cache.evictions > 0 and cache.peak_bytes <= limit


def test_random_access_fetches_a_shard_on_first_use_within_the_limit(plain, remote, tmp_path):  # noqa: F811
    sizes = sorted((s.size for s in _shards(plain)), reverse=True)
    limit = sum(sizes[:2])
    directory = str(tmp_path / "cache")
    local = reader.RandomAccess(plain)
    cached = reader.RandomAccess(remote, local_cache=directory, local_cache_bytes=limit)
    order = list(range(0, len(local), 3)) + list(range(len(local) - 1, -1, -4))
    for i in order:
        a, b = local[i], cached[i]
        assert a["id"] == b["id"] and (a["image"] == b["image"]).all()
        assert _cached_bytes(directory) <= limit
    cache = shard_cache.shared(directory, limit)
    assert cache.evictions > 0 and cache.downloads > len(cached._copies)
    assert cache.hits > 0


def test_a_local_dataset_makes_no_copy(plain, tmp_path):  # noqa: F811
    directory = str(tmp_path / "cache")
    records = reader.RandomAccess(plain, local_cache=directory, local_cache_bytes=1)
    assert records[0]["id"] == reader.RandomAccess(plain)[0]["id"]
    list(reader.load(plain, batch_size=8, local_cache=directory, local_cache_bytes=1))
    assert not os.path.exists(directory)


def test_a_damaged_copy_is_found_by_its_sha256_and_fetched_again(plain, remote, gcs_emulator, tmp_path):  # noqa: F811
    shard = _shards(plain)[0]
    uri = _uri(gcs_emulator, shard)
    directory = str(tmp_path / "cache")
    path = shard_cache.ShardCache(directory, 1 << 20).get(uri, shard.sha256, shard.size)
    with open(path, "r+b") as handle:                 # one bit flipped on disk
        first = handle.read(1)
        handle.seek(0)
        handle.write(bytes([first[0] ^ 1]))
    cache = shard_cache.ShardCache(directory, 1 << 20)   # the next run
    assert cache.get(uri, shard.sha256, shard.size) == path
    assert cache.refetches == 1 and cache.downloads == 1
    with open(path, "rb") as handle:
        assert handle.read(1) == first


def test_a_truncated_copy_and_a_stale_part_file_are_replaced(plain, remote, gcs_emulator, tmp_path):  # noqa: F811
    shard = _shards(plain)[1]
    uri = _uri(gcs_emulator, shard)
    directory = tmp_path / "cache"
    directory.mkdir()
    name = shard_cache.local_name(shard_cache.Shard(uri, shard.sha256, shard.size))
    (directory / name).write_bytes(b"\0" * (shard.size // 2))
    (directory / f"{name}.999999.0{shard_cache.PART_SUFFIX}").write_bytes(b"\0" * 7)
    cache = shard_cache.ShardCache(str(directory), 1 << 20)
    assert sorted(os.listdir(directory)) == sorted([name, shard_cache.LOCK_NAME])   # the .part is gone
    path = cache.get(uri, shard.sha256, shard.size)
    assert os.path.getsize(path) == shard.size and cache.refetches == 1 and cache.downloads == 1


KILLED = """
import sys
from dcm2tfrecord.reader import shard_cache
directory, uri, sha256, size = sys.argv[1:]
shard_cache.ShardCache(directory, 1 << 20, chunk_bytes=1).get(uri, sha256, int(size))   # a GET a byte: slow
"""


def test_a_download_killed_midway_leaves_a_part_file_the_next_cache_removes(plain, remote, gcs_emulator,  # noqa: F811
                                                                           tmp_path):
    shard = max(_shards(plain), key=lambda s: s.size)
    uri = _uri(gcs_emulator, shard)
    directory = str(tmp_path / "cache")
    child = subprocess.Popen([sys.executable, "-c", KILLED, directory, uri, shard.sha256, str(shard.size)])
    deadline = time.monotonic() + 60
    parts: list = []
    while not parts and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.02)
        if os.path.isdir(directory):
            parts = [n for n in os.listdir(directory) if n.endswith(shard_cache.PART_SUFFIX)]
    time.sleep(0.1)                                   # some bytes written, far from all
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert parts, "the download finished (or failed) before it could be killed"
    names = os.listdir(directory)
    assert any(n.endswith(shard_cache.PART_SUFFIX) for n in names)
    assert not [n for n in names if not n.endswith(shard_cache.PART_SUFFIX) and n != shard_cache.LOCK_NAME]
    cache = shard_cache.ShardCache(directory, 1 << 20)
    assert not [n for n in os.listdir(directory) if n.endswith(shard_cache.PART_SUFFIX)]
    path = cache.get(uri, shard.sha256, shard.size)
    assert os.path.getsize(path) == shard.size and cache.downloads == 1


def test_a_shard_larger_than_the_limit_is_a_clear_error(plain, remote, tmp_path):  # noqa: F811
    largest = max(s.size for s in _shards(plain))
    with pytest.raises(ValueError, match=r"more than local_cache_bytes=10 holds: raise local_cache_bytes "
                                         rf"to at least {largest}"):
        reader.RandomAccess(remote, local_cache=str(tmp_path / "c"), local_cache_bytes=10)
    with pytest.raises(ValueError, match="local_cache_bytes=10"):
        reader.load(remote, local_cache=str(tmp_path / "c"), local_cache_bytes=10)
    with pytest.raises(ValueError, match="local_cache needs local_cache_bytes"):
        reader.load(remote, local_cache=str(tmp_path / "c"))
