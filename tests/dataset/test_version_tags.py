"""Named versions (``dcm2tfrecord tag``) and ``prune`` on a real --incremental root of three
versions, each reusing shards of the one before: a tag is read wherever a version number is
(reader.load, RandomAccess, inspect, copy, rollback); prune keeps the newest, LATEST's and every
tagged version, and every file a kept version reuses, so what is kept still reads and verifies."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import versions
from dcm2tfrecord.dataset.names import BadName, check_tag
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import run_convert, write_png_archive

OPTIONS = dict(incremental=True, labels_from_dirs=True, target_shard_mb=0.001, min_shard_mb=0.0005,
               max_shard_mb=0.002)


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def _records(root, version=None) -> int:
    meta = reader.info(root, version)
    return sum(meta.num_records(split) for split in meta.split_names)


@pytest.fixture
def root(tmp_path):
    archive, out = tmp_path / "archive", str(tmp_path / "root")
    for i, count in enumerate((6, 3, 2)):               # versions of 6, 9 and 11 records
        write_png_archive(archive / f"part{i}", count, 8, 8, seed=i + 1)
        run_convert(archive, out, **OPTIONS)
    return out


def test_tag_names_are_checked_in_one_place():
    assert check_tag("paper-2026") == "paper-2026" and check_tag(" v1.2_final ") == "v1.2_final"
    for bad in ("3", "0003", "../x", "a/b", "-x", ".hidden", "", "x" * 65, "tag.", "é"):
        with pytest.raises(BadName):
            check_tag(bad)


def test_a_tag_is_read_wherever_a_version_number_is(root, tmp_path):
    assert _records(root) == 11
    out = _cli("tag", root, "paper-2026", "1")
    assert out.returncode == 0 and "paper-2026 -> version 0001" in out.stdout, out.stderr
    assert _cli("tag", root).stdout.split() == ["paper-2026", "0001"]
    assert _records(root, "paper-2026") == 6
    assert len(reader.RandomAccess(root, version="paper-2026")) == 6
    assert sum(int(b[1].shape[0]) for b in reader.load(root, batch_size=4, version="paper-2026", shuffle=False)) == 6
    shown = _cli("inspect", root, "--version", "paper-2026")
    assert shown.returncode == 0 and "/versions/0001" in shown.stdout, shown.stderr
    copied = _cli("copy", root, tmp_path / "paper", "--version", "paper-2026")
    assert copied.returncode == 0 and _records(str(tmp_path / "paper")) == 6, copied.stderr
    listing = _cli("versions", root)
    assert "tags: paper-2026" in [line for line in listing.stdout.splitlines() if " 0001 " in line][0]
    assert json.loads(_cli("versions", root, "--json").stdout)[0]["tags"] == ["paper-2026"]
    # the tag stays where it is unless moved; rollback takes it
    again = _cli("tag", root, "paper-2026", "2")
    assert again.returncode == 2 and "already names version 0001" in again.stderr and "--move" in again.stderr
    assert _cli("rollback", root, "paper-2026").returncode == 0 and versions.read_latest(root) == "0001"
    assert _cli("tag", root, "paper-2026", "2", "--move").returncode == 0 and _records(root, "paper-2026") == 9


def test_an_unknown_or_bad_tag_is_one_line(root):
    with pytest.raises(versions.UnknownTag, match="has no tag 'nope'"):
        reader.info(root, "nope")
    with pytest.raises(ValueError, match="has no tag 'nope'"):
        reader.RandomAccess(root, version="nope")
    bad = _cli("tag", root, "../evil", "1")
    assert bad.returncode == 2 and "a tag is a letter" in bad.stderr
    assert not os.path.exists(os.path.join(root, "evil")) and not os.path.exists(os.path.join(root, "tags"))
    missing = _cli("tag", root, "later", "7")
    assert missing.returncode == 2 and "version 0007" in missing.stderr and "not committed" in missing.stderr


def test_prune_keeps_latest_tagged_and_reused_and_removes_the_rest(root):
    v3 = json.load(open(os.path.join(root, "versions", "0003", "dataset.json")))
    reused_from_2 = [s["file"] for split in v3["splits"].values() for s in split["shards"]
                     if s["file"].startswith("../0002/")]
    assert reused_from_2, "the fixture's third version reuses shards of the second"
    assert _cli("tag", root, "first", "1").returncode == 0
    dry = _cli("prune", root, "--keep", "1")
    assert dry.returncode == 0 and "would remove versions 0002" in dry.stdout and "kept: 0001, 0003" in dry.stdout
    assert versions.committed_versions(root) == ["0001", "0002", "0003"]
    done = _cli("prune", root, "--keep", "1", "--yes")
    assert done.returncode == 0 and "removed versions 0002" in done.stdout, done.stderr
    assert versions.committed_versions(root) == ["0001", "0003"]
    left = sorted(os.listdir(os.path.join(root, "versions", "0002")))
    held = sorted(name for file in reused_from_2 for name in
                  (file[len("../0002/"):], file[len("../0002/"):] + ".idx", file[len("../0002/"):] + ".records.json"))
    assert left == held                                          # only what version 3 reuses
    assert _records(root) == 11 and verify_dataset(root).ok
    assert _records(root, "first") == 6 and verify_dataset(os.path.join(root, "versions", "0001")).ok
    with pytest.raises(FileNotFoundError):
        reader.info(root, 2)
    assert _cli("rollback", root, "2").returncode == 2
    # nothing left to prune: a second prune removes nothing that is used
    assert "nothing" in _cli("prune", root, "--keep", "1", "--yes").stdout
    assert verify_dataset(root).ok
    # a convert --incremental after the prune still reuses through the held files
    summary = run_convert(os.path.join(os.path.dirname(root), "archive"), root, **OPTIONS)
    assert summary["version"]["name"] == "0004" and summary["version"]["reused_shards"] >= 1
    assert _records(root) == 11 and verify_dataset(root).ok
