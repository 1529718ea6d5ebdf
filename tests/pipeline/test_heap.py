"""The local runner hands freed memory back to the system between stages (pipeline.launch.heap,
issue 47 item 3): glibc's malloc_trim really releases the free pages a fragmented heap keeps,
and the local conversion's FnApiRunner calls it before each stage it executes."""
from __future__ import annotations

import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from dcm2tfrecord.pipeline.launch import fork_server, heap

GLIBC = sys.platform.startswith("linux") and heap._malloc_trim() is not None


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_trim_returns_the_free_pages_a_fragmented_heap_keeps():
    # 8 KB blocks (malloc's, not pymalloc's: above 512 B) between small ones that stay:
    # freed, the 8 KB blocks leave holes below the heap's top, which free() alone keeps
    big, keep = [], []
    for i in range(12_000):
        big.append(bytes(8_000) + i.to_bytes(4, "little"))
        keep.append(bytes(600) + i.to_bytes(4, "little"))
    for block in big:                          # touch every page, so they are resident
        assert block[0] == 0
    del big
    before = _rss_bytes()
    assert heap.release_free_memory() is True
    released = before - _rss_bytes()
    assert released > 40 << 20, f"released {released / 2**20:.1f} MiB of ~96 MiB freed"
    assert len(keep) == 12_000


def test_without_malloc_trim_it_does_nothing(monkeypatch):
    monkeypatch.setattr(heap, "_LOOKED", True)
    monkeypatch.setattr(heap, "_TRIM", None)
    assert heap.release_free_memory() is False


def test_the_local_runner_releases_before_each_stage(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(fork_server, "release_free_memory", lambda: calls.append(1) or True)
    options = PipelineOptions(["--direct_num_workers=1", "--direct_running_mode=in_memory"])
    with beam.Pipeline(runner=fork_server.local_runner(None), options=options) as p:
        _ = (p | beam.Create(range(100)) | beam.Map(lambda x: (x % 3, x)) | beam.GroupByKey()
             | beam.MapTuple(lambda k, v: (k, sum(v)))
             | beam.io.WriteToText(str(tmp_path / "out")))
    assert len(calls) >= 3      # at least: before the GroupByKey, after it, the write's finalize
    lines = sorted(open(f).read() for f in tmp_path.glob("out*"))
    assert "".join(lines).count("\n") == 3
