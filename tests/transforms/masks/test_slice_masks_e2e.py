"""Masks on per-slice records (issue 33): ``--class_map`` with ``--unit file``, and with
``--frames split``.

Real conversions (``run_convert``: Beam's local runner, in process) of real CT series
(tests/support/series_builders), annotated by files written with independent tools from known
arrays: highdicom (SEG, over classic slices and over a multi-frame image highdicom converts them
to) and rt-utils (RTSTRUCT). Each slice record is read back with ``reader.RandomAccess`` and
matched to its slice by the position it records (``dicom/image_position_patient``); its
``mask`` must be that slice of the known array (SEG), or that slice of the ``--unit series``
volume's mask (RTSTRUCT: the same contours rasterised by the same rules).
"""
from __future__ import annotations

import os

import highdicom as hd
import numpy as np
import pydicom
import pytest
from pydicom.uid import generate_uid

from dcm2tfrecord import reader
from dcm2tfrecord.transforms.masks import annotation_cache
from tests.support import mask_datasets as md
from tests.support import run_convert, write_png_archive
from tests.support.processes import errors_of

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True)
RAW_NAME_PARTS = (b"Pat Smith", b"Jones spleen", b"DOE^JANE")


def _records(out) -> list[dict]:
    access = reader.RandomAccess(str(out), "train")
    return [access[i] for i in range(len(access))]


def _position(record: dict) -> tuple:
    return tuple(round(float(v), 3) for v in record["dicom/image_position_patient"][:3])


def _by_position(records: list[dict]) -> dict[tuple, dict]:
    found = {_position(r): r for r in records}
    assert len(found) == len(records), "two records at one position"
    return found


def _positions(datasets) -> list[tuple]:
    return [tuple(round(float(v), 3) for v in ds.ImagePositionPatient) for ds in datasets]


def _of_slice(records: list[dict], ds: pydicom.Dataset) -> dict:
    """The one record whose image is ``ds``'s pixels."""
    pixels = np.asarray(pydicom.pixels.apply_modality_lut(ds.pixel_array, ds))
    [found] = [r for r in records if r["image"].shape[:2] == pixels.shape
               and np.array_equal(r["image"][..., 0], pixels)]
    return found


def _mask(record: dict, channels: int) -> np.ndarray:
    mask = record["mask"]
    assert int(record["mask_channels"]) == channels and mask.dtype == np.uint8, (record["mask_channels"], mask.dtype)
    assert mask.shape[:-1] == record["image"].shape[:-1] and mask.shape[-1] == channels, mask.shape
    return mask


def _expected(per_class: np.ndarray, layout: str) -> np.ndarray:
    return md.label_map(per_class) if layout == "label_map" else md.channels(per_class)


def _assert_no_raw_names(out) -> None:
    md.assert_no_raw_names(out, RAW_NAME_PARTS)


# ---------------------------------------------------------------- SEG over classic slices


@pytest.fixture(scope="module")
def seg_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("slice_seg")
    series, known = md.seg_archive(root, seed=11)
    return root, series, known, md.class_map(root)


@pytest.mark.parametrize("layout,frames", [("label_map", "stack"), ("binary", "stack"), ("label_map", "split")])
def test_seg_each_slice_record_holds_its_slice_of_the_known_masks(seg_archive, tmp_path, layout, frames):
    root, series, known, class_map = seg_archive
    annotation_cache.CACHE.clear()
    out = tmp_path / "out"
    summary = run_convert(root / "in", out, class_map=class_map, mask_layout=layout, frames=frames, **OPTIONS)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    assert summary["records"] == series.depth, summary
    by_position = _by_position(_records(out))
    expected = _expected(known[:2], layout)                 # the spleen maps to no class
    channels = 1 if layout == "label_map" else 2
    for k, position in enumerate(_positions(series.datasets)):
        record = by_position[position]
        ds = series.datasets[k]
        np.testing.assert_array_equal(record["image"][..., 0], pydicom.pixels.apply_modality_lut(ds.pixel_array, ds))
        np.testing.assert_array_equal(_mask(record, channels), expected[k])
    assert not expected[1].any() and expected[0].any()      # an empty slice is all background, written
    seg_uri = str(root / "in" / "seg.dcm")
    # one parse for the 6 records
    assert annotation_cache.CACHE.parses[seg_uri] == 1, dict(annotation_cache.CACHE.parses)
    assert annotation_cache.CACHE.hits[seg_uri] == series.depth - 1, dict(annotation_cache.CACHE.hits)
    _assert_no_raw_names(out)


# ---------------------------------------------------------------- SEG over a multi-frame image, --frames split


@pytest.mark.parametrize("frames", ["split", "stack"])
def test_a_multi_frame_image_gives_each_frame_its_segment_frame(tmp_path, frames):
    """--frames split: one record per frame, each with its frame's mask; --frames stack: one
    record of the file, its mask frame for frame."""
    root = tmp_path / "in"
    source = md.series(tmp_path / "classic", n=5, spacing=2.5, shape=(32, 40), seed=12)
    image = hd.legacy.LegacyConvertedEnhancedCTImage(
        legacy_datasets=source.datasets, series_instance_uid=str(generate_uid(entropy_srcs=["sm", "series"])),
        series_number=5, sop_instance_uid=str(generate_uid(entropy_srcs=["sm", "sop"])), instance_number=1)
    os.makedirs(root)
    image.save_as(str(root / "enhanced.dcm"))
    image = pydicom.dcmread(str(root / "enhanced.dcm"))
    count = int(image.NumberOfFrames)
    known = md.random_masks(source, 2, seed=13)             # [segments, frame, j, i]: the image's frame order
    md.save_seg([image], known, root / "seg.dcm", "enhanced_seg")
    out = tmp_path / "out"
    summary = run_convert(root, out, class_map=md.class_map(tmp_path), frames=frames, **OPTIONS)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    records = _records(out)
    if frames == "split":
        assert summary["records"] == count, summary
        masks = {_position(r): _mask(r, 1) for r in records}
    else:
        [record] = records
        mask = _mask(record, 1)
        placed = np.round(record["dicom/image_position_patient"].reshape(-1, 3), 3).tolist()
        masks = {tuple(p): mask[k] for k, p in enumerate(placed)}
    assert len(masks) == count
    expected = md.label_map(known)
    for f, item in enumerate(image.PerFrameFunctionalGroupsSequence):
        position = tuple(round(float(v), 3) for v in item.PlanePositionSequence[0].ImagePositionPatient)
        np.testing.assert_array_equal(masks[position], expected[f])
    assert len({int(expected[f].sum()) for f in range(count)}) > 2      # frames told apart


# ---------------------------------------------------------------- RTSTRUCT: each slice as the volume has it


@pytest.fixture(scope="module")
def rt_archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("slice_rt")
    series = md.series(root / "in" / "ct", n=7, spacing=2.5, shape=(md.RT_SIZE, md.RT_SIZE),
                       pixel_spacing=(0.8, 0.8), seed=14)
    d = series.depth
    liver, tumour = (np.zeros((d, md.RT_SIZE, md.RT_SIZE), bool) for _ in range(2))
    for k in range(1, 5):
        liver[k] = md.disc((40 + 2 * k, 56 - k), 14 + 2 * k)
    for k in range(2, 5):
        tumour[k] = md.disc((44, 58), 6 + k)                # inside the liver: Liver wins in a label map
    tumour[2] ^= md.disc((44, 58), 3)                       # a hole
    md.write_rtstruct(series, {"liver": liver, "DOE^JANE GTV tumour": tumour}, root / "in" / "rt.dcm")
    return root, series, md.class_map(root)


@pytest.mark.parametrize("layout", ["label_map", "binary"])
def test_rtstruct_slice_records_equal_the_volume_slices(rt_archive, tmp_path, layout):
    root, series, class_map = rt_archive
    volume_out, slices_out = tmp_path / "volume", tmp_path / "slices"
    summary = run_convert(root / "in", volume_out, class_map=class_map, mask_layout=layout, unit="series", **OPTIONS)
    assert summary["records"] == 1 and summary["failed"] == {}, summary
    [volume] = _records(volume_out)
    annotation_cache.CACHE.clear()
    summary = run_convert(root / "in", slices_out, class_map=class_map, mask_layout=layout, **OPTIONS)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    assert summary["records"] == series.depth, summary
    by_position = _by_position(_records(slices_out))
    channels = 1 if layout == "label_map" else 2
    volume_mask = _mask(volume, channels)
    for k, position in enumerate(_positions(series.datasets)):
        np.testing.assert_array_equal(_mask(by_position[position], channels), volume_mask[k])
    assert volume_mask[2].any() and not volume_mask[0].any() and not volume_mask[6].any()
    assert annotation_cache.CACHE.parses[str(root / "in" / "rt.dcm")] == 1, dict(annotation_cache.CACHE.parses)
    _assert_no_raw_names(slices_out)


def _series_and_its_rtstruct(rt_archive, tmp_path):
    """(a fresh input folder linking the archive's slices, the archive's RTSTRUCT to edit and save there)."""
    root, series, _ = rt_archive
    inputs = tmp_path / "in"
    os.makedirs(inputs)
    for path in series.written.paths:
        os.symlink(path, inputs / os.path.basename(path))
    return inputs, pydicom.dcmread(str(root / "in" / "rt.dcm"))


def test_a_contour_off_the_series_fails_the_series_once(rt_archive, tmp_path):
    root, series, class_map = rt_archive
    inputs, rt = _series_and_its_rtstruct(rt_archive, tmp_path)
    contour = rt.ROIContourSequence[0].ContourSequence[0]
    data = [float(v) for v in contour.ContourData]
    contour.ContourData = [v + 40.0 if i % 3 == 2 else v for i, v in enumerate(data)]   # 40 mm off the slab
    del contour.ContourImageSequence
    rt.save_as(str(inputs / "rt.dcm"))
    out = tmp_path / "out"
    summary = run_convert(inputs, out, class_map=class_map, **OPTIONS)
    assert summary["records"] == 0 and summary["failed"] == {"contour_off_grid": series.depth + 1}, summary
    errors = errors_of(out)
    assert sorted(os.path.basename(e["uri"]) for e in errors) == sorted(
        [os.path.basename(p) for p in series.written.paths] + ["rt.dcm"])
    assert all("ROI 1" in e["message"] and "\n" not in e["message"] for e in errors), errors[0]
    _assert_no_raw_names(out)



@pytest.mark.parametrize("unit", ["file", "series"])
def test_a_contour_outside_the_rows_and_columns_fails_the_series_under_either_unit(rt_archive, tmp_path, unit):
    """A contour on a slice's plane but wholly outside its rows and columns failed only its slice
    under --unit file (the write-time check) and the whole volume under --unit series: both units
    now fail the series, every file of it and the structure set, contour_off_grid, as
    docs/CONVERTING.md says of a contour on no slice."""
    root, series, class_map = rt_archive
    inputs, rt = _series_and_its_rtstruct(rt_archive, tmp_path)
    contour = rt.ROIContourSequence[0].ContourSequence[0]
    data = [float(v) for v in contour.ContourData]
    contour.ContourData = [v + 2000.0 if i % 3 == 0 else v for i, v in enumerate(data)]   # 2 m to the side
    rt.save_as(str(inputs / "rt.dcm"))
    out = tmp_path / "out"
    summary = run_convert(inputs, out, class_map=class_map, unit=unit, **OPTIONS)
    assert summary["records"] == 0 and summary["failed"] == {"contour_off_grid": series.depth + 1}, summary
    errors = errors_of(out)
    assert all("ROI 1" in e["message"] and "wholly outside" in e["message"] for e in errors), errors[0]
    _assert_no_raw_names(out)


@pytest.mark.parametrize("unit", ["file", "series"])
def test_a_structure_set_in_another_frame_of_reference_fails_its_records(rt_archive, tmp_path, unit):
    """The ROIs' Referenced Frame of Reference UID against the image's own (read from its header at
    write): another coordinate system, so frame_of_reference_mismatch, one line per record."""
    root, series, class_map = rt_archive
    inputs, rt = _series_and_its_rtstruct(rt_archive, tmp_path)
    other = str(generate_uid(entropy_srcs=["another frame of reference"]))
    for item in rt.StructureSetROISequence:
        item.ReferencedFrameOfReferenceUID = other
    rt.save_as(str(inputs / "rt.dcm"))
    out = tmp_path / "out"
    summary = run_convert(inputs, out, class_map=class_map, unit=unit, **OPTIONS)
    assert summary["records"] == 0, summary
    failed = summary["failed"]
    assert set(failed) == {"frame_of_reference_mismatch"} and failed["frame_of_reference_mismatch"] >= (
        series.depth if unit == "file" else 1), summary
    errors = errors_of(out)
    assert all(other in e["message"] and "\n" not in e["message"] for e in errors), errors[0]
    _assert_no_raw_names(out)


# ---------------------------------------------------------------- missing masks, masks without images


@pytest.fixture(scope="module")
def two_series(tmp_path_factory):
    """``in/``: series A (5 slices) with a SEG, series B (3 slices, 64 x 48: told apart from A by
    its size) without one, and the SEG of a series C whose images are not among the inputs."""
    root = tmp_path_factory.mktemp("slice_two_series")
    return (root, *md.two_series(root, (5, 3, 4), seed=15, shape=(64, 48)))


@pytest.mark.parametrize("missing_mask", ["skip", "empty", "error"])
def test_unannotated_series_and_an_orphan_annotation(two_series, tmp_path, missing_mask):
    root, a, b, known = two_series
    out = tmp_path / "out"
    summary = run_convert(root / "in", out, class_map=md.class_map(tmp_path), missing_mask=missing_mask, **OPTIONS)
    errors = errors_of(out)
    orphans = [os.path.basename(e["uri"]) for e in errors if e["reason"] == "mask_without_image"]
    assert orphans == ["seg_orphan.dcm"], errors
    missing = sorted(os.path.basename(e["uri"]) for e in errors if e["reason"] == "missing_mask")
    b_files = sorted(os.path.basename(p) for p in b.written.paths)
    if missing_mask == "empty":
        assert summary["skipped"] == {} and summary["failed"] == {"mask_without_image": 1}, summary
        assert missing == [] and summary["records"] == a.depth + b.depth
    else:
        assert missing == b_files and summary["records"] == a.depth
        key = "skipped" if missing_mask == "skip" else "failed"
        assert summary[key].get("missing_mask") == b.depth, summary
    records = _records(out)                                 # A and B share positions: matched by pixels
    expected = md.label_map(known)
    for k, ds in enumerate(a.datasets):
        np.testing.assert_array_equal(_mask(_of_slice(records, ds), 1), expected[k])
    for ds in b.datasets if missing_mask == "empty" else ():
        assert not _mask(_of_slice(records, ds), 1).any()


# ---------------------------------------------------------------- resize


@pytest.mark.parametrize("resize,mode", [("48x48", "pad"), ("40x64", "crop")])
def test_resized_slice_masks_are_the_volume_masks_resized(seg_archive, tmp_path, resize, mode):
    root, series, known, class_map = seg_archive
    out_volume, out_slices = tmp_path / "volume", tmp_path / "slices"
    run_convert(root / "in", out_volume, class_map=class_map, resize=resize, resize_mode=mode, unit="series",
                **OPTIONS)
    [volume] = _records(out_volume)
    summary = run_convert(root / "in", out_slices, class_map=class_map, resize=resize, resize_mode=mode, **OPTIONS)
    assert summary["failed"] == {} and summary["records"] == series.depth, summary
    target = tuple(int(v) for v in resize.split("x"))
    records = _records(out_slices)
    volume_mask = _mask(volume, 1)
    positions = volume["dicom/image_position_patient"].reshape(-1, 3)
    for record in records:
        assert record["image"].shape[:2] == target
        distance = np.linalg.norm(positions - record["dicom/image_position_patient"][:3], axis=1)
        k = int(np.argmin(distance))
        assert distance[k] < 1e-2 and sorted(distance)[1] > 1.0, distance
        np.testing.assert_array_equal(_mask(record, 1), volume_mask[k])
    assert volume_mask.any()


# ---------------------------------------------------------------- records no mask source covers


@pytest.mark.parametrize("unit", ["file", "series"])
@pytest.mark.parametrize("missing_mask", ["skip", "error", "empty"])
def test_a_record_no_mask_source_covers_follows_missing_mask(seg_archive, tmp_path, unit, missing_mask):
    """PNGs beside an annotated series: no SEG, RTSTRUCT or NIfTI mask can cover them, so they are
    skipped, failed, or written with an all-background mask; the dataset then reads with masks."""
    root, series, known, class_map = seg_archive
    inputs = tmp_path / "in"
    inputs.mkdir()
    os.symlink(root / "in", inputs / "dicom", target_is_directory=True)
    pngs = write_png_archive(inputs / "png", 2, 24, 20)
    out = tmp_path / "out"
    summary = run_convert(inputs, out, class_map=class_map, unit=unit, missing_mask=missing_mask, **OPTIONS)
    masked = series.depth if unit == "file" else 1
    if missing_mask != "empty":
        status = "skipped" if missing_mask == "skip" else "failed"
        assert summary[status] == {"missing_mask": len(pngs)}, summary
        assert summary["records"] == masked, summary
        assert {e["reason"] for e in errors_of(out)} == {"missing_mask"}
        return
    assert summary["failed"] == {} and summary["skipped"] == {} and summary["records"] == masked + len(pngs)
    records = _records(out)
    assert all("mask" in r and r["mask"].shape[:-1] == r["image"].shape[:-1] for r in records)
    flat = [r["mask"] for r in records if r["image"].shape[-3:-1] == (24, 20)]
    assert len(flat) == len(pngs) and all(not m.any() for m in flat)
    assert any(r["mask"].any() for r in records)               # the SEG's series still holds its masks
