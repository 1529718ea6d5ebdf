"""Issue 33, first slice, end to end: ``--class_map`` turns DICOM SEG and RTSTRUCT files among the
inputs into masks of the ``--unit series`` volume record they annotate.

Real conversions (``run_convert``: Beam's local runner, in process) of real CT series
(tests/support/series_builders: pydicom's CT_small cropped, file names shuffled), annotated by
files written with independent tools from known arrays: highdicom (SEG) and rt-utils (RTSTRUCT).
The records are read back with ``reader.RandomAccess``: ``record["mask"]`` is ``[d, h, w, c]``
and must line up voxel for voxel with ``record["image"]``, in the record's slice order
(anatomical, along the normal; checked here against the image itself, not assumed).

Raw ROI / segment names hold patient-like text ("Pat Smith tumour"): none may appear in any
output file (shards, indexes, dataset.json, errors.jsonl).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from PIL import Image
from pydicom.pixels import apply_modality_lut

from dcm2tfrecord import reader
from dcm2tfrecord.transforms.images.geometry import placement
from tests.support import run_convert
from tests.support import mask_datasets as md
from tests.support.processes import errors_of

# rt-utils 1.2.7 saves through pydicom attributes pydicom 3 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, unit="series")
CLASS_MAP_YAML = 'Liver: ["liver"]\nTumour: [".*tumou?r"]\n'
CLASSES = ["Liver", "Tumour"]
RAW_NAME_PARTS = (b"Pat Smith", b"Smith", b"Jones spleen", b"DOE^JANE")   # long enough not to occur by chance


# ---------------------------------------------------------------- helpers


def _class_map(folder) -> str:
    path = os.path.join(str(folder), "classes.yaml")
    with open(path, "w") as handle:
        handle.write(CLASS_MAP_YAML)
    return path


def _convert(inputs, out, **options) -> tuple[dict, list[dict]]:
    """(summary, records): every record of the run, deepest volume first."""
    summary = run_convert(inputs, out, **{**OPTIONS, **options})
    if not summary["records"]:
        return summary, []
    access = reader.RandomAccess(str(out), "train")
    records = [access[i] for i in range(len(access))]
    return summary, sorted(records, key=lambda r: -int(r["depth"]))


def _manifest(out) -> dict:
    with open(os.path.join(str(out), "dataset.json")) as handle:
        return json.load(handle)


def _assert_no_raw_names(out) -> None:
    md.assert_no_raw_names(out, RAW_NAME_PARTS)


def _assert_image_in_record_order(record: dict, series: md.Series) -> None:
    """The record's image is the series' slices in ``series.order``: the order the masks are expected in."""
    image = record["image"]
    assert image.shape == (series.depth, *series.shape, 1), image.shape
    for k, ds in enumerate(series.datasets):
        np.testing.assert_array_equal(image[k, ..., 0], np.asarray(apply_modality_lut(ds.pixel_array, ds)))


def _mask(record: dict, channels: int) -> np.ndarray:
    mask = record["mask"]
    assert record["mask_dtype"] == b"uint8" and int(record["mask_channels"]) == channels
    assert mask.dtype == np.uint8 and mask.ndim == 4 and mask.shape[-1] == channels, (mask.dtype, mask.shape)
    assert mask.shape[:3] == record["image"].shape[:3]
    return mask


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * float((a & b).sum()) / float(a.sum() + b.sum())


# ---------------------------------------------------------------- 1. SEG, exact


@pytest.fixture(scope="module")
def seg_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("seg_archive")
    return (root, *md.seg_archive(root, seed=1))


@pytest.mark.parametrize("layout", ["label_map", "binary"])
def test_seg_masks_are_the_known_masks_in_record_order(seg_archive, tmp_path, layout):
    root, series, known = seg_archive
    out = tmp_path / "out"
    summary, records = _convert(root / "in", out, class_map=_class_map(root), mask_layout=layout)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    assert summary["records"] == 1 and len(records) == 1, summary
    [record] = records
    _assert_image_in_record_order(record, series)
    per_class = known[:2]                                  # the spleen segment maps to no class: ignored
    assert (per_class[0] & per_class[1]).any()             # overlaps to resolve
    if layout == "label_map":
        mask = _mask(record, 1)
        np.testing.assert_array_equal(mask, md.label_map(per_class))
        assert set(np.unique(mask).tolist()) == {0, 1, 2}
    else:
        np.testing.assert_array_equal(_mask(record, 2), md.channels(per_class))
    manifest = _manifest(out)
    assert manifest["mask_classes"] == CLASSES
    assert {"mask_raw", "mask_dtype", "mask_channels"} <= set(manifest["features"])
    _assert_no_raw_names(out)


# ---------------------------------------------------------------- 2. RTSTRUCT (rt-utils), Dice


def test_rtstruct_masks_match_the_known_discs_and_two_files_unite(tmp_path):
    root = tmp_path / "in"
    series = md.series(root / "ct", n=7, spacing=2.5, shape=(md.RT_SIZE, md.RT_SIZE), pixel_spacing=(0.8, 0.8),
                       seed=2)
    assert series.order == sorted(series.order, key=lambda i: series.written.positions[i][2])
    d = series.depth
    liver_a, liver_b, tumour = (np.zeros((d, md.RT_SIZE, md.RT_SIZE), bool) for _ in range(3))
    for k in range(1, 4):
        liver_a[k] = md.disc((40 + 2 * k, 56 - k), 14 + 2 * k)         # centres off the diagonal
    for k in range(3, 6):
        liver_b[k] = md.disc((60, 30), 12)
    for k in range(2, 5):
        tumour[k] = md.disc((44, 58), 6 + k)                          # inside the liver: Liver wins there
    # two structure sets of one series: the Liver ROIs of both are united
    md.write_rtstruct(series, {"liver": liver_a, "DOE^JANE GTV tumour": tumour}, root / "rt_a.dcm")
    body = md.disc((48, 48), 40)[None].repeat(d, 0)
    md.write_rtstruct(series, {"LIVER": liver_b, "DOE^JANE body": body}, root / "rt_b.dcm")
    out = tmp_path / "out"
    summary, records = _convert(root, out, class_map=_class_map(tmp_path), mask_layout="binary")
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    [record] = records
    _assert_image_in_record_order(record, series)
    mask = _mask(record, 2).astype(bool)
    expected = {"Liver": liver_a | liver_b, "Tumour": tumour}
    for c, name in enumerate(CLASSES):
        assert _dice(mask[..., c], expected[name]) >= 0.99, name
        assert mask[..., c].any(axis=(1, 2)).tolist() == expected[name].any(axis=(1, 2)).tolist(), name
    assert _manifest(out)["mask_classes"] == CLASSES
    _assert_no_raw_names(out)


# ---------------------------------------------------------------- 3. missing masks, masks without images


@pytest.fixture(scope="module")
def two_series(tmp_path_factory):
    """``in/``: series A (6 slices) with a SEG, series B (4 slices) without one, and the SEG of a
    series C whose images are not among the inputs."""
    root = tmp_path_factory.mktemp("two_series")
    return (root, *md.two_series(root, (6, 4, 5), seed=3))


def _assert_orphan_failed(out, summary) -> None:
    assert summary["failed"].get("mask_without_image") == 1, summary
    orphans = [e for e in errors_of(out) if e["reason"] == "mask_without_image"]
    assert [os.path.basename(e["uri"]) for e in orphans] == ["seg_orphan.dcm"], orphans


@pytest.mark.parametrize("missing_mask", ["skip", "empty", "error"])
def test_missing_mask_and_mask_without_image(two_series, tmp_path, missing_mask):
    root, a, b, known = two_series
    out = tmp_path / "out"
    summary, records = _convert(root / "in", out, class_map=_class_map(tmp_path), missing_mask=missing_mask)
    _assert_orphan_failed(out, summary)
    b_files = sorted(os.path.basename(p) for p in b.written.paths)
    missing = sorted(os.path.basename(e["uri"]) for e in errors_of(out) if e["reason"] == "missing_mask")
    if missing_mask == "skip":
        assert summary["skipped"] == {"missing_mask": b.depth}, summary
        assert summary["failed"] == {"mask_without_image": 1}, summary
        assert missing == b_files
    elif missing_mask == "error":
        assert summary["skipped"] == {}, summary
        assert summary["failed"] == {"mask_without_image": 1, "missing_mask": b.depth}, summary
        assert missing == b_files
    else:
        assert summary["skipped"] == {} and summary["failed"] == {"mask_without_image": 1}, summary
        assert missing == []
    assert [int(r["depth"]) for r in records] == ([a.depth, b.depth] if missing_mask == "empty" else [a.depth])
    _assert_image_in_record_order(records[0], a)
    np.testing.assert_array_equal(_mask(records[0], 1), md.label_map(known))
    if missing_mask == "empty":
        _assert_image_in_record_order(records[1], b)
        empty = _mask(records[1], 1)
        assert empty.shape == (b.depth, *b.shape, 1) and not empty.any()
    assert _manifest(out)["mask_classes"] == CLASSES
    _assert_no_raw_names(out)


# ---------------------------------------------------------------- 4. resize


def _placed(labels: np.ndarray, target: tuple[int, int], mode: str) -> np.ndarray:
    """[k, j, i, 1] labels resized by nearest neighbour and placed as ``resize`` places the image."""
    (sh, sw), (top, left) = placement(labels.shape[1:3], target, mode)
    out = np.zeros((labels.shape[0], *target, 1), labels.dtype)
    src_top, src_left = max(0, -top), max(0, -left)         # a crop's negative offset cuts the scaled mask
    dst_top, dst_left = max(0, top), max(0, left)           # a pad's positive one moves it in
    h, w = min(sh - src_top, target[0] - dst_top), min(sw - src_left, target[1] - dst_left)
    for k in range(labels.shape[0]):
        scaled = np.asarray(Image.fromarray(labels[k, ..., 0]).resize((sw, sh), Image.Resampling.NEAREST))
        out[k, dst_top:dst_top + h, dst_left:dst_left + w, 0] = scaled[src_top:src_top + h, src_left:src_left + w]
    return out


@pytest.mark.parametrize("resize,mode", [("48x48", "pad"), ("40x64", "crop")])
def test_resized_mask_is_placed_like_the_image(seg_archive, tmp_path, resize, mode):
    root, series, known = seg_archive
    target = tuple(int(v) for v in resize.split("x"))
    (sh, sw), (top, left) = placement(series.shape, target, mode)
    assert (top, left) != (0, 0)                          # the placement is not trivial
    out = tmp_path / "out"
    summary, records = _convert(root / "in", out, class_map=_class_map(root), resize=resize, resize_mode=mode)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    [record] = records
    assert record["image"].shape == (series.depth, *target, 1)
    mask = _mask(record, 1)
    assert mask.shape == record["image"].shape
    np.testing.assert_array_equal(mask, _placed(md.label_map(known[:2]), target, mode))
    if mode == "pad":                                     # the padding is background
        assert not mask[:, :, :left].any() and not mask[:, :, left + sw:].any()
    _assert_no_raw_names(out)
