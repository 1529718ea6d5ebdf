"""Local worker processes forked from the launcher (pipeline/launch/fork_server.py, issue 27).

The command line is run as a user runs it (a subprocess: a single-threaded launcher, which
is when workers are forked); forked and spawned workers must write the in-process run's
bytes, and a launcher killed outright must leave no worker and no socket behind.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from dcm2tfrecord.pipeline.launch import fork_server
from tests.support.hooks import PAUSE_ENV, subprocess_env
from tests.support.processes import cmdline
from tests.support.runners import _shards, archive, reference  # noqa: F401 - fixtures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _command(archive, output) -> list[str]:
    root, labels, salt, _ = archive
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output", str(output),
            "--labels", labels, "--id_salt_file", salt, "--splits", "train=0.5,validation=0.5",
            "--max_failure_ratio", "1.0", "--progress", "none", *WORKERS]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (fork_server.SPAWN_ENV, "DCM2TFRECORD_ID_SALT")}
    path = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    # tests/support/hooks on the path too: a pause point, when ``extra`` sets one (PAUSE_ENV)
    return {**subprocess_env({**env, "PYTHONPATH": path}), "CUDA_VISIBLE_DEVICES": "-1",
            "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


@pytest.mark.parametrize("spawn", [False, True], ids=["forked", "spawned"])
def test_forked_and_spawned_workers_write_the_in_process_bytes(archive, reference, tmp_path, spawn):
    output = tmp_path / "out"
    # a temp folder too deep for a Unix socket's name: the fork server's goes to /tmp
    temp = tmp_path / ("deep" * 30)
    temp.mkdir()
    env = _env(TMPDIR=str(temp), **({fork_server.SPAWN_ENV: "1"} if spawn else {}))
    proc = subprocess.run(_command(archive, output), env=env, capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _shards(output) == reference[0]
    said = "(2 worker processes (multi_processing))" if spawn else \
        "(2 worker processes (multi_processing, forked))"
    assert said in proc.stdout, proc.stdout[-1500:]
    assert not _sockets_left(temp), "the fork server's socket folder outlived the run"


def _sockets_left(folder) -> list:
    """The fork server's socket folders under ``folder`` (the run's TMPDIR)."""
    return [n for n in os.listdir(folder) if n.startswith("dcm2tfrecord-workers-")]


def _process_table() -> dict:
    """{pid: (parent pid, start time, state)} of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(name)] = (int(fields[1]), fields[19], fields[0])
    return table


def _descendants(pid: int, table: dict) -> dict:
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start, _) in table.items():
            if ppid == parent and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def _alive(processes: dict) -> list:
    table = _process_table()
    return [pid for pid, start in processes.items()
            if pid in table and table[pid][1] == start and table[pid][2] != "Z"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_a_launcher_killed_outright_leaves_no_worker_and_no_socket(archive, tmp_path):
    """SIGKILL to the launcher alone (not its process group: a parent that dies without a
    word) while every shard writer is held: the fork server sees its parent gone, kills its
    workers and removes its socket; nothing of the run is left running."""
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    temp = tempfile.mkdtemp(prefix="fork-test-", dir="/tmp")   # short enough for the socket
    env = _env(TMPDIR=temp, **{PAUSE_ENV: f"half_written:{pauses}"})
    log = open(tmp_path / "run.log", "wb")
    launcher = subprocess.Popen(_command(archive, tmp_path / "out"), env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
    try:
        deadline = time.time() + 240
        while not any(n.startswith("half_written-") for n in os.listdir(pauses)):
            assert launcher.poll() is None and time.time() < deadline, \
                (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.05)
        family = _descendants(launcher.pid, _process_table())
        # the fork server, at least one worker held in the writer, Beam's worker commands
        assert len(family) >= 3, family
        assert _sockets_left(temp), "no fork server socket: the workers were not forked"
        commands = [cmdline(pid) for pid in family]
        assert not any("sdk_worker_main" in c for c in commands), commands   # none spawned
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        deadline = time.time() + 20
        while _alive(family) and time.time() < deadline:
            time.sleep(0.1)
        assert not _alive(family), f"left running after the launcher died: {_alive(family)}"
        assert not _sockets_left(temp)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def test_workers_are_spawned_where_forking_is_unsafe_or_turned_off(monkeypatch):
    monkeypatch.delenv(fork_server.SPAWN_ENV, raising=False)
    single = threading.active_count() == 1
    assert fork_server.can_fork() == (single and sys.platform.startswith("linux"))
    held = threading.Event()
    thread = threading.Thread(target=held.wait)
    thread.start()
    try:   # a launcher already running threads: a fork would copy their locks mid-use
        assert not fork_server.can_fork()
    finally:
        held.set()
        thread.join()
    monkeypatch.setenv(fork_server.SPAWN_ENV, "1")
    assert not fork_server.can_fork()


_RACE = r'''
import json, os, socket, sys, time
sys.path.insert(0, sys.argv[1])
from dcm2tfrecord.pipeline.launch import fork_server, peer_checks

def client(path, hold_s):
    """A client whose worker dies at once (no Beam environment), closed ``hold_s`` later:
    inside the server's poll interval, so its worker's death and its close meet in one pass."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    env = json.dumps({}).encode()
    s.sendall(len(env).to_bytes(8, "little") + env)
    time.sleep(hold_s)
    s.close()

server = fork_server.ForkServer()
path = os.path.join(server._dir, peer_checks.SOCKET_NAME)
for n in range(8):
    client(path, 0.05 + 0.04 * n)
    time.sleep(0.05)
    assert os.waitpid(server.pid, os.WNOHANG) == (0, 0), f"the fork server stopped after client {n}"
silent = socket.socket(socket.AF_UNIX)          # connects and sends nothing: dropped after 5 s, not forever
silent.connect(path)
s = socket.socket(socket.AF_UNIX)
s.connect(path)
env = json.dumps({}).encode()
s.sendall(len(env).to_bytes(8, "little") + env)
s.settimeout(30)
print("served", s.recv(64).decode(), flush=True)
server.close()
'''


def test_the_fork_server_outlives_workers_dying_as_their_clients_go(tmp_path):
    """Issue 35: _reap closed a dead worker's connection and the same pass then read it (EBADF),
    stopping the server and every other worker; a client that sent nothing blocked it."""
    env = {**_env(), fork_server.SPAWN_ENV: ""}
    done = subprocess.run([sys.executable, "-c", _RACE, ROOT], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "served 1", done.stdout + done.stderr[-2000:]
