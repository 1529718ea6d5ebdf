"""``--crop nonzero|foreground`` end to end: NIfTI images and their label maps cut to the image's
non-zero box, and a CT series with its SEG cut to the mask's foreground then resampled by
``--spacing``, converted by Beam's local runner (``run_convert``) with and without the option and
read back with ``reader.RandomAccess`` and ``reader.load``. Each record is its plain conversion
cut to the box (then resampled), its mask cut alike, its affine moved to the box's first voxel,
the box and the source's grid recorded (``dicom/crop_box``, ``dicom/original_*``), from which
``reader.geometry.to_original_grid`` puts the mask back; ``verify`` passes."""
from __future__ import annotations

import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.reader import geometry as reader_geometry
from dcm2tfrecord.transforms.images import spacing
from tests.support import mask_datasets as md
from tests.support.nifti_tasks import PATTERN
from tests.support.nifti_tasks import class_map as _nifti_class_map
from tests.support.preprocessed import CLASS_MAP_YAML, ORIGINALS, affine as _affine, manifest as _manifest
from tests.support.preprocessed import records as _records
from tests.support.preprocessed import CROP_BOX, box as _box, cut as _cut, msd_with_background as _msd_with_background

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

def test_nifti_images_and_label_maps_are_cut_to_the_nonzero_box(tmp_path):
    root = tmp_path / "msd"
    _msd_with_background(root)
    options = dict(class_map=_nifti_class_map(tmp_path), mask_pattern=PATTERN)
    plain = _records(root, tmp_path / "plain", **options)
    cropped = _records(root, tmp_path / "out", crop="nonzero", **options)
    assert set(plain) == set(cropped) and len(plain) == 3
    whole = 0
    for key in plain:
        before, after = plain[key], cropped[key]
        image = before["image"]
        box = _box((image != 0).any(axis=3)) if image.any() else (0, image.shape[0], 0, image.shape[1], 0,
                                                                   image.shape[2])
        whole += not image.any()
        np.testing.assert_array_equal(after[CROP_BOX], box)
        np.testing.assert_array_equal(after["image"], _cut(image, box))
        np.testing.assert_array_equal(after["mask"], _cut(before["mask"], box))
        # a voxel of the cut record lies where the same voxel of the source did
        for k, j, i in [(0, 0, 0), tuple(n - 1 for n in after["image"].shape[:3])]:
            np.testing.assert_allclose(_affine(after) @ [k, j, i, 1],
                                       _affine(before) @ [k + box[0], j + box[2], i + box[4], 1], atol=1e-3)
        np.testing.assert_array_equal(after["dicom/original_shape"], image.shape[:3])
        np.testing.assert_array_equal(after["dicom/original_affine"], before["dicom/affine"])
        np.testing.assert_array_equal(reader_geometry.to_original_grid(after["mask"], after), before["mask"])
    assert whole == 1
    manifest = _manifest(tmp_path / "out")
    assert {CROP_BOX, *ORIGINALS} <= set(manifest["features"])
    assert manifest["options"]["crop"] == "nonzero"
    assert not {CROP_BOX, *ORIGINALS} & set(_manifest(tmp_path / "plain")["features"])    # off: not written
    assert max(s[1] for s in manifest["splits"]["train"]["shapes"]) < 12          # the written, cut shapes
    assert verify_dataset(str(tmp_path / "out")).ok


def test_a_series_is_cut_to_its_segs_foreground_then_resampled(tmp_path):
    root = tmp_path
    series = md.series(root / "in" / "ct", n=6, spacing=2.5, seed=11)
    masks = np.zeros((3, series.depth, *series.shape), bool)
    masks[0, 1:4, 3:7, 2:9] = True          # Liver
    masks[1, 2:5, 5:9, 6:11] = True         # Tumour
    masks[2, 0, 0, 0] = True                # Jones spleen: no class, so no foreground
    md.write_seg(series, masks, root / "in" / "seg.dcm", "crop_seg")
    class_map = root / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    [(key, plain)] = _records(root / "in", tmp_path / "plain", class_map=str(class_map)).items()
    target = (1.1, 0.9, 1.5)
    [(_, record)] = _records(root / "in", tmp_path / "out", class_map=str(class_map), crop="foreground",
                             spacing="1.1,0.9,1.5").items()
    box = _box((plain["mask"] != 0).any(axis=3))
    assert box == (1, 5, 3, 9, 2, 11), box
    np.testing.assert_array_equal(record[CROP_BOX], box)
    source = tuple(np.linalg.norm(_affine(plain)[:3, :3], axis=0).tolist())
    target_dhw = spacing.axis_order(target)
    cut_image, cut_mask = _cut(plain["image"], box), _cut(plain["mask"], box)
    shape = spacing.planned_shape(cut_image.shape[:3], source, target_dhw)
    np.testing.assert_array_equal(record["image"], spacing.resample_image(cut_image, source, target_dhw, shape))
    np.testing.assert_array_equal(record["mask"], spacing.resample_mask(cut_mask, source, target_dhw, shape))
    assert set(np.unique(record["mask"])) == {0, 1, 2}
    # the resampled grid starts at the box's first voxel, with the target's steps
    matrix = _affine(record)
    np.testing.assert_allclose(matrix[:3, 3], (_affine(plain) @ [box[0], box[2], box[4], 1])[:3], atol=1e-3)
    np.testing.assert_allclose(np.linalg.norm(matrix[:3, :3], axis=0), target_dhw, rtol=1e-5)
    # the source before both steps
    np.testing.assert_array_equal(record["dicom/original_shape"], plain["image"].shape[:3])
    np.testing.assert_array_equal(record["dicom/original_affine"], plain["dicom/affine"])
    np.testing.assert_allclose(record["dicom/original_spacing"], source, rtol=1e-6)
    back = reader_geometry.to_original_grid(record["mask"], record)
    assert back.shape == plain["mask"].shape
    outside = np.ones(back.shape[:3], bool)
    outside[box[0]:box[1], box[2]:box[3], box[4]:box[5]] = False
    assert not back[outside].any() and set(np.unique(back)) == {0, 1, 2}
    assert verify_dataset(str(tmp_path / "out")).ok
    [loaded] = list(reader.load(str(tmp_path / "out"), "train", batch_size=1, shuffle=False, output="dict"))
    np.testing.assert_array_equal(loaded[CROP_BOX].to_list()[0], box)


def test_slice_records_are_cut_in_plane(tmp_path):
    root = tmp_path
    series = md.series(root / "in" / "ct", n=3, spacing=2.5, seed=12)
    masks = np.zeros((1, series.depth, *series.shape), bool)
    masks[0, 0, 2:5, 3:8] = True
    masks[0, 2, 4:6, 1:3] = True            # slice 1: empty, kept whole
    md.write_seg(series, masks, root / "in" / "seg.dcm", "crop_slices")
    class_map = root / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    plain = _records(root / "in", tmp_path / "plain", class_map=str(class_map), unit="file")
    cropped = _records(root / "in", tmp_path / "out", class_map=str(class_map), unit="file", crop="foreground")
    assert set(plain) == set(cropped) and len(plain) == 3
    boxes = []
    for key in plain:
        before, after = plain[key], cropped[key]
        mask = before["mask"][None] if before["mask"].ndim == 3 else before["mask"]
        box = _box(mask[..., 0] != 0) if mask.any() else (0, 1, 0, mask.shape[1], 0, mask.shape[2])
        boxes.append(box)
        np.testing.assert_array_equal(after[CROP_BOX], box)
        image = before["image"][None] if before["image"].ndim == 3 else before["image"]
        got = after["image"][None] if after["image"].ndim == 3 else after["image"]
        np.testing.assert_array_equal(got, _cut(image, box))
        assert int(after["depth"]) == 1
        np.testing.assert_allclose(np.asarray(after["dicom/image_position_patient"], float),
                                   (_affine(before) @ [0, box[2], box[4], 1])[:3], atol=1e-3)
    assert sorted(b[3] - b[2] for b in boxes) == [2, 3, series.shape[0]]
    assert verify_dataset(str(tmp_path / "out")).ok


def test_a_raster_image_is_cut_in_plane_and_put_back_by_its_box(tmp_path):
    """A PNG has no geometry: it is cut to its non-zero box in-plane, the box and its shape kept
    (dicom/original_affine empty), and ``dcm2tfrecord verify`` passes on the dataset."""
    from PIL import Image

    from dcm2tfrecord.pipeline import cli

    pixels = np.zeros((12, 16), np.uint8)
    pixels[3:9, 5:14] = np.random.default_rng(13).integers(1, 255, size=(6, 9), dtype=np.uint8)
    os.makedirs(tmp_path / "in")
    Image.fromarray(pixels).save(tmp_path / "in" / "body.png")
    [(_, record)] = _records(tmp_path / "in", tmp_path / "out", unit="file", crop="nonzero").items()
    np.testing.assert_array_equal(record[CROP_BOX], (0, 1, 3, 9, 5, 14))
    np.testing.assert_array_equal(np.asarray(record["image"]).reshape(6, 9), pixels[3:9, 5:14])
    assert np.asarray(record["dicom/original_affine"]).size == 0
    back = reader_geometry.to_original_grid(np.asarray(record["image"]).reshape(1, 6, 9), record)
    np.testing.assert_array_equal(back[0], pixels)
    assert cli.main(["verify", str(tmp_path / "out")]) == 0


def test_an_enhanced_stack_is_cut_as_a_volume(tmp_path):
    """An Enhanced multi-frame CT stored out of order: its stack is a volume, cut in 3-D to the
    non-zero box (frames all zero at its ends, a zero border in-plane)."""
    from tests.support import enhanced_objects as eo

    datasets = eo.slices("crop", 6, spacing=2.5, intercepts=("0",))
    for i, ds in enumerate(datasets):
        pixels = np.zeros((int(ds.Rows), int(ds.Columns)), np.int16)
        if 1 <= i <= 3:
            pixels[10:40, 20:50] = 100 + i
        ds.PixelData = pixels.tobytes()
    enhanced = eo.legacy_enhanced(datasets, "crop")
    eo.reorder_frames(enhanced, [3, 0, 5, 1, 4, 2])
    eo.save(enhanced, tmp_path / "in" / "enhanced.dcm")
    [(key, plain)] = _records(tmp_path / "in", tmp_path / "plain", unit="file").items()
    [(_, record)] = _records(tmp_path / "in", tmp_path / "out", unit="file", crop="nonzero").items()
    box = _box((plain["image"] != 0).any(axis=3))
    assert box == (1, 4, 10, 40, 20, 50), box
    np.testing.assert_array_equal(record[CROP_BOX], box)
    np.testing.assert_array_equal(record["image"], _cut(plain["image"], box))
    np.testing.assert_allclose(_affine(record)[:3, 3], (_affine(plain) @ [box[0], box[2], box[4], 1])[:3],
                               atol=1e-3)
    positions = np.asarray(record["dicom/image_position_patient"]).reshape(-1, 3)
    assert len(positions) == 3
    for k, position in enumerate(positions):
        np.testing.assert_allclose(position, (_affine(record) @ [k, 0, 0, 1])[:3], atol=1e-3)
    assert verify_dataset(str(tmp_path / "out")).ok
