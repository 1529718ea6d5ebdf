"""The job on a Spark standalone / Flink session cluster on 127.0.0.1 against the local run,
on the same CT archive: wall time, CPU per record (the launcher plus every process of the
cluster: daemons, job server, worker pool and its SDK workers), and the ratios.

    PYTHONPATH=. python -m benchmarks.bench_cluster --mb 40 --engines spark flink
    PYTHONPATH=. python -m benchmarks.bench_cluster --smoke    # the local run alone, seconds
    PYTHONPATH=. python -m benchmarks.bench_cluster --smoke --engines spark flink   # minutes

``--smoke`` (tests/e2e/test_bench_smoke_a.py): a CT archive of 2 slices; without ``--engines``,
the local run alone, on the Beam installed here (nothing fetched, no cluster started): the
archive, the conversion, the figures, the table and --json as a full run makes them. With
``--engines``, those clusters too, each started, run and stopped as a full run does them (the
first time, ~0.9 GB fetched into scripts/local_cluster.py's cache).

The cluster (scripts/local_cluster.py: one master + two workers, or a job manager + two
task managers, each worker one core) is started before the clock and stopped after; the
cluster's CPU is read from /proc for its processes and all their descendants before and
after the job. Both runs use Beam local_cluster.BEAM_JAVA on the Python side (the cluster
needs it; the local run is timed with the same Beam so that only the runner differs), and
their shards must be byte-identical. The machine is shared: CPU per record is the steady
figure, wall time is noisy.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.archives import ct_archive
from benchmarks.proc_monitor import _tree, bench_env, machine_description
from dcm2tfrecord.dataset.names import MANIFEST_NAME, SHARD_SUFFIX

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TICK = os.sysconf("SC_CLK_TCK")


def _local_cluster():
    spec = importlib.util.spec_from_file_location("local_cluster", os.path.join(ROOT, "scripts", "local_cluster.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_s(pids) -> float:
    """User + system CPU seconds of these processes and all their descendants (alive now),
    and of the children they reaped."""
    total = 0.0
    seen = set()
    for root in pids:
        for pid in _tree(root):
            if pid in seen:
                continue
            seen.add(pid)
            try:
                with open(f"/proc/{pid}/stat", "rb") as handle:
                    rest = handle.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            # utime stime cutime cstime: fields 14-17, here 11-14 after "state ppid ..."
            total += sum(int(x) for x in rest[11:15]) / TICK
    return total


def _shards(output: str) -> dict:
    return {n: hashlib.sha256(open(os.path.join(output, n), "rb").read()).hexdigest()
            for n in sorted(os.listdir(output)) if SHARD_SUFFIX in n}


def _records(output: str) -> int:
    with open(os.path.join(output, MANIFEST_NAME)) as handle:
        return int(json.load(handle)["counts"]["written"])


def _convert_args(archive_root: str, salt: str, output: str) -> list:
    return ["--input", archive_root, "--output", output, "--id_salt_file", salt, "--progress", "none"]


def run_local(lc, paths, archive_root: str, salt: str, work: str) -> dict:
    output = os.path.join(work, "local")
    env = bench_env()
    if paths is not None:             # the clusters' Beam (no cluster: the Beam installed here)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (paths.beam_python, env.get("PYTHONPATH")) if p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.time()
    subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "convert",
                    *_convert_args(archive_root, salt, output)], env=env, check=True)
    wall = time.time() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "records": _records(output), "shards": _shards(output)}


def run_cluster(lc, paths, engine: str, archive_root: str, salt: str, work: str) -> dict:
    output = os.path.join(work, engine)
    cluster = lc.Cluster(engine, os.path.join(work, f"{engine}-cluster"), paths, pool_python=sys.executable,
                         pool_env=bench_env())
    setup_started = time.time()
    cluster.start()
    try:
        setup = time.time() - setup_started
        cluster_pids = list(cluster.pids.values())
        cpu_before = _cpu_s(cluster_pids)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        proc = cluster.convert([*_convert_args(archive_root, salt, output), "--environment_cache_millis=600000"],
                               env=bench_env())
        wall = time.time() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = _cpu_s(cluster_pids) - cpu_before + (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if proc.returncode != 0:
            raise SystemExit(f"{engine} run failed (exit {proc.returncode}); logs in {cluster.logs}")
        return {"wall_s": wall, "cpu_s": cpu, "setup_s": setup, "records": _records(output),
                "shards": _shards(output)}
    finally:
        cluster.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=40, help="CT archive size in MiB (512 KiB slices)")
    parser.add_argument("--engines", nargs="+", choices=["spark", "flink"],
                        help="default: spark flink; with --smoke, none")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.engines is None:
        args.engines = [] if args.smoke else ["spark", "flink"]
    if args.smoke:
        args.mb = 1.0
    lc = _local_cluster()
    # no engine (--smoke): the local run on the Beam installed here, nothing fetched
    paths = lc.fetch(tuple(args.engines)) if args.engines else None
    archive = ct_archive(args.mb)
    work = tempfile.mkdtemp(prefix="bench-cluster-")
    salt = os.path.join(work, "salt")
    with open(salt, "w") as handle:
        handle.write("bench-cluster-salt\n")
    print(machine_description())
    if paths is None:
        import apache_beam
        print(f"archive: {archive.path} ({args.mb:g} MiB CT); Beam {apache_beam.__version__} (installed), "
              "no cluster")
    else:
        print(f"archive: {archive.path} ({args.mb:g} MiB CT); Beam {lc.BEAM_JAVA} (Python and Java), "
              f"Spark {lc.SPARK}, Flink {lc.FLINK}")
    results = {"local": run_local(lc, paths, archive.path, salt, work)}
    for engine in args.engines:
        results[engine] = run_cluster(lc, paths, engine, archive.path, salt, work)
    local = results["local"]
    print(f"{'run':<8}{'records':>8}{'wall s':>9}{'CPU s':>8}{'CPU ms/rec':>12}{'wall x':>8}{'CPU x':>7}"
          f"{'setup s':>9}  same bytes")
    for name, r in results.items():
        per = 1000 * r["cpu_s"] / max(r["records"], 1)
        print(f"{name:<8}{r['records']:>8}{r['wall_s']:>9.1f}{r['cpu_s']:>8.1f}{per:>12.1f}"
              f"{r['wall_s'] / local['wall_s']:>8.2f}{r['cpu_s'] / local['cpu_s']:>7.2f}"
              f"{r.get('setup_s', 0):>9.1f}  {r['shards'] == local['shards']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({k: {f: v for f, v in r.items() if f != "shards"} for k, r in results.items()}, handle, indent=1)
    same = all(r["shards"] == local["shards"] for r in results.values())
    if args.smoke and same:
        shutil.rmtree(work, ignore_errors=True)       # a full run keeps its shards and cluster logs
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
