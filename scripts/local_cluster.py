#!/usr/bin/env python3
"""A Spark standalone or Flink session cluster on 127.0.0.1, with Beam's Java job server and a
Python SDK worker pool, and `dcm2tfrecord convert` run on it (docs/OPERATIONS.md,
"On your own cluster"; tests/e2e/test_cluster.py runs this; benchmarks/bench_cluster.py times it).

    scripts/local_cluster.py fetch                   # download and cache everything (once)
    scripts/local_cluster.py spark --input ARCHIVE --output OUT --id_salt_file SALT [convert flags]
    scripts/local_cluster.py flink --input ARCHIVE --output OUT --id_salt_file SALT [convert flags]

`spark` / `flink` start the cluster (one master and two workers; a job manager and two task
managers), the job server and one worker pool, run `run_portable.sh` against them, and stop
every process they started (by process id) however the run ends. `--keep` leaves them running
and prints their endpoints and process ids; `scripts/local_cluster.py stop --run_dir RUN_DIR`
stops them. The worker pool and the launcher run the Python that has this project installed:
$DCM2TFRECORD_PYTHON, else the checkout's .venv (as run_portable.sh), else this interpreter.

Versions. Beam's Java job servers are not on Maven Central for every Beam release: here the
newest Beam whose Spark runner, Flink runner and job service all resolve there is BEAM_JAVA
(2.62.0), so the job runs with that Beam on both sides: the job server is Beam's driver class
on the runner's Maven classpath, and the Python side (launcher and SDK workers) puts Beam
BEAM_JAVA's wheel (installed --no-deps into the cache) ahead of the installed Beam on
PYTHONPATH. Spark is pyspark SPARK's distribution (its jars, bin/ and sbin/), Flink is
PyFlink FLINK's (apache-flink's bin/ and conf/, apache-flink-libraries' lib/), both from PyPI.

Everything is cached under $DCM2TFRECORD_CLUSTER_CACHE (default ~/.cache/dcm2tfrecord/cluster):
~0.9 GB, fetched once (each piece is built in a temporary folder and renamed into place whole;
a download is tried three times). Heaps are small (master/worker daemons 256 MiB, executors
and task managers ~1 GiB) so that the cluster fits on a laptop.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import zipfile
from typing import Callable, Optional

BEAM_JAVA = "2.62.0"
SPARK = "3.5.7"            # Beam's Spark 3 runner is built against Spark 3.5
FLINK = "1.19.3"           # Beam BEAM_JAVA publishes beam-runners-flink-1.19
FLINK_MINOR = ".".join(FLINK.split(".")[:2])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAVA_OPENS = [  # what Spark's own launcher gives a Java 17 driver (JavaModuleOptions)
    "-XX:+IgnoreUnrecognizedVMOptions", "-Djdk.reflect.useDirectMethodHandle=false",
    *(f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
        "java.lang", "java.lang.invoke", "java.lang.reflect", "java.io", "java.net", "java.nio",
        "java.util", "java.util.concurrent", "java.util.concurrent.atomic", "sun.nio.ch",
        "sun.nio.cs", "sun.security.action", "sun.util.calendar"))]
SPARK_DRIVER_CLASS = "org.apache.beam.runners.spark.SparkJobServerDriver"
FLINK_DRIVER_CLASS = "org.apache.beam.runners.flink.FlinkJobServerDriver"


class ClusterError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"local_cluster: {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the cache


def cache_root() -> str:
    return os.environ.get("DCM2TFRECORD_CLUSTER_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "dcm2tfrecord", "cluster")


def _retry(what: str, action: Callable[[], None], tries: int = 3) -> None:
    for attempt in range(1, tries + 1):
        try:
            action()
            return
        except (subprocess.CalledProcessError, OSError) as exc:
            if attempt == tries:
                raise ClusterError(f"fetching {what} failed {tries} times; last: {exc}") from exc
            log(f"fetching {what} failed ({exc}); trying again")
            time.sleep(5 * attempt)


def _whole(dest: str, what: str, build: Callable[[str], None]) -> str:
    """``dest``, built by ``build(tmp)`` in a temporary folder beside it and renamed into place
    with a marker last: a download cut short leaves no half folder behind."""
    marker = os.path.join(dest, ".complete")
    if os.path.exists(marker):
        return dest
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.exists(dest):
        shutil.rmtree(dest)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(dest) + ".partial-", dir=os.path.dirname(dest))
    try:
        log(f"fetching {what} into {dest} (once)")

        def attempt() -> None:
            for name in os.listdir(tmp):     # what an earlier attempt left
                path = os.path.join(tmp, name)
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            build(tmp)
        _retry(what, attempt)
        with open(os.path.join(tmp, ".complete"), "w") as handle:
            handle.write(what + "\n")
        os.rename(tmp, dest)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def project_python() -> str:
    """The Python that has this project installed, as run_portable.sh picks it:
    $DCM2TFRECORD_PYTHON, else the checkout's .venv, else this interpreter."""
    venv = os.path.join(ROOT, ".venv", "bin", "python")
    return os.environ.get("DCM2TFRECORD_PYTHON") or (venv if os.path.exists(venv) else sys.executable)


def _pip(*args: str) -> None:
    subprocess.run([project_python(), "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True, stdout=sys.stderr)


def _pip_download(spec: str, into: str, *extra: str) -> str:
    into = tempfile.mkdtemp(prefix="download-", dir=into)
    _pip("download", "--no-deps", "-d", into, *extra, spec)
    found = os.listdir(into)
    if len(found) != 1:
        raise OSError(f"pip download {spec} left {found}")
    return os.path.join(into, found[0])


def _spark_home(tmp: str) -> None:
    sdist = _pip_download(f"pyspark=={SPARK}", tmp)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="tar")
    deps = os.path.join(tmp, f"pyspark-{SPARK}", "deps")
    for name in ("bin", "sbin", "jars"):
        os.rename(os.path.join(deps, name), os.path.join(tmp, name))
    os.makedirs(os.path.join(tmp, "conf"))
    shutil.rmtree(os.path.join(tmp, f"pyspark-{SPARK}"))
    shutil.rmtree(os.path.dirname(sdist))


def _flink_home(tmp: str) -> None:
    sdist = _pip_download(f"apache-flink-libraries=={FLINK}", tmp)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp, filter="tar")
    deps = os.path.join(tmp, f"apache-flink-libraries-{FLINK}", "deps")
    for name in ("lib", "opt", "plugins", "bin"):
        os.rename(os.path.join(deps, name), os.path.join(tmp, name))
    # bin/ and conf/ (scripts and configuration, no code) come with the apache-flink wheel
    wheel = _pip_download(f"apache-flink=={FLINK}", tmp, "--only-binary=:all:", "--python-version", "3.11",
                          "--platform", "manylinux2014_x86_64", "--implementation", "cp")
    with zipfile.ZipFile(wheel) as whl:
        for info in whl.infolist():
            for part in ("bin", "conf"):
                prefix = f"pyflink/{part}/"
                if info.filename.startswith(prefix) and not info.is_dir():
                    target = os.path.join(tmp, part, info.filename[len(prefix):])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    with open(target, "wb") as handle:
                        handle.write(whl.read(info))
                    if part == "bin":
                        os.chmod(target, 0o755)
    shutil.rmtree(os.path.join(tmp, f"apache-flink-libraries-{FLINK}"))
    shutil.rmtree(os.path.dirname(sdist))
    shutil.rmtree(os.path.dirname(wheel))


# Left out of the Spark job server's classpath: slf4j 1.7 (Spark's own 2.x and its log4j binding
# come first).


def _maven_classpath(artifact: str, *excluded: tuple) -> Callable[[str], None]:
    exclusions = "".join(f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>"
                         for g, a in excluded)

    def build(tmp: str) -> None:
        pom = os.path.join(tmp, "pom.xml")
        with open(pom, "w") as handle:
            handle.write(f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dcm2tfrecord</groupId><artifactId>job-server-classpath</artifactId><version>1</version>
  <dependencies><dependency><groupId>org.apache.beam</groupId><artifactId>{artifact}</artifactId>
    <version>{BEAM_JAVA}</version>
    <exclusions>{exclusions}</exclusions></dependency></dependencies>
</project>
""")
        subprocess.run(["mvn", "-q", "-B", "-f", pom, "dependency:copy-dependencies", "-DincludeScope=runtime",
                        f"-DoutputDirectory={os.path.join(tmp, 'jars')}"], check=True, stdout=sys.stderr)
        os.remove(pom)
    return build


def _beam_python(tmp: str) -> None:
    # crcmod: a requirement of that Beam that later ones dropped
    _pip("install", "--no-deps", "--no-compile", "--target", tmp, f"apache-beam=={BEAM_JAVA}", "crcmod>=1.7,<2")


class Paths:
    def __init__(self, root: str):
        self.root = root
        self.spark_home = os.path.join(root, f"spark-{SPARK}")
        self.flink_home = os.path.join(root, f"flink-{FLINK}")
        self.spark_jars = os.path.join(root, f"beam-runners-spark-3-{BEAM_JAVA}", "jars")
        self.flink_jars = os.path.join(root, f"beam-runners-flink-{FLINK_MINOR}-{BEAM_JAVA}", "jars")
        tag = subprocess.run([project_python(), "-c", "import sys; print('cp%d%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        self.beam_python = os.path.join(root, f"apache-beam-{BEAM_JAVA}-{tag}")


def fetch(engines: tuple = ("spark", "flink")) -> Paths:
    """Everything the engines need, from PyPI and Maven Central, cached."""
    paths = Paths(cache_root())
    _whole(paths.beam_python, f"apache-beam {BEAM_JAVA} (Python)", _beam_python)
    if "spark" in engines:
        _whole(paths.spark_home, f"Spark {SPARK} (PyPI pyspark)", _spark_home)
        _whole(os.path.dirname(paths.spark_jars), f"beam-runners-spark-3 {BEAM_JAVA} (Maven)",
               _maven_classpath("beam-runners-spark-3", ("org.slf4j", "slf4j-api")))
    if "flink" in engines:
        _whole(paths.flink_home, f"Flink {FLINK} (PyPI apache-flink)", _flink_home)
        _whole(os.path.dirname(paths.flink_jars), f"beam-runners-flink-{FLINK_MINOR} {BEAM_JAVA} (Maven)",
               _maven_classpath(f"beam-runners-flink-{FLINK_MINOR}"))
    return paths


def fetchable() -> Optional[str]:
    """None when the cache is whole or PyPI and Maven Central answer; else why not."""
    paths = Paths(cache_root())
    if all(os.path.exists(os.path.join(p, ".complete")) for p in (
            paths.beam_python, paths.spark_home, paths.flink_home,
            os.path.dirname(paths.spark_jars), os.path.dirname(paths.flink_jars))):
        return None
    if shutil.which("java") is None or shutil.which("mvn") is None:
        return "needs java and mvn on PATH"
    for url in ("https://pypi.org/simple/pyspark/",
                "https://repo.maven.apache.org/maven2/org/apache/beam/beam-runners-spark-3/maven-metadata.xml"):
        try:
            urllib.request.urlopen(url, timeout=15).close()
        except OSError as exc:
            return f"offline: {url} does not answer ({exc})"
    return None


# ---------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``: one process, by its id."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            if not _alive(pid):
                return
            time.sleep(0.1)


def _http_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def _wait(what: str, ready: Callable[[], bool], timeout_s: float, logs: str,
          alive: Callable[[], bool] = lambda: True) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if ready():
                return
        except (OSError, ValueError, KeyError):
            pass
        if not alive():
            break
        time.sleep(0.5)
    raise ClusterError(f"{what} did not come up within {timeout_s:.0f} s; see {logs}")


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


class Cluster:
    """One engine's cluster, job server and worker pool on 127.0.0.1, under ``run_dir``; every
    process it starts is recorded by id (``pids``) and stopped by ``stop()``."""

    def __init__(self, engine: str, run_dir: str, paths: Optional[Paths] = None,
                 pool_python: Optional[str] = None, pool_env: Optional[dict] = None):
        if engine not in ("spark", "flink"):
            raise ValueError(engine)
        self.engine = engine
        self.run = os.path.abspath(run_dir)
        self.paths = paths or fetch((engine,))
        self.logs = os.path.join(self.run, "logs")
        self.pool_python = pool_python or project_python()
        self.pool_env = pool_env
        self.pids: dict = {}           # name -> pid
        self._popen: list = []
        for sub in ("logs", "pids", "work", "tmp", "conf", "artifacts"):
            os.makedirs(os.path.join(self.run, sub), exist_ok=True)
        self.job_port, self.artifact_port, self.expansion_port = free_port(), free_port(), free_port()
        self.pool_port = free_port()
        self.ui_port = free_port()
        self.master_port = free_port()

    # -- the Python side: launcher and SDK workers run Beam BEAM_JAVA

    def python_env(self, base: Optional[dict] = None) -> dict:
        env = dict(os.environ if base is None else base)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (self.paths.beam_python, env.get("PYTHONPATH")) if p)
        env.setdefault("CUDA_VISIBLE_DEVICES", "-1")
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["PATH"] = os.path.dirname(self.pool_python) + os.pathsep + env.get("PATH", "")
        return env

    @property
    def job_endpoint(self) -> str:
        return f"127.0.0.1:{self.job_port}"

    @property
    def environment_config(self) -> str:
        return f"127.0.0.1:{self.pool_port}"

    @property
    def pool_log(self) -> str:
        return os.path.join(self.logs, "sdk-worker-pool.log")

    def _spawn(self, name: str, argv: list, env: dict, log_name: str) -> int:
        handle = open(os.path.join(self.logs, log_name), "ab")
        proc = subprocess.Popen(argv, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.run)
        handle.close()
        self._popen.append(proc)
        self.pids[name] = proc.pid
        return proc.pid

    def start(self, timeout_s: float = 180.0) -> "Cluster":
        try:
            if self.engine == "spark":
                self._start_spark(timeout_s)
            else:
                self._start_flink(timeout_s)
            self._start_pool(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_pool(self, timeout_s: float) -> None:
        env = self.python_env(self.pool_env)
        pid = self._spawn("sdk-worker-pool", [self.pool_python, "-m", "apache_beam.runners.worker.worker_pool_main",
                                              f"--service_port={self.pool_port}"], env, "sdk-worker-pool.log")
        _wait("the SDK worker pool", lambda: _port_open(self.pool_port), timeout_s, self.pool_log,
              lambda: _alive(pid))

    def _job_server(self, jars: list, driver: str, args: list, heap: str, props: list) -> None:
        java = shutil.which("java") or "java"
        cp = os.pathsep.join(j if j.endswith(".jar") else os.path.join(j, "*") for j in jars)
        log_conf = os.path.join(self.run, "conf", "job-server-log4j2.properties")
        with open(log_conf, "w") as handle:
            handle.write("rootLogger.level = info\nrootLogger.appenderRef.out.ref = out\n"
                         "appender.out.type = Console\nappender.out.name = out\n"
                         "appender.out.layout.type = PatternLayout\n"
                         "appender.out.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n\n"
                         "logger.spark.name = org.apache.spark\nlogger.spark.level = warn\n")
        argv = [java, f"-Xmx{heap}", *JAVA_OPENS, f"-Dlog4j2.configurationFile={log_conf}",
                f"-Dlog4j.configurationFile={log_conf}", *props, "-cp", cp, driver,
                f"--job-port={self.job_port}", f"--artifact-port={self.artifact_port}",
                f"--expansion-port={self.expansion_port}", f"--artifacts-dir={os.path.join(self.run, 'artifacts')}",
                *args]
        pid = self._spawn("job-server", argv, dict(os.environ), "job-server.log")
        _wait("Beam's job server", lambda: _port_open(self.job_port), 120, os.path.join(self.logs, "job-server.log"),
              lambda: _alive(pid))

    # -- Spark standalone: its own sbin/spark-daemon.sh

    def _spark_env(self) -> dict:
        env = dict(os.environ)
        env.update(SPARK_HOME=self.paths.spark_home, SPARK_CONF_DIR=os.path.join(self.run, "conf"),
                   SPARK_LOG_DIR=self.logs, SPARK_PID_DIR=os.path.join(self.run, "pids"),
                   SPARK_WORKER_DIR=os.path.join(self.run, "work"), SPARK_LOCAL_DIRS=os.path.join(self.run, "tmp"),
                   SPARK_DAEMON_MEMORY="256m", SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_IDENT_STRING=f"dcm2tfrecord{os.getpid()}")
        env.pop("SPARK_NO_DAEMONIZE", None)
        return env

    def _spark_daemon(self, action: str, cls: str, instance: int, *args: str) -> None:
        subprocess.run([os.path.join(self.paths.spark_home, "sbin", "spark-daemon.sh"), action, cls,
                        str(instance), *args], env=self._spark_env(), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def _spark_pid(self, cls: str, instance: int) -> Optional[int]:
        name = f"spark-dcm2tfrecord{os.getpid()}-{cls}-{instance}.pid"
        try:
            with open(os.path.join(self.run, "pids", name)) as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):
            return None

    def spark_workers(self) -> list:
        return [self.pids[k] for k in sorted(self.pids) if k.startswith("spark-worker-")]

    def _start_spark(self, timeout_s: float) -> None:
        master_cls, worker_cls = "org.apache.spark.deploy.master.Master", "org.apache.spark.deploy.worker.Worker"
        self._spark_daemon("start", master_cls, 1, "--host", "127.0.0.1", "--port", str(self.master_port),
                           "--webui-port", str(self.ui_port))
        self.pids["spark-master"] = self._spark_pid(master_cls, 1)
        master = f"spark://127.0.0.1:{self.master_port}"
        _wait("the Spark master", lambda: _port_open(self.master_port), timeout_s, self.logs)
        for i in (1, 2):
            self._spark_daemon("start", worker_cls, i, "--host", "127.0.0.1", "--webui-port", str(free_port()),
                               "--cores", "1", "--memory", "1g", "--work-dir", os.path.join(self.run, "work"), master)
            self.pids[f"spark-worker-{i}"] = self._spark_pid(worker_cls, i)

        def two_workers() -> bool:
            state = _http_json(f"http://127.0.0.1:{self.ui_port}/json/")
            return sum(w["state"] == "ALIVE" for w in state["workers"]) >= 2
        _wait("two Spark workers", two_workers, timeout_s, self.logs)
        # Beam's Google Cloud client needs a newer Guava than the 14 that Spark's jars/ holds: it
        # goes first, on the driver (the job server) and on the executors
        guava = [os.path.join(self.paths.spark_jars, n) for n in os.listdir(self.paths.spark_jars)
                 if n.startswith("guava-")]
        self._job_server([*guava, os.path.join(self.paths.spark_home, "jars"), self.paths.spark_jars],
                         SPARK_DRIVER_CLASS, [f"--spark-master-url={master}"], "1g",
                         [f"-Dspark.executor.extraClassPath={os.pathsep.join(guava)}",
                          "-Dspark.executor.memory=640m", "-Dspark.driver.host=127.0.0.1",
                          "-Dspark.driver.bindAddress=127.0.0.1", "-Dspark.cores.max=2",
                          f"-Dspark.local.dir={os.path.join(self.run, 'tmp')}", "-Dspark.ui.enabled=false"])

    # -- Flink session cluster: its own bin/jobmanager.sh and bin/taskmanager.sh

    def _flink_env(self) -> dict:
        env = dict(os.environ)
        env.update(FLINK_HOME=self.paths.flink_home, FLINK_CONF_DIR=os.path.join(self.run, "conf"),
                   FLINK_LOG_DIR=self.logs, FLINK_PID_DIR=os.path.join(self.run, "pids"),
                   FLINK_IDENT_STRING=f"dcm2tfrecord{os.getpid()}")
        return env

    def _flink_pids(self, kind: str) -> list:
        name = f"flink-dcm2tfrecord{os.getpid()}-{kind}.pid"
        try:
            with open(os.path.join(self.run, "pids", name)) as handle:
                return [int(line) for line in handle.read().split()]
        except (OSError, ValueError):
            return []

    def task_managers(self) -> list:
        return [self.pids[k] for k in sorted(self.pids) if k.startswith("flink-taskmanager-")]

    def _start_flink(self, timeout_s: float) -> None:
        conf = os.path.join(self.run, "conf")
        for name in os.listdir(os.path.join(self.paths.flink_home, "conf")):
            if name.startswith("log4j"):
                shutil.copy(os.path.join(self.paths.flink_home, "conf", name), conf)
        settings = {
            "jobmanager.rpc.address": "127.0.0.1", "jobmanager.rpc.port": self.master_port,
            "jobmanager.bind-host": "127.0.0.1", "taskmanager.bind-host": "127.0.0.1",
            "taskmanager.host": "127.0.0.1", "rest.address": "127.0.0.1", "rest.bind-address": "127.0.0.1",
            "rest.port": self.ui_port, "jobmanager.memory.process.size": "768m",
            "taskmanager.memory.process.size": "1500m",
            # managed memory holds Flink's sort buffers, shared by a task manager's slots: a
            # record that does not fit a fresh one fails the job ("Cannot write record to fresh
            # sort buffer. Record too large."); 32 MiB a slot failed on this job's grouped records
            "taskmanager.memory.managed.size": "256m",
            # the job's ~60 exchanges each need buffers: 64 MiB (the default share) is short of them
            "taskmanager.memory.network.min": "160m", "taskmanager.memory.network.max": "160m",
            # two slots each: the job (parallelism 2) still fits when one task manager is lost
            "taskmanager.numberOfTaskSlots": 2, "parallelism.default": 2,
            "io.tmp.dirs": os.path.join(self.run, "tmp"), "blob.server.port": "0",
            "taskmanager.rpc.port": "0", "taskmanager.data.port": "0",
            "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3,
            "restart-strategy.fixed-delay.delay": "2 s", "heartbeat.timeout": 20000,
            "env.java.opts.all": " ".join(JAVA_OPENS),
        }
        with open(os.path.join(conf, "config.yaml"), "w") as handle:
            for key, value in settings.items():
                handle.write(f"{key}: {json.dumps(value) if isinstance(value, str) else value}\n")
        env = self._flink_env()
        bin_dir = os.path.join(self.paths.flink_home, "bin")
        subprocess.run([os.path.join(bin_dir, "jobmanager.sh"), "start"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        for pid in self._flink_pids("standalonesession"):
            self.pids["flink-jobmanager"] = pid
        _wait("the Flink job manager", lambda: _port_open(self.ui_port), timeout_s, self.logs)
        for i in (1, 2):
            subprocess.run([os.path.join(bin_dir, "taskmanager.sh"), "start"], env=env, check=True,
                           stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            pids = self._flink_pids("taskexecutor")
            if len(pids) >= i:
                self.pids[f"flink-taskmanager-{i}"] = pids[i - 1]

        def two_task_managers() -> bool:
            return len(_http_json(f"http://127.0.0.1:{self.ui_port}/taskmanagers")["taskmanagers"]) >= 2
        _wait("two Flink task managers", two_task_managers, timeout_s, self.logs)
        log_jars = [os.path.join(self.paths.flink_home, "lib", n) for n in sorted(
            os.listdir(os.path.join(self.paths.flink_home, "lib"))) if n.startswith("log4j-")]
        self._job_server([self.paths.flink_jars, *log_jars], FLINK_DRIVER_CLASS,
                         [f"--flink-master=127.0.0.1:{self.ui_port}"], "768m", [])

    def stop(self) -> None:
        """Every process this cluster started, by its id: the worker pool (and the SDK workers it
        started, its process group), the job server, then the engine's daemons."""
        order = ["sdk-worker-pool", "job-server"] + sorted(k for k in self.pids if "worker-" in k or "taskmanager" in k)
        order += [k for k in self.pids if k not in order]
        for name in order:
            pid = self.pids.get(name)
            if not pid:
                continue
            if name == "sdk-worker-pool":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGTERM)
            kill(pid)
            if name == "sdk-worker-pool":
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        for proc in self._popen:
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
        self.pids.clear()

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def save(self) -> None:
        with open(os.path.join(self.run, "cluster.json"), "w") as handle:
            json.dump({"engine": self.engine, "pids": self.pids, "job_endpoint": self.job_endpoint,
                       "environment_config": self.environment_config, "ui": f"http://127.0.0.1:{self.ui_port}",
                       "logs": self.logs}, handle, indent=1)

    # -- the job

    def convert_argv(self, args: list) -> list:
        return [os.path.join(ROOT, "run_portable.sh"), "--job_endpoint", self.job_endpoint,
                "--environment_type", "EXTERNAL", "--environment_config", self.environment_config, *args]

    def convert(self, args: list, timeout_s: float = 900, env: Optional[dict] = None,
                **popen) -> subprocess.CompletedProcess:
        run_env = self.python_env(env)
        run_env.setdefault("DCM2TFRECORD_PYTHON", self.pool_python)
        return subprocess.run(self.convert_argv(args), env=run_env, timeout=timeout_s, **popen)


def stop_saved(run_dir: str) -> None:
    with open(os.path.join(run_dir, "cluster.json")) as handle:
        saved = json.load(handle)
    for name, pid in saved["pids"].items():
        if name == "sdk-worker-pool":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
        kill(pid)


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engine", choices=("fetch", "spark", "flink", "stop"))
    parser.add_argument("--run_dir", help="where logs, pids and work folders go (a new temporary folder if not given)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running after the job")
    known, rest = parser.parse_known_args(argv)
    if known.engine == "fetch":
        fetch()
        return 0
    if known.engine == "stop":
        stop_saved(known.run_dir or (rest[0] if rest else "."))
        return 0
    run_dir = known.run_dir or tempfile.mkdtemp(prefix=f"dcm2tfrecord-{known.engine}-")
    cluster = Cluster(known.engine, run_dir)
    try:
        cluster.start()
        cluster.save()
        log(f"{known.engine} cluster up: job server {cluster.job_endpoint}, worker pool "
            f"{cluster.environment_config}, web UI http://127.0.0.1:{cluster.ui_port}, logs {cluster.logs}")
        code = 0
        if rest:
            code = cluster.convert(rest).returncode
        if known.keep:
            log(f"left running: {json.dumps(cluster.pids)}; stop with {sys.argv[0]} stop --run_dir {run_dir}")
            return code
        return code
    finally:
        if not known.keep:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
