"""Reliability III (issue 25), items 2, 6, 7 and 8's reader parts: the output lock and links in
the output, label rows that label nothing, a storage outage while shards are written, and
RandomAccess / split specs / start_step / dataset.json damage reported in one clear line."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import reader
from dataset import names
from dataset.files import OutputLinkError, create_output
from dataset.lock import LockUnavailable, OutputBusy, OutputLock
from pipeline.options import UsageError
from tests.conftest import IN_MEMORY, TEST_SALT, run_convert, write_png_archive
from tests.test_reliability import cli, errors_of, our_lines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = dict(target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=8)
LOCK_FIELDS = {"token", "host", "pid", "started", "heartbeat"}


# ---------------------------------------------------------------- 2. the lock and links in the output


def _victim(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "victim_dir").mkdir(exist_ok=True)
    return victim


def _hostile_lock(kind: str, out, tmp_path) -> None:
    """Makes OUT/.lock something no run of ours makes."""
    lock = out / names.LOCK_NAME
    if kind == "link_to_file":
        os.symlink(_victim(tmp_path), lock)
    elif kind == "link_to_dir":
        _victim(tmp_path)
        os.symlink(tmp_path / "victim_dir", lock)
    elif kind == "dangling_link":
        os.symlink(tmp_path / "nowhere" / "x", lock)
    elif kind == "directory":
        lock.mkdir()
        (lock / "inside").write_text("x")
    elif kind == "fifo":
        os.mkfifo(lock)


LOCK_KINDS = ["link_to_file", "link_to_dir", "dangling_link", "directory", "fifo"]


@pytest.mark.parametrize("kind", LOCK_KINDS)
def test_a_lock_that_cannot_be_taken_is_refused_and_nothing_is_written_through_it(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    _hostile_lock(kind, out, tmp_path)
    before = {p: open(p, "rb").read() for p in [tmp_path / "victim.txt"] if os.path.exists(p)}
    with pytest.raises(LockUnavailable, match=r"\.lock .*remove it"):
        OutputLock(str(out)).__enter__()
    assert {p: open(p, "rb").read() for p in before} == before
    if os.path.isdir(tmp_path / "victim_dir"):
        assert os.listdir(tmp_path / "victim_dir") == []
    assert not os.path.exists(tmp_path / "nowhere")


@pytest.mark.parametrize("name", [names.LOCK_NAME, names.INCOMPLETE_DIR, names.PROGRESS_DIR,
                                  names.MANIFEST_NAME, names.ERRORS_NAME, "lock directory"])
def test_convert_refuses_links_in_its_output_in_one_line_with_exit_2(tmp_path, name):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    out = tmp_path / "out"
    out.mkdir()
    victim = _victim(tmp_path)
    if name == "lock directory":
        (out / names.LOCK_NAME).mkdir()
    else:
        target = victim if "." in name.lstrip(".") or name == names.LOCK_NAME else tmp_path / "victim_dir"
        os.symlink(target, out / name)
    code, _, stderr = cli("convert", "--input", str(tmp_path / "in"), "--output", str(out),
                          "--id_salt", TEST_SALT, "--progress", "none", *IN_MEMORY)
    assert code == 2, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert ("symbolic link" if name != "lock directory" else "is a directory") in stderr, stderr
    assert victim.read_text() == "precious\n" and os.listdir(tmp_path / "victim_dir") == []
    assert name == names.MANIFEST_NAME or not os.path.exists(out / names.MANIFEST_NAME)


def test_files_of_the_output_are_never_opened_through_a_link(tmp_path):
    """The one place output files are opened: a link anywhere between the output and the file
    (a folder link, a file link, dangling or not) is refused and nothing outside changes."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    victim = _victim(tmp_path)
    os.symlink(tmp_path / "victim_dir", out / "dirlink")
    os.symlink(victim, out / "sub" / "filelink")
    os.symlink(tmp_path / "gone", out / "dangling")
    for path in (out / "dirlink" / "f", out / "dirlink" / "deeper" / "f", out / "sub" / "filelink",
                 out / "dangling", out / "dangling" / "f"):
        with pytest.raises(OutputLinkError):
            create_output(str(out), str(path)).close()
    assert victim.read_text() == "precious\n" and os.listdir(tmp_path / "victim_dir") == []
    assert not os.path.exists(tmp_path / "gone")
    with create_output(str(out), str(out / "new" / "deeper" / "f")) as handle:   # real folders made
        handle.write(b"ok")
    assert (out / "new" / "deeper" / "f").read_bytes() == b"ok"


_HOLDER = ("import sys, time; sys.path.insert(0, %r)\n"
           "from dataset.lock import OutputLock\n"
           "lock = OutputLock(sys.argv[1]).__enter__(); print('held', flush=True); time.sleep(60)\n")


def test_the_lock_holds_no_path_and_a_killed_holders_lock_is_taken_over_and_removed(tmp_path):
    patient_dir = tmp_path / "Smith_Jane_12345"
    out = patient_dir / "out"
    argv = [sys.executable, "-c", _HOLDER % ROOT, str(out), "--input", str(patient_dir / "scans"),
            "--labels", str(patient_dir / "labels.csv")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        text = (out / names.LOCK_NAME).read_text()
        holder = json.loads(text)
        assert set(holder) <= LOCK_FIELDS and {"host", "pid", "started", "token"} <= set(holder)
        assert holder["pid"] == proc.pid
        assert "Smith" not in text and str(tmp_path) not in text and "--" not in text
        with pytest.raises(OutputBusy, match=r"process \d+ on .*started") as busy:
            OutputLock(str(out)).__enter__()
        assert "Smith" not in str(busy.value).replace(str(out), "")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.exists(out / names.LOCK_NAME)          # left by the dead run: nothing identifying
    with OutputLock(str(out)) as lock:                     # its holder is dead: taken over
        assert json.loads((out / names.LOCK_NAME).read_text())["token"] == lock.token
    assert not os.path.exists(out / names.LOCK_NAME)       # and cleaned up
