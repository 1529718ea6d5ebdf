"""``--spacing auto`` end to end: MSD-like NIfTI tasks whose cases differ in spacing, converted by
Beam's local runner (``run_convert``) with and without the option. The target is nnU-Net v2's
(transforms.images.spacing.auto_spacing over every volume record's spacing and shape as probed),
every record (and its mask) is resampled to it, and dataset.json records it (its ``auto_spacing``
object, which ``inspect`` shows)."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.pipeline.cli import main
from dcm2tfrecord.transforms.images import spacing
from tests.support import mask_datasets as md
from tests.support.nifti_tasks import PATTERN, msd_spacings
from tests.support.nifti_tasks import class_map as _nifti_class_map
from tests.support.preprocessed import CLASS_MAP_YAML, affine as _affine, manifest as _manifest, records as _records

# name -> (shape along the file's i, j, k; spacing mm along them)
ISOTROPIC = {"case_1": ((9, 7, 5), (0.7, 0.9, 2.5)), "case_2": ((8, 8, 4), (0.8, 1.0, 2.0)),
             "case_3": ((6, 5, 3), (0.6, 0.8, 3.0))}
# coarse slices (5 to 10 mm) and few of them (3 x 3 < 11): the coarse axis at its 10th percentile
ANISOTROPIC = {"case_1": ((12, 11, 3), (0.9, 1.0, 5.0)), "case_2": ((13, 12, 3), (1.0, 1.0, 8.0)),
               "case_3": ((11, 12, 3), (1.1, 0.9, 10.0))}


def _voxel(record) -> tuple:
    """A record's spacing in array order ``(depth, height, width)``, from its affine."""
    return tuple(float(v) for v in np.linalg.norm(_affine(record)[:3, :3], axis=0))


def _shape(record) -> tuple:
    image = record["image"]
    return tuple(image.shape[:3]) if image.ndim == 4 else (1,) + tuple(image.shape[:2])


def _converted(tmp_path, cases):
    root = tmp_path / "msd"
    msd_spacings(root, cases)
    options = dict(class_map=_nifti_class_map(tmp_path), mask_pattern=PATTERN)
    plain = _records(root, tmp_path / "plain", **options)
    auto = _records(root, tmp_path / "auto", spacing="auto", **options)
    assert set(plain) == set(auto) and len(plain) == len(cases)
    return plain, auto


def _check(tmp_path, plain, auto, expected_xyz, anisotropic):
    chosen = spacing.auto_spacing([(_voxel(r), _shape(r)) for r in plain.values()])
    assert chosen.target == pytest.approx(expected_xyz, rel=1e-5)
    assert chosen.anisotropic == anisotropic
    target = spacing.axis_order(chosen.target)
    for key, record in auto.items():
        # resampled to the chosen target, from its source's grid (recorded), mask and all
        np.testing.assert_allclose(_voxel(record), target, rtol=1e-5)
        np.testing.assert_allclose(record["dicom/original_spacing"], _voxel(plain[key]), rtol=1e-6)
        size = _shape(plain[key])
        shape = spacing.planned_shape(size, _voxel(plain[key]), target)
        assert _shape(record) == shape
        image = plain[key]["image"] if plain[key]["image"].ndim == 4 else plain[key]["image"][None]
        resampled = spacing.resample_image(image, _voxel(plain[key]), target, shape)
        np.testing.assert_array_equal(record["image"].reshape(resampled.shape), resampled)
        assert record["mask"].size == int(np.prod(shape))
    written = _manifest(tmp_path / "auto")
    assert written["options"]["spacing"] == "auto"
    block = written["auto_spacing"]
    assert block["rule"] == spacing.AUTO_RULE and block["records"] == len(plain)
    assert block["target_mm"] == pytest.approx(list(chosen.target), rel=1e-9)
    assert block["anisotropic"] is anisotropic and block["from_slices"] is False
    assert "auto_spacing" not in _manifest(tmp_path / "plain")
    return block


def test_spacing_auto_takes_the_median_spacing_of_the_records(tmp_path, capsys):
    plain, auto = _converted(tmp_path, ISOTROPIC)
    # NIfTI i, j, k are the record's columns, rows and slices: X, Y, Z medians of each
    block = _check(tmp_path, plain, auto, (0.7, 0.9, 2.5), anisotropic=False)
    assert block["median_mm"] == pytest.approx(block["target_mm"])
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "auto")]) == 0
    shown = capsys.readouterr().out
    # its Training view section, under the dataset facts
    assert "    spacing chosen: 0.7,0.9,2.5 mm (X,Y,Z) by nnunetv2_fullres_target_spacing over 3 records" in shown


def test_spacing_auto_brings_an_anisotropic_axis_to_its_tenth_percentile(tmp_path, capsys):
    plain, auto = _converted(tmp_path, ANISOTROPIC)
    block = _check(tmp_path, plain, auto, (1.0, 1.0, float(np.percentile([5.0, 8.0, 10.0], 10))), anisotropic=True)
    assert block["median_mm"][2] == pytest.approx(8.0)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path / "auto")]) == 0
    assert ("    spacing chosen: 1,1,5.6 mm (X,Y,Z) by nnunetv2_fullres_target_spacing over 3 records; anisotropic: "
            "the coarse axis at its 10th percentile (median 1,1,8)") in capsys.readouterr().out


def test_a_dicom_series_and_its_slices_take_their_own_spacing(tmp_path):
    """A CT series and its SEG: as one volume (--unit series) the target is the volume's spacing
    (the median of one), as slice records (--unit file) their in-plane medians (from_slices), each
    written with the spacing chosen and a dataset that verifies."""
    md.seg_archive(tmp_path, seed=4, depth=4)
    class_map = tmp_path / "classes.yaml"
    class_map.write_text(CLASS_MAP_YAML)
    plain = _records(tmp_path / "in", tmp_path / "plain", class_map=str(class_map))
    [volume] = plain.values()
    expected = spacing.axis_order(_voxel(volume))
    [record] = _records(tmp_path / "in", tmp_path / "auto", class_map=str(class_map), spacing="auto").values()
    block = _manifest(tmp_path / "auto")["auto_spacing"]
    assert block["target_mm"] == pytest.approx(list(expected), rel=1e-6)
    assert block["records"] == 1 and not block["from_slices"]
    np.testing.assert_allclose(record["dicom/pixel_spacing"], [expected[1], expected[0]], rtol=1e-6)
    np.testing.assert_allclose(record["dicom/slice_spacing"], [expected[2]], rtol=1e-6)
    np.testing.assert_array_equal(record["image"], volume["image"])     # its own spacing: unchanged
    assert verify_dataset(str(tmp_path / "auto")).ok
    slices = _records(tmp_path / "in", tmp_path / "slices", class_map=str(class_map), unit="file", spacing="auto")
    block = _manifest(tmp_path / "slices")["auto_spacing"]
    assert block["from_slices"] and block["records"] == 4
    assert block["target_mm"][:2] == pytest.approx(list(expected[:2]), rel=1e-6)
    for record in slices.values():
        np.testing.assert_allclose(record["dicom/pixel_spacing"], [expected[1], expected[0]], rtol=1e-6)
        assert int(record["depth"]) == 1
