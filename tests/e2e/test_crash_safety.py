"""SIGKILL during a conversion, then a rerun with the same arguments, gives the same bytes (issue 6, item 3).

``python -m dcm2tfrecord.pipeline convert`` runs as a subprocess in its own session, on
Beam's multi-process local runner (the default local mode), and is killed
with SIGKILL on its whole process group — launcher and Beam worker processes
alike — at several points of one chain of runs on the same output directory:

1. ``planned``: as soon as the run leaves anything in the output directory
   (progress or temp files), i.e. around planning and the first writes;
2. ``half_written``: while a shard temp file under ``.incomplete/`` holds
   some but not all of its bytes;
3. ``shards_partly_final``: once this run has renamed some of its shards into
   place and not yet the others (so before dataset.json).

Points 2 and 3 are exact: the writer's test-only pause point
(``dataset.shard_writer.TEST_PAUSE_ENV``) stops every shard writer there and
says so with a file; the kill follows that file, not a race against polling.

At every kill no file under a final shard or index name differs from the
uninterrupted run's (none is half-written) and no dataset.json exists; each
rerun needs no --overwrite; the last one completes and its output — shards,
indexes, dataset.json, errors.jsonl, nothing else, no temp files — is
byte-identical to the uninterrupted run's, and passes ``verify``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Callable, Optional

import pytest

from dcm2tfrecord.dataset.shard_writer import TEST_PAUSE_ENV
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import write_png_archive

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_TIMEOUT_S = 600
POLL_S = 0.05
INCOMPLETE = ".incomplete"
SHARD_ARGS = ["--target_shard_mb", "1", "--min_shard_mb", "0.5", "--max_shard_mb", "2"]
BEAM_ARGS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> str:
    """36 RGB images (~110 KB of pixels each: 4 shards of ~1 MB), one broken PNG, one text file."""
    root = tmp_path_factory.mktemp("crash") / "archive"
    paths = write_png_archive(root, 36, 192, 192, channels=3)
    with open(paths[0], "rb") as handle:
        data = handle.read()
    (root / "broken.png").write_bytes(data[:len(data) // 2])
    (root / "notes.txt").write_text("not an image")
    return str(root)


def _env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("DCM2TFRECORD_ID_SALT", "crash-safety-test")
    return {**env, **(extra or {})}


def _command(archive: str, output: str) -> list[str]:
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive, "--output", output,
            *SHARD_ARGS, *BEAM_ARGS]


def _tail(log_path: str, chars: int = 3000) -> str:
    with open(log_path, errors="replace") as handle:
        return handle.read()[-chars:]


# ---------------------------------------------------------------- processes


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


# ---------------------------------------------------------------- output snapshots


def _files(root: str) -> dict[str, bytes]:
    """Every file under ``root`` (hidden ones included) -> its bytes."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                out[os.path.relpath(path, root)] = handle.read()
    return out


def _temp_files(output: str) -> list[os.DirEntry]:
    try:
        return [e for e in os.scandir(os.path.join(output, INCOMPLETE)) if e.is_file()]
    except FileNotFoundError:
        return []


def _shard_temp(entry_name: str) -> Optional[str]:
    """The shard a temp file belongs to (``{shard}.{uuid}``), None for an index temp."""
    stem = entry_name.rsplit(".", 1)[0]
    return stem if stem.endswith(".tfrecord") else None


def assert_no_partial_final_files(output: str, reference: dict[str, bytes], moment: str) -> None:
    """At a kill: whatever sits under a final name is the uninterrupted run's file, whole."""
    assert not os.path.exists(os.path.join(output, "dataset.json")), \
        f"{moment}: dataset.json exists, so the kill came after the commit"
    for name in os.listdir(output):
        if ".tfrecord" in name:
            with open(os.path.join(output, name), "rb") as handle:
                data = handle.read()
            assert name in reference, f"{moment}: unexpected final file {name}"
            assert len(data) == len(reference[name]), \
                f"{moment}: {name} is {len(data)} bytes under its final name, whole it is {len(reference[name])}"
            assert data == reference[name], f"{moment}: {name} differs from the uninterrupted run's"


# ---------------------------------------------------------------- the test


def test_sigkill_at_several_points_then_rerun_gives_identical_bytes(archive, tmp_path):
    reference_dir = str(tmp_path / "reference")
    assert run_until(_command(archive, reference_dir), str(tmp_path / "reference.log"), None) is None
    reference = _files(reference_dir)
    shard_names = sorted(n for n in reference if n.endswith(".tfrecord"))
    assert len(shard_names) >= 3 and "dataset.json" in reference and "errors.jsonl" in reference
    assert not any(n.startswith(INCOMPLETE) for n in reference)

    output = str(tmp_path / "crashed")
    command = _command(archive, output)
    launched = {"ns": 0}
    seen_temps: set[str] = set()

    def anything_written():
        if os.path.isdir(output) and any(n not in ("errors.jsonl",) for n in os.listdir(output)):
            return "output directory populated (planning / first writes)"
        return None

    pauses = tmp_path / "pauses"

    def stopped_at(point):
        def reached():
            found = sorted(n for n in os.listdir(pauses) if n.startswith(point + "-"))
            return f"{point}: {found[0][len(point) + 1:]} stopped there" if found else None
        return reached

    kill_points = [("planned", anything_written, ""), ("half_written", stopped_at("half_written"),
                                                          "half_written"),
                   ("shards_partly_final", stopped_at("partly_final"), "partly_final")]
    hits = {}
    for number, (moment, kill_when, pause) in enumerate(kill_points):
        seen_temps.update(e.name for e in _temp_files(output))
        launched["ns"] = time.time_ns() - 1_000_000_000   # mtime granularity, clock skew
        shutil.rmtree(pauses, ignore_errors=True)
        os.makedirs(pauses)
        env = {TEST_PAUSE_ENV: f"{pause}:{pauses}"} if pause else None
        hit = run_until(command, str(tmp_path / f"run{number}_{moment}.log"), kill_when, env)
        if hit is None or os.path.exists(os.path.join(output, "dataset.json")):
            # The run committed before the kill point came: a rerun without --overwrite
            # would rightly be refused, so the chain ends here.
            pytest.fail(f"kill point {moment!r} not reached before the run committed")
        hits[moment] = hit
        assert_no_partial_final_files(output, reference, f"after the kill at {moment} ({hit})")
        if moment == "half_written":
            partial = [e for e in _temp_files(output) if _shard_temp(e.name) and e.name not in seen_temps
                       and 0 < e.stat().st_size < len(reference[_shard_temp(e.name)])]
            assert partial, "the half-written shard temp file should still be there after the kill"
        if moment == "shards_partly_final":
            final = [n for n in shard_names if os.path.exists(os.path.join(output, n))
                     and os.stat(os.path.join(output, n)).st_mtime_ns >= launched["ns"]]
            assert 1 <= len(final) < len(shard_names), (final, shard_names)
    assert _temp_files(output), "the killed runs should have left temp files for the rerun to remove"
    assert run_until(command, str(tmp_path / "final.log"), None) is None

    final = _files(output)
    assert sorted(final) == sorted(reference), \
        f"the rerun left different files than an uninterrupted run (kills: {hits})"
    for name in sorted(reference):
        assert final[name] == reference[name], f"{name} differs from the uninterrupted run's"
    assert not os.path.exists(os.path.join(output, INCOMPLETE))
    report = verify_dataset(output)
    assert report.ok, report.problems[:5]
