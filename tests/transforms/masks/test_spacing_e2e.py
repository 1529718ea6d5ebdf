"""``--spacing X,Y,Z`` end to end: a CT series and its SEG (--unit series), and NIfTI images and
their label maps, converted with and without the option by Beam's local runner (``run_convert``),
read back with ``reader.RandomAccess``. With it each record is its plain conversion resampled
(transforms.images.spacing, on the shape the probe planned), its mask resampled class by class
(no class invented), its affine rewritten to the target spacing with the first voxel's centre
kept, and the source's shape, spacing and affine recorded (``dicom/original_*``), from which
``reader.geometry.to_original_grid`` puts a mask back on the source's grid."""
from __future__ import annotations


import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.reader import geometry as reader_geometry
from dcm2tfrecord.transforms.images import spacing
from tests.support import enhanced_objects as eo
from tests.support import mask_datasets as md
from tests.support import run_convert, write_png_archive
from tests.support.processes import errors_of
from tests.support.nifti_tasks import PATTERN, msd as _msd
from tests.support.nifti_tasks import class_map as _nifti_class_map
from tests.support.preprocessed import (CLASS_MAP_YAML, OPTIONS, ORIGINALS, affine as _affine,  # noqa: F401
                                        manifest as _manifest, records as _records)

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")


def _volume(record: dict) -> dict:
    """The record with its image and mask as ``[d, h, w, c]`` (RandomAccess gives a 2-D record's as
    ``[h, w, c]``)."""
    if record["image"].ndim == 4:
        return record
    return {**record, **{k: record[k][None] for k in ("image", "mask") if k in record}}


def _check_resampled(plain: dict, respaced: dict, target_xyz, in_plane_only: bool = False) -> None:
    """``respaced`` is ``plain`` put on the grid of ``target_xyz``, its geometry and the source's recorded."""
    plain, respaced = _volume(plain), _volume(respaced)
    target = spacing.axis_order(target_xyz)
    original = tuple(np.linalg.norm(_affine(plain)[:3, :3], axis=0).tolist())
    source = (target[0],) + original[1:] if in_plane_only else original
    size = plain["image"].shape[:3]
    shape = spacing.planned_shape(size, source, target)
    assert respaced["image"].shape == shape + plain["image"].shape[3:], (respaced["image"].shape, shape)
    assert respaced["image"].dtype == plain["image"].dtype
    np.testing.assert_array_equal(respaced["image"], spacing.resample_image(plain["image"], source, target, shape))
    # the affine: the target's steps along the same directions, from the same first voxel centre
    matrix = _affine(respaced)
    np.testing.assert_allclose(np.linalg.norm(matrix[:3, :3], axis=0)[1:], target[1:], rtol=1e-5)
    if not in_plane_only:
        np.testing.assert_allclose(np.linalg.norm(matrix[:3, 0]), target[0], rtol=1e-5)
    np.testing.assert_allclose(matrix[:3, 3], _affine(plain)[:3, 3], atol=1e-4)
    np.testing.assert_allclose(matrix[:3, :3], _affine(plain)[:3, :3] * (np.asarray(target) / source), rtol=1e-5,
                               atol=1e-6)
    positions = np.asarray(respaced["dicom/image_position_patient"]).reshape(-1, 3)
    assert len(positions) == shape[0]
    np.testing.assert_allclose(positions[-1], (matrix @ [shape[0] - 1, 0, 0, 1])[:3], atol=1e-3)
    # what undoes it
    np.testing.assert_array_equal(respaced["dicom/original_shape"], size)
    np.testing.assert_allclose(respaced["dicom/original_spacing"], original, rtol=1e-6)
    np.testing.assert_array_equal(respaced["dicom/original_affine"], plain["dicom/affine"])
    if "mask" not in plain:
        return
    mask = spacing.resample_mask(plain["mask"], source, target, shape)
    np.testing.assert_array_equal(respaced["mask"], mask)
    assert set(np.unique(respaced["mask"])) <= set(np.unique(plain["mask"]))       # no class invented
    assert len(np.unique(respaced["mask"])) > 1 or not plain["mask"].any()
    back = reader_geometry.to_original_grid(respaced["mask"], respaced)
    assert back.shape == plain["mask"].shape and back.dtype == plain["mask"].dtype
    assert set(np.unique(back)) <= set(np.unique(plain["mask"]))


def test_a_series_and_its_seg_are_resampled_to_the_spacing(tmp_path):
    root = tmp_path
    series, _ = md.seg_archive(root, seed=1)
    class_map = root / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    plain = _records(root / "in", tmp_path / "plain", class_map=str(class_map))
    target = (1.1, 0.9, 1.5)
    respaced = _records(root / "in", tmp_path / "out", class_map=str(class_map), spacing="1.1,0.9,1.5")
    [(key, record)] = respaced.items()
    _check_resampled(plain[key], record, target)
    np.testing.assert_allclose(record["dicom/pixel_spacing"], [0.9, 1.1], rtol=1e-6)
    np.testing.assert_allclose(record["dicom/slice_spacing"], [1.5], rtol=1e-6)
    assert record["image"].shape[0] == round(series.depth * 2.5 / 1.5)
    manifest = _manifest(tmp_path / "out")
    assert set(ORIGINALS) <= set(manifest["features"])
    assert manifest["options"]["spacing"] == "1.1,0.9,1.5"
    assert not set(ORIGINALS) & set(_manifest(tmp_path / "plain")["features"])      # off: not written
    assert verify_dataset(str(tmp_path / "out")).ok
    [loaded] = list(reader.load(str(tmp_path / "out"), "train", batch_size=1, shuffle=False, output="dict"))
    for name in ORIGINALS:      # tf.data reads them too (ragged: a batch of one)
        np.testing.assert_array_equal(loaded[name].to_list()[0], record[name])


def test_nifti_images_and_their_label_maps_are_resampled_to_the_spacing(tmp_path):
    root = tmp_path / "msd"
    _msd(root)
    options = dict(class_map=_nifti_class_map(tmp_path), mask_pattern=PATTERN)
    plain = _records(root, tmp_path / "plain", **options)
    respaced = _records(root, tmp_path / "out", spacing="0.5,0.6,1.25", **options)
    assert set(plain) == set(respaced) and len(plain) == 3
    for key in plain:
        _check_resampled(plain[key], respaced[key], (0.5, 0.6, 1.25))


def test_slice_records_are_resampled_in_plane_and_a_raster_image_fails(tmp_path):
    root = tmp_path
    md.seg_archive(root, seed=2, depth=3)
    class_map = root / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    plain = _records(root / "in", tmp_path / "plain", class_map=str(class_map), unit="file")
    respaced = _records(root / "in", tmp_path / "out", class_map=str(class_map), unit="file", spacing="0.5,0.8,9")
    assert set(plain) == set(respaced) and len(plain) == 3
    for key in plain:
        _check_resampled(plain[key], respaced[key], (0.5, 0.8, 9.0), in_plane_only=True)
        assert int(respaced[key]["depth"]) == 1
    write_png_archive(root / "in" / "png", count=1, height=8, width=8)
    summary = run_convert(root / "in", tmp_path / "with_png", **{**OPTIONS, "unit": "file", "spacing": "1,1,1",
                                                                 "class_map": str(class_map)})
    assert summary["failed"] == {"missing_attribute": 1}, summary
    [error] = errors_of(tmp_path / "with_png")
    assert "--spacing" in error["message"] and "raster image" in error["message"], error


def test_an_enhanced_file_is_resampled_as_a_volume(tmp_path):
    datasets = eo.slices("spacing", 6, spacing=2.5)
    enhanced = eo.legacy_enhanced(datasets, "spacing")
    eo.reorder_frames(enhanced, [3, 0, 5, 1, 4, 2])           # stored out of order, as scanners do
    eo.save(enhanced, tmp_path / "in" / "enhanced.dcm")
    plain = _records(tmp_path / "in", tmp_path / "plain", unit="file")
    respaced = _records(tmp_path / "in", tmp_path / "out", unit="file", spacing="0.9,0.8,1.5")
    [key] = plain
    _check_resampled(plain[key], respaced[key], (0.9, 0.8, 1.5))
    assert int(respaced[key]["depth"]) == round(6 * 2.5 / 1.5)


def test_rtstruct_contours_are_placed_on_the_source_slices_then_resampled(tmp_path):
    """--unit file: an RTSTRUCT's contours are placed on each slice's own rows and columns (before
    the record's resampled shape is planned), then resampled with it; a disc far past the
    resampled grid's row count is no contour off the grid."""
    root = tmp_path / "in"
    series = md.series(root / "ct", n=3, spacing=2.5, shape=(md.RT_SIZE, md.RT_SIZE), pixel_spacing=(0.8, 0.8),
                       seed=3)
    disc = np.zeros((series.depth, md.RT_SIZE, md.RT_SIZE), bool)
    disc[:] = md.disc((72, 70), 10)                 # rows 62-82: past the 38 rows of 2 mm
    md.write_rtstruct(series, {"liver": disc}, root / "rt.dcm")
    class_map = tmp_path / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    plain = _records(root, tmp_path / "plain", class_map=str(class_map), unit="file")
    respaced = _records(root, tmp_path / "out", class_map=str(class_map), unit="file", spacing="2,2,2.5")
    assert set(plain) == set(respaced) and len(plain) == series.depth
    for key in plain:
        _check_resampled(plain[key], respaced[key], (2.0, 2.0, 2.5), in_plane_only=True)
        assert respaced[key]["mask"].any()


def test_a_volume_the_spacing_makes_larger_than_max_shard_mb_fails_alone(tmp_path):
    root = tmp_path / "in"
    md.series(root / "small", n=3, spacing=2.5, shape=(16, 16), seed=5)
    md.series(root / "large", n=3, spacing=2.5, shape=(md.RT_SIZE, md.RT_SIZE), seed=4)
    summary = run_convert(root, tmp_path / "out", **{**OPTIONS, "spacing": "0.1,0.1,2.5", "max_shard_mb": 1,
                                                     "min_shard_mb": 1, "target_shard_mb": 1})
    assert summary["failed"] == {"record_too_large": 3}, summary          # the large series' three slices
    assert summary["records"] == 1, summary
    messages = {e["message"] for e in errors_of(tmp_path / "out")}
    assert len(messages) == 1 and "--spacing 0.1,0.1,2.5" in messages.pop()
