"""``--intensity zscore`` end to end: NIfTI images with their label maps, and a CT series with its
SEG (also with ``--crop nonzero --spacing``), converted by Beam's local runner (``run_convert``)
with and without the option and read back with ``reader.RandomAccess`` and ``reader.load``. Each
image is float32, its plain conversion z-scored over its non-zero voxels (nnU-Net's order: crop,
normalise, resample), the mask unchanged, ``intensity/mean`` and ``intensity/std`` written and
declared only with the option, ``reader.intensity.denormalize`` gives the plain image back;
``verify`` passes."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.transforms.images import intensity, spacing
from tests.support import mask_datasets as md
from tests.support.nifti_tasks import PATTERN
from tests.support.nifti_tasks import class_map as _nifti_class_map
from tests.support.preprocessed import CLASS_MAP_YAML, CROP_BOX, affine as _affine, cut as _cut
from tests.support.preprocessed import manifest as _manifest, msd_with_background as _msd_with_background
from tests.support.preprocessed import records as _records

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

FEATURES = {intensity.MEAN, intensity.STD}


def _check_normalised(image: np.ndarray) -> None:
    assert image.dtype == np.float32
    region = image != 0
    if region.any():
        assert abs(float(image[region].mean())) < 1e-3
        assert abs(float(image[region].std()) - 1) < 1e-3


def test_nifti_images_are_zscored_and_their_label_maps_kept(tmp_path):
    root = tmp_path / "msd"
    _msd_with_background(root)
    options = dict(class_map=_nifti_class_map(tmp_path), mask_pattern=PATTERN)
    plain = _records(root, tmp_path / "plain", **options)
    normalised = _records(root, tmp_path / "out", intensity="zscore", **options)
    assert set(plain) == set(normalised) and len(plain) == 3
    for key in plain:
        before, after = plain[key], normalised[key]
        expected, mean, std = intensity.zscore(before["image"])
        _check_normalised(after["image"])
        np.testing.assert_array_equal(after["image"], expected)
        np.testing.assert_array_equal(after["mask"], before["mask"])
        np.testing.assert_allclose(after[intensity.MEAN], mean, rtol=1e-6)
        np.testing.assert_allclose(after[intensity.STD], std, rtol=1e-6)
        back = reader.intensity.denormalize(after["image"], after)
        np.testing.assert_allclose(back, before["image"], atol=0.05)
        np.testing.assert_array_equal(after["dicom/affine"], before["dicom/affine"])
    manifest = _manifest(tmp_path / "out")
    assert FEATURES <= set(manifest["features"])
    assert manifest["options"]["intensity"] == "zscore"
    assert not FEATURES & set(_manifest(tmp_path / "plain")["features"])      # none: not written
    assert "float32" in str(manifest["splits"]["train"]) and "int16" not in str(manifest["splits"]["train"])
    assert verify_dataset(str(tmp_path / "out")).ok
    from dcm2tfrecord.pipeline import cli
    assert cli.main(["verify", str(tmp_path / "out")]) == 0
    loaded = list(reader.load(str(tmp_path / "out"), "train", batch_size=1, shuffle=False, output="dict"))
    assert len(loaded) == 3
    for batch in loaded:
        assert batch["image"].dtype.name == "float32"
        assert batch[intensity.MEAN].to_list()[0] and batch[intensity.STD].to_list()[0]


def test_the_probe_plans_float32(tmp_path):
    """Shards are planned on 4 bytes a voxel, what the writer writes (its size check is exact)."""
    from dcm2tfrecord.transforms.records.probe import probe_file
    from dcm2tfrecord.transforms.settings import DecodeSettings
    from dcm2tfrecord.transforms.sources.match import expand_pattern
    root = tmp_path / "msd"
    _msd_with_background(root)
    source = next(expand_pattern(str(root / "imagesTr" / "case_1_0000.nii.gz")))
    plain = probe_file(source)
    record = probe_file(source, settings=DecodeSettings(intensity=intensity.Intensity.ZSCORE))
    assert plain.spec.dtype == "int16" and record.spec.dtype == "float32"
    assert record.spec.shape == plain.spec.shape
    assert record.spec.num_pixel_bytes == 2 * plain.spec.num_pixel_bytes


def _series(root):
    series = md.series(root / "in" / "ct", n=6, spacing=2.5, seed=11)
    masks = np.zeros((2, series.depth, *series.shape), bool)
    masks[0, 1:4, 3:7, 2:9] = True          # Liver
    masks[1, 2:5, 5:9, 6:11] = True         # Tumour
    md.write_seg(series, masks, root / "in" / "seg.dcm", "intensity_seg")
    class_map = root / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    return str(class_map)


def test_a_series_is_zscored_alone_and_after_crop_before_spacing(tmp_path):
    class_map = _series(tmp_path)
    [(_, plain)] = _records(tmp_path / "in", tmp_path / "plain", class_map=class_map).items()
    [(_, alone)] = _records(tmp_path / "in", tmp_path / "alone", class_map=class_map,
                            intensity="zscore").items()
    expected, mean, std = intensity.zscore(plain["image"])
    np.testing.assert_array_equal(alone["image"], expected)
    np.testing.assert_array_equal(alone["mask"], plain["mask"])
    np.testing.assert_allclose(alone[intensity.MEAN], mean, rtol=1e-6)
    _check_normalised(alone["image"])
    np.testing.assert_allclose(reader.intensity.denormalize(alone["image"], alone), plain["image"], atol=0.05)
    assert verify_dataset(str(tmp_path / "alone")).ok

    target = (1.1, 0.9, 1.5)
    [(_, record)] = _records(tmp_path / "in", tmp_path / "out", class_map=class_map, intensity="zscore",
                             crop="nonzero", spacing="1.1,0.9,1.5").items()
    box = tuple(int(n) for n in record[CROP_BOX])
    cut = _cut(plain["image"], box)
    normal, mean, std = intensity.zscore(cut)           # crop, normalise, resample (nnU-Net's order)
    source = tuple(np.linalg.norm(_affine(plain)[:3, :3], axis=0).tolist())
    target_dhw = spacing.axis_order(target)
    shape = spacing.planned_shape(cut.shape[:3], source, target_dhw)
    assert record["image"].dtype == np.float32
    np.testing.assert_allclose(record["image"], spacing.resample_image(normal, source, target_dhw, shape),
                               atol=1e-5)
    np.testing.assert_array_equal(record["mask"],
                                  spacing.resample_mask(_cut(plain["mask"], box), source, target_dhw, shape))
    np.testing.assert_allclose(record[intensity.MEAN], mean, rtol=1e-6)
    np.testing.assert_allclose(record[intensity.STD], std, rtol=1e-6)
    assert verify_dataset(str(tmp_path / "out")).ok
    [loaded] = list(reader.load(str(tmp_path / "out"), "train", batch_size=1, shuffle=False, output="dict"))
    assert loaded["image"].dtype.name == "float32"
    np.testing.assert_allclose(loaded[intensity.MEAN].to_list()[0], mean, rtol=1e-6)
