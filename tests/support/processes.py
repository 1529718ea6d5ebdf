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


def _files(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones included) -> its bytes."""
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
