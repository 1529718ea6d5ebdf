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

Points 2 and 3 are exact: a test-only pause point (tests/support/hooks, loaded by the
run's processes from PYTHONPATH) stops every shard writer there and says so
with a file; the kill follows that file, not a race against polling.

At every kill no file under a final shard or index name differs from the
uninterrupted run's (none is half-written) and no dataset.json exists; each
rerun needs no --overwrite; the last one completes and its output — shards,
indexes, dataset.json, errors.jsonl, nothing else, no temp files — is
byte-identical to the uninterrupted run's, and passes ``verify``.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from typing import Optional

import pytest

from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import write_png_archive
from tests.support.processes import run_until, tree_bytes
from tests.support.hooks import PAUSE_ENV

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


def _command(archive: str, output: str) -> list[str]:
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive, "--output", output,
            *SHARD_ARGS, *BEAM_ARGS]


# ---------------------------------------------------------------- processes


# ---------------------------------------------------------------- output snapshots


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
    reference = tree_bytes(reference_dir)
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
        env = {PAUSE_ENV: f"{pause}:{pauses}"} if pause else None
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

    final = tree_bytes(output)
    assert sorted(final) == sorted(reference), \
        f"the rerun left different files than an uninterrupted run (kills: {hits})"
    for name in sorted(reference):
        assert final[name] == reference[name], f"{name} differs from the uninterrupted run's"
    assert not os.path.exists(os.path.join(output, INCOMPLETE))
    report = verify_dataset(output)
    assert report.ok, report.problems[:5]
