"""``verify`` checks the training view dataset.json's options record (dataset/verify_view.py): with
``--intensity zscore`` one mean and std per channel and a float32 image, with ``--crop`` a box
inside the source's shape, with ``--spacing X,Y,Z`` the target spacing (a slice record's
in-plane only). A dataset converted with all three verifies clean; one record altered (written
back through tests/support/shard_edits.py) fails naming its shard and record, and the fix."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.dataset import features as record_format
from dcm2tfrecord.dataset.example import decode_example, encode_example
from dcm2tfrecord.dataset.features import AFFINE, CROP_BOX, DTYPE, INTENSITY_MEAN, INTENSITY_STD, ORIGINAL_SHAPE
from dcm2tfrecord.dataset.manifest import Manifest
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.dataset.verify_view import ViewRule, check_view
from dcm2tfrecord.pipeline import cli
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.images import intensity
from tests.support import mask_datasets as md
from tests.support import run_convert
from tests.support.nifti_tasks import PATTERN, class_map
from tests.support.preprocessed import CLASS_MAP_YAML, OPTIONS, msd_with_background
from tests.support.shard_edits import edit_record, manifest

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

VIEW = dict(spacing="1.2,1.1,2.0", crop="foreground", intensity="zscore")


def test_verify_spells_the_features_as_their_writers_do():
    """dataset/ imports nothing of transforms/: the names verify checks are the writers'."""
    assert (record_format.INTENSITY_MEAN, record_format.INTENSITY_STD) == (intensity.MEAN, intensity.STD)
    for name in ("AFFINE", "PIXEL_SPACING", "SLICE_SPACING", "ORIGINAL_SHAPE", "CROP_BOX"):
        assert getattr(patient_space, name) == getattr(record_format, name), name


@pytest.fixture(scope="module")
def view_dataset(tmp_path_factory) -> str:
    """Three NIfTI volumes with label maps (one all zero, kept whole), converted with the three options."""
    root = tmp_path_factory.mktemp("verify_view")
    msd_with_background(root / "msd")
    out = str(root / "out")
    summary = run_convert(root / "msd", out, class_map=class_map(root), mask_pattern=PATTERN, **OPTIONS, **VIEW)
    assert summary["records"] == 3 and summary["failed"] == {}, summary
    return out


def _copy(src: str, tmp_path) -> str:
    import shutil
    dst = str(tmp_path / "copy")
    shutil.copytree(src, dst)
    return dst


def test_a_dataset_of_the_three_options_verifies_clean(view_dataset, capsys):
    assert verify_dataset(view_dataset).problems == []
    assert cli.main(["verify", view_dataset]) == 0
    capsys.readouterr()


def test_slice_records_are_held_to_the_spacing_in_plane_only(tmp_path):
    """--unit file: each slice resampled in-plane, its slice step the source's (not the target's 9 mm)."""
    md.seg_archive(tmp_path, seed=2, depth=3)
    (tmp_path / "classes.yaml").write_text(CLASS_MAP_YAML)
    out = str(tmp_path / "out")
    summary = run_convert(tmp_path / "in", out, **{**OPTIONS, "unit": "file", "spacing": "0.5,0.8,9",
                                                   "class_map": str(tmp_path / "classes.yaml")})
    assert summary["records"] == 3, summary
    assert verify_dataset(out).problems == []

    def respaced_in_plane(features):
        features["dicom/pixel_spacing"] = np.asarray([0.8, 0.6], np.float32)       # row, column
    edit_record(out, 1, respaced_in_plane)
    [problem] = verify_dataset(out).problems
    assert ": record 1 at byte " in str(problem), problem
    assert "spacing from dicom/pixel_spacing: column 0.6 mm (target 0.5), not --spacing 0.5,0.8,9 within " \
           "0.0001 mm; convert the inputs again with --spacing 0.5,0.8,9" in str(problem), problem


def _drop_std(features):
    del features[INTENSITY_STD]


def _two_means(features):
    features[INTENSITY_MEAN] = np.asarray([1.0, 2.0], np.float32)


def _int32(features):
    features[DTYPE] = [b"int32"]           # as many bytes a voxel: only the view's rule tells


def _box_past_the_shape(features):
    shape = features[ORIGINAL_SHAPE]
    features[CROP_BOX] = np.asarray([0, shape[0] + 1, 0, shape[1], 0, shape[2]], np.int64)


def _empty_box(features):
    box = features[CROP_BOX].copy()
    box[3] = box[2]
    features[CROP_BOX] = box


def _wider_columns(features):
    matrix = features[AFFINE].reshape(4, 4).copy()
    matrix[:3, 2] *= 1.01
    features[AFFINE] = matrix.ravel()


@pytest.mark.parametrize("edit, expected", [
    (_drop_std, "feature 'intensity/std' is missing: --intensity zscore keeps one per channel; "
                "convert the inputs again with --intensity zscore, as dataset.json records"),
    (_two_means, "feature 'intensity/mean' holds 2 float value(s), --intensity zscore keeps one float per "
                 "channel (1); convert the inputs again with --intensity zscore"),
    (_int32, "image dtype int32, --intensity zscore writes float32; convert the inputs again with "
             "--intensity zscore"),
    (_box_past_the_shape, "is not a box [k0, k1, j0, j1, i0, i1] inside dicom/original_shape"),
    (_empty_box, "(0 <= start < end <= size on each axis); convert the inputs again with --crop foreground"),
    (_wider_columns, "spacing from dicom/affine's column lengths: column 1.212 mm (target 1.2), not --spacing "
                     "1.2,1.1,2.0 within 0.0001 mm; convert the inputs again with --spacing 1.2,1.1,2.0"),
], ids=["intensity_std_missing", "a_mean_per_channel", "float32", "crop_box_outside", "crop_box_empty",
        "spacing"])
def test_an_altered_record_fails_naming_the_record_and_the_fix(view_dataset, tmp_path, capsys, edit, expected):
    path = _copy(view_dataset, tmp_path)
    edit_record(path, 1, edit)
    shard = manifest(path)["splits"]["train"]["shards"][0]["file"]
    problems = [str(p) for p in verify_dataset(path).problems]
    assert len(problems) == 1, problems            # the view's own line, not the schema's too
    assert problems[0].startswith(f"{shard}: record 1 at byte ") and expected in problems[0], problems
    assert cli.main(["verify", path]) == 1
    assert expected in capsys.readouterr().out


def _manifest(options: dict, **top) -> Manifest:
    return Manifest.from_json({"format_version": 1, "splits": {}, "features": {}, "options": options, **top})


@pytest.mark.parametrize("options, rule", [
    ({}, None),
    ({"crop": "off", "intensity": "none", "spacing": None}, None),
    ({"spacing": "auto"}, None),                       # chosen by the job, no auto_spacing: nothing to hold to
    ({"spacing": "1,2,3"}, ViewRule(spacing="1,2,3", target=(3.0, 2.0, 1.0))),
    ({"crop": "nonzero", "intensity": "zscore"}, ViewRule(intensity="zscore", crop="nonzero")),
])
def test_the_rule_comes_from_dataset_json_options(options, rule):
    assert ViewRule.of(_manifest(options)) == rule


def test_spacing_auto_is_held_to_the_target_dataset_json_records():
    """--spacing auto: the target the job chose (auto_spacing's target_mm, X,Y,Z); none without one."""
    chosen = _manifest({"spacing": "auto"}, auto_spacing={"target_mm": [0.7, 0.9, 2.5], "rule": "r"})
    assert ViewRule.of(chosen) == ViewRule(spacing="auto", target=(2.5, 0.9, 0.7))
    assert ViewRule.of(_manifest({"spacing": "auto"}, auto_spacing="not an object")) is None
    assert ViewRule.of(_manifest({"spacing": "auto"}, auto_spacing={"target_mm": None})) is None


def test_a_spacing_auto_record_off_the_chosen_target_fails(tmp_path):
    """A --spacing auto conversion verifies clean; a record whose pixel spacing is not the target
    dataset.json's auto_spacing records fails, naming it and the fix."""
    md.seg_archive(tmp_path, seed=2, depth=3)
    (tmp_path / "classes.yaml").write_text(CLASS_MAP_YAML)
    out = str(tmp_path / "out")
    summary = run_convert(tmp_path / "in", out, **{**OPTIONS, "spacing": "auto",
                                                   "class_map": str(tmp_path / "classes.yaml")})
    assert summary["records"] == 1, summary
    assert verify_dataset(out).problems == []

    def off_target(features):
        features["dicom/pixel_spacing"] = features["dicom/pixel_spacing"] * np.float32(1.01)
    edit_record(out, 0, off_target)
    [problem] = verify_dataset(out).problems
    assert "spacing from dicom/pixel_spacing" in str(problem) and "not --spacing auto within 0.0001 mm; " \
           "convert the inputs again with --spacing auto" in str(problem), problem


def test_a_record_without_any_spacing_fails_the_spacing():
    record = decode_example(encode_example({"depth": 3, "channels": 1, "dtype": "int16"}))
    [problem] = check_view(record, ViewRule(spacing="1,1,1", target=(1.0, 1.0, 1.0)))
    assert problem.startswith("the record holds no spacing (dicom/affine, dicom/pixel_spacing)"), problem


def test_a_ct_record_holds_dataset_json_fingerprint_or_fails_naming_it():
    stats = {"percentile_00_5": [-990.5], "percentile_99_5": [2950.25], "mean": [11.125], "std": [301.5]}
    rule = ViewRule.of(Manifest.from_json({"format_version": 1, "splits": {}, "features": {},
                                           "options": {"intensity": "ct"}, "fingerprint": stats}))
    assert rule == ViewRule(intensity="ct", fingerprint=stats)
    base = {"depth": 1, "channels": 1, "dtype": "float32", "intensity/clip_low": np.float32([-990.5]),
            "intensity/clip_high": np.float32([2950.25]), "intensity/mean": np.float32([11.125]),
            "intensity/std": np.float32([301.5])}
    assert check_view(decode_example(encode_example(base)), rule) == []
    other = decode_example(encode_example({**base, "intensity/clip_high": np.float32([3000.0])}))
    [problem] = check_view(other, rule)
    assert problem.startswith("feature 'intensity/clip_high' is [3000.0], dataset.json's fingerprint "
                              "percentile_99_5 [2950.25]: the record was normalised with another fingerprint"), problem
    missing = decode_example(encode_example({k: v for k, v in base.items() if k != "intensity/clip_low"}))
    [problem] = check_view(missing, rule)
    assert "'intensity/clip_low' is missing: --intensity ct keeps one per channel" in problem
    no_fingerprint = ViewRule.of(Manifest.from_json({"format_version": 1, "splits": {}, "features": {},
                                                     "options": {"intensity": "ct"}}))
    [problem] = check_view(decode_example(encode_example(base)), no_fingerprint)
    assert problem.startswith("dataset.json has no fingerprint"), problem
