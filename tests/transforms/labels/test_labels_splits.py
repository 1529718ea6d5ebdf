"""Labels joined from CSV or folders, leak-free patient splits, shard policy per split."""
import json
import os

import pydicom
import pytest
import tensorflow as tf
from pydicom.uid import generate_uid

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline.options.usage import UsageError
from tests.support import pydicom_test_files
from tests.support import run_convert, write_png_archive

SMALL = dict(target_shard_mb=0.2, min_shard_mb=0.05, max_shard_mb=0.5)


def _labels_by_id(dataset_dir, split="train"):
    out = {}
    for batch in reader.load(dataset_dir, split=split, batch_size=1, shuffle=False, output="dict"):
        out[batch["id"][0].numpy().decode()] = batch["label"][0].numpy()
    return out


def _write_ct_patients(root, patients, slices=3, start=0):
    """Copies of CT_small.dcm re-identified as ``patients`` synthetic patients."""
    template = pydicom.dcmread(os.path.join(pydicom_test_files(), "CT_small.dcm"))
    os.makedirs(root, exist_ok=True)
    for p in range(start, start + patients):
        study = generate_uid(entropy_srcs=[f"study{p}"])
        for s in range(slices):
            ds = template.copy()
            ds.PatientID = f"PAT{p:04d}"
            ds.PatientName = f"Doe^Patient{p}"
            ds.StudyInstanceUID = study
            ds.SeriesInstanceUID = generate_uid(entropy_srcs=[f"series{p}"])
            ds.SOPInstanceUID = generate_uid(entropy_srcs=[f"sop{p}-{s}"])
            ds.save_as(os.path.join(root, f"p{p:04d}_s{s}.dcm"))


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels") / "archive"
    write_png_archive(root / "cats", count=4, height=8, width=8, seed=1)
    write_png_archive(root / "dogs", count=3, height=8, width=8, seed=2)
    write_png_archive(root / "birds", count=2, height=8, width=8, seed=3)
    return root


def _write_csv(path, header, rows):
    with open(path, "w") as handle:
        handle.write(",".join(header) + "\n")
        for row in rows:
            handle.write(",".join(row) + "\n")
    return str(path)


def test_string_labels_map_to_sorted_indices_and_missing_are_skipped(images, tmp_path):
    from tests.support import rid
    rows = [(f"cats/img_{i:04d}.png", "cat") for i in range(4)] + \
           [(f"dogs/img_{i:04d}.png", "dog") for i in range(3)] + [("birds/img_0000.png", "bird")]
    csv = _write_csv(tmp_path / "labels.csv", ["path", "label"], rows)
    run_convert(images, tmp_path / "out", labels=csv, **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    assert manifest["labels"]["class_names"] == ["bird", "cat", "dog"]
    assert manifest["counts"]["skipped"] == {"missing_label": 1}
    assert manifest["splits"]["train"]["label_counts"] == {"0": 1, "1": 4, "2": 3}
    labels = _labels_by_id(str(tmp_path / "out"))
    assert labels[rid("dogs/img_0002.png")] == 2
    assert labels[rid("cats/img_0001.png")] == 1
    raw = b"".join(open(tmp_path / "out" / s["file"], "rb").read()
                   for s in manifest["splits"]["train"]["shards"])
    assert b"cats/img_0001.png" not in raw


def test_int_float_and_multi_label_columns(images, tmp_path):
    paths = [f"cats/img_{i:04d}.png" for i in range(4)] + [f"dogs/img_{i:04d}.png" for i in range(3)] \
        + [f"birds/img_{i:04d}.png" for i in range(2)]
    csv = _write_csv(tmp_path / "l.csv", ["path", "grade", "score", "tags"],
                     [(p, str(i * 3), f"{i / 4:.2f}", "a|c" if i % 2 else "b") for i, p in enumerate(paths)])
    run_convert(images, tmp_path / "int", labels=csv, label_column="grade", **SMALL)
    ints = _labels_by_id(str(tmp_path / "int"))
    assert sorted(int(v) for v in ints.values()) == [i * 3 for i in range(9)]
    run_convert(images, tmp_path / "float", labels=csv, label_column="score", **SMALL)
    assert reader.info(str(tmp_path / "float"))["features"]["label"]["dtype"] == "float"
    floats = _labels_by_id(str(tmp_path / "float"))
    assert sorted(round(float(v), 2) for v in floats.values()) == [round(i / 4, 2) for i in range(9)]
    run_convert(images, tmp_path / "multi", labels=csv, label_column="tags", multi_label=True, **SMALL)
    manifest = reader.info(str(tmp_path / "multi"))
    assert manifest["labels"]["class_names"] == ["a", "b", "c"]
    vectors = sorted(tuple(v.tolist()) for v in _labels_by_id(str(tmp_path / "multi")).values())
    assert vectors == sorted([(1, 0, 1) if i % 2 else (0, 1, 0) for i in range(9)])


def test_labels_from_dirs_and_missing_label_modes(images, tmp_path):
    run_convert(images, tmp_path / "dirs", labels_from_dirs=True, **SMALL)
    manifest = reader.info(str(tmp_path / "dirs"))
    assert manifest["labels"]["class_names"] == ["birds", "cats", "dogs"]
    assert manifest["splits"]["train"]["label_counts"] == {"0": 2, "1": 4, "2": 3}
    csv = _write_csv(tmp_path / "few.csv", ["path", "label"], [("cats/img_0000.png", "cat")])
    run_convert(images, tmp_path / "unl", labels=csv, missing_label="unlabeled", **SMALL)
    values = sorted(int(v) for v in _labels_by_id(str(tmp_path / "unl")).values())
    assert values == [-1] * 8 + [0]
    run_convert(images, tmp_path / "err", labels=csv, missing_label="error", **SMALL)
    assert reader.info(str(tmp_path / "err"))["counts"]["failed"] == {"missing_label": 8}


def test_malformed_label_rows_are_reported_by_line(images, tmp_path):
    csv = tmp_path / "bad.csv"
    csv.write_text("path,label\ncats/img_0000.png,cat\ncats/img_0001.png\n,dog\n"
                   "cats/img_0002.png,cat,extra\ncats/img_0000.png,dog\n")
    run_convert(images, tmp_path / "out", labels=str(csv), **SMALL)
    errors = [json.loads(line) for line in open(tmp_path / "out" / "errors.jsonl")]
    bad = sorted(e["uri"].rsplit(":", 1)[1] for e in errors if e["reason"] == "malformed_label_row")
    assert bad == ["3", "4", "5", "6"]
    with pytest.raises(UsageError, match="--label_column"):
        run_convert(images, tmp_path / "o2", labels=str(csv), label_column="nope", **SMALL)
    assert not (tmp_path / "o2").exists()


@pytest.fixture(scope="module")
def patients(tmp_path_factory):
    root = tmp_path_factory.mktemp("patients") / "archive"
    _write_ct_patients(root, patients=40, slices=3)
    return root


def test_no_patient_in_two_splits_and_old_patients_never_move(patients, tmp_path):
    splits = "train=0.6,validation=0.2,test=0.2"
    run_convert(patients, tmp_path / "out", splits=splits, **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    assert set(manifest["splits"]) == {"train", "validation", "test"}
    assert manifest["groups"]["groups_in_several_splits"] == 0
    assert sum(manifest["groups"]["num_groups"].values()) == 40
    assert sum(s["num_records"] for s in manifest["splits"].values()) == 120
    for split in manifest["splits"].values():
        assert split["num_records"] == 3 * split["num_groups"]
    assert 12 <= manifest["splits"]["train"]["num_groups"] <= 36

    def patient_of_split(dataset_dir):
        found = {}
        for name, entry in reader.info(dataset_dir)["splits"].items():
            for shard in entry["shards"]:
                for raw in tf.data.TFRecordDataset(os.path.join(dataset_dir, shard["file"])):
                    found.setdefault(name, set()).add(
                        tf.train.Example.FromString(raw.numpy()).features.feature["id"].bytes_list.value[0])
        return found
    before = patient_of_split(str(tmp_path / "out"))
    _write_ct_patients(tmp_path / "more", patients=20, slices=3, start=100)
    run_convert([patients, tmp_path / "more"], tmp_path / "out2", splits=splits, **SMALL)
    after = patient_of_split(str(tmp_path / "out2"))
    # record ids are per relative path; the old archive's records kept their split
    for name, ids in before.items():
        assert ids <= after[name]


def test_patient_labels_and_split_column(patients, tmp_path):
    rows = [(f"PAT{p:04d}", "sick" if p % 3 == 0 else "well", "test" if p < 10 else "train")
            for p in range(40)]
    csv = _write_csv(tmp_path / "patients.csv", ["patient_id", "diagnosis", "fold"], rows)
    run_convert(patients, tmp_path / "out", labels=csv, label_key="patient_id",
                label_column="diagnosis", split_column="fold", **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    assert manifest["splits"]["test"]["num_records"] == 30
    assert manifest["splits"]["train"]["num_records"] == 90
    assert manifest["labels"]["class_names"] == ["sick", "well"]
    assert manifest["splits"]["test"]["label_counts"] == {"0": 12, "1": 18}
    raw = open(tmp_path / "out" / manifest["splits"]["test"]["shards"][0]["file"], "rb").read()
    assert b"PAT0001" not in raw and b"Doe^Patient1" not in raw


def test_min_shards_gzip_and_dali_index(tmp_path):
    write_png_archive(tmp_path / "in", count=60, height=64, width=64, channels=3)   # ~0.7 MB
    run_convert(tmp_path / "in", tmp_path / "out", target_shard_mb=1, min_shard_mb=0.05,
                max_shard_mb=2, min_shards=6, compression="gzip")
    manifest = reader.info(str(tmp_path / "out"))
    shards = manifest["splits"]["train"]["shards"]
    assert len(shards) == 6 and manifest["min_shards"]["train"]["honoured"]
    assert all(s["file"].endswith(".tfrecord.gz") for s in shards)
    total = 0
    for shard in shards:
        path = str(tmp_path / "out" / shard["file"])
        records = list(tf.data.TFRecordDataset(path, compression_type="GZIP"))
        assert len(records) == shard["num_records"]
        lines = open(path + ".idx").read().split("\n")[:-1]
        assert len(lines) == len(records)
        for line, record in zip(lines, records):
            offset, size = map(int, line.split())
            assert size == len(record.numpy()) + 16
            total += 1
    assert total == 60
    images, _ = next(iter(reader.load(str(tmp_path / "out"), batch_size=60)))
    assert images.shape == (60, 64, 64, 3)
    run_convert(tmp_path / "in", tmp_path / "few", target_shard_mb=1, min_shard_mb=0.3,
                max_shard_mb=2, min_shards=50)
    few = reader.info(str(tmp_path / "few"))
    assert few["min_shards"]["train"] == {"requested": 50, "honoured": False}
    assert all(s["num_bytes"] >= 0.3 * (1 << 20) for s in few["splits"]["train"]["shards"])


def test_uncompressed_index_offsets_point_at_records(tmp_path):
    write_png_archive(tmp_path / "in", count=5, height=16, width=16)
    run_convert(tmp_path / "in", tmp_path / "out", **SMALL)
    shard = reader.info(str(tmp_path / "out"))["splits"]["train"]["shards"][0]
    data = open(tmp_path / "out" / shard["file"], "rb").read()
    import struct
    for line in open(tmp_path / "out" / shard["index_file"]):
        offset, size = map(int, line.split())
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        assert length + 16 == size


def test_record_too_large_fails_instead_of_an_oversized_shard(tmp_path):
    write_png_archive(tmp_path / "in", count=3, height=16, width=16)
    write_png_archive(tmp_path / "in" / "big", count=1, height=700, width=700, channels=3)
    run_convert(tmp_path / "in", tmp_path / "out", target_shard_mb=0.5, min_shard_mb=0.1, max_shard_mb=1)
    manifest = reader.info(str(tmp_path / "out"))
    assert manifest["counts"]["failed"] == {"record_too_large": 1}
    assert manifest["counts"]["written"] == 3


@pytest.mark.parametrize("label_key,column", [("sop_instance_uid", "SOPInstanceUID"),
                                              ("series_instance_uid", "SeriesInstanceUID"),
                                              ("study_instance_uid", "StudyInstanceUID")])
def test_labels_by_each_dicom_key(patients, tmp_path, label_key, column):
    from tests.support import rid
    rows, expected = [], {}
    for name in sorted(os.listdir(patients)):
        ds = pydicom.dcmread(os.path.join(patients, name), stop_before_pixels=True)
        value = str(getattr(ds, column))
        label = str(int(ds.PatientID[3:]) % 4)
        rows.append((value, label))
        expected[rid(name)] = int(label)
    csv = _write_csv(tmp_path / "keys.csv", [label_key, "label"], sorted(set(rows)))
    run_convert(patients, tmp_path / "out", labels=csv, label_key=label_key, **SMALL)
    got = {k: int(v) for k, v in _labels_by_id(str(tmp_path / "out")).items()}
    assert got == expected


def _write_tiny_patients(root, patient_ids, slices_of):
    template = pydicom.dcmread(os.path.join(pydicom_test_files(), "dicomdirtests", "77654033",
                                            "CT2", "17106"))
    os.makedirs(root, exist_ok=True)
    paths = {}
    for p in patient_ids:
        for s in range(slices_of(p)):
            ds = template.copy()
            ds.PatientID = f"P{p:05d}"
            ds.StudyInstanceUID = f"1.2.826.0.1.3680043.9.7.{p}"
            ds.SeriesInstanceUID = f"1.2.826.0.1.3680043.9.7.{p}.1"
            ds.SOPInstanceUID = f"1.2.826.0.1.3680043.9.7.{p}.1.{s}"
            rel = f"p{p:05d}_{s}.dcm"
            ds.save_as(os.path.join(root, rel))
            paths[rel] = p
    return paths


def _split_of_records(dataset_dir):
    from collections import defaultdict
    found = defaultdict(set)
    for name, entry in reader.info(dataset_dir)["splits"].items():
        files = [os.path.join(dataset_dir, s["file"]) for s in entry["shards"]]
        spec = {"id": tf.io.FixedLenFeature([], tf.string)}
        for batch in tf.data.TFRecordDataset(files).batch(512).map(lambda x: tf.io.parse_example(x, spec)):
            found[name].update(v.decode() for v in batch["id"].numpy())
    return {rid: name for name, ids in found.items() for rid in ids}


def test_two_thousand_patients_ratios_no_leak_and_stable_after_growth(tmp_path):
    from tests.support import rid
    slices = lambda p: 3 if p % 10 == 0 else 1                                 # noqa: E731
    paths = _write_tiny_patients(tmp_path / "a", range(2000), slices)
    asked = {"train": 0.7, "validation": 0.15, "test": 0.15}
    spec = ",".join(f"{k}={v}" for k, v in asked.items())
    run_convert(tmp_path / "a", tmp_path / "out1", splits=spec, **SMALL)
    first = _split_of_records(str(tmp_path / "out1"))
    patient_split = {}
    for rel, p in paths.items():
        split = first[rid(rel)]
        assert patient_split.setdefault(p, split) == split, f"patient {p} in two splits"
    for name, fraction in asked.items():
        achieved = sum(1 for s in patient_split.values() if s == name) / 2000
        assert abs(achieved - fraction) <= 0.02, (name, achieved)
    manifest = reader.info(str(tmp_path / "out1"))
    assert manifest["groups"]["groups_in_several_splits"] == 0
    assert manifest["groups"]["num_groups"] == {
        n: sum(1 for s in patient_split.values() if s == n) for n in asked}
    new = _write_tiny_patients(tmp_path / "b", range(2000, 2400), slices)
    run_convert([tmp_path / "a", tmp_path / "b"], tmp_path / "out2", splits=spec, **SMALL)
    second = _split_of_records(str(tmp_path / "out2"))
    assert len(second) == len(paths) + len(new)
    for rel, p in paths.items():
        assert second[rid(rel)] == patient_split[p]


def test_summary_says_when_min_shards_is_overridden(tmp_path):
    from dcm2tfrecord.pipeline.summary import format_summary
    write_png_archive(tmp_path / "in", count=20, height=64, width=64, channels=3)
    summary = run_convert(tmp_path / "in", tmp_path / "out", target_shard_mb=1, min_shard_mb=0.1,
                          max_shard_mb=2, min_shards=40)
    assert any("--min_shards 40 not honoured" in n for n in summary["notes"])
    assert "minimum size won" in format_summary(summary)
