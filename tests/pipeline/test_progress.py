"""Progress: files the job leaves in the output, the launcher's lines, Beam counter names."""
import io
import json
import os
import re
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline import graph
from dcm2tfrecord.pipeline.launch import runner
from dcm2tfrecord.pipeline.options.table import ConvertOptions
from dcm2tfrecord.pipeline.progress import LineRenderer, ProgressMonitor, ProgressReader, RateMeter, describe
from tests.support import IN_MEMORY, TEST_SALT, write_png_archive
from tests.support.hooks import subprocess_env
from dcm2tfrecord.transforms.counters import NAMESPACE

MB = 1 << 20
LINE = re.compile(r"^progress \[\d+:\d\d:\d\d\] (.*)$")
WRITING = re.compile(r"(\d+)/(\d+) records, (\d+)/(\d+) shards, (\d+)% of ([\d.]+) MB planned, "
                     r"([\d.]+) MB on disk, ([\d.]+) MB/s, ETA (\S+)")


def _write_json(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        json.dump(content, handle)


def test_reader_adds_up_plan_done_shards_and_bytes_in_flight(tmp_path):
    out = str(tmp_path)
    progress = ProgressReader(out)
    assert progress.read().planned_records is None           # still planning
    _write_json(f"{out}/.progress/plan.json", {"splits": {
        "train": {"records": 90, "bytes": 90 * MB, "shards": 3},
        "test": {"records": 10, "bytes": 10 * MB, "shards": 1}}})
    _write_json(f"{out}/.progress/train-00000-of-00003.tfrecord.done",
                {"split": "train", "records": 29, "bytes": 29 * MB, "planned_records": 30,
                 "planned_bytes": 30 * MB})
    os.makedirs(f"{out}/.incomplete")
    with open(f"{out}/.incomplete/train-00001-of-00003.tfrecord.abc", "wb") as handle:
        handle.write(b"\0" * (5 * MB))
    with open(f"{out}/.progress/test-00000-of-00001.tfrecord.done", "w") as handle:
        handle.write('{"split": "te')                          # caught half-written: skipped
    snap = progress.read()
    assert (snap.planned_records, snap.planned_bytes, snap.planned_shards) == (100, 100 * MB, 4)
    assert (snap.shards_done, snap.records_done, snap.records_written) == (1, 30, 29)
    assert snap.bytes_written == 34 * MB and snap.bytes_in_flight == 5 * MB
    assert snap.fraction == pytest.approx(0.35)


def test_line_shows_records_mb_rate_and_eta():
    from dcm2tfrecord.pipeline.progress import Snapshot
    snap = Snapshot(planned_records=100, planned_bytes=100 * MB, planned_shards=4, shards_done=1,
                    records_done=25, records_written=25, bytes_done=25 * MB,
                    planned_bytes_done=25 * MB, bytes_in_flight=0)
    meter = RateMeter()
    meter.add(0.0, 0)
    meter.add(5.0, 25 * MB)
    assert meter.bytes_per_second() == pytest.approx(5 * MB)
    line = describe(snap, meter.bytes_per_second(), meter.eta_seconds(snap))
    assert WRITING.search(line).groups() == ("25", "100", "1", "4", "25", "100.0", "25.0", "5.0",
                                             "0:00:15")
    stream = io.StringIO()
    renderer = LineRenderer(stream, log_s=10)
    for elapsed in (0, 4, 9, 10.5, 12):
        renderer.update(snap, 0.0, None, elapsed)
    assert len(stream.getvalue().splitlines()) == 2           # at 0 s and 10.5 s


def _plan(out, content):
    _write_json(f"{out}/.progress/plan.json", content)


def test_monitor_is_silent_with_none(tmp_path):
    """With a plan to report and time to report it, ``none`` writes nothing; ``log`` does."""
    out = str(tmp_path)
    _plan(out, {"splits": {"train": {"records": 10, "bytes": 10 * MB, "shards": 1}}})
    silent, talking = io.StringIO(), io.StringIO()
    with ProgressMonitor(out, "none", stream=silent, poll_s=0.01, log_s=0.01):
        time.sleep(0.2)
    with ProgressMonitor(out, "log", stream=talking, poll_s=0.01, log_s=0.01):
        time.sleep(0.2)
    assert silent.getvalue() == ""
    assert "0/10 records" in talking.getvalue()


class _BrokenStream(io.StringIO):
    """A terminal that went away: every write raises."""

    def write(self, text):
        raise OSError("stream closed")


def test_monitor_never_fails_the_run(tmp_path):
    """A broken plan file and a stream that raises on every write: the job's result stands."""
    out = str(tmp_path)
    _plan(out, {"splits": {"train": "not a split entry"}})   # read() raises TypeError on it
    for mode in ("log", "bar"):
        monitor = ProgressMonitor(out, mode, stream=_BrokenStream(), poll_s=0.01, log_s=0.01)
        with monitor:
            time.sleep(0.1)
            result = "the job's result"
        assert result == "the job's result" and not monitor._thread.is_alive()
    # an exception of the job itself comes out unchanged, not masked by the monitor's own
    with pytest.raises(KeyError, match="the job's error"):
        with ProgressMonitor(out, "log", stream=_BrokenStream(), poll_s=0.01):
            raise KeyError("the job's error")


@pytest.fixture(scope="module")
def rgb_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress") / "archive"
    write_png_archive(root, count=60, height=256, width=256, channels=3, seed=5)
    return str(root)


def test_periodic_progress_lines_when_output_is_not_a_terminal(rgb_archive, tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
               DCM2TFRECORD_ID_SALT="progress-test-salt",
               DCM2TFRECORD_PROGRESS_POLL_S="0.05", DCM2TFRECORD_PROGRESS_LOG_S="0.2")
    # every shard writer holds after its first record until "go" (the test-only pause point
    # of tests/support/hooks, which the run loads from PYTHONPATH): a line while shards are written
    # is then certain, not a race with writers that now finish within one log interval
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    env = subprocess_env(env, pause="half_written", pause_dir=pauses)
    out = tmp_path / "out"
    with open(tmp_path / "stdout", "w+") as stdout, open(tmp_path / "stderr", "w+") as stderr:
        run = subprocess.Popen(
            [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", rgb_archive, "--output", str(out),
             "--target_shard_mb", "1", "--min_shard_mb", "0.5", "--max_shard_mb", "2",
             "--direct_num_workers=1", "--direct_running_mode=in_memory"],
            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, text=True, env=env)
        deadline = time.time() + 600
        while not any(n.startswith("half_written-") for n in os.listdir(pauses)):
            assert run.poll() is None and time.time() < deadline, (tmp_path / "stderr").read_text()
            time.sleep(0.05)
        while not any(WRITING.search(line) for line in (tmp_path / "stderr").read_text().splitlines()):
            assert run.poll() is None and time.time() < deadline, (tmp_path / "stderr").read_text()
            time.sleep(0.05)
        (pauses / "go").touch()
        run.wait(timeout=600)
        stdout.seek(0)
        stderr.seek(0)
        done = subprocess.CompletedProcess(run.args, run.returncode, stdout.read(), stderr.read())
    assert done.returncode == 0, done.stderr
    lines = [m.group(1) for m in map(LINE.match, done.stderr.splitlines()) if m]
    assert len(lines) >= 4, done.stderr
    assert lines[0].startswith("planning")
    writing = [WRITING.search(line).groups() for line in lines if WRITING.search(line)]
    assert writing, lines
    assert all(g[1] == "60" for g in writing)                 # planned records
    assert [int(g[0]) for g in writing] == sorted(int(g[0]) for g in writing)
    assert any(int(g[0]) < 60 for g in writing), lines         # a line while shards were written
    assert lines[-1].startswith("done: 60 records written of 60 planned, ")
    assert "\r" not in done.stderr                            # no bar redraws in a log
    assert "records/s" in done.stdout                         # then the summary
    assert not (out / ".progress").exists() and not (out / ".incomplete").exists()
    assert reader.info(str(out))["counts"]["written"] == 60


def test_counters_have_the_stable_names_the_issue_lists(tmp_path):
    archive = tmp_path / "archive"
    write_png_archive(archive, count=3, height=16, width=16)
    (archive / "notes.txt").write_text("not an image")
    (archive / "truncated.png").write_bytes((archive / "img_0000.png").read_bytes()[:60])
    out = tmp_path / "out"
    opts = ConvertOptions(inputs=(str(archive),), output=str(out), id_salt=TEST_SALT,
                          target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=2, max_failure_ratio=1.0)
    options = runner.make_pipeline_options(IN_MEMORY)
    pipeline = beam.Pipeline(runner=runner.make_runner(options), options=options)
    graph.build(pipeline, opts)
    result = pipeline.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]}
    manifest = reader.info(str(out))
    assert counters["files_matched"] == 5 == manifest["counts"]["matched"]
    assert counters["files_probed"] == 5
    assert counters["records_written"] == 3
    assert counters["bytes_written"] == manifest["splits"]["train"]["num_bytes"]
    assert counters["skipped_unsupported_format"] == 1
    assert counters["failed_invalid_image"] == 1
    assert {k for k in counters if k.startswith(("skipped_", "failed_"))} == {
        f"{status}_{reason}" for status in ("skipped", "failed")
        for reason in manifest["counts"][status]}
