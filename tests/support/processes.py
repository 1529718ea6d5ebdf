"""Conversions run as a user runs them, in subprocesses: killed at a chosen moment
(e2e/test_crash_safety.py, pipeline/test_incremental.py) or run to the end
(pipeline/test_convert_reliability*.py); and the files they leave."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Callable, Optional

import pytest

from dcm2tfrecord.dataset import names
from tests.support.hooks import subprocess_env


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository


RUN_TIMEOUT_S = 600


POLL_S = 0.05


def _env(extra: Optional[dict] = None) -> dict:
    # tests/support/hooks on the path too: a pause point, when ``extra`` sets one (PAUSE_ENV)
    env = subprocess_env(dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
                              PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
    env.setdefault("DCM2TFRECORD_ID_SALT", "crash-safety-test")
    return {**env, **(extra or {})}


def _tail(log_path: str, chars: int = 3000) -> str:
    with open(log_path, errors="replace") as handle:
        return handle.read()[-chars:]


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, state, process group) for every process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0], int(fields[2]))
    return table


def _descendants(pid: int) -> set[int]:
    table = _proc_table()
    found, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, row in table.items() if row[0] == parent and p not in found]
        found.update(children)
        frontier.extend(children)
    return found


def _living(pids: set[int], group: int) -> set[int]:
    """Processes of ``pids`` or of process group ``group`` that still run (zombies do not)."""
    table = _proc_table()
    return {p for p, (_, state, pgrp) in table.items()
            if (p in pids or pgrp == group) and state not in ("Z", "X")}


def _kill_run(proc: subprocess.Popen, family: set[int]) -> None:
    """SIGKILL to the run's process group at once; then every process it started must be gone.

    ``family`` is the latest snapshot of the run's descendants, so that a
    worker that had left the group would be noticed too.
    """
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.time() + 30
    while _living(family, proc.pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not _living(family, proc.pid), \
        f"processes of the killed run still alive: {_living(family, proc.pid)}"


def run_until(command: list[str], log_path: str, kill_when: Optional[Callable[[], Optional[str]]],
              env: Optional[dict] = None) -> Optional[str]:
    """Runs ``command``; SIGKILLs it the moment ``kill_when()`` returns a description.

    Returns that description, or None when the run finished first (it must
    then have succeeded).
    """
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=_env(env), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    started = family_at = time.time()
    family = {proc.pid}
    try:
        while proc.poll() is None:
            hit = kill_when() if kill_when is not None else None
            if hit:
                _kill_run(proc, family)
                return hit
            if time.time() - started > RUN_TIMEOUT_S:
                _kill_run(proc, family)
                pytest.fail(f"conversion ran past {RUN_TIMEOUT_S} s:\n{_tail(log_path)}")
            if time.time() - family_at > 0.5:
                family, family_at = family | _descendants(proc.pid), time.time()
            time.sleep(POLL_S)
    except BaseException:
        if proc.poll() is None:
            _kill_run(proc, family)
        raise
    assert proc.returncode == 0, f"conversion failed ({proc.returncode}):\n{_tail(log_path)}"
    return None


def tree_bytes(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones included), by its path relative to it -> its bytes."""
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, root)] = handle.read()
    return out


def our_lines(stderr: str) -> list[str]:
    """What dcm2tfrecord itself printed (TensorFlow's start-up lines are issue 15's)."""
    return [line for line in stderr.splitlines() if line.startswith("dcm2tfrecord")]


def cli(*args, env=None, timeout=600):
    """``python -m dcm2tfrecord.pipeline ...`` in a subprocess, one worker in-process: (code, stdout, stderr)."""
    base = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": ROOT}
    proc = subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", *args], capture_output=True, text=True,
                          env={**base, **(env or {})}, cwd=ROOT, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def errors_of(dataset_dir) -> list[dict]:
    with open(os.path.join(dataset_dir, names.ERRORS_NAME)) as handle:
        return [json.loads(line) for line in handle]


def cmdline(pid: int) -> str:
    """Process ``pid``'s command line, its arguments joined by spaces ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    row = _proc_table().get(pid)
    return row is not None and row[1] not in ("Z", "X")


def children(pid: int) -> list[int]:
    return [p for p, row in _proc_table().items() if row[0] == pid]


# ---------------------------------------------------------------- a storage outage, a killed worker


def outage_run(tmp_path, files: int, extra: list[str], wait_for: str):
    """A gs:// -> gs:// run whose storage is killed once ``wait_for`` appears in its output:
    (exit code, seconds from the outage to the run's end, stderr, what the output holds)."""
    from tests.support import TEST_SALT, write_png_archive
    from tests.support.gcs_emulator import running_emulator
    write_png_archive(tmp_path / "archive", files, 16, 16)
    os.makedirs(tmp_path / "e")
    stderr_path = tmp_path / "stderr.txt"     # a file, not a pipe: a pipe left unread can block the run
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    with running_emulator(str(tmp_path / "e")) as emulator, open(stderr_path, "w") as stderr:
        emulator.upload_tree(str(tmp_path / "archive"), "a")
        proc = subprocess.Popen(
            [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", emulator.url("a"),
             "--output", emulator.url("out"), "--id_salt", TEST_SALT, "--progress", "none",
             "--target_shard_mb=0.0005", "--min_shard_mb=0.0001", "--max_shard_mb=1", *extra],
            stdout=subprocess.DEVNULL, stderr=stderr, env={**env, **emulator.env}, cwd=ROOT)
        deadline = time.monotonic() + 300
        while True:
            listed = emulator.list("out")
            if any(wait_for in name for name in listed):
                break
            assert proc.poll() is None and time.monotonic() < deadline, stderr_path.read_text()
            time.sleep(0.1)
        emulator.stop()
        stopped = time.monotonic()
        code = proc.wait(timeout=900)
        elapsed = time.monotonic() - stopped
    return code, elapsed, stderr_path.read_text(), listed


def assert_failed_cleanly(code, stderr, listed):
    assert code == 1, stderr
    assert our_lines(stderr) and "the run failed and committed nothing new" in our_lines(stderr)[-1], stderr
    # (which storage call failed first varies: a read that names the outage, or Beam's batch
    # copy answering None, which the last line then names as it is)
    assert not any(name.endswith(names.MANIFEST_NAME) for name in listed)


def process_roles(launcher: int) -> dict[str, list[int]]:
    """The run's processes by role: the fork server, the worker clients Beam started, the
    forked workers (children of the fork server), the spawned workers."""
    mine = children(launcher)
    clients = [p for p in mine if " -S -c " in cmdline(p)]
    servers = [p for p in mine if p not in clients and "dcm2tfrecord.pipeline" in cmdline(p)]
    forked = children(servers[0]) if servers else []
    # this run's processes only, never another run's
    spawned = [p for p in _descendants(launcher) - {launcher}
               if "sdk_worker_main" in cmdline(p) and not cmdline(p).startswith("/bin/sh")]
    return {"server": servers, "client": clients, "worker": forked, "spawned": spawned}


def run_killing(command, env, cwd, role: str, when: str, pauses=None,
                ends_within_s: float = 90) -> tuple[subprocess.Popen, str, float]:
    """Runs ``command``; SIGKILLs one process of ``role`` once ``when`` ("paused": every shard
    writer holds, then they go on; "at_start": as soon as it exists, before it connected).
    Returns the finished process, its stderr and the seconds from the kill to its end."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=cwd, start_new_session=True)
    try:
        deadline = time.time() + 240
        victim = None
        while victim is None:
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()[-3000:]
            ready = when == "at_start" or any(n.startswith("half_written-") for n in os.listdir(pauses))
            found = process_roles(proc.pid)[role] if ready else []
            victim = found[0] if found else None
            time.sleep(0.005 if when == "at_start" else 0.05)
        os.kill(victim, signal.SIGKILL)
        killed = time.time()
        if pauses is not None:
            time.sleep(0.5)
            (pauses / "go").touch()
        _, stderr = proc.communicate(timeout=ends_within_s + 60)
        return proc, stderr, time.time() - killed
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
