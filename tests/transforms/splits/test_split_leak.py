"""A --split_column CSV that puts one patient in two splits: counted right, refused by default.

The count of splits per group is a CombineFn whose accumulator is a set merged by
union; a callable applied again to partial results (len(set(...)) of counts) says
every group is in one split. Each local runner mode combines differently, so each
is run end to end.
"""
import os

import pydicom
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import names
from dcm2tfrecord.pipeline import convert
from tests.support import pydicom_test_files
from tests.support import RUNNER_MODES, TEST_SALT

# patient -> the split of each of its slices (from the CSV): P0 in train and test,
# P1 in train and validation, P2 and P3 each in one split
SLICES = {0: ("train", "test", "train"), 1: ("validation", "train"), 2: ("test", "test"), 3: ("train",)}
MODES = RUNNER_MODES


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    return _leaky_archive(tmp_path_factory.mktemp("leak"), SLICES)


def _leaky_archive(root, slices):
    """One DICOM file per slice of ``slices`` (patient -> the CSV's split of each of its
    slices), and labels.csv giving each its split in column ``fold``."""
    template = pydicom.dcmread(os.path.join(pydicom_test_files(), "dicomdirtests", "77654033",
                                            "CT2", "17106"))
    os.makedirs(root / "in")
    rows = ["path,label,fold"]
    for p, folds in slices.items():
        for s, fold in enumerate(folds):
            ds = template.copy()
            ds.PatientID = f"LEAK{p}"
            ds.StudyInstanceUID = f"1.2.826.0.1.3680043.9.8.{p}"
            ds.SeriesInstanceUID = f"1.2.826.0.1.3680043.9.8.{p}.1"
            ds.SOPInstanceUID = f"1.2.826.0.1.3680043.9.8.{p}.1.{s}"
            ds.save_as(str(root / "in" / f"p{p}_{s}.dcm"))
            rows.append(f"p{p}_{s}.dcm,{p % 2},{fold}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")
    return root


def _argv(root, out, mode, *extra):
    return ["--input", str(root / "in"), "--output", str(out), "--labels", str(root / "labels.csv"),
            "--split_column", "fold", "--id_salt", TEST_SALT, "--progress", "none",
            "--target_shard_mb", "0.2", "--min_shard_mb", "0.05", "--max_shard_mb", "0.5",
            *MODES[mode], *extra]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_patient_in_two_splits_is_refused_under_every_runner_mode(leaky, tmp_path, mode, capsys):
    out = tmp_path / "out"
    assert convert.main(_argv(leaky, out, mode)) == 1
    err = capsys.readouterr().err
    assert "2 group(s) (split by patient for DICOM, record otherwise) appear in more than one split" in err
    assert "across splits test, train, validation" in err and "--allow_split_leak" in err
    assert not (out / names.MANIFEST_NAME).exists()
    assert (out / names.FAILED_RUN_NAME).exists()


def test_allow_split_leak_commits_and_records_the_leak(leaky, tmp_path, capsys):
    _commits_with_the_leak_recorded(_argv(leaky, tmp_path / "out", "multi_threading", "--allow_split_leak"),
                                    capsys, 2, ["test", "train", "validation"],
                                    {"test": 2, "train": 3, "validation": 1})


def _commits_with_the_leak_recorded(argv, capsys, leaking, splits, num_groups):
    """convert.main(argv) commits; dataset.json and the summary say ``leaking`` groups across
    ``splits``."""
    assert convert.main(argv) == 0
    groups = reader.info(argv[argv.index("--output") + 1])["groups"]
    assert groups["groups_in_several_splits"] == leaking
    assert groups["splits_sharing_groups"] == splits
    assert groups["num_groups"] == num_groups
    assert f"WARNING: {leaking} group(s) appear in more than one split" in capsys.readouterr().out


def test_a_csv_without_a_leak_commits(leaky, tmp_path):
    text = (leaky / "labels.csv").read_text()
    fixed = tmp_path / "src"
    os.makedirs(fixed)
    os.symlink(leaky / "in", fixed / "in")
    lines = [line if not line.startswith(("p0_", "p1_")) else line.rsplit(",", 1)[0] + ",train"
             for line in text.splitlines()]
    (fixed / "labels.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert convert.main(_argv(fixed, out, "in_memory")) == 0
    groups = reader.info(str(out))["groups"]
    assert groups["groups_in_several_splits"] == 0 and "splits_sharing_groups" not in groups
    assert groups["num_groups"] == {"test": 1, "train": 3}


def test_a_patient_in_three_splits_is_one_leaking_group(tmp_path, capsys):
    """One patient whose slices the CSV puts in train, validation and test is one group in
    several splits, not two (a planted bug counted each split beyond the first: issue 35,
    survivor 3)."""
    root = _leaky_archive(tmp_path, {0: ("train", "validation", "test"), 1: ("train",)})
    assert convert.main(_argv(root, tmp_path / "refused", "in_memory")) == 1
    err = capsys.readouterr().err
    assert "1 group(s) (split by patient for DICOM, record otherwise) appear in more than one split" in err
    assert "across splits test, train, validation" in err
    _commits_with_the_leak_recorded(_argv(root, tmp_path / "out", "in_memory", "--allow_split_leak"),
                                    capsys, 1, ["test", "train", "validation"],
                                    {"test": 1, "train": 2, "validation": 1})


def test_a_volume_slice_the_csv_gives_another_split_is_a_leak_not_an_unmatched_row(tmp_path, capsys):
    """--unit series --split_column: a volume takes its first slice's row; a row giving another
    of its slices another split is a group in two splits, counted and refused as for files,
    and no row of the volume's slices is unmatched_label_row (issue 35, item 11)."""
    import json
    from tests.support import series_builders
    series = series_builders.regular(str(tmp_path / "in"), 4, 2.5)
    rel = [os.path.relpath(path, tmp_path / "in") for path in series.paths]

    def csv(folds):
        (tmp_path / "labels.csv").write_text(
            "path,label,fold\n" + "".join(f"{r},1,{f}\n" for r, f in zip(rel, folds)))
    # the middle slices are never a volume's first, whichever way it is stacked
    csv(["train", "train", "test", "train"])
    refused = tmp_path / "refused"
    assert convert.main(_argv(tmp_path, refused, "in_memory", "--unit", "series")) == 1
    err = capsys.readouterr().err
    assert "1 group(s) (split by patient for DICOM, record otherwise) appear in more than one split" in err
    assert "across splits test, train" in err
    report = json.loads((refused / names.FAILED_RUN_NAME).read_text())
    assert report["counts"]["label_rows_rejected"] == {}
    out = tmp_path / "out"     # the volume is in train only: one group in train
    _commits_with_the_leak_recorded(_argv(tmp_path, out, "in_memory", "--unit", "series",
                                          "--allow_split_leak"), capsys, 1, ["test", "train"], {"train": 1})
    info = reader.info(str(out))
    assert info["counts"]["written"] == 4 and info["counts"]["label_rows_rejected"] == {}
    # every slice's row agreeing: no leak, and still no row unmatched
    csv(["train"] * 4)
    agreed = tmp_path / "agreed"
    assert convert.main(_argv(tmp_path, agreed, "in_memory", "--unit", "series")) == 0
    info = reader.info(str(agreed))
    assert info["groups"]["groups_in_several_splits"] == 0
    assert info["counts"]["label_rows_rejected"] == {} and info["counts"]["written"] == 4
