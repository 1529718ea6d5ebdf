"""--incremental: versions, reused shards, LATEST, rollback (issue 8, item 4).

One chain of real conversions on one archive of generated PNGs in two class
folders: version 1; then files added, changed and deleted -> version 2, whose
records must equal a full conversion of the archive as it now is, while the
shards that hold only unchanged records are the very same files (referenced,
not rewritten); a run killed mid-way leaves LATEST where it was; rollback;
an option change rebuilds. A second chain shows small deltas becoming small
shards and being compacted once they add up past the target size.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline import cli
from dcm2tfrecord.pipeline.summary import format_summary
from tests.support import rid, run_convert, write_png_archive
from tests.support.hooks import PAUSE_ENV
from tests.support.processes import run_until
from dcm2tfrecord.dataset.verify import verify_dataset

MB = 1 << 20
# ~27.6 KB per 96x96x3 record: a few shards per split
SHARDS = dict(target_shard_mb=0.2, min_shard_mb=0.1, max_shard_mb=0.4)
OPTIONS = dict(incremental=True, labels_from_dirs=True, splits="train=0.75,test=0.25", **SHARDS)


def _manifest(directory) -> dict:
    with open(os.path.join(directory, "dataset.json")) as handle:
        return json.load(handle)


def _latest(root) -> str:
    with open(os.path.join(root, "LATEST")) as handle:
        return handle.read().strip()


def _records(dataset_dir: str) -> dict:
    """record id -> (split, label, sha256 of the pixels), read with tf.data from the manifest's shards."""
    meta = reader.info(dataset_dir)
    features = {"id": tf.io.FixedLenFeature([], tf.string), "label": tf.io.FixedLenFeature([], tf.int64),
                "image_raw": tf.io.FixedLenFeature([], tf.string)}
    out = {}
    for split in meta.split_names:
        for raw in tf.data.TFRecordDataset(meta.shard_paths(split)):
            ex = tf.io.parse_single_example(raw, features)
            key = ex["id"].numpy().decode()
            assert key not in out, f"record {key} twice"
            out[key] = (split, meta.class_names[int(ex["label"])],
                        hashlib.sha256(ex["image_raw"].numpy()).hexdigest())
    return out


def _file_state(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


def _shard_states(version_dir: str) -> dict:
    """shard file name -> (inode, mtime) for the shards this version wrote itself."""
    manifest = _manifest(version_dir)
    return {s["file"]: _file_state(os.path.join(version_dir, s["file"]))
            for entry in manifest["splits"].values() for s in entry["shards"]}


def _fingerprints(version_dir: str, shard_file: str) -> list:
    with open(os.path.join(version_dir, shard_file + ".records.json")) as handle:
        return json.load(handle)["fingerprints"]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """Runs the chain once; tests below look at what each step left."""
    base = tmp_path_factory.mktemp("incremental")
    archive, root = str(base / "archive"), str(base / "out")
    write_png_archive(os.path.join(archive, "cat"), 10, 96, 96, channels=3, seed=1)
    write_png_archive(os.path.join(archive, "dog"), 10, 96, 96, channels=3, seed=2)
    steps = {"v1": run_convert(archive, root, **OPTIONS)}
    v1_dir = os.path.join(root, "versions", "0001")
    steps["v1_records"] = _records(root)
    steps["v1_states"] = _shard_states(v1_dir)

    # Change the archive: 3 new files, 1 rewritten with other pixels, 1 deleted.
    write_png_archive(os.path.join(archive, "cat", "more"), 3, 96, 96, channels=3, seed=5)
    changed = os.path.join(archive, "dog", "img_0001.png")
    Image.fromarray(np.full((96, 96, 3), 77, np.uint8)).save(changed)
    deleted = os.path.join(archive, "cat", "img_0002.png")
    os.remove(deleted)
    steps["v2"] = run_convert(archive, root, **OPTIONS)
    steps["v2_records"] = _records(root)
    steps["full"] = run_convert(archive, str(base / "full"), **{k: v for k, v in OPTIONS.items()
                                                               if k != "incremental"})
    steps["full_records"] = _records(str(base / "full"))
    steps.update(archive=archive, root=root, changed=changed, deleted=deleted, base=str(base))
    return steps


def test_first_run_makes_version_1_and_points_latest_at_it(chain):
    root = chain["root"]
    assert sorted(os.listdir(os.path.join(root, "versions"))) == ["0001", "0002"]
    assert sorted(os.listdir(root)) == ["LATEST", "versions"]
    v1 = _manifest(os.path.join(root, "versions", "0001"))
    assert v1["incremental"]["base_version"] is None and v1["incremental"]["reused_shards"] == 0
    assert chain["v1"]["version"]["name"] == "0001"
    assert len(chain["v1_records"]) == 20
    # every shard has its records file, listing one fingerprint per record
    for entry in v1["splits"].values():
        for shard in entry["shards"]:
            assert len(_fingerprints(os.path.join(root, "versions", "0001"), shard["file"])) == \
                shard["num_records"]


def test_new_version_holds_exactly_what_a_full_conversion_holds(chain):
    assert _latest(chain["root"]) == "0002"
    assert chain["v2_records"] == chain["full_records"]
    assert len(chain["v2_records"]) == 20 + 3 - 1
    v2 = _manifest(os.path.join(chain["root"], "versions", "0002"))
    full = _manifest(os.path.join(chain["base"], "full"))
    assert v2["counts"] == full["counts"]
    assert v2["labels"]["class_names"] == full["labels"]["class_names"]
    text = format_summary(chain["v2"])
    assert f"version 0002 of {chain['root']} (LATEST now points to it)" in text
    assert "from version 0001" in text


def test_unchanged_shards_are_referenced_not_rewritten(chain):
    root = chain["root"]
    v1_dir, v2_dir = (os.path.join(root, "versions", v) for v in ("0001", "0002"))
    v2 = _manifest(v2_dir)
    info = v2["incremental"]
    reused = [s for e in v2["splits"].values() for s in e["shards"] if s["file"].startswith("../")]
    written = [s for e in v2["splits"].values() for s in e["shards"] if not s["file"].startswith("../")]
    assert info["base_version"] == "0001"
    assert info["reused_shards"] == len(reused) >= 1 and info["written_shards"] == len(written) >= 1
    for shard in reused:
        name = shard["file"].split("/", 2)[2]
        assert shard["file"] == f"../0001/{name}"
        assert not os.path.exists(os.path.join(v2_dir, name)), "a reused shard was copied"
        # the very same file: same inode, same mtime as right after version 1
        assert _file_state(os.path.join(v1_dir, name)) == chain["v1_states"][name]
    # the shards of version 1 that held the changed or deleted file are not reused
    v1_ids = chain["v1_records"]
    gone = {rid for rid in v1_ids if rid not in chain["v2_records"]
            or chain["v2_records"][rid] != v1_ids[rid]}
    assert len(gone) == 2     # the deleted file, and the rewritten one (new pixels)
    reused_names = {s["file"].split("/", 2)[2] for s in reused}
    meta_v1 = reader.info(v1_dir)
    for split in meta_v1.split_names:
        for path in meta_v1.shard_paths(split):
            ids = {tf.train.Example.FromString(r.numpy()).features.feature["id"].bytes_list.value[0].decode()
                   for r in tf.data.TFRecordDataset(path)}
            assert (os.path.basename(path) in reused_names) == (not ids & gone), path


def test_groups_keep_their_split_across_versions(chain):
    v1, v2 = chain["v1_records"], chain["v2_records"]
    common = set(v1) & set(v2)
    assert len(common) >= 18
    assert all(v1[r][0] == v2[r][0] for r in common)


def test_reader_verify_and_versions_read_latest_or_a_given_version(chain, capsys):
    root = chain["root"]
    assert reader.info(root).num_records("train") + reader.info(root).num_records("test") == 22
    assert sum(reader.info(root, version=1).num_records(s) for s in ("train", "test")) == 20
    exact = reader.info(root).layout("train").dtype
    images = sum(int(x.shape[0]) for x, _ in reader.load(root, "train", batch_size=4, shuffle=False,
                                                         dtype=exact))
    assert images == reader.info(root).num_records("train")
    report = verify_dataset(root)       # the version LATEST names, reused shards included
    assert report.ok, report.problems
    assert report.records == 22
    assert cli.main(["inspect", root]) == 0
    overview = capsys.readouterr().out
    assert "versions/0002" in overview and "from version 0001" in overview
    assert cli.main(["versions", root]) == 0
    listing = capsys.readouterr().out
    assert "* 0002" in listing and "  0001" in listing
    assert cli.main(["versions", root, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["version"], r["latest"], sum(r["records"].values())) for r in rows] == \
        [("0001", False, 20), ("0002", True, 22)]


def test_killed_run_leaves_latest_on_the_old_version_and_a_rerun_commits(chain, tmp_path):
    root, archive = chain["root"], chain["archive"]
    write_png_archive(os.path.join(archive, "dog", "more"), 2, 96, 96, channels=3, seed=9)
    v3_dir = os.path.join(root, "versions", "0003")
    pauses = tmp_path / "pauses"
    os.makedirs(pauses)

    def writing() -> str | None:      # a shard writer of version 3 stopped half-way (pause point)
        if any(n.startswith("half_written-") for n in os.listdir(pauses)) and \
                os.path.isdir(os.path.join(v3_dir, ".incomplete")) and \
                not os.path.exists(os.path.join(v3_dir, "dataset.json")):
            return "writing version 3"
        return None

    command = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive, "--output", root,
               "--incremental", "--labels_from_dirs", "--splits", "train=0.75,test=0.25",
               "--target_shard_mb", "0.2", "--min_shard_mb", "0.1", "--max_shard_mb", "0.4",
               "--id_salt", "dcm2tfrecord-tests", "--direct_num_workers=1",
               "--direct_running_mode=in_memory"]
    hit = run_until(command, str(tmp_path / "killed.log"), writing,
                    env={PAUSE_ENV: f"half_written:{pauses}"})
    assert hit == "writing version 3", "the run finished before it could be killed"
    assert _latest(root) == "0002"
    assert not os.path.exists(os.path.join(v3_dir, "dataset.json"))
    assert sum(reader.info(root).num_records(s) for s in ("train", "test")) == 22
    assert run_until(command, str(tmp_path / "rerun.log"), None) is None
    assert _latest(root) == "0003"
    assert sum(reader.info(root).num_records(s) for s in ("train", "test")) == 24
    assert not os.path.exists(os.path.join(v3_dir, ".incomplete"))
    assert verify_dataset(root).ok


def test_rollback_points_latest_back_and_forth(chain, capsys):
    root = chain["root"]
    before = _latest(root)
    assert cli.main(["rollback", root, "1"]) == 0
    assert _latest(root) == "0001"
    assert sum(reader.info(root).num_records(s) for s in ("train", "test")) == 20
    assert cli.main(["rollback", root, "42"]) == 2
    assert "not committed" in capsys.readouterr().err
    assert cli.main(["rollback", root, before]) == 0
    assert _latest(root) == before
    assert cli.main(["rollback", chain["archive"], "1"]) == 2      # not a versioned root


def test_changed_options_rebuild_everything_into_a_new_version(chain):
    root = chain["root"]
    summary = run_convert(chain["archive"], root, **{**OPTIONS, "resize": "64x64"})
    version = summary["version"]
    assert version["reused_shards"] == 0 and "--resize" in version["rebuild_reason"]
    manifest = _manifest(os.path.join(root, "versions", version["name"]))
    assert not any(s["file"].startswith("../") for e in manifest["splits"].values() for s in e["shards"])
    assert reader.info(root).layout("train").fixed_shape == (1, 64, 64, 3)


def test_incremental_refuses_a_plain_dataset_and_overwrite(tmp_path, sample_archive):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "dataset.json").write_text("{}")
    command = ["convert", "--input", sample_archive, "--output", str(plain), "--incremental",
               "--id_salt", "x"]
    assert cli.main(command) == 2
    assert cli.main(command[:4] + [str(tmp_path / "new"), "--incremental", "--overwrite",
                                   "--id_salt", "x"]) == 2
    assert not (tmp_path / "new").exists()


def test_small_deltas_stay_small_shards_until_they_add_up_then_are_compacted(tmp_path):
    archive, root = str(tmp_path / "archive"), str(tmp_path / "out")
    options = dict(incremental=True, **SHARDS)
    write_png_archive(archive, 20, 96, 96, channels=3, seed=3)            # ~550 KB: full shards

    def shards(version: str) -> list[dict]:
        return _manifest(os.path.join(root, "versions", version))["splits"]["train"]["shards"]

    run_convert(archive, root, **options)
    min_bytes = int(SHARDS["min_shard_mb"] * MB)
    assert all(s["num_bytes"] >= min_bytes for s in shards("0001"))
    for step, count in ((1, 2), (2, 2)):                                   # 2 records, ~55 KB each
        write_png_archive(os.path.join(archive, f"delta{step}"), count, 96, 96, channels=3, seed=10 + step)
        run_convert(archive, root, **options)
    v3 = shards("0003")
    small = [s for s in v3 if s["num_bytes"] < min_bytes]
    assert len(small) == 2, v3                      # 55 + 55 KB < 200 KB target: both kept
    assert sum(1 for s in small if s["file"].startswith("../0002/")) == 1
    write_png_archive(os.path.join(archive, "delta3"), 4, 96, 96, channels=3, seed=13)
    summary = run_convert(archive, root, **options)                        # 110 + 110 KB >= target
    v4 = shards("0004")
    assert all(s["num_bytes"] >= min_bytes for s in v4), v4
    assert sum(s["num_records"] for s in v4) == 28
    assert summary["version"]["reused_records"] == 20    # the full shards of version 1
    assert verify_dataset(root).ok


def test_a_file_replaced_with_the_same_size_and_mtime_is_converted_again_not_reused(tmp_path):
    """issue 35, item 5: ``rsync -a`` or ``cp -p`` between two versions keeps a file's size and
    modification time; the probe's fingerprint of its head tells the new bytes apart, so the
    shard that held the old ones is not reused and the record holds the new pixels."""
    archive, root = tmp_path / "archive" / "cat", str(tmp_path / "out")
    rng = np.random.default_rng(21)
    images = [rng.integers(0, 255, (96, 96, 3), dtype=np.uint8) for _ in range(7)]
    archive.mkdir(parents=True)
    for i, image in enumerate(images[:6]):      # stored, not compressed: one size for one shape
        Image.fromarray(image).save(archive / f"img_{i:04d}.png", compress_level=0)
    options = dict(incremental=True, labels_from_dirs=True, **SHARDS)
    run_convert(str(tmp_path / "archive"), root, **options)
    target = archive / "img_0001.png"
    before = os.stat(target)
    Image.fromarray(images[6]).save(target, compress_level=0)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(target).st_size == before.st_size
    summary = run_convert(str(tmp_path / "archive"), root, **options)
    records = _records(root)
    assert records[rid("cat/img_0001.png")][2] == hashlib.sha256(images[6].tobytes()).hexdigest()
    assert records[rid("cat/img_0000.png")][2] == hashlib.sha256(images[0].tobytes()).hexdigest()
    assert summary["version"]["reused_records"] < 6
    assert verify_dataset(root).ok


def test_a_version_written_before_sources_were_fingerprinted_is_read_but_not_reused(tmp_path):
    """issue 35, item 5: an earlier dcm2tfrecord's records files (no ``fingerprints_version``, their
    fingerprints made of uri, size and mtime alone) cannot tell a replaced file: the next
    version reuses nothing of them, says why, and the old version stays readable."""
    archive, root = str(tmp_path / "archive"), str(tmp_path / "out")
    write_png_archive(os.path.join(archive, "cat"), 6, 96, 96, channels=3, seed=4)
    options = dict(incremental=True, labels_from_dirs=True, **SHARDS)
    run_convert(archive, root, **options)
    v1_dir = os.path.join(root, "versions", "0001")
    records_files = [n for n in os.listdir(v1_dir) if n.endswith(".records.json")]
    assert records_files
    for name in records_files:                  # as the earlier release wrote them
        path = os.path.join(v1_dir, name)
        with open(path) as handle:
            content = json.load(handle)
        assert content.pop("fingerprints_version") == 2
        with open(path, "w") as handle:
            json.dump(content, handle, sort_keys=True)
    summary = run_convert(archive, root, **options)
    assert summary["version"]["reused_shards"] == 0
    assert "written by an earlier dcm2tfrecord" in summary["version"]["rebuild_reason"]
    assert "every record was converted again" in format_summary(summary)
    assert _records(root) == _records(v1_dir)
    assert verify_dataset(v1_dir).ok and verify_dataset(root).ok
