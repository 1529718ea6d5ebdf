"""Reliability IV (issue 35), items 1 and 12 and create_output's folders: links planted in the
output while a run is going. Nothing outside ``--output`` is written, renamed or deleted
through one; the step that meets it fails in one line; a failure after the commit says what
was committed."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.files import (OutputLinkError, create_output, delete_tree, remove_own_files,
                                        write_atomically)
from dcm2tfrecord.dataset.progress import remove_progress, write_plan
from dcm2tfrecord.pipeline.output_dir import remove_stale_files
from dcm2tfrecord.dataset.manifest import read_manifest
from tests.support import TEST_SALT, write_png_archive
from tests.support.hooks import subprocess_env
from tests.support.processes import ROOT, our_lines

SMALL = ["--target_shard_mb", "0.02", "--min_shard_mb", "0.01", "--max_shard_mb", "0.05"]
VICTIM_FILES = {names.PLAN_NAME: b"user plan\n", "train-00000-of-00002.tfrecord.done": b"user done\n",
                "precious.txt": b"precious\n", "train-00000-of-00001.tfrecord.abc": b"user temp\n"}


def _victim_dir(tmp_path):
    victim = tmp_path / "victim_dir"
    victim.mkdir()
    for name, data in VICTIM_FILES.items():
        (victim / name).write_bytes(data)
    return victim


def _victim_intact(victim) -> None:
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == VICTIM_FILES


def _wait_for(predicate, proc, what: str, timeout_s: float = 300) -> None:
    deadline = time.time() + timeout_s
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {proc.communicate()}")
        if time.time() > deadline:
            proc.kill()
            raise AssertionError(f"no {what} within {timeout_s} s")
        time.sleep(0.05)


def _paused_run(tmp_path, count: int = 12, *extra: str):
    """A conversion whose shard writers all stop after their first record (the pause hook)."""
    write_png_archive(tmp_path / "in", count, 32, 32)
    pause = tmp_path / "pause"
    pause.mkdir()
    env = subprocess_env(dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
                              PYTHONPATH=ROOT), pause="half_written", pause_dir=pause)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", str(tmp_path / "in"),
         "--output", str(tmp_path / "out"), "--id_salt", TEST_SALT, "--progress", "none",
         "--direct_num_workers=1", "--direct_running_mode=in_memory", *SMALL, *extra],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: any(p.name.startswith("half_written-") for p in pause.iterdir()), proc,
              "shard writer paused")
    return proc, pause


def _replace_with_link(folder, target) -> None:
    """``folder`` moved out of the output and a link to ``target`` put in its place."""
    os.rename(folder, folder.parent.parent / f"real{folder.name}")
    os.symlink(target, folder)


def _resume_failing(proc, pause, victim) -> tuple[list[str], str]:
    """Lets the paused writers go; the run must end with exit 1 and the victim folder as it
    was. (dcm2tfrecord's own stderr lines, the whole stderr)."""
    (pause / "go").touch()
    stdout, stderr = proc.communicate(timeout=600)
    _victim_intact(victim)
    assert proc.returncode == 1, (stdout, stderr)
    return our_lines(stderr), stderr


def _resume_committed(proc, pause, victim) -> tuple[list[str], str]:
    """Lets the paused writers go; the run commits, so it must end with exit 0 (Reliability V,
    item 5: the exit code agrees with what was committed) and the victim folder as it was."""
    (pause / "go").touch()
    stdout, stderr = proc.communicate(timeout=600)
    _victim_intact(victim)
    assert proc.returncode == 0, (stdout, stderr)
    return our_lines(stderr), stderr


def test_progress_made_a_link_mid_run_deletes_nothing_behind_it_and_says_what_was_committed(tmp_path):
    """Item 1 (`.progress` swapped for a link once the plan is written: the tidy-up deleted four
    files behind it, then failed in 69 lines) and item 12 (that failure said "committed nothing
    new" of a committed dataset). Issue 43, item 5: it ended with exit 1 although the dataset
    was committed; now exit 0 and one warning naming what was left alone."""
    victim = _victim_dir(tmp_path)
    proc, pause = _paused_run(tmp_path)
    out = tmp_path / "out"
    assert (out / names.PROGRESS_DIR / names.PLAN_NAME).exists()
    _replace_with_link(out / names.PROGRESS_DIR, victim)
    lines, stderr = _resume_committed(proc, pause, victim)
    assert len(lines) == 1, stderr
    assert lines[0].startswith("dcm2tfrecord convert: warning: "), lines
    assert "the dataset was committed" in lines[0] and "12 records" in lines[0], lines
    assert ".progress is a symbolic link" in lines[0] and "committed nothing" not in lines[0], lines
    manifest = read_manifest(str(out))                  # committed, whole
    assert sum(s.num_records for s in manifest.splits.values()) == 12
    assert os.path.islink(out / names.PROGRESS_DIR)     # the link itself left for the user


def test_progress_made_a_link_mid_incremental_run_exits_0_and_the_summary_says_committed(tmp_path):
    """Issue 43, item 5 under --incremental: the version's ``.progress`` made a link while its
    shards are written. The version is committed and LATEST: exit 0, one warning naming the
    link, nothing behind it deleted, and --summary_json says committed with that warning."""
    victim = _victim_dir(tmp_path)
    summary_path = tmp_path / "summary.json"
    proc, pause = _paused_run(tmp_path, 12, "--incremental", "--summary_json", str(summary_path))
    version = tmp_path / "out" / names.VERSIONS_DIR / "0001"
    assert (version / names.PROGRESS_DIR / names.PLAN_NAME).exists()
    os.rename(version / names.PROGRESS_DIR, tmp_path / "realprogress")
    os.symlink(victim, version / names.PROGRESS_DIR)
    lines, stderr = _resume_committed(proc, pause, victim)
    assert len(lines) == 1 and "warning: the dataset was committed" in lines[0], stderr
    assert "version 0001" in lines[0] and ".progress is a symbolic link" in lines[0], lines
    assert (tmp_path / "out" / names.LATEST_NAME).read_text().strip() == "0001"
    assert os.path.islink(version / names.PROGRESS_DIR)
    summary = json.loads(summary_path.read_text())
    assert summary["status"] == "committed" and summary["exit_code"] == 0 and summary["written"] == 12
    assert summary["warnings"] == lines and summary["message"] == lines[0]


def _exchange(a: str, b: str) -> None:
    """renameat2(RENAME_EXCHANGE): ``a`` and ``b`` swap places in one step."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 2) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), a)


_SWAPPER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3]
n = 0
while not os.path.exists(stop):
    libc.renameat2(-100, a, -100, b, 2)
    n += 1
print(n)
"""


def _swapping(real: str, link_target: str, tmp_path):
    """A process swapping the folder ``real`` with a link to ``link_target``, as fast as it can,
    until the returned stop file exists; an attacker's rename-exchange race."""
    decoy = real + ".decoy"
    os.symlink(link_target, decoy)
    stop = str(tmp_path / "stop")
    proc = subprocess.Popen([sys.executable, "-c", _SWAPPER, real, decoy, stop],
                            stdout=subprocess.PIPE, text=True)
    return proc, stop


def _stop_swapping(proc, stop: str) -> int:
    open(stop, "w").close()
    swaps = int(proc.communicate(timeout=60)[0])
    assert swaps > 100, swaps
    return swaps


def test_a_folder_swapped_for_a_link_mid_write_never_lets_a_file_out(tmp_path):
    """The create_output minor item and the rename-exchange race of item 1: folders between the
    output and the file were checked with lstat and then the path opened, so a folder swapped
    for a link between the two let the file be written behind the link. Now each folder is
    opened without following links, the file relative to it: every attempt either writes inside
    the output or fails with OutputLinkError."""
    out = tmp_path / "out"
    (out / "sub" / "deeper").mkdir(parents=True)
    victim = tmp_path / "victim_dir"
    (victim / "deeper").mkdir(parents=True)
    swapper, stop = _swapping(str(out / "sub"), str(victim), tmp_path)
    written = refused = 0
    try:
        deadline = time.time() + 3
        i = 0
        while time.time() < deadline:
            i += 1
            try:
                if i % 2:
                    write_atomically(str(out), f"sub/deeper/f{i}.json", b"{}", "application/json")
                else:
                    with create_output(str(out), str(out / "sub" / "deeper" / f"g{i}")) as handle:
                        handle.write(b"g")
                written += 1
            except (OutputLinkError, FileNotFoundError):   # a link met, or a folder swapped away
                refused += 1
    finally:
        _stop_swapping(swapper, stop)
    assert [p for p in victim.rglob("*") if p.is_file()] == []
    assert written and refused, (written, refused)


def test_a_hard_link_under_a_progress_name_is_replaced_never_written(tmp_path):
    """``.progress/plan.json`` hard-linked to a file outside: writing the plan unlinks the name
    and creates a new file, so the other name keeps its bytes (it was truncated and written)."""
    out = tmp_path / "out"
    (out / names.PROGRESS_DIR).mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    os.link(victim, out / names.PROGRESS_DIR / names.PLAN_NAME)
    write_plan(str(out), {})
    assert victim.read_bytes() == b"precious\n"
    assert json.loads((out / names.PROGRESS_DIR / names.PLAN_NAME).read_text()) == {"splits": {}}
    with create_output(str(out), str(out / "x")) as handle:     # and a plain create still works
        handle.write(b"x")
    os.link(victim, out / "y")
    with create_output(str(out), str(out / "y")) as handle:
        handle.write(b"y")
    assert victim.read_bytes() == b"precious\n" and (out / "y").read_bytes() == b"y"


def test_tidy_up_deletes_only_regular_files_under_its_names_and_never_behind_links(tmp_path):
    """remove_stale_files after a commit: a folder or link under a shard's name, a link at
    ``.incomplete`` or ``.progress``, and a user's file in them, all stay; only this tool's
    regular files go."""
    from tests.support import run_convert
    write_png_archive(tmp_path / "in", 3, 16, 16)
    out = tmp_path / "out"
    run_convert(tmp_path / "in", out)
    manifest = read_manifest(str(out))
    victim = _victim_dir(tmp_path)
    stale_dir = out / "train-00009-of-00010.tfrecord"        # a folder under a shard's name
    stale_dir.mkdir()
    (stale_dir / "user.txt").write_text("keep")
    os.symlink(victim / "precious.txt", out / "train-00008-of-00010.tfrecord")
    (out / "train-00007-of-00010.tfrecord").write_bytes(b"stale shard")      # ours: goes
    (out / names.INCOMPLETE_DIR).mkdir()
    (out / names.INCOMPLETE_DIR / "x.tfrecord.0123").write_bytes(b"temp")  # ours: goes
    os.symlink(victim, out / names.PROGRESS_DIR)
    with pytest.raises(OutputLinkError, match=r"\.progress is a symbolic link"):
        remove_stale_files(str(out), manifest)
    _victim_intact(victim)
    assert (stale_dir / "user.txt").read_text() == "keep"
    assert os.path.islink(out / "train-00008-of-00010.tfrecord")
    assert not (out / "train-00007-of-00010.tfrecord").exists()
    assert not (out / names.INCOMPLETE_DIR).exists()
    os.unlink(out / names.PROGRESS_DIR)
    (out / names.PROGRESS_DIR).mkdir()
    (out / names.PROGRESS_DIR / "notes.txt").write_text("mine")                 # not ours: stays
    (out / names.PROGRESS_DIR / "a.tfrecord.done").write_text("{}")             # ours: goes
    remove_progress(str(out))
    assert os.listdir(out / names.PROGRESS_DIR) == ["notes.txt"]


def test_removing_a_tree_never_follows_a_link_on_the_way(tmp_path):
    """delete_tree (a killed run's unfinished versions/NNNN): ``versions`` made a link to a folder
    outside used to delete that folder's NNNN; now OutputLinkError and nothing goes."""
    root = tmp_path / "root"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "0002").mkdir(parents=True)
    (elsewhere / "0002" / "keep.txt").write_text("keep")
    os.symlink(elsewhere, root / names.VERSIONS_DIR)
    with pytest.raises(OutputLinkError, match="versions is a symbolic link"):
        delete_tree(str(root), str(root / names.VERSIONS_DIR / "0002"))
    assert (elsewhere / "0002" / "keep.txt").read_text() == "keep"
    os.unlink(root / names.VERSIONS_DIR)
    (root / names.VERSIONS_DIR / "0002" / "inner").mkdir(parents=True)
    os.symlink(elsewhere, root / names.VERSIONS_DIR / "0002" / "inner" / "link")
    delete_tree(str(root), str(root / names.VERSIONS_DIR / "0002"))       # links inside: unlinked
    assert not (root / names.VERSIONS_DIR / "0002").exists()
    assert (elsewhere / "0002" / "keep.txt").read_text() == "keep"


def test_deleting_while_a_folder_is_swapped_for_a_link_never_deletes_behind_it(tmp_path):
    """remove_own_files against the rename-exchange race: the folder is opened once, without
    following links, and every name is unlinked relative to that handle."""
    out = tmp_path / "out"
    victim = tmp_path / "victim_dir"
    victim.mkdir()
    swapper = None
    try:
        for round_ in range(40):
            folder = out / names.PROGRESS_DIR
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(50):
                (folder / f"s{round_}-{i}.done").write_text("{}")
                (victim / f"s{round_}-{i}.done").write_text("user")
            if swapper is None:
                swapper, stop = _swapping(str(folder), str(victim), tmp_path)
            try:
                remove_own_files(str(out), str(folder), lambda name: name.endswith(".done"))
            except (OutputLinkError, FileNotFoundError):
                pass
    finally:
        if swapper is not None:
            _stop_swapping(swapper, stop)
    assert len([p for p in victim.iterdir() if p.suffix == ".done"]) == 40 * 50


def test_incomplete_swapped_for_a_link_mid_write_fails_in_one_line_and_writes_nothing_behind_it(tmp_path):
    """Item 1's rename-exchange: ``.incomplete`` and a link to a folder outside swap places while
    the shards are half written. The writers' next steps meet the link: the run fails in one
    line naming it, commits nothing, and nothing appears behind the link."""
    victim = _victim_dir(tmp_path)
    proc, pause = _paused_run(tmp_path)
    out = tmp_path / "out"
    os.symlink(victim, tmp_path / "out" / "decoy")
    _exchange(str(out / names.INCOMPLETE_DIR), str(out / "decoy"))
    assert os.path.islink(out / names.INCOMPLETE_DIR)
    lines, stderr = _resume_failing(proc, pause, victim)
    assert len(lines) == 1 and ".incomplete is a symbolic link" in lines[0], stderr
    assert "committed nothing new" in lines[0], lines
    assert not (out / names.MANIFEST_NAME).exists()
    assert not [p for p in out.iterdir() if p.name.endswith(names.SHARD_SUFFIX)]


def test_versions_swapped_for_a_link_mid_run_of_incremental_writes_nothing_behind_it(tmp_path):
    """--incremental writes in ROOT/versions/NNNN: those folders are the tool's, opened from
    ROOT without following links, so ``versions`` made a link mid-run is met, not followed."""
    victim = _victim_dir(tmp_path)
    proc, pause = _paused_run(tmp_path, 12, "--incremental")
    out = tmp_path / "out"
    _replace_with_link(out / names.VERSIONS_DIR, victim)
    lines, stderr = _resume_failing(proc, pause, victim)
    assert len(lines) == 1 and "versions is a symbolic link" in lines[0], stderr
    assert not (out / names.LATEST_NAME).exists()
