"""``dcm2tfrecord copy`` (dataset.transfer) on real conversions: a plain dataset and a version of
an --incremental root whose shards are partly reused from the version before. The copy equals the
source byte for byte and reads and verifies as it; an interrupted copy never looks complete and,
run again, finishes without copying the finished files again; a damaged source shard or a
damaged file at the destination is caught by its sha256; a destination holding anything else is
refused before a byte is written. gs:// both ways: tests/e2e/test_gcs_emulator.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import transfer
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import run_convert, write_png_archive
from tests.support.reader_datasets import archive, plain  # noqa: F401  (fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _files(root) -> dict[str, bytes]:
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, root).replace(os.sep, "/")] = open(path, "rb").read()
    return out


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "copy", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def versioned(tmp_path_factory):
    work = tmp_path_factory.mktemp("versioned")
    source, root = work / "archive", str(work / "root")
    options = dict(incremental=True, labels_from_dirs=True, target_shard_mb=0.001, min_shard_mb=0.0005,
                   max_shard_mb=0.002)
    write_png_archive(source / "a", 6, 8, 8, seed=1)
    run_convert(source, root, **options)
    write_png_archive(source / "b", 3, 8, 8, seed=2)
    run_convert(source, root, **options)
    return root


def test_a_copy_is_the_dataset_byte_for_byte(plain, tmp_path):  # noqa: F811
    out = _cli(plain, tmp_path / "copy")
    assert out.returncode == 0, out.stderr
    assert "every byte checked" in out.stdout and "MB/s" in out.stdout
    assert _files(tmp_path / "copy") == _files(plain)
    assert verify_dataset(str(tmp_path / "copy")).ok
    again = _cli(plain, tmp_path / "copy")                     # a finished copy: verified, nothing copied
    assert again.returncode == 0 and ": 0 files (0.0 MB)" in again.stdout and "already there, verified" in again.stdout


def test_a_version_is_copied_with_the_shards_it_reuses(versioned, tmp_path):
    manifest = json.load(open(os.path.join(versioned, "versions", "0002", "dataset.json")))
    reused = [s["file"] for s in manifest["splits"]["train"]["shards"] if s["file"].startswith("../0001/")]
    assert reused
    dst = tmp_path / "copy"
    report = transfer.copy_dataset(versioned, str(dst))
    assert report.version == "0002"
    copied = _files(dst)
    assert copied["LATEST"] == b"0002\n"
    for file in reused:                                      # the earlier version's shard, where it was
        assert copied["versions/0001/" + file[len("../0001/"):]] == _files(versioned)[
            "versions/0001/" + file[len("../0001/"):]]
    assert "versions/0001/dataset.json" not in copied         # that version itself is not copied
    source = _files(versioned)
    assert all(source[name] == data for name, data in copied.items())
    assert reader.info(str(dst)).num_records("train") == reader.info(versioned).num_records("train") == 9
    assert [r["id"] for r in reader.RandomAccess(str(dst))] == [r["id"] for r in reader.RandomAccess(versioned)]
    one = tmp_path / "one"
    assert transfer.copy_dataset(versioned, str(one), version="1").version == "0001"
    assert _files(one)["LATEST"] == b"0001\n" and reader.info(str(one)).num_records("train") == 6


def test_an_interrupted_copy_never_looks_complete_and_finishes_when_run_again(plain, tmp_path):  # noqa: F811
    dst = tmp_path / "copy"
    done = []

    def interrupt(line):
        done.append(line)
        if len(done) == 6:
            raise KeyboardInterrupt          # as a kill between two files
    with pytest.raises(KeyboardInterrupt):
        transfer.copy_dataset(plain, str(dst), progress=interrupt)
    partial = _files(dst)
    assert "dataset.json" not in partial and transfer.MARKER_NAME in partial
    with pytest.raises(Exception):
        reader.info(str(dst))
    # a flaky store left one finished file damaged: caught by its digest and copied again
    finished = sorted(n for n in partial if n != transfer.MARKER_NAME and not n.startswith(".incomplete/"))
    assert 6 <= len(finished) < len(_files(plain)) - 1       # those under way when it stopped finish whole
    assert all(partial[name] == _files(plain)[name] for name in finished)
    with open(dst / finished[-1], "r+b") as handle:
        handle.seek(2)
        handle.write(b"\x00\xff")
    report = transfer.copy_dataset(plain, str(dst))
    assert report.kept == len(finished) - 1 and report.copied == len(_files(plain)) - report.kept
    assert _files(dst) == _files(plain) and verify_dataset(str(dst)).ok


def test_a_damaged_source_shard_stops_the_copy_naming_it(plain, tmp_path):  # noqa: F811
    import shutil
    source = tmp_path / "source"
    shutil.copytree(plain, source)
    shard = sorted(n for n in os.listdir(source) if n.endswith(".tfrecord"))[1]
    with open(source / shard, "r+b") as handle:
        handle.seek(30)
        handle.write(b"\x01\x02")
    out = _cli(source, tmp_path / "copy")
    assert out.returncode == 1 and shard in out.stderr and "the source is damaged" in out.stderr
    assert not (tmp_path / "copy" / "dataset.json").exists()


def test_a_destination_holding_anything_else_is_refused_untouched(plain, versioned, tmp_path):  # noqa: F811
    other = tmp_path / "other"
    assert _cli(versioned, other).returncode == 0
    before = _files(other)
    out = _cli(plain, other)                                   # holds another dataset's copy
    assert out.returncode == 2 and "not empty" in out.stderr
    assert _files(other) == before
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    out = _cli(plain, stranger)
    assert out.returncode == 2 and "not empty" in out.stderr and _files(stranger) == {"notes.txt": b"mine"}
    different = tmp_path / "different"
    assert _cli(plain, different).returncode == 0
    (different / "dataset.json").write_bytes((different / "dataset.json").read_bytes().replace(b"{", b"{ ", 1))
    out = _cli(plain, different)
    assert out.returncode == 2 and "holds another dataset" in out.stderr
    out = _cli(tmp_path / "nothing", tmp_path / "x")
    assert out.returncode == 2 and "holds no committed dataset" in out.stderr and not (tmp_path / "x").exists()
