"""The same job on every Beam runner this environment can start, byte for byte.

A tiny archive (PNGs, a truncated PNG, a CT slice, labels, two splits) is converted
once in-process (the reference) and then on FnApiRunner's multi_threading and
multi_processing modes, BundleBasedDirectRunner, and the portable runner on the
embedded job service, in LOOPBACK and in EXTERNAL mode with Beam's worker pool as
a separate process (the way a Flink or Spark sidecar runs it); every shard and
index must equal the reference's. The graph rule that keeps this so is checked
on the graph itself. The Java job servers of Flink and Spark, on real clusters, are
tests/e2e/test_cluster.py (slow).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.versions import BaseVersion, PreviousShard
from dcm2tfrecord.pipeline import convert, graph
from dcm2tfrecord.pipeline.launch import runner
from dcm2tfrecord.pipeline.root_cause import root_cause
from dcm2tfrecord.pipeline.options.arguments import parse_convert
from dcm2tfrecord.pipeline.launch.beam_args import unknown_beam_args
from dcm2tfrecord.pipeline.options.salt import check_salt_stays_out_of_the_job
from dcm2tfrecord.pipeline.options.usage import UsageError
from tests.support import TEST_SALT
from tests.support.runners import _byte_strings, _opts, _shards, archive, reference  # noqa: F401  (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "run_portable.sh")
LOOPBACK = ["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=LOOPBACK"]


# ---------------------------------------------------------------- the graph


class _SideInputsOffMultiOutputSteps(PipelineVisitor):
    def __init__(self):
        self.found = []

    def visit_transform(self, node):
        for side in node.side_inputs:
            producer = side.pvalue.producer
            if len(producer.outputs) > 1:
                self.found.append(f"{node.full_label} reads {producer.full_label}")


@pytest.mark.parametrize("extra", [{}, {"labels_from_dirs": True, "labels": None}, {"unit": "series"},
                                   {"duplicates": "keep", "split_column": "split"}, "incremental",
                                   {"intensity": "ct"}])
def test_no_side_input_is_read_off_a_step_with_several_outputs(archive, tmp_path, extra):
    """Runners differ in how they keep the outputs of a multi-output step apart when one of
    them is a side input (BundleBasedDirectRunner mixed WriteShards' failures into the view
    of its shard results: "'Outcome' object has no attribute 'split'"): no side input is
    read straight off such a step, whatever the options."""
    base = None
    if extra == "incremental":
        base = BaseVersion("0001", (PreviousShard("train", "../0001/train-00000-of-00001.tfrecord",
                                                  str(tmp_path / "x.records.json"), 1, 10),))
        extra = {}
    pipeline = beam.Pipeline(options=PipelineOptions([]))
    graph.build(pipeline, _opts(archive, tmp_path / "out", **extra), base)
    visitor = _SideInputsOffMultiOutputSteps()
    pipeline.visit(visitor)
    assert visitor.found == []


# ---------------------------------------------------------------- every runner, the same bytes


@pytest.mark.parametrize("beam_args", [
    ["--direct_num_workers=2", "--direct_running_mode=multi_threading"],
    ["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
    ["--runner=BundleBasedDirectRunner"],
], ids=["multi_threading", "multi_processing", "BundleBasedDirectRunner"])
def test_local_runners_write_the_reference_bytes(archive, reference, tmp_path, beam_args):
    output = tmp_path / "out"
    convert.run(_opts(archive, output), beam_args, quiet=True)
    assert _shards(output) == reference[0]


def test_portable_runner_loopback_writes_the_reference_bytes_and_the_salt_never_travels(
        archive, reference, tmp_path, monkeypatch):
    """The job as the portable runner submits it (pipeline and options, recorded on their way
    into the embedded job service) holds the salt file's name, never the salt."""
    from apache_beam.runners.portability import local_job_service
    from google.protobuf import json_format
    import base64
    submitted = []
    prepare = local_job_service.LocalJobServicer.Prepare

    def recording_prepare(self, request, context=None, timeout=None):
        submitted.append(json_format.MessageToDict(request))
        return prepare(self, request, context, timeout)

    monkeypatch.setattr(local_job_service.LocalJobServicer, "Prepare", recording_prepare)
    output = tmp_path / "out"
    convert.run(_opts(archive, output), LOOPBACK, quiet=True)
    assert _shards(output) == reference[0]
    assert len(submitted) == 1
    blobs = list(_byte_strings(submitted[0]))
    pickled = [blob for blob in blobs if b"ProbeHeadersFn" in blob or b"WriteShardFn" in blob]
    assert pickled, "no pickled DoFn found: the search would see nothing"
    assert any(archive[2].encode() in blob for blob in pickled)     # the file name does travel
    salt = TEST_SALT.encode()
    for form in (salt, TEST_SALT.encode("utf-16-le"), base64.b64encode(salt)):
        assert not any(form in blob for blob in blobs), form


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start_worker_pool(port: int, env: dict, log_path):
    """Beam's EXTERNAL worker pool on 127.0.0.1:port, once it listens: (the process, its open log)."""
    log = open(log_path, "wb")
    pool = subprocess.Popen([sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main",
                             f"--service_port={port}"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return pool, log
        except OSError:
            if pool.poll() is not None or time.time() >= deadline:
                if pool.poll() is None:
                    os.killpg(pool.pid, 9)
                log.close()
                pytest.fail(log_path.read_text()[-2000:])
            time.sleep(0.2)



def test_run_portable_with_an_external_worker_pool_writes_the_reference_bytes(archive, reference,
                                                                             tmp_path):
    """run_portable.sh, EXTERNAL (its default): Beam's worker pool runs as its own process on
    127.0.0.1 and starts the SDK workers (with the `python` first on PATH), as a Flink or Spark
    task manager's sidecar does; the job goes through the embedded job service."""
    port = _free_port()
    env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": ROOT, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("DCM2TFRECORD_ID_SALT", None)
    pool, log = _start_worker_pool(port, env, tmp_path / "pool.log")
    try:
        output = tmp_path / "out"        # given relative: the script makes it absolute
        root, labels, salt, _ = archive
        proc = subprocess.run([SCRIPT, "--job_endpoint", "embed", "--input", root, "--output", "out",
                               "--id_salt_file", salt, "--labels", labels, "--max_failure_ratio=1",
                               "--splits", "train=0.5,validation=0.5", "--progress", "none",
                               f"--environment_config=127.0.0.1:{port}"],
                              env={**env, "DCM2TFRECORD_PYTHON": sys.executable}, capture_output=True,
                              text=True, cwd=tmp_path, timeout=240)
        assert proc.returncode == 0, proc.stderr[-3000:] + (tmp_path / "pool.log").read_text()[-2000:]
        assert _shards(output) == reference[0]
        assert TEST_SALT not in proc.stdout + proc.stderr
    finally:
        os.killpg(pool.pid, 15)
        pool.wait(timeout=30)
        log.close()


def test_a_worker_that_cannot_read_the_salt_file_fails_in_one_line_naming_its_host(archive, tmp_path,
                                                                                  monkeypatch):
    """The launcher read the salt file; by the time the workers start it is gone (a secret not
    mounted on that node): the run fails, its one line names the host and the file. The
    workers are spawned interpreters, which read the file themselves as a remote worker does
    (a worker sharing the launcher's memory uses the salt it read: issue 35)."""
    _, _, salt, _ = archive
    moved = str(tmp_path / "salt")
    shutil.copyfile(salt, moved)
    opts = _opts(archive, tmp_path / "out").replace(id_salt_file=moved)
    opts.salt()                  # read by the launcher (read once per launcher process)
    os.remove(moved)
    monkeypatch.setenv("DCM2TFRECORD_SPAWN_WORKERS", "1")
    with pytest.raises(Exception) as caught:
        convert.run(opts, ["--direct_num_workers=2", "--direct_running_mode=multi_processing"], quiet=True)
    line = root_cause(caught.value)
    assert f"on worker host {socket.gethostname()}" in line and moved in line and "no such file" in line, line
    assert "\n" not in line
    assert not (tmp_path / "out" / names.MANIFEST_NAME).exists()


# ---------------------------------------------------------------- options and the salt on each runner


def test_options_of_every_beam_runner_are_known_and_typos_still_refused():
    known = ["--runner=PortableRunner", "--job_endpoint=localhost:8099", "--environment_type=EXTERNAL",
             "--environment_config=localhost:50000", "--sdk_worker_parallelism=2",     # PortableOptions
             "--flink_master=localhost:8081", "--flink_version=1.19", "--parallelism=4",  # Flink
             "--spark_master_url=spark://host:7077", "--spark_version=3",                # Spark
             "--job_port=8099", "--artifact_port=8098", "--job_server_jvm_properties=-Xmx1g",  # job server
             "--prism_location=/opt/prism", "--render_output=/tmp/graph.svg"]           # Prism, render
    assert unknown_beam_args(known) == []
    assert unknown_beam_args(known + ["--flink_mastr=localhost:8081"]) == ["--flink_mastr=localhost:8081"]
    assert unknown_beam_args(["stray"]) == ["stray"]
    with pytest.raises(UsageError, match="^Beam pipeline option argument --flink_version: invalid choice"):
        unknown_beam_args(["--flink_version=0.1"])


def test_a_runner_module_that_cannot_be_imported_breaks_nothing(monkeypatch):
    """Runner modules are imported for their options, each guarded (the Dask runner's needs dask)."""
    from dcm2tfrecord.pipeline.launch import beam_args
    monkeypatch.setattr(beam_args, "RUNNER_OPTION_MODULES",
                        ("apache_beam.runners.no_such_runner",) + beam_args.RUNNER_OPTION_MODULES)
    assert unknown_beam_args(["--flink_master=x", "--typo_option=1"]) == ["--typo_option=1"]


def test_dask_runner_is_refused_in_one_line(archive, tmp_path):
    root, _, salt, _ = archive
    with pytest.raises(UsageError) as caught:
        parse_convert(["--input", root, "--output", str(tmp_path / "o"), "--id_salt_file", salt,
                       "--runner=DaskRunner", "--dask_client_address=localhost:8786"])
    assert "DaskRunner is not supported" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("runner", ["PortableRunner", "FlinkRunner", "SparkRunner", "PrismRunner"])
def test_on_other_runners_the_salt_file_may_be_a_path_each_worker_reads(archive, runner):
    _, _, salt, _ = archive
    opts = _opts(archive, "/tmp/unused")
    check_salt_stays_out_of_the_job(opts, [f"--runner={runner}"])          # a mounted secret: fine
    for refused in (opts.replace(id_salt_file=None, id_salt=TEST_SALT),
                    opts.replace(id_salt_file=None, allow_random_salt=True)):
        with pytest.raises(UsageError, match="--id_salt_file PATH"):
            check_salt_stays_out_of_the_job(refused, [f"--runner={runner}"])
    with pytest.raises(UsageError, match="gs://"):                          # Dataflow: an object
        check_salt_stays_out_of_the_job(opts, ["--runner=DataflowRunner"])
    check_salt_stays_out_of_the_job(opts.replace(id_salt_file=None, id_salt=TEST_SALT),
                                    ["--runner=BundleBasedDirectRunner"])   # in this process


# ---------------------------------------------------------------- run_portable.sh, before Python


def _script(*args, **env) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("JOB_ENDPOINT", "INPUT", "OUTPUT", "ID_SALT_FILE", "DCM2TFRECORD_ID_SALT")}
    return subprocess.run([SCRIPT, *args], env={**base, "DCM2TFRECORD_PYTHON": sys.executable, **env},
                          capture_output=True, text=True, timeout=60)


def test_run_portable_names_each_missing_setting_in_one_line():
    proc = _script()
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert [line.split()[3] for line in lines] == \
        ["--job_endpoint", "--input", "--output", "--id_salt_file"], proc.stderr
    for name in ("JOB_ENDPOINT", "INPUT", "OUTPUT", "ID_SALT_FILE"):
        assert f"env {name})" in proc.stderr
    assert _script("--job_endpoint").stderr.strip() == "run_portable.sh: error: --job_endpoint needs a value"


def test_run_portable_refuses_what_would_break_the_job_before_python():
    settings = ["--job_endpoint", "h:8099", "--input", "/a", "--output", "/o", "--id_salt_file", "/s"]
    for extra, said in ((["--id_salt", "x"], "--id_salt would travel inside the job"),
                        (["--runner=FlinkRunner"], "always uses --runner=PortableRunner"),
                        (["--environment_type=DOKCER"], "--environment_type DOKCER: give EXTERNAL")):
        proc = _script(*settings, *extra)
        assert proc.returncode == 2 and said in proc.stderr and len(proc.stderr.splitlines()) == 1, \
            proc.stderr
    assert os.access(SCRIPT, os.X_OK) and subprocess.run(["bash", "-n", SCRIPT]).returncode == 0


@pytest.mark.parametrize("beam_args", [[], ["--runner=DirectRunner"],
                                       ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]])
def test_local_runs_go_straight_to_the_in_process_runner_never_to_prism(beam_args):
    """Beam's DirectRunner would first try to download and start Prism (waiting on the network
    when offline): local runs get FnApiRunner itself."""
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    assert isinstance(runner.make_runner(runner.make_pipeline_options(beam_args)), FnApiRunner)


def test_a_job_whose_sdk_workers_never_start_ends_in_one_line_naming_the_cause_and_the_log(archive, tmp_path):
    """EXTERNAL: the worker pool starts each worker with the `python` first on its PATH; here
    that one cannot start Beam (as a Python without this project or Beam would): the job
    server waits for a worker forever, so the launcher bounds the wait
    ($DCM2TFRECORD_WORKER_START_TIMEOUT_S), cancels the job and fails in one line; nothing
    is committed."""
    port = _free_port()
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python").write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named apache_beam' >&2\n"
                                     "exit 1\n")
    (fake_bin / "python").chmod(0o755)
    # the project as this test imports it (a checkout's own, not another install's)
    project = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(convert.__file__))))
    env = {**os.environ, "PATH": str(fake_bin) + os.pathsep + os.environ["PATH"],
           "PYTHONPATH": os.pathsep.join((project, ROOT)), "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("DCM2TFRECORD_ID_SALT", None)
    pool, log = _start_worker_pool(port, env, tmp_path / "pool.log")
    try:
        root, labels, salt, _ = archive
        launcher_env = {**env, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
                        "DCM2TFRECORD_PYTHON": sys.executable, "DCM2TFRECORD_WORKER_START_TIMEOUT_S": "15"}
        started = time.time()
        proc = subprocess.run([SCRIPT, "--job_endpoint", "embed", "--input", root, "--output", "out",
                               "--id_salt_file", salt, "--progress", "none",
                               f"--environment_config=127.0.0.1:{port}"],
                              env=launcher_env, capture_output=True, text=True, cwd=tmp_path, timeout=240)
        took = time.time() - started
        assert proc.returncode == 1, proc.stderr[-3000:]
        lines = [line for line in proc.stderr.splitlines() if line.startswith("dcm2tfrecord convert:")]
        assert len(lines) == 1, proc.stderr[-3000:]
        assert "no Python SDK worker started within 15 s" in lines[0], lines[0]
        assert f"worker pool at 127.0.0.1:{port}" in lines[0] and "log" in lines[0], lines[0]
        assert took < 15 + 90, took        # the bound, plus the launcher's own start and the cancel
        assert not (tmp_path / "out" / names.MANIFEST_NAME).exists()
        assert "No module named apache_beam" in (tmp_path / "pool.log").read_text()   # where the line points
    finally:
        os.killpg(pool.pid, 15)
        pool.wait(timeout=30)
        log.close()
