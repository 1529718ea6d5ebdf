"""The forked workers' socket trusts no one (pipeline/launch/peer_checks.py, issue 35, item 3).

Where another user may write the folder above the socket's (a world-writable TMPDIR
without the sticky bit), they can rename the 0700 socket folder away and put their own,
with their own socket, in its place. The worker clients sent that impostor their whole
environment (the runner's control address, $DCM2TFRECORD_ID_SALT) and the run hung. Here
an impostor is a real AF_UNIX listener that records what it receives; a different user
cannot be made without root, so the uid check is tested through ``peer_refusal`` and the
rest through the real same-user path (a pid that is not the fork server's).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.pipeline.launch import fork_server as forking, peer_checks   # fork_server: a fixture below
from dcm2tfrecord.pipeline.options.salt import SALT_ENV
from tests.support.hooks import PAUSE_ENV, subprocess_env
from tests.support.processes import children, our_lines, running
from tests.support.runners import archive  # noqa: F401 - fixture

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECRET = "env-salt-that-must-stay-home-Qz81"
WORKERS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in (forking.SPAWN_ENV, SALT_ENV)}
    path = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return {**subprocess_env({**env, "PYTHONPATH": path}), "CUDA_VISIBLE_DEVICES": "-1",
            "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


class Impostor:
    """A listener at ``path`` that accepts every connection and records every byte sent."""

    def __init__(self, path: str):
        self.received: list[bytes] = []
        self.connections = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.settimeout(2)
            data = b""
            try:
                while chunk := conn.recv(1 << 16):
                    data += chunk
            except OSError:
                pass
            self.received.append(data)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()


_SERVER = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from dcm2tfrecord.pipeline.launch import fork_server
from dcm2tfrecord.pipeline.options.salt import SALT_ENV
server = fork_server.ForkServer()
print(json.dumps({"folder": server.folder, "command": server.command, "pid": server.pid}), flush=True)
sys.stdin.readline()
server.close()
'''


@pytest.fixture
def fork_server():
    """A real fork server in its own single-threaded process: (its description, the process)."""
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, ROOT], env=_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield json.loads(proc.stdout.readline()), proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def _client(command: str, control: bool = True) -> subprocess.CompletedProcess:
    """The worker command as Beam runs it, its environment holding the salt (and, with
    ``control``, a control address: what an impostor wants)."""
    env = {"PATH": os.environ.get("PATH", ""), SALT_ENV: SECRET,
           **({"CONTROL_API_SERVICE_DESCRIPTOR": 'url: "localhost:1"'} if control else {})}
    return subprocess.run(command, shell=True, env=env, capture_output=True, text=True, timeout=60)


def test_an_impostor_folder_in_the_socket_folders_place_is_refused_and_sent_nothing(fork_server):
    server, _ = fork_server
    folder = server["folder"]
    os.rename(folder, folder + ".moved")       # what another user can do under a non-sticky TMPDIR
    os.mkdir(folder, 0o700)
    impostor = Impostor(os.path.join(folder, "workers.sock"))
    try:
        done = _client(server["command"])
    finally:
        impostor.close()
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(folder + ".moved", folder)
    assert impostor.connections == 0 and not impostor.received
    assert SECRET not in done.stdout + done.stderr
    assert done.returncode == peer_checks.REFUSED_FOLDER, (done.returncode, done.stderr)


def test_an_impostor_socket_in_the_real_folder_is_refused_by_its_credentials(fork_server):
    """The folder is the one made, but another process listens in it: SO_PEERCRED names a
    process that is not the fork server, and the client sends nothing."""
    server, _ = fork_server
    path = os.path.join(server["folder"], "workers.sock")
    os.rename(path, path + ".real")
    impostor = Impostor(path)
    try:
        done = _client(server["command"])
    finally:
        impostor.close()
        os.unlink(path)
        os.rename(path + ".real", path)
    assert impostor.connections == 1 and impostor.received == [b""]
    assert done.returncode == peer_checks.REFUSED_PEER, (done.returncode, done.stderr)


def test_the_real_fork_server_passes_the_clients_checks(fork_server):
    """The real path: the client checks the folder and the fork server's pid and uid, sends its
    environment, and gets its worker's status (Beam's harness fails at once without a control
    address: status 1)."""
    server, _ = fork_server
    done = _client(server["command"], control=False)
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert SECRET not in done.stdout + done.stderr


def test_peer_credentials_must_name_this_user_and_for_the_client_the_fork_server():
    me = os.getuid()
    assert peer_checks.peer_refusal((1234, me, 0), me) == ""
    assert peer_checks.peer_refusal((1234, me, 0), me, 1234) == ""
    assert "uid" in peer_checks.peer_refusal((1234, me + 1, 0), me)
    assert "uid" in peer_checks.peer_refusal((1234, me + 1, 0), me, 1234)     # the right pid, another user
    assert "not the fork server" in peer_checks.peer_refusal((999, me, 0), me, 1234)


def test_a_temp_folder_others_may_write_without_the_sticky_bit_is_never_used_for_the_socket(monkeypatch):
    shared = tempfile.mkdtemp(prefix="shared-", dir="/tmp")
    try:
        os.chmod(shared, 0o777)                        # world-writable, no sticky bit
        inner = os.path.join(shared, "mine")
        os.mkdir(inner, 0o700)                         # safe itself, but its parent is not
        assert peer_checks.unsafe_parent(shared) == os.path.realpath(shared)
        assert peer_checks.unsafe_parent(inner) == os.path.realpath(shared)
        os.chmod(shared, 0o770)                        # the group may write it: as unsafe
        assert peer_checks.unsafe_parent(inner) == os.path.realpath(shared)
        os.chmod(shared, 0o777 | stat.S_ISVTX)         # sticky: others cannot rename our folders
        assert peer_checks.unsafe_parent(inner) == ""
        if os.getuid() == 0:                           # a folder of another user: its owner can
            os.chown(shared, 65534, -1)
            assert peer_checks.unsafe_parent(inner) == os.path.realpath(shared)
            os.chown(shared, 0, -1)
        os.chmod(shared, 0o777)
        for unsafe in (shared, inner):
            monkeypatch.setattr(tempfile, "tempdir", unsafe)
            folder = peer_checks.socket_folder()
            try:
                assert not os.path.realpath(folder).startswith(os.path.realpath(shared) + os.sep), folder
                assert os.path.dirname(folder) == "/tmp"
            finally:
                os.rmdir(folder)
        assert os.listdir(shared) == ["mine"] and os.listdir(inner) == []
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _worker_environments(pauses) -> list[dict]:
    out = []
    for name in os.listdir(pauses):
        if name.startswith("half_written-"):
            with open(os.path.join(pauses, name)) as handle:
                out.append(json.load(handle))
    return out


@pytest.mark.parametrize("spawn", [False, True], ids=["forked", "spawned"])
def test_no_worker_is_handed_the_salt_in_its_environment(archive, tmp_path, spawn):  # noqa: F811
    """$DCM2TFRECORD_ID_SALT reaches the workers in their settings, never in their environment."""
    root, labels, _, _ = archive
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    temp = tempfile.mkdtemp(prefix="fork-test-", dir="/tmp")
    env = _env(TMPDIR=temp, **{SALT_ENV: SECRET, PAUSE_ENV: f"half_written:{pauses}"},
               **({forking.SPAWN_ENV: "1"} if spawn else {}))
    command = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output",
               str(tmp_path / "out"), "--labels", labels, "--splits", "train=0.5,validation=0.5",
               "--max_failure_ratio", "1.0", "--progress", "none", *WORKERS]
    log = open(tmp_path / "run.log", "wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
                            start_new_session=True)
    try:
        deadline = time.time() + 240
        while not _worker_environments(pauses):
            assert proc.poll() is None and time.time() < deadline, (tmp_path / "run.log").read_text()[-3000:]
            time.sleep(0.05)
        seen = _worker_environments(pauses)
        (pauses / "go").touch()
        assert proc.wait(timeout=240) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)
    assert all("CONTROL_API_SERVICE_DESCRIPTOR" in e for e in seen), "not a worker's environment"
    assert not any(SALT_ENV in e or SECRET in json.dumps(e) for e in seen)
    assert ("forked)" in (tmp_path / "run.log").read_text()) != spawn


def test_an_impostor_in_the_socket_folders_place_mid_run_stops_it_in_one_line_and_is_sent_nothing(
        archive, tmp_path):  # noqa: F811
    """The swap made as soon as the fork server's folder appears (before any worker starts):
    every worker refuses the socket, the run ends at once in one line naming the folder and
    the fix, nothing is committed, and the impostor never receives a byte."""
    root, labels, salt, _ = archive
    temp = tempfile.mkdtemp(prefix="fork-test-", dir="/tmp")
    output = tmp_path / "out"
    command = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output",
               str(output), "--labels", labels, "--id_salt_file", salt, "--splits", "train=0.5,validation=0.5",
               "--max_failure_ratio", "1.0", "--progress", "none", *WORKERS]
    proc = subprocess.Popen(command, env=_env(TMPDIR=temp),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    impostor = None
    try:
        deadline = time.time() + 120
        while impostor is None and time.time() < deadline and proc.poll() is None:
            found = [n for n in os.listdir(temp) if n.startswith("dcm2tfrecord-workers-")]
            if found and os.path.exists(os.path.join(temp, found[0], "workers.sock")):
                folder = os.path.join(temp, found[0])
                os.rename(folder, os.path.join(temp, "moved-away"))
                os.mkdir(folder, 0o700)
                impostor = Impostor(os.path.join(folder, "workers.sock"))
            time.sleep(0.005)
        assert impostor is not None, "no fork server folder appeared"
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
        if impostor is not None:
            impostor.close()
        shutil.rmtree(temp, ignore_errors=True)
    assert impostor.connections == 0 and not impostor.received
    assert proc.returncode == 1, stderr[-3000:]
    lines = our_lines(stderr)
    assert len(lines) == 1 and "refused the fork server's socket" in lines[0] and "TMPDIR" in lines[0], stderr[-3000:]
    assert "Traceback" not in stderr and "Empty" not in stderr, stderr[-3000:]
    assert not (output / names.MANIFEST_NAME).exists()


def test_a_forked_worker_goes_with_its_killed_client(fork_server):
    """Survivor 4 of issue 35: a client killed outright (SIGKILL: no word to the server) closes
    its connection; the server kills that client's worker at once, which no test checked."""
    server, _ = fork_server
    env = {"PATH": os.environ.get("PATH", ""),
           # a control address nothing answers: Beam's harness waits there (up to 60 s)
           "CONTROL_API_SERVICE_DESCRIPTOR": 'url: "localhost:1"', "PIPELINE_OPTIONS": "{}"}
    client = subprocess.Popen(server["command"], shell=True, env=env)
    try:
        deadline = time.time() + 30
        workers: list[int] = []
        while not workers:
            assert client.poll() is None and time.time() < deadline, "no worker was forked"
            workers = children(server["pid"])
            time.sleep(0.05)
        time.sleep(1.0)
        assert running(workers[0]) and client.poll() is None, "the worker did not wait for its runner"
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=10)
        gone_by = time.time() + 3.0
        while running(workers[0]) and time.time() < gone_by:
            time.sleep(0.05)
        assert not running(workers[0]), "the forked worker outlived its killed client"
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
