"""The bound on a cluster job whose SDK workers never start (pipeline.launch.worker_start): the
pure part. The whole, through a job service and a worker pool whose `python` cannot start
Beam, is tests/e2e/test_runners.py (test_a_job_whose_sdk_workers_never_start_ends_...)."""
from __future__ import annotations

import os
import time

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.progress import any_worker_started, remove_progress, write_worker_started
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.pipeline.launch.worker_start import (WORKER_START_TIMEOUT_ENV, WORKER_START_TIMEOUT_S,
                                                WorkersNeverStarted, no_worker_message, wait_for_first_worker,
                                                watches_worker_start, worker_start_timeout_s)


def test_the_bound_defaults_to_ten_minutes_and_a_bad_value_is_refused_in_one_line():
    assert worker_start_timeout_s({}) == WORKER_START_TIMEOUT_S == 600
    assert worker_start_timeout_s({WORKER_START_TIMEOUT_ENV: "45"}) == 45
    for bad in ("0", "-3", "soon", "nan"):
        with pytest.raises(UsageError, match=f"^\\${WORKER_START_TIMEOUT_ENV}=") as caught:
            worker_start_timeout_s({WORKER_START_TIMEOUT_ENV: bad})
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("runner,watched", [("PortableRunner", True), ("FlinkRunner", True), ("SparkRunner", True),
                                            ("apache_beam.runners.portability.portable_runner.PortableRunner", True),
                                            ("", False), ("DirectRunner", False), ("FnApiRunner", False),
                                            ("BundleBasedDirectRunner", False), ("DataflowRunner", False)])
def test_only_runners_whose_workers_this_launcher_cannot_see_are_watched(runner, watched):
    assert watches_worker_start(runner) is watched


@pytest.mark.parametrize("kind,config,says", [
    ("EXTERNAL", "node-1:50000", ["worker pool at node-1:50000", "`python` first on its PATH", "worker pool's log"]),
    ("", "", ["SDK container", "docker logs"]),
    ("PROCESS", '{"command": "/opt/boot"}', ["PROCESS command", "executor's log"]),
])
def test_the_message_is_one_line_naming_the_bound_the_likely_cause_and_the_log(kind, config, says):
    line = no_worker_message(45, kind, config)
    assert "\n" not in line
    assert line.startswith(f"no Python SDK worker started within 45 s (${WORKER_START_TIMEOUT_ENV})")
    assert "nothing committed" in line
    for part in says:
        assert part in line, (part, line)


def test_no_mark_the_job_is_cancelled_and_the_wait_ends_at_the_bound(tmp_path):
    cancelled = []
    started = time.monotonic()
    with pytest.raises(WorkersNeverStarted, match="^the line$"):
        wait_for_first_worker(str(tmp_path), lambda: "RUNNING", lambda: cancelled.append(1), 0.5, "the line",
                              poll_s=0.05)
    assert cancelled == [1]
    assert 0.5 <= time.monotonic() - started < 5


def test_a_cancel_that_fails_still_ends_the_wait_with_the_line(tmp_path):
    def cancel():
        raise RuntimeError("job service gone")
    with pytest.raises(WorkersNeverStarted, match="^the line$"):
        wait_for_first_worker(str(tmp_path), lambda: "STARTING", cancel, 0.2, "the line", poll_s=0.05)


def test_a_workers_mark_or_a_finished_job_ends_the_wait_at_once(tmp_path):
    output = str(tmp_path / "out")
    os.makedirs(output)
    # a job that failed (or finished) before any mark: its result tells how; no cancel
    wait_for_first_worker(output, lambda: "FAILED", lambda: pytest.fail("cancelled"), 60, "x", poll_s=0.05)
    wait_for_first_worker(output, lambda: "JobState.DONE", lambda: pytest.fail("cancelled"), 60, "x", poll_s=0.05)
    assert not any_worker_started(output)
    assert write_worker_started(output) == ""
    assert any_worker_started(output)
    marks = os.listdir(os.path.join(output, names.PROGRESS_DIR))
    assert len(marks) == 1 and marks[0].endswith(names.WORKER_SUFFIX) and f"-{os.getpid()}." in marks[0]
    started = time.monotonic()
    wait_for_first_worker(output, lambda: "RUNNING", lambda: pytest.fail("cancelled"), 60, "x", poll_s=0.05)
    assert time.monotonic() - started < 5
    assert write_worker_started(output) == ""      # once per process and output: still one mark
    assert len(os.listdir(os.path.join(output, names.PROGRESS_DIR))) == 1
    remove_progress(output)                        # removed at commit with the other progress files
    assert not os.path.exists(os.path.join(output, names.PROGRESS_DIR))


def test_a_worker_mark_names_only_host_and_process():
    assert names.worker_mark_name("node-3.cluster", 42) == "node-3.cluster-42.worker"
    assert names.worker_mark_name("../../etc/x y", 7) == ".._.._etc_x_y-7.worker"
