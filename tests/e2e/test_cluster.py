"""The job on a real cluster on 127.0.0.1: a Spark standalone cluster (one master, two
workers) and a Flink session cluster (a job manager, two task managers), each with Beam's
Java job server and a Python SDK worker pool (EXTERNAL), through run_portable.sh, as
scripts/local_cluster.py starts them for users: every shard and index equals a local run's,
and a worker killed while shards are written leaves either the same bytes or nothing
committed.

Slow: the first run downloads ~0.9 GB (pyspark and PyFlink from PyPI, Beam's runners from
Maven Central) into $DCM2TFRECORD_CLUSTER_CACHE (~/.cache/dcm2tfrecord/cluster); each
engine's run is then ~2-3 minutes here. Skipped, saying why, without java/mvn or offline.
Beam runs at local_cluster.BEAM_JAVA on both sides (Maven Central serves no job server for
the Beam installed here): the launcher and the workers put that Beam's wheel first on
PYTHONPATH.
"""
from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import dcm2tfrecord.pipeline
from dcm2tfrecord.dataset import names
from tests.support.runners import _shards, archive, reference  # noqa: F401  (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.slow


def _load_local_cluster():
    spec = importlib.util.spec_from_file_location("local_cluster", os.path.join(ROOT, "scripts", "local_cluster.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


local_cluster = _load_local_cluster()
# the project as this test imports it (a worktree's, not another install's), for the launcher
# and the SDK workers
PROJECT_PATH = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(dcm2tfrecord.pipeline.__file__))))


@pytest.fixture(scope="module")
def paths():
    why = local_cluster.fetchable()
    if why:
        pytest.skip(f"cluster test: {why}")
    return local_cluster.fetch()


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_PATH, ROOT) if p)
    env.pop("DCM2TFRECORD_ID_SALT", None)
    return env


def _args(archive, output) -> list:
    root, labels, salt, _ = archive
    return ["--input", root, "--output", str(output), "--id_salt_file", salt, "--labels", labels,
            "--max_failure_ratio=1", "--splits", "train=0.5,validation=0.5", "--progress", "none",
            "--environment_cache_millis=600000"]


@pytest.fixture(params=["spark", "flink"])
def cluster(request, paths, tmp_path):
    env = _env()
    cluster = local_cluster.Cluster(request.param, str(tmp_path / "cluster"), paths, pool_python=sys.executable,
                                    pool_env=env)
    request.addfinalizer(cluster.stop)           # every process it started, by id
    cluster.start()
    cluster.test_env = env
    return cluster


def _failure(proc, cluster) -> str:
    logs = []
    for name in sorted(os.listdir(cluster.logs)):
        with open(os.path.join(cluster.logs, name), errors="replace") as handle:
            logs.append(f"--- {name}\n{handle.read()[-1500:]}")
    return (proc.stderr or "")[-3000:] + "\n".join(logs)


def test_the_job_on_a_cluster_writes_the_reference_bytes(archive, reference, cluster, tmp_path):
    output = tmp_path / "out"
    started = time.time()
    proc = cluster.convert(_args(archive, output), timeout_s=900, env=cluster.test_env, capture_output=True,
                           text=True)
    assert proc.returncode == 0, _failure(proc, cluster)
    assert _shards(output) == reference[0]
    assert os.path.exists(output / names.MANIFEST_NAME)
    print(f"{cluster.engine}: the job took {time.time() - started:.0f} s")


def _kill_a_worker_once_shards_are_written(cluster, output, killed: list, stop: threading.Event) -> None:
    """Waits for the first shard's .done progress mark (shards are being written), then kills
    one Spark worker / Flink task manager with SIGKILL."""
    progress = os.path.join(output, names.PROGRESS_DIR)
    while not stop.is_set():
        if os.path.isdir(progress) and any(n.endswith(".done") or n.startswith("plan")
                                           for n in os.listdir(progress)):
            victims = cluster.spark_workers() if cluster.engine == "spark" else cluster.task_managers()
            pid = victims[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.05)


def test_a_worker_killed_while_shards_are_written_leaves_the_same_bytes_or_nothing(archive, reference, cluster,
                                                                                   tmp_path):
    output = tmp_path / "out"
    killed: list = []
    stop = threading.Event()
    watcher = threading.Thread(target=_kill_a_worker_once_shards_are_written,
                               args=(cluster, str(output), killed, stop), daemon=True)
    watcher.start()
    try:
        proc = cluster.convert(_args(archive, output), timeout_s=900, env=cluster.test_env, capture_output=True,
                               text=True)
    finally:
        stop.set()
        watcher.join(timeout=5)
    assert killed, "no worker was killed: the run ended before shards were written"
    if proc.returncode == 0:
        # the engine retried the lost worker's tasks: the same bytes, nothing twice, nothing lost
        assert _shards(output) == reference[0], _failure(proc, cluster)
        assert not os.path.exists(output / ".incomplete") or not os.listdir(output / ".incomplete")
    else:
        # the engine gave up: one line, nothing committed
        lines = [line for line in proc.stderr.splitlines() if line.startswith("dcm2tfrecord convert:")]
        assert len(lines) == 1, _failure(proc, cluster)
        assert "committed nothing" in lines[0] or "NOT committed" in lines[0], lines[0]
        assert not os.path.exists(output / names.MANIFEST_NAME)
    print(f"{cluster.engine}: killed {killed}, run exit {proc.returncode}")


def test_the_script_refuses_nothing_it_does_not_know(tmp_path):
    """`local_cluster.py` without an engine: argparse's one line, exit 2 (no cluster started)."""
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "local_cluster.py"), "yarn"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


@pytest.fixture
def spark_cluster(paths, tmp_path):
    env = _env()
    cluster = local_cluster.Cluster("spark", str(tmp_path / "cluster"), paths, pool_python=sys.executable,
                                    pool_env=env)
    try:
        cluster.start()
        cluster.test_env = env
        yield cluster
    finally:
        cluster.stop()


def test_a_job_whose_workers_never_start_ends_in_one_line_on_a_real_job_server(archive, spark_cluster, tmp_path):
    """The worker pool's workers start with a `python` that cannot start Beam (first on the
    pool's PATH): Spark's job server waits for them forever; the launcher cancels the job
    after $DCM2TFRECORD_WORKER_START_TIMEOUT_S and fails in one line naming the pool's log."""
    cluster = spark_cluster
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python").write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named apache_beam' >&2\n"
                                     "exit 1\n")
    (fake_bin / "python").chmod(0o755)
    local_cluster.kill(cluster.pids["sdk-worker-pool"])          # the good pool, replaced by a bad one
    env = cluster.python_env(cluster.test_env)
    env["PATH"] = str(fake_bin) + os.pathsep + env["PATH"]
    with open(cluster.pool_log, "ab") as log:
        pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                                 f"--service_port={cluster.pool_port}"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    cluster.pids["sdk-worker-pool"] = pool.pid
    deadline = time.time() + 60
    while not local_cluster._port_open(cluster.pool_port):
        assert pool.poll() is None and time.time() < deadline
        time.sleep(0.2)
    output = tmp_path / "out"
    started = time.time()
    proc = cluster.convert(_args(archive, output), timeout_s=600,
                           env={**cluster.test_env, "DCM2TFRECORD_WORKER_START_TIMEOUT_S": "60"},
                           capture_output=True, text=True)
    took = time.time() - started
    lines = [line for line in proc.stderr.splitlines() if line.startswith("dcm2tfrecord convert:")]
    assert proc.returncode == 1 and len(lines) == 1, _failure(proc, cluster)
    assert "no Python SDK worker started within 60 s" in lines[0] and "worker pool's log" in lines[0], lines[0]
    assert took < 60 + 180, took      # the bound, plus the launcher's start and the job's submission
    assert not os.path.exists(output / names.MANIFEST_NAME)
    with open(cluster.pool_log) as handle:
        assert "No module named apache_beam" in handle.read()
    print(f"spark, workers never start: ended after {took:.0f} s")
