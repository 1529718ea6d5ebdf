"""A worker process, its client or the fork server killed outright (SIGKILL, as the
out-of-memory killer does) during a local run (pipeline/launch/worker_watch.py WorkersWatch,
issue 35, item 4).

Beam alone printed its threads' tracebacks and ended with the message ``Empty``, or, for a
worker killed before it connected, waited forever. Expected: one line naming what died and
what to do, nothing committed, no traceback; and the rerun writes the in-process run's bytes.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.pipeline.launch import fork_server, peer_checks, worker_watch
from dcm2tfrecord.pipeline.options.salt import SALT_ENV
from tests.support.hooks import PAUSE_ENV, subprocess_env
from tests.support.processes import our_lines, run_killing
from tests.support.runners import _shards, archive, reference  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and forked workers: Linux")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]
ENDS_WITHIN_S = 90      # a run whose worker died ends this soon (it waited forever)


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (fork_server.SPAWN_ENV, SALT_ENV)}
    path = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return {**subprocess_env({**env, "PYTHONPATH": path}), "CUDA_VISIBLE_DEVICES": "-1",
            "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


def _command(archive, output) -> list[str]:  # noqa: F811
    root, labels, salt, _ = archive
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output", str(output),
            "--labels", labels, "--id_salt_file", salt, "--splits", "train=0.5,validation=0.5",
            "--max_failure_ratio", "1.0", "--progress", "none", *WORKERS]


def _rerun_is_the_in_process_run(archive, output, reference, env, cwd):  # noqa: F811
    done = subprocess.run(_command(archive, output), env=env, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert _shards(output) == reference[0]


@pytest.mark.parametrize("role, said", [
    ("worker", "a worker process was killed by SIGKILL"),
    ("server", "the fork server (process"),
    ("client", "a worker process was killed by SIGKILL"),
    ("spawned", "a worker process was killed by SIGKILL"),
])
def test_a_process_of_the_run_killed_mid_write_ends_it_in_one_line_and_the_rerun_writes_the_same_bytes(
        archive, reference, tmp_path, role, said):  # noqa: F811
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    temp = tempfile.mkdtemp(prefix="fork-test-", dir="/tmp")
    try:
        env = _env(TMPDIR=temp, **{PAUSE_ENV: f"half_written:{pauses}"},
                   **({fork_server.SPAWN_ENV: "1"} if role == "spawned" else {}))
        output = tmp_path / "out"
        proc, stderr, took = run_killing(_command(archive, output), env, tmp_path, role, "paused", pauses)
        assert proc.returncode == 1, stderr[-3000:]
        lines = our_lines(stderr)
        assert len(lines) == 1 and said in lines[0] and "rerun" in lines[0], stderr[-3000:]
        if role != "server":
            assert "SIGKILL (the out-of-memory killer" in lines[0]
        # nothing but that line: no Beam traceback, no gRPC message, no "Empty"
        assert stderr.strip().splitlines() == lines, stderr[-3000:]
        assert not (output / names.MANIFEST_NAME).exists()
        _rerun_is_the_in_process_run(archive, output, reference, _env(TMPDIR=temp), tmp_path)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize("spawn", [False, True], ids=["forked", "spawned"])
def test_a_worker_killed_before_it_connected_ends_the_run_in_one_line_not_never(archive, tmp_path, spawn):  # noqa: F811
    """Killed as soon as it exists: Beam waited forever for its connection."""
    temp = tempfile.mkdtemp(prefix="fork-test-", dir="/tmp")
    try:
        env = _env(TMPDIR=temp, **({fork_server.SPAWN_ENV: "1"} if spawn else {}))
        output = tmp_path / "out"
        proc, stderr, took = run_killing(_command(archive, output), env, tmp_path,
                                          "spawned" if spawn else "worker", "at_start")
        assert proc.returncode == 1 and took < ENDS_WITHIN_S, (took, stderr[-3000:])
        lines = our_lines(stderr)
        assert len(lines) == 1 and "a worker process was killed by SIGKILL" in lines[0], stderr[-3000:]
        assert stderr.strip().splitlines() == lines, stderr[-3000:]      # no traceback, no shell's "Killed"
        assert not (output / names.MANIFEST_NAME).exists()
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def test_death_lines_name_what_died_and_what_to_do():
    sigkill = "a worker process was killed by SIGKILL (the out-of-memory killer"
    assert worker_watch.death_line(-9, None).startswith(sigkill)
    assert worker_watch.death_line(128 + 9, None).startswith(sigkill)
    assert "fewer --direct_num_workers" in worker_watch.death_line(137, None)
    assert worker_watch.death_line(128 + 15, None).startswith("a worker process was killed by SIGTERM;")
    assert worker_watch.death_line(1, None).startswith("a worker process exited with status 1")
    for code in (peer_checks.REFUSED_FOLDER, peer_checks.REFUSED_PEER):
        assert "TMPDIR" in worker_watch.death_line(code, None)
    for code in (-9, 1, peer_checks.REFUSED_PEER):
        line = worker_watch.death_line(code, None)
        assert "\n" not in line and "nothing was committed" in line.lower()


def test_a_spawned_worker_started_just_after_a_death_is_stopped_too():
    """Measured in CI under load: Beam started the second spawned worker after the first
    one's death had been handled, so the one scan for workers to stop missed it and Beam's
    tidy-up waited on it forever. Every worker that appears while the watch lasts is stopped."""
    late: list[subprocess.Popen] = []
    ended: list = []

    def watched() -> None:   # a thread of its own: no signal to the main thread of pytest
        with worker_watch.WorkersWatch(None) as watch:
            watch.died(-signal.SIGKILL)
            assert "a worker process was killed by SIGKILL" in watch.first
            started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "sdk_worker_main"])
            late.append(started)
            try:
                ended.append(started.wait(timeout=10))
            except subprocess.TimeoutExpired:
                ended.append(None)

    thread = threading.Thread(target=watched)
    thread.start()
    thread.join(30)
    try:
        assert ended == [-signal.SIGKILL], ended
    finally:
        for process in late:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_forked_workers_stderr_drops_beams_broken_log_stream_and_keeps_the_rest():
    """Beam stops a worker's logging server once the worker command (the client) ends, before
    the fork server has killed the worker behind it: measured in CI, the worker then printed
    gRPC's "Cancelling all calls" under the run's one line."""
    import io
    out = io.StringIO()
    stream = fork_server._WithoutBrokenLogStream(out)
    print("before", file=stream)
    print('Logging client failed: <_MultiThreadedRendezvous of RPC that terminated with:\n'
          '\tstatus = StatusCode.UNAVAILABLE\n>... resetting', file=stream)
    print("Logging client is fine", file=stream)
    stream.write("\n")
    stream.flush()
    assert out.getvalue() == "before\nLogging client is fine\n\n"
