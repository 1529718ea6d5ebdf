"""gs:// end to end against gcp-storage-emulator: inputs, labels CSV, output and temp on GCS.

The same archive converted from gs:// to gs:// and from a local directory to a
local directory gives the same bytes (shards, indexes, errors, manifest apart
from the recorded input paths); the reader reads the GCS result back after a
local copy (TensorFlow's own GCS client does not honour the emulator).
"""
from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np
import pytest
from PIL import Image

from dcm2tfrecord import reader
from tests.support import pydicom_test_files
from dcm2tfrecord.dataset.names import TFDS_INFO_NAME
from dcm2tfrecord.dataset.tfds_metadata import NAMES as TFDS_NAMES
from dcm2tfrecord.pipeline.options.locations import recorded_location
from tests.support import IN_MEMORY, TEST_SALT, rid, run_convert, write_png_archive
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)

DICOM_FILES = {          # archive path -> pydicom test file
    "dicom/ct/CT_small.dcm": "CT_small.dcm",
    "dicom/mr/MR_small.dcm": "MR_small.dcm",
    "dicom/mr/MR_small_RLE.dcm": "MR_small_RLE.dcm",
    "dicom/rgb/SC_rgb_jpeg_dcmtk.dcm": "SC_rgb_jpeg_dcmtk.dcm",
    "dicom/plan/rtplan.dcm": "rtplan.dcm",            # no pixel data: skipped
}
OPTIONS = dict(labels_csv="labels.csv", splits="train=0.6,validation=0.4",
               target_shard_mb=0.015, min_shard_mb=0.005, max_shard_mb=0.1)


def _build_archive(root: str) -> None:
    write_png_archive(os.path.join(root, "png", "gray"), 4, 40, 48, channels=1, seed=1)
    write_png_archive(os.path.join(root, "png", "rgb"), 3, 36, 30, channels=3, seed=2)
    for rel, name in DICOM_FILES.items():
        target = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(pydicom_test_files(), name), target)
    with open(os.path.join(root, "notes.txt"), "w") as handle:   # unsupported_format
        handle.write("not an image\n")


def _write_labels(path: str, archive: str) -> None:
    rels = sorted(os.path.relpath(os.path.join(d, f), archive).replace(os.sep, "/")
                  for d, _, files in os.walk(archive) for f in files)
    rows = [(rel, "lesion" if i % 2 else "normal") for i, rel in enumerate(rels)
            if not rel.startswith("png/rgb/img_0002")]   # one unlabelled: skipped missing_label
    with open(path, "w") as handle:
        handle.write("path,label\n")
        handle.writelines(f"{rel},{label}\n" for rel, label in rows)


def _convert(inputs: str, labels: str, output: str, beam_args=IN_MEMORY, **overrides) -> dict:
    options = {k: v for k, v in OPTIONS.items() if k != "labels_csv"}
    options.update(overrides)
    return run_convert(inputs, output, beam_args=beam_args, labels=labels, **options)


@pytest.fixture(scope="module")
def converted(gcs_emulator, tmp_path_factory):
    """(local dataset dir, local copy of the gs:// dataset, gs:// output uri, timings)."""
    work = tmp_path_factory.mktemp("gcs")
    archive, labels = str(work / "archive"), str(work / "labels.csv")
    _build_archive(archive)
    _write_labels(labels, archive)

    started = time.time()
    _convert(archive, labels, str(work / "local_out"))
    local_wall = time.time() - started

    gcs_emulator.upload_tree(archive, "archive")
    gs_labels = gcs_emulator.upload_file(labels, "meta/labels.csv")
    gs_out = gcs_emulator.url("datasets/out")
    started = time.time()
    _convert(gcs_emulator.url("archive"), gs_labels, gs_out,
             beam_args=IN_MEMORY + [f"--temp_location={gcs_emulator.url('tmp')}"])
    gs_wall = time.time() - started

    copy = str(work / "gs_copy")
    gcs_emulator.download_tree("datasets/out", copy)
    return {"local": str(work / "local_out"), "copy": copy, "gs_out": gs_out, "work": work,
            "archive": archive, "gs_labels": gs_labels, "local_labels": labels,
            "local_wall": local_wall, "gs_wall": gs_wall}


def _files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                  for d, _, files in os.walk(root) for f in files)


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def test_credential_lookup_is_instant(gcs_emulator):
    """No ADC retries/back-off: Beam finds the fixture's offline credentials at once."""
    from apache_beam.internal.gcp import auth
    from apache_beam.options.pipeline_options import PipelineOptions
    auth._Credentials._credentials_init = False
    started = time.time()
    credentials = auth.get_service_credentials(PipelineOptions([]))
    assert credentials is not None and time.time() - started < 2.0


def test_gs_to_gs_same_bytes_as_local(converted):
    local, copy = converted["local"], converted["copy"]
    files = _files(local)
    assert files == _files(copy), "gs:// output holds different files (or leftovers)"
    shards = [f for f in files if ".tfrecord" in f]
    assert len([f for f in shards if not f.endswith(".idx")]) >= 3, files
    for name in shards:
        assert _read(os.path.join(local, name)) == _read(os.path.join(copy, name)), name
    # TFDS's metadata, written through the same FileSystems at the same commit point
    tfds_files = [f for f in files if f in TFDS_NAMES]
    assert TFDS_INFO_NAME in tfds_files, files
    for name in tfds_files:
        assert _read(os.path.join(local, name)) == _read(os.path.join(copy, name)), name

    def manifest(root):
        with open(os.path.join(root, "dataset.json")) as handle:
            data = json.load(handle)
        inputs, labels = data["options"].pop("inputs"), data["options"].pop("labels")
        source = data["labels"].pop("source")
        return data, inputs, labels, source

    local_m, local_inputs, local_labels, local_source = manifest(local)
    gs_m, gs_inputs, gs_labels, gs_source = manifest(copy)
    gs_archive = converted["gs_out"].rsplit("/", 2)[0] + "/archive"
    # locations recorded as scheme, bucket and a keyed hash (docs/CONVERTING.md, "Patient safety")
    assert gs_inputs == [recorded_location(gs_archive, TEST_SALT)]
    assert gs_inputs[0].startswith(gs_archive.split("/archive")[0] + "/<hmac:")
    assert gs_labels == gs_source == recorded_location(converted["gs_labels"], TEST_SALT)
    assert local_inputs == [recorded_location(converted["archive"], TEST_SALT)]
    assert local_labels == local_source == recorded_location(converted["local_labels"], TEST_SALT)
    assert local_m == gs_m
    counts = gs_m["counts"]
    assert counts["unaccounted"] == 0
    assert {"missing_label", "no_pixel_data", "unsupported_format"} <= set(counts["skipped"])

    def errors(root, archive, labels):
        text = _read(os.path.join(root, "errors.jsonl")).decode()
        return text.replace(archive + "/", "ARCHIVE/").replace(labels, "LABELS").splitlines()

    gs_errors = errors(copy, gs_archive, converted["gs_labels"])
    assert gs_errors == errors(local, converted["archive"], converted["local_labels"])
    # inputs not written, and labels rows that label none of the written ones (rows of
    # skipped files: issue 25, item 6)
    assert all(json.loads(e)["uri"].startswith("ARCHIVE/")
               or (json.loads(e)["uri"].startswith("LABELS:") and json.loads(e)["status"] == "rejected")
               for e in gs_errors), gs_errors


def test_reader_reads_the_gs_result_back(converted):
    copy = converted["copy"]
    ids = {}
    for split in sorted(reader.info(copy)["splits"]):
        exact = reader.info(copy).layout(split).dtype
        for batch in reader.load(copy, split=split, batch_size=1, shuffle=False, output="dict",
                                 dtype=exact):
            ids[batch["id"][0].numpy().decode()] = batch["image"][0].numpy()
    with open(os.path.join(copy, "dataset.json")) as handle:
        assert len(ids) == json.load(handle)["counts"]["records"]
    png = os.path.join(converted["archive"], "png", "rgb", "img_0001.png")
    expected = np.asarray(Image.open(png))
    assert np.array_equal(ids[rid("png/rgb/img_0001.png")], expected)


def test_overwrite_on_gs_removes_stale_shards(converted, gcs_emulator):
    """--overwrite on gs://: the old manifest is withdrawn first; after the commit stale shards
    and a crashed run's temp objects under .incomplete/ (a prefix, not a directory, on GCS) go."""
    before = [n for n in gcs_emulator.list("datasets/out") if n.endswith(".tfrecord")]
    leftover = converted["work"] / "leftover"
    leftover.write_bytes(b"half a shard")
    gcs_emulator.upload_file(str(leftover), "datasets/out/.incomplete/train-00000-of-00009.tfrecord.0f0f")
    _convert(gcs_emulator.url("archive"), converted["gs_labels"], converted["gs_out"],
             overwrite=True, target_shard_mb=0.5, min_shard_mb=0.2, max_shard_mb=1.0)
    after = gcs_emulator.list("datasets/out")
    shards = [n for n in after if n.endswith(".tfrecord")]
    assert len(shards) == 2 and len(before) > 2     # one per split now
    assert not [n for n in after if "/.incomplete/" in n]
    copy = str(converted["work"] / "gs_copy_overwritten")
    gcs_emulator.download_tree("datasets/out", copy)
    with open(os.path.join(copy, "dataset.json")) as handle:
        manifest = json.load(handle)
    listed = {s["file"] for split in manifest["splits"].values() for s in split["shards"]}
    assert {n.rsplit("/", 1)[-1] for n in shards} == listed


def test_incremental_versions_on_gs(converted, gcs_emulator):
    """--incremental with a gs:// root: versions, LATEST, reused shards referenced across
    version prefixes, a killed run's leftovers under the new version's prefix removed."""
    from dcm2tfrecord.dataset.verify import verify_dataset
    root = gcs_emulator.url("versioned")
    options = dict(incremental=True, target_shard_mb=0.015, min_shard_mb=0.005, max_shard_mb=0.1)
    first = _convert(gcs_emulator.url("archive"), converted["gs_labels"], root, **options)
    assert first["version"]["name"] == "0001"
    extra = converted["work"] / "extra"
    write_png_archive(str(extra), 2, 40, 48, channels=1, seed=7)
    gcs_emulator.upload_tree(str(extra), "archive/png/extra")
    gcs_emulator.client().bucket(gcs_emulator.bucket).blob("archive/png/gray/img_0003.png").delete()
    junk = converted["work"] / "junk"
    junk.write_bytes(b"left by a killed run")
    gcs_emulator.upload_file(str(junk), "versioned/versions/0002/.incomplete/train-v0002-00000.x")
    gcs_emulator.upload_file(str(junk), "versioned/versions/0002/train-v0002-00007-of-00009.tfrecord")
    second = _convert(gcs_emulator.url("archive"), converted["gs_labels"], root, **options)
    version = second["version"]
    assert version["name"] == "0002" and version["base_version"] == "0001"
    assert version["reused_shards"] >= 1 and version["written_shards"] >= 1
    names = gcs_emulator.list("versioned")
    assert "versioned/versions/0002/train-v0002-00007-of-00009.tfrecord" not in names
    assert not [n for n in names if "/.incomplete/" in n]
    assert gcs_emulator.client().bucket(gcs_emulator.bucket).blob(
        "versioned/LATEST").download_as_bytes() == b"0002\n"
    report = verify_dataset(root)        # FileSystems, through the emulator: resolves LATEST
    assert report.ok, report.problems
    copy = str(converted["work"] / "versioned_copy")
    gcs_emulator.download_tree("versioned", copy)
    total = sum(reader.info(copy).num_records(s) for s in reader.info(copy).split_names)
    assert total == second["records"] == first["records"] - 1     # one gone; the two new lack labels
    assert second["skipped"]["missing_label"] == first["skipped"]["missing_label"] + 2
    assert sum(reader.info(copy, version=1).num_records(s)
               for s in reader.info(copy, version=1).split_names) == first["records"]


def test_copy_between_the_bucket_and_local_folders(converted, gcs_emulator):
    """dcm2tfrecord copy gs:// -> local -> gs://: the same bytes as the bucket's dataset at
    every step, each copy verifying, dataset.json last (nothing under .incomplete/ left)."""
    from dcm2tfrecord.dataset.transfer import copy_dataset
    from dcm2tfrecord.dataset.verify import verify_dataset
    # the bucket's dataset as it is now (earlier tests of this module convert into it again)
    now = str(converted["work"] / "gs_now")
    shutil.rmtree(now, ignore_errors=True)
    gcs_emulator.download_tree("datasets/out", now)
    data = [name for name in _files(now) if not any(part.startswith(".") for part in name.split("/"))]
    local = str(converted["work"] / "copied_from_gs")
    report = copy_dataset(converted["gs_out"], local)
    assert report.copied == len(data) and report.copied_bytes > 0
    assert {name: _read(os.path.join(local, name)) for name in _files(local)} == \
        {name: _read(os.path.join(now, name)) for name in data}
    back = gcs_emulator.url("copied/out")
    copy_dataset(local, back)
    assert verify_dataset(back).ok
    listed = gcs_emulator.list("copied/out")
    assert sorted(n[len("copied/out/"):] for n in listed) == _files(local)
    again = copy_dataset(local, back)                          # whole already: verified in place
    assert again.copied == 0 and again.kept == len(_files(local)) - 1
