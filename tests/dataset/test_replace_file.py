"""dataset.files.replace_file, the atomic write of a file outside any output (--summary_json):
a reader finds the old bytes or the new ones, a link at the name is replaced and never written
through, and no temp file is left, whether the write succeeds or fails."""
from __future__ import annotations

import os
import threading

import pytest

from dcm2tfrecord.dataset.files import replace_file


def test_a_file_is_replaced_whole_and_its_folder_made(tmp_path):
    path = tmp_path / "reports" / "deep" / "summary.json"
    replace_file(str(path), b"first\n", "application/json")
    replace_file(str(path), b"second\n", "application/json")
    assert path.read_bytes() == b"second\n"
    assert os.listdir(path.parent) == ["summary.json"]


def test_a_link_at_the_name_is_replaced_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"precious\n")
    os.symlink(victim, tmp_path / "summary.json")
    replace_file(str(tmp_path / "summary.json"), b"{}\n", "application/json")
    assert victim.read_bytes() == b"precious\n"
    assert not os.path.islink(tmp_path / "summary.json")
    assert (tmp_path / "summary.json").read_bytes() == b"{}\n"


def test_a_reader_never_sees_a_part(tmp_path):
    path = tmp_path / "summary.json"
    old, new = b"o" * (1 << 20), b"n" * (1 << 20)
    replace_file(str(path), old, "application/json")
    seen: set[bytes] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(path.read_bytes())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(40):
            replace_file(str(path), new if i % 2 == 0 else old, "application/json")
    finally:
        done.set()
        reader.join()
    assert seen <= {old, new} and seen, len(seen)


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "summary.json"
    replace_file(str(path), b"old\n", "application/json")
    os.mkdir(tmp_path / "blocked")
    os.mkdir(tmp_path / "blocked" / "summary.json")           # a folder where the file goes
    with pytest.raises(OSError):
        replace_file(str(tmp_path / "blocked" / "summary.json"), b"new\n", "application/json")
    assert os.listdir(tmp_path / "blocked") == ["summary.json"]
    assert path.read_bytes() == b"old\n"
