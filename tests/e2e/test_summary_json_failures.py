"""Reliability V (issue 43), item 6, the failures a run meets in its machinery: a storage
outage (the GCS emulator stopped mid-write) and a local worker process killed mid-write each
leave a ``--summary_json`` saying ``failed`` with the exit code, the one line printed and the
kind of failure (tests/pipeline/test_summary_on_failure.py has the others)."""
from __future__ import annotations

import json
import os
import sys

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.pipeline.launch import fork_server
from dcm2tfrecord.pipeline.options.salt import SALT_ENV
from tests.support.hooks import PAUSE_ENV, subprocess_env
from tests.support.processes import ROOT, assert_failed_cleanly, our_lines, outage_run, run_killing
from tests.support.runners import archive  # noqa: F401 - a fixture


def _says_failed(code: int, stderr: str, path, reason: str) -> None:
    summary = json.loads(path.read_text())
    assert (summary["status"], summary["reason"], summary["exit_code"]) == ("failed", reason, code), summary
    assert our_lines(stderr) and summary["message"] == our_lines(stderr)[-1], (summary, stderr[-3000:])
    assert "matched" not in summary         # no count is known of a run stopped under way


def test_a_storage_outage_mid_write_is_written_as_one(tmp_path):
    path = tmp_path / "reports" / "summary.json"
    code, _, stderr, listed = outage_run(tmp_path, 30, ["--gcs_retry_s=4", "--summary_json", str(path)],
                                         names.DONE_SUFFIX)
    assert_failed_cleanly(code, stderr, listed)
    _says_failed(code, stderr, path, "storage_outage")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and forked workers: Linux")
def test_a_worker_killed_mid_write_is_written_as_workers_died(tmp_path, archive):  # noqa: F811
    root, labels, salt, _ = archive
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    path = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if k not in (fork_server.SPAWN_ENV, SALT_ENV)}
    env = {**subprocess_env({**env, "PYTHONPATH": ROOT}), "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2",
           "TMPDIR": str(tmp_path), PAUSE_ENV: f"half_written:{pauses}"}
    command = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output",
               str(tmp_path / "out"), "--labels", labels, "--id_salt_file", salt, "--max_failure_ratio", "1.0",
               "--progress", "none", "--direct_num_workers=2", "--direct_running_mode=multi_processing",
               "--summary_json", str(path)]
    proc, stderr, _ = run_killing(command, env, tmp_path, "worker", "paused", pauses)
    assert proc.returncode == 1, stderr[-3000:]
    assert "a worker process was killed by SIGKILL" in our_lines(stderr)[-1]
    _says_failed(proc.returncode, stderr, path, "workers_died")
    assert not (tmp_path / "out" / names.MANIFEST_NAME).exists()
