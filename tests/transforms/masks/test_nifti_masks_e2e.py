"""Issue 33, items 1 and 2, end to end: NIfTI images labelled by their NIfTI masks, paired by
``--mask_pattern`` (the Medical Segmentation Decathlon's ``imagesTr``/``labelsTr`` layout) or by
a labels-CSV ``--mask_column``.

Real conversions (``run_convert``: Beam's local runner, in process) of volumes and label maps
nibabel writes (int16 images on an oblique affine, uint8 label maps of values 0-4 on the same
affine). Read back with ``reader.RandomAccess`` and ``reader.load(..., masks=True)``: the mask
must be the label map written, in the record's ``[k, j, i]`` order (``data.transpose(2, 1, 0)``),
its values mapped by the class map (1 -> kidney, 2 and 3 -> tumour, 4 -> no class: background).
"""
from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.transforms.images.geometry import placement
from tests.support import run_convert
from tests.support.processes import errors_of
from tests.support.nifti_tasks import (CLASS_MAP, CLASSES, OBLIQUE, PATTERN, SHAPES,  # noqa: F401
                                       class_map as _class_map, image as _image, labels as _labels,
                                       msd as _msd, save as _save)

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, keep_source_path=True, allow_empty=True)

LUT = np.array([0, 1, 2, 2, 0], np.uint8)          # value -> class index (4 maps to no class)


def _ours(data: np.ndarray) -> np.ndarray:
    """nibabel's [i, j, k(, t)] in the record's order [(t,) k, j, i]."""
    return data.transpose(*reversed(range(data.ndim)))


def _expected(labels: np.ndarray, layout: str) -> np.ndarray:
    classes = LUT[_ours(labels)]
    if layout == "label_map":
        return classes[..., None]
    return np.stack([classes == c for c in (1, 2)], axis=-1).astype(np.uint8)


def _convert(inputs, out, **options) -> tuple[dict, dict]:
    """(summary, {file name: [records]})."""
    summary = run_convert(inputs, out, **{**OPTIONS, **options})
    by_name: dict = {}
    if summary["records"]:
        access = reader.RandomAccess(str(out), "train")
        for n in range(len(access)):
            record = access[n]
            name = os.path.basename(bytes(record["source_path"]).decode())
            by_name.setdefault(name, []).append(record)
    return summary, by_name


def _mask(record: dict, channels: int) -> np.ndarray:
    mask = record["mask"]
    assert bytes(record["mask_dtype"]) == b"uint8" and int(record["mask_channels"]) == channels
    assert mask.dtype == np.uint8 and mask.shape[:3] == record["image"].shape[:3], (mask.shape, record["image"].shape)
    return mask


def _manifest(out) -> dict:
    with open(os.path.join(str(out), "dataset.json")) as handle:
        return json.load(handle)


def _errors(out) -> dict:
    """{(file name, reason): message}."""
    return {(os.path.basename(e["uri"]), e["reason"]): e["message"] for e in errors_of(out)}


# ---------------------------------------------------------------- 1. the MSD layout, both layouts


@pytest.fixture(scope="module")
def msd(tmp_path_factory):
    root = tmp_path_factory.mktemp("msd")
    return root, _msd(root / "Task01")


@pytest.mark.parametrize("layout", ["label_map", "binary"])
def test_msd_masks_are_the_label_maps_written(msd, tmp_path, layout):
    root, written = msd
    out = tmp_path / "out"
    summary, records = _convert(root / "Task01", out, class_map=_class_map(tmp_path), mask_pattern=PATTERN,
                                mask_layout=layout)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    assert summary["records"] == 3, summary                  # the label maps are no records of their own
    assert sorted(records) == [f"{case}_0000.nii.gz" for case in sorted(SHAPES)]
    for case, (image, labels) in written.items():
        [record] = records[f"{case}_0000.nii.gz"]
        np.testing.assert_array_equal(record["image"][..., 0], _ours(image))
        np.testing.assert_array_equal(_mask(record, 1 if layout == "label_map" else 2), _expected(labels, layout))
    manifest = _manifest(out)
    assert manifest["mask_classes"] == CLASSES
    assert manifest["options"]["mask_pattern"] == PATTERN
    assert manifest["counts"]["matched"] == 6 and manifest["counts"]["written"] == 6, manifest["counts"]
    assert verify_dataset(str(out)).ok
    if layout == "label_map":                                 # through tf.data too
        by_size = {int(np.prod(_ours(image).shape)): labels for image, labels in written.values()}
        seen = 0
        for images, masks, _ in reader.load(str(out), "train", batch_size=1, masks=True, shuffle=False):
            expected = _expected(by_size[int(np.prod(images.shape[1:4]))], layout)
            np.testing.assert_array_equal(masks.numpy()[0], expected)
            seen += 1
        assert seen == 3


# ---------------------------------------------------------------- 2. missing masks, masks without images


@pytest.fixture(scope="module")
def gaps(tmp_path_factory):
    """case_3 has no label map; labelsTr/case_9 has no image; imagesTs/ holds an image the pattern does not name."""
    root = tmp_path_factory.mktemp("gaps")
    written = _msd(root / "Task02")
    os.remove(root / "Task02" / "labelsTr" / "case_3.nii.gz")
    _save(root / "Task02" / "labelsTr" / "case_9.nii.gz", _labels((4, 4, 4), 9))
    _save(root / "Task02" / "imagesTs" / "case_7_0000.nii.gz", _image((4, 5, 6), 7))
    return root, written


@pytest.mark.parametrize("missing_mask", ["skip", "empty", "error"])
def test_missing_masks_follow_missing_mask_and_an_orphan_mask_fails(gaps, tmp_path, missing_mask):
    root, written = gaps
    out = tmp_path / "out"
    summary, records = _convert(root / "Task02", out, class_map=_class_map(tmp_path), mask_pattern=PATTERN,
                                missing_mask=missing_mask)
    errors = _errors(out)
    assert "pairs with no image" in errors[("case_9.nii.gz", "mask_without_image")]
    missing = {name for name, reason in errors if reason == "missing_mask"}
    if missing_mask == "empty":
        assert summary["skipped"] == {} and summary["failed"] == {"mask_without_image": 1}, summary
        assert sorted(records) == ["case_1_0000.nii.gz", "case_2_0000.nii.gz", "case_3_0000.nii.gz",
                                   "case_7_0000.nii.gz"]
        for name in ("case_3_0000.nii.gz", "case_7_0000.nii.gz"):
            mask = _mask(records[name][0], 1)
            assert mask.shape == records[name][0]["image"].shape and not mask.any()
    else:
        status = "skipped" if missing_mask == "skip" else "failed"
        assert summary[status].get("missing_mask") == 2, summary
        assert missing == {"case_3_0000.nii.gz", "case_7_0000.nii.gz"}
        assert "names the mask labelsTr/case_3.nii.gz, which is not among" in \
            errors[("case_3_0000.nii.gz", "missing_mask")]
        assert sorted(records) == ["case_1_0000.nii.gz", "case_2_0000.nii.gz"]
    for case in ("case_1", "case_2"):
        np.testing.assert_array_equal(_mask(records[f"{case}_0000.nii.gz"][0], 1),
                                      _expected(written[case][1], "label_map"))
    assert _manifest(out)["counts"]["matched"] == 7


# ---------------------------------------------------------------- 3. masks that do not fit


def test_a_mask_off_the_grid_or_not_a_label_map_fails_naming_both_files(tmp_path):
    root = tmp_path / "Task03"
    written = _msd(root, {"good": (6, 5, 4), "shifted": (6, 5, 4), "smaller": (6, 5, 4), "fractional": (6, 5, 4),
                          "nudged": (6, 5, 4)})
    shifted = OBLIQUE.copy()
    shifted[:3, 3] += [0.0, 0.01, 0.0]                         # 10 um: beyond the 1 um tolerance
    _save(root / "labelsTr" / "shifted.nii.gz", written["shifted"][1], shifted)
    _save(root / "labelsTr" / "smaller.nii.gz", written["smaller"][1][:5])
    _save(root / "labelsTr" / "fractional.nii.gz", written["fractional"][1].astype(np.float32) / 2)
    nudged = OBLIQUE.copy()
    nudged[:3, 3] += 1e-5                                      # float32 noise: still the image's grid
    _save(root / "labelsTr" / "nudged.nii.gz", written["nudged"][1], nudged)
    out = tmp_path / "out"
    summary, records = _convert(root, out, class_map=_class_map(tmp_path), mask_pattern=PATTERN)
    assert summary["failed"] == {"mask_grid_mismatch": 4, "mask_invalid": 2}, summary   # both files of each
    assert sorted(records) == ["good_0000.nii.gz", "nudged_0000.nii.gz"]
    for case in ("good", "nudged"):
        np.testing.assert_array_equal(_mask(records[f"{case}_0000.nii.gz"][0], 1),
                                      _expected(written[case][1], "label_map"))
    errors = _errors(out)
    for case, reason, says in (("shifted", "mask_grid_mismatch", "origin lies 0.01 mm"),
                               ("smaller", "mask_grid_mismatch", "grid is 5x5x4 voxels, the image's 6x5x4"),
                               ("fractional", "mask_invalid", "no integers (e.g. ")):
        for name in (f"{case}_0000.nii.gz", f"{case}.nii.gz"):
            message = errors[(name, reason)]
            assert f"mask labelsTr/{case}.nii.gz of image imagesTr/{case}_0000.nii.gz" in message, message
            assert says in message and "\n" not in message, message


# ---------------------------------------------------------------- 4. 4-D images, --resize


def test_a_3d_mask_labels_every_volume_of_a_4d_image_and_resize_is_nearest(tmp_path):
    root = tmp_path / "Task04"
    image, labels = _image((8, 6, 3, 2), 4), _labels((8, 6, 3), 4)
    _save(root / "imagesTr" / "series_0000.nii.gz", image)
    _save(root / "labelsTr" / "series.nii.gz", labels)
    out = tmp_path / "out"
    summary, records = _convert(root, out, class_map=_class_map(tmp_path), mask_pattern=PATTERN, resize="4x10",
                                resize_mode="pad", unit="series")
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    volumes = records["series_0000.nii.gz"]
    assert len(volumes) == 2
    (sh, sw), (top, left) = placement((6, 8), (4, 10), "pad")
    assert left > 0 and sh < 6                               # smaller than the file: its voxels are not bounded by it
    expected = np.zeros((3, 4, 10, 1), np.uint8)
    for k, plane in enumerate(_expected(labels, "label_map")[..., 0]):
        expected[k, top:top + sh, left:left + sw, 0] = np.asarray(
            Image.fromarray(plane).resize((sw, sh), Image.Resampling.NEAREST))
    for record in volumes:
        assert record["image"].shape == (3, 4, 10, 1)
        np.testing.assert_array_equal(_mask(record, 1), expected)


# ---------------------------------------------------------------- 5. by a CSV column, no DICOM anywhere


def test_masks_named_by_a_csv_column(tmp_path):
    root = tmp_path / "in"
    written = {}
    for n, name in enumerate(("ct/a.nii.gz", "ct/b.nii", "ct/c.nii.gz")):
        shape = (5 + n, 4, 3)
        image, labels = _image(shape, 20 + n), _labels(shape, 20 + n)
        _save(root / name, image)
        written[name] = (image, labels)
    _save(root / "seg" / "a_labels.nii.gz", written["ct/a.nii.gz"][1])
    _save(root / "seg" / "b_labels.nii.gz", written["ct/b.nii"][1])
    _save(root / "seg" / "spare.nii.gz", written["ct/c.nii.gz"][1])         # named by no row: an image
    labels = tmp_path / "labels.csv"
    with open(labels, "w", newline="") as handle:
        rows = csv.writer(handle)
        rows.writerow(["path", "label", "mask"])
        rows.writerow(["ct/a.nii.gz", "1", "seg/a_labels.nii.gz"])
        rows.writerow(["ct/b.nii", "0", "./seg/b_labels.nii.gz"])
        rows.writerow(["ct/c.nii.gz", "1", "../outside.nii.gz"])             # no path below the root
        rows.writerow(["seg/spare.nii.gz", "0", ""])
    out = tmp_path / "out"
    summary, records = _convert(root, out, class_map=_class_map(tmp_path), labels=str(labels), mask_column="mask",
                                missing_mask="empty")
    assert summary["failed"] == {"mask_invalid": 1}, summary
    assert "'../outside.nii.gz' has an empty, '.' or '..' component" in _errors(out)[("c.nii.gz", "mask_invalid")]
    assert sorted(records) == ["a.nii.gz", "b.nii", "spare.nii.gz"]
    for name in ("ct/a.nii.gz", "ct/b.nii"):
        [record] = records[os.path.basename(name)]
        np.testing.assert_array_equal(record["image"][..., 0], _ours(written[name][0]))
        np.testing.assert_array_equal(_mask(record, 1), _expected(written[name][1], "label_map"))
        assert int(record["label"]) == (1 if name == "ct/a.nii.gz" else 0)
    assert not _mask(records["spare.nii.gz"][0], 1).any()                    # --missing_mask empty


# ---------------------------------------------------------------- 6. options refused before any work


@pytest.mark.parametrize("options,says", [
    (dict(mask_pattern=r"imagesTr/(.*)\.nii\.gz"), "no '=' between"),
    (dict(mask_pattern=r"imagesTr/(.*\.nii\.gz=labelsTr/\1"), "an unclosed ( before any '='"),
    (dict(mask_pattern=r"imagesTr/(.*))\.nii\.gz=labelsTr/\1"), "is not a regular expression"),
    (dict(mask_pattern=r"imagesTr/(.*)\.nii\.gz=labelsTr/\2.nii.gz"), "refers to group 2"),
    (dict(mask_pattern=r"imagesTr/(.*)\.nii\.gz=/labelsTr/\1.nii.gz"), "is not a relative path"),
    (dict(mask_pattern=PATTERN, class_map=None), "--mask_pattern needs --class_map"),
    (dict(mask_pattern=PATTERN, mask_column="mask"), "exclude each other"),
    (dict(mask_column="mask"), "--mask_column needs --labels"),
    (dict(mask_column="mask", labels="CSV", label_key="patient_id"), "--mask_column needs --label_key path"),
    (dict(mask_column="masks", labels="CSV"), "column(s) masks not in its header"),
])
def test_mask_pairing_options_are_refused_in_one_line(msd, tmp_path, options, says):
    from dcm2tfrecord.pipeline.options.usage import UsageError
    root, _ = msd
    if options.get("labels") == "CSV":
        options["labels"] = str(tmp_path / "labels.csv")
        with open(options["labels"], "w") as handle:
            handle.write("path,patient_id,label,mask\nimagesTr/case_1_0000.nii.gz,p1,1,labelsTr/case_1.nii.gz\n")
    options = {"class_map": _class_map(tmp_path), **options}
    with pytest.raises(UsageError) as caught:
        run_convert(root / "Task01", tmp_path / "out", **{**OPTIONS, **options})
    message = str(caught.value)
    assert says in message and "\n" not in message, message
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- 7. gs://


def test_masks_on_cloud_storage_pair_and_read_as_local_ones(msd, tmp_path):
    from tests.support.gcs_emulator import running_emulator
    root, written = msd
    os.makedirs(tmp_path / "gcs")
    with running_emulator(str(tmp_path / "gcs")) as emulator:
        emulator.upload_tree(str(root / "Task01"), "msd")
        out = tmp_path / "out"
        summary, records = _convert(emulator.url("msd"), out, class_map=_class_map(tmp_path), mask_pattern=PATTERN)
    assert summary["failed"] == {} and summary["skipped"] == {} and summary["records"] == 3, summary
    for case, (_, labels) in written.items():
        np.testing.assert_array_equal(_mask(records[f"{case}_0000.nii.gz"][0], 1), _expected(labels, "label_map"))
