"""--split_by: each group kept in one split, at the level asked, with the documented fallback.

The archive holds patients with several studies, each with several series,
each with several slices; then patient-less studies (PatientID removed),
study-less series (PatientID and StudyInstanceUID removed) and bare files
(no PatientID, study or series). docs/CONVERTING.md (`--split_by`): "a DICOM without
the identifier falls back to the next finer one" — patient -> study -> series -> record.

For each --split_by value the test reads every record back with its split
and its hashed identifiers (``dicom/*_hash``), and checks that every group —
the first identifier present at the asked level or finer, else the record —
lies in one split, that dataset.json counts exactly those groups, and that
the next coarser level does spread over both splits (so a coarser grouping
than asked would fail the test, and a finer one fails the one-split check).
"""
from __future__ import annotations

import os

import numpy as np
import pydicom
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support import pydicom_test_files
from tests.support import run_convert

LEVELS = ("patient", "study", "series")
HASH_OF = {"patient": "dicom/patient_id_hash", "study": "dicom/study_uid_hash",
           "series": "dicom/series_uid_hash"}
KEYWORD_OF = {"patient": "PatientID", "study": "StudyInstanceUID", "series": "SeriesInstanceUID"}
SMALL = dict(target_shard_mb=0.05, min_shard_mb=0.01, max_shard_mb=1, splits="train=0.5,test=0.5")


def _slice(template, path: str, ids: dict, n: int) -> None:
    ds = template.copy()
    ds.Rows = ds.Columns = 8
    ds.PixelData = np.full((8, 8), n, dtype=np.int16).tobytes()
    ds.SOPInstanceUID = f"1.2.826.0.1.3680043.9.7772.{n}"
    for level, keyword in KEYWORD_OF.items():
        if ids.get(level):
            setattr(ds, keyword, ids[level])
        elif keyword in ds:
            delattr(ds, keyword)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ds.save_as(path)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """6 patients x 2 studies x 2 series x 2 slices; 3 patient-less studies; 3 study-less series; 6 bare."""
    root = str(tmp_path_factory.mktemp("split_by") / "archive")
    template = pydicom.dcmread(os.path.join(pydicom_test_files(), "CT_small.dcm"))
    uid = "1.2.826.0.1.3680043.9.7773"
    n = 0

    def tree(prefix: str, ids: dict, levels: list[str], fanout: int = 2):
        nonlocal n
        if not levels:
            for k in range(fanout):
                n += 1
                _slice(template, os.path.join(root, prefix, f"{k}.dcm"), ids, n)
            return
        for k in range(fanout if ids else 3):
            value = f"{uid}.{levels[0]}.{prefix.replace('/', '.')}{k}" if levels[0] != "patient" \
                else f"PAT{k:03d}"
            tree(f"{prefix}{levels[0]}{k}/", {**ids, levels[0]: value}, levels[1:])

    for p in range(6):
        tree(f"p{p}/", {"patient": f"PAT{p:03d}"}, ["study", "series"])
    tree("anonymous/", {}, ["study", "series"])        # no PatientID
    tree("no_study/", {}, ["series"])                   # no PatientID, no StudyInstanceUID
    for k in range(6):                                  # no identifier at all
        n += 1
        _slice(template, os.path.join(root, "bare", f"{k}.dcm"), {}, n)
    return root


def _records(dataset_dir: str) -> list[dict]:
    meta = reader.info(dataset_dir)
    out = []
    for split in meta.split_names:
        for raw in tf.data.TFRecordDataset(meta.shard_paths(split)):
            feature = tf.train.Example.FromString(raw.numpy()).features.feature
            row = {level: feature[key].bytes_list.value[0].decode() for level, key in HASH_OF.items()}
            row.update(split=split, id=feature["id"].bytes_list.value[0].decode())
            out.append(row)
    return out


def _group(row: dict, split_by: str) -> str:
    """The documented group: the first identifier present at split_by or finer, else the record."""
    levels = LEVELS[LEVELS.index(split_by):] if split_by in LEVELS else ()
    return next((f"{level}:{row[level]}" for level in levels if row[level]), f"record:{row['id']}")


def _splits_of(rows: list[dict], key) -> dict:
    found: dict = {}
    for row in rows:
        found.setdefault(key(row), set()).add(row["split"])
    return found


@pytest.mark.parametrize("split_by", ["patient", "study", "series", "record"])
def test_each_group_lies_in_one_split_and_the_next_coarser_level_does_not(archive, tmp_path, split_by):
    out = str(tmp_path / "out")
    run_convert(archive, out, split_by=split_by, **SMALL)
    manifest = reader.info(out)
    rows = _records(out)
    assert len(rows) == 6 * 8 + 3 * 4 + 3 * 2 + 6
    assert {row["split"] for row in rows} == {"train", "test"}
    groups = _splits_of(rows, lambda row: _group(row, split_by))
    assert {g: s for g, s in groups.items() if len(s) > 1} == {}
    assert manifest["groups"]["groups_in_several_splits"] == 0
    counted = {split: sum(1 for s in groups.values() if s == {split}) for split in ("train", "test")}
    assert manifest["groups"]["num_groups"] == counted
    # every fallback level is present in this archive, and grouped as documented
    kinds = {g.split(":")[0] for g in groups}
    assert kinds == {"patient": {"patient", "study", "series", "record"}, "study": {"study", "series", "record"},
                     "series": {"series", "record"}, "record": {"record"}}[split_by]
    if split_by == "patient":   # several studies per patient: grouping by study would not do
        studies = _splits_of([r for r in rows if r["patient"]], lambda row: row["patient"])
        assert all(len({r["study"] for r in rows if r["patient"] == p}) == 2 for p in studies)
    else:                       # the next coarser level spreads: the grouping is not coarser than asked
        coarser = LEVELS[LEVELS.index(split_by) - 1] if split_by in LEVELS else "series"
        spread = _splits_of([r for r in rows if r[coarser]], lambda row: row[coarser])
        assert any(len(s) > 1 for s in spread.values()), f"no {coarser} spans two splits"
