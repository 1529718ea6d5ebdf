"""The geometry test harness itself (tests/support/geometry_refs.py, series_builders.py): the
three references agree with each other and with the contract's formula on real files, the
voxel-by-voxel comparison fails on every convention error, and dcm2niix's and SimpleITK's
behaviour on gaps, tilt, localizers, 4-D and DWI is what geometry_refs' docstring says."""
from __future__ import annotations

import itertools
import os

import numpy as np
import pydicom
import pytest

from tests.support import geometry_refs as refs
from tests.support import series_builders as sb


def _contract(series, indices=None):
    chosen = list(range(len(series.slices))) if indices is None else list(indices)
    affine = refs.our_affine_from_slices(series.positions[chosen], series.orientation, series.pixel_spacing)
    return affine, series.volume(chosen)


def _only(run, name):
    assert name in run.volumes, (sorted(run.volumes), run.log)
    return run.volumes[name]


# --- the builders --------------------------------------------------------------------------

def test_builders_write_what_they_return_deterministically(tmp_path):
    one = sb.tilted_gantry(str(tmp_path / "a"))
    two = sb.tilted_gantry(str(tmp_path / "b"))
    assert [os.path.basename(p) for p in one.paths] != sorted(os.path.basename(p) for p in one.paths)
    for a, b in zip(one.paths, two.paths):
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    uids = set()
    for k, written in enumerate(one.slices):
        ds = pydicom.dcmread(written.path)
        np.testing.assert_allclose([float(v) for v in ds.ImagePositionPatient], written.position, atol=1e-6)
        np.testing.assert_allclose([float(v) for v in ds.ImageOrientationPatient], written.orientation, atol=1e-8)
        np.testing.assert_array_equal(ds.pixel_array, written.pixels)
        assert ds.SeriesInstanceUID == one.series_uid and float(ds.GantryDetectorTilt) == 15.0
        assert (ds.Rows, ds.Columns) == sb.DEFAULT_SHAPE["CT"] and [float(v) for v in ds.PixelSpacing] == [0.7, 0.9]
        uids.add(ds.SOPInstanceUID)
        if k:
            assert not np.array_equal(written.pixels, one.slices[k - 1].pixels)
    assert len(uids) == len(one.slices)
    steps = np.diff(one.positions, axis=0)
    np.testing.assert_allclose(steps, [[0, 0, 2.5]] * (len(steps)))            # along z, not the normal
    assert abs(np.dot(steps[0], sb.normal(one.orientation))) < 2.5 - 0.05


def test_4d_and_dwi_builders_set_the_distinguishing_tags(tmp_path):
    series = sb.dwi(str(tmp_path / "dwi"))
    ds = pydicom.dcmread(series.paths[4 * 2 + 1])
    assert float(ds[0x0018, 0x9087].value) == 1000.0
    assert [float(v) for v in ds[0x0018, 0x9089].value] == [0.0, 0.6, 0.8]
    np.testing.assert_allclose(series.positions[8:12], series.positions[:4])
    four = sb.four_d(str(tmp_path / "4d"), times=2, z=3)
    stamps = [(int(pydicom.dcmread(p).TemporalPositionIdentifier), pydicom.dcmread(p).AcquisitionTime)
              for p in four.paths]
    assert stamps == [(1, "101500.000000")] * 3 + [(2, "101510.000000")] * 3


# --- the references agree ------------------------------------------------------------------

def test_nibabel_simpleitk_and_dcm2niix_agree_with_the_contract_formula_on_an_oblique_series(tmp_path):
    series = sb.oblique(str(tmp_path / "dicom"), n=6, spacing=-2.0)      # built against the normal
    ours, volume = _contract(series)
    np.testing.assert_allclose(refs.nibabel_affine(series.paths), ours, atol=1e-6)
    nib_array, nib_affine = refs.nibabel_series(series.paths)
    assert nib_array.shape == (96, 80, 6)                                 # [row, column, slice]: not transposed
    assert refs.assert_same_geometry(ours, volume, nib_affine, nib_array, their_space="lps") < 1e-3
    itk_array, itk_affine = refs.sitk_series(series.folder)
    assert refs.assert_same_geometry(ours, volume, itk_affine, itk_array, their_space="lps") < 1e-3
    assert refs.axis_matches(volume, itk_array) == [((0, 1, 2), (0,))]    # sorted along the normal
    nifti = refs.dcm2niix_volumes(series.folder, str(tmp_path / "nifti"))
    assert len(nifti) == 1
    assert refs.assert_same_geometry(ours, volume, nifti[0].affine_ras, nifti[0].data, their_space="ras") < 1e-3
    assert refs.axis_matches(volume, nifti[0].data) == [((2, 1, 0), (1, 2))]
    # the same files, listed along the normal: every reference still agrees, through another mapping
    along = list(range(len(series.slices)))[::-1]
    ours_along, volume_along = _contract(series, along)
    np.testing.assert_allclose(refs.nibabel_affine([series.paths[i] for i in along]), ours_along, atol=1e-6)
    assert refs.assert_same_geometry(ours_along, volume_along, itk_affine, itk_array, their_space="lps") < 1e-3
    assert refs.axis_matches(volume_along, nifti[0].data) == [((2, 1, 0), (1,))]


def test_the_contract_formula_puts_slice_k_at_its_own_position(tmp_path):
    for series in (sb.oblique(str(tmp_path / "o")), sb.tilted_gantry(str(tmp_path / "t"))):
        affine, volume = _contract(series)
        for k, written in enumerate(series.slices):
            np.testing.assert_allclose(affine @ [k, 0, 0, 1], [*written.position, 1], atol=1e-6)
            row, col = np.array(written.orientation[:3]), np.array(written.orientation[3:])
            np.testing.assert_allclose(affine @ [k, 1, 0, 1], [*(written.position + 0.7 * col), 1], atol=1e-6)
            np.testing.assert_allclose(affine @ [k, 0, 1, 1], [*(written.position + 0.9 * row), 1], atol=1e-6)
    with pytest.raises(ValueError):
        refs.our_affine_from_slices([[0, 0, 0]], sb.AXIAL, (1, 1))
    single = refs.our_affine_from_slices([[1, 2, 3]], sb.CORONAL, (0.5, 0.8), single_slice_spacing=4.0)
    np.testing.assert_allclose(single[:3, 0], [0, 4.0, 0])                 # row x column = (0, 1, 0)
    corners = refs.world_corners(single, (1, 3, 5))
    np.testing.assert_allclose(corners[-1], [1 + 0.8 * 4, 2, 3 - 0.5 * 2])  # voxel [0, 2, 4]
    assert corners.shape == (8, 3)


# --- the comparison fails on convention errors ---------------------------------------------

def _mutations(affine, shape):
    n = shape
    flip_j = affine.copy()
    flip_j[:3, 1] *= -1
    flip_j_same_box = flip_j.copy()
    flip_j_same_box[:3, 3] = affine[:3, 3] + affine[:3, 1] * (n[1] - 1)     # same 8 corner points
    reversed_k = affine.copy()
    reversed_k[:3, 0] *= -1
    reversed_k[:3, 3] = affine[:3, 3] + affine[:3, 0] * (n[0] - 1)          # same box, slices upside down
    swapped = affine[:, [0, 2, 1, 3]]
    shifted = affine.copy()
    shifted[:3, 3] += [1.0, 0.0, 0.0]
    nudged = affine.copy()
    nudged[:3, 3] += [0.0, 0.0, 0.01]
    row_spacing_for_column = affine.copy()
    row_spacing_for_column[:3, 1] *= 0.9 / 0.7
    row_spacing_for_column[:3, 2] *= 0.7 / 0.9
    return {"flipped j": flip_j, "flipped j, same box": flip_j_same_box, "reversed slices, same box": reversed_k,
            "swapped i and j": swapped, "origin 1 mm off": shifted, "origin 0.01 mm off": nudged,
            "spacings swapped": row_spacing_for_column}


def test_a_wrong_affine_fails_against_every_reference(tmp_path):
    series = sb.oblique(str(tmp_path / "dicom"), n=5, spacing=2.5)
    ours, volume = _contract(series)
    itk_array, itk_affine = refs.sitk_series(series.folder)
    nifti = refs.dcm2niix_volumes(series.folder, str(tmp_path / "nifti"))[0]
    theirs = [(itk_affine, itk_array, "lps"), (nifti.affine_ras, nifti.data, "ras"),
              (*refs.nibabel_series(series.paths)[::-1], "lps")]
    for their_affine, their_array, space in theirs:
        refs.assert_same_geometry(ours, volume, their_affine, their_array, their_space=space)
        for label, wrong in _mutations(ours, volume.shape).items():
            with pytest.raises(AssertionError, match="corner voxels differ"):
                refs.assert_same_geometry(wrong, volume, their_affine, their_array, their_space=space)
                pytest.fail(f"{label} passed against {space}")
        other = "ras" if space == "lps" else "lps"
        with pytest.raises(AssertionError, match="corner voxels differ"):
            refs.assert_same_geometry(ours, volume, their_affine, their_array, their_space=other)
    # a consistent description in another axis order is right, and passes
    transposed = np.transpose(volume, (0, 2, 1))
    refs.assert_same_geometry(ours[:, [0, 2, 1, 3]], transposed, itk_affine, itk_array, their_space="lps")
    # the right affine for other voxels fails: values decide the mapping
    with pytest.raises(AssertionError, match="no axis permutation"):
        refs.assert_same_geometry(ours, volume[[0, 2, 1, 3, 4]], itk_affine, itk_array, their_space="lps")


def test_the_axis_mapping_is_found_by_value_among_all_48():
    rng = np.random.default_rng(0)
    for shape in ((4, 5, 6), (5, 5, 5)):
        ours = rng.normal(size=shape)
        for perm in itertools.permutations(range(3)):
            for count in range(4):
                for flipped in itertools.combinations(range(3), count):
                    theirs = np.flip(np.transpose(ours, perm), flipped) * 3.0 - 7.0
                    assert refs.axis_matches(ours, theirs) == [(perm, flipped)]


def test_data_too_symmetric_to_decide_fails():
    flat = np.ones((3, 4, 5))
    with pytest.raises(AssertionError, match="too symmetric"):
        refs.assert_same_geometry(np.eye(4), flat, np.eye(4), flat, their_space="lps")
    k, j, i = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")
    mirrored = 10.0 * k + 3.0 * j + np.abs(i - 2)                          # symmetric along i only
    with pytest.raises(AssertionError, match="too symmetric"):
        refs.assert_same_geometry(np.eye(4), mirrored, np.eye(4), mirrored, their_space="lps")
    single = np.arange(20.0).reshape(1, 4, 5)                              # a length-1 axis decides nothing, harmlessly
    assert refs.assert_same_geometry(np.eye(4), single, np.eye(4), single, their_space="lps") == 0.0


# --- what dcm2niix and SimpleITK do (measured; geometry_refs' docstring) --------------------

def test_dcm2niix_and_simpleitk_on_the_ge_gap(tmp_path):
    series = sb.ge_gap(str(tmp_path / "dicom"))
    ours, volume = _contract(series)
    run = refs.dcm2niix_run(series.folder, str(tmp_path / "nifti"))
    assert "Interslice distance varies in this volume" in run.log
    assert sorted(run.volumes) == ["7_ge_gap", "7_ge_gap_Eq_1"]
    raw = run.volumes["7_ge_gap"]
    first_step, _ = _contract(series, [0, 1])
    refs.assert_same_geometry(first_step, volume, raw.affine_ras, raw.data, their_space="ras")
    with pytest.raises(AssertionError, match="differ by up to 402.5"):
        refs.assert_same_geometry(ours, volume, raw.affine_ras, raw.data, their_space="ras")
    equidistant = run.volumes["7_ge_gap_Eq_1"]
    assert equidistant.data.shape == (80, 96, 8)
    np.testing.assert_allclose(equidistant.affine_ras[2, 2], 205.0 / 7, atol=1e-3)
    itk_array, itk_affine = refs.sitk_series(series.folder)
    refs.assert_same_geometry(ours, volume, itk_affine, itk_array, their_space="lps")  # mean step, as the contract


@pytest.mark.parametrize("builder, stacked, equidistant", [
    (sb.missing_slices, 9, 10), (sb.repeated_position, 6, 5), (sb.localizer_included, 6, 12)])
def test_dcm2niix_and_simpleitk_stack_uneven_series_whole(tmp_path, builder, stacked, equidistant):
    series = builder(str(tmp_path / "dicom"))
    run = refs.dcm2niix_run(series.folder, str(tmp_path / "nifti"))
    assert "Interslice distance varies in this volume" in run.log
    name = f"7_{builder.__name__}"
    assert sorted(run.volumes) == [name, name + "_Eq_1"]
    assert run.volumes[name].data.shape[2] == stacked and run.volumes[name + "_Eq_1"].data.shape[2] == equidistant
    itk_array, itk_affine = refs.sitk_series(series.folder)
    assert itk_array.shape[0] == stacked
    if builder is not sb.localizer_included:
        ours, volume = _contract(series)
        first_step, _ = _contract(series, [0, 1])
        refs.assert_same_geometry(first_step, volume, run.volumes[name].affine_ras, run.volumes[name].data,
                                  their_space="ras")
        refs.assert_same_geometry(ours, volume, itk_affine, itk_array, their_space="lps")


def test_dcm2niix_and_simpleitk_on_a_tilted_gantry(tmp_path):
    series = sb.tilted_gantry(str(tmp_path / "dicom"), n=8, table_step=2.5, tilt_degrees=15.0)
    ours, volume = _contract(series)
    run = refs.dcm2niix_run(series.folder, str(tmp_path / "nifti"))
    assert "Gantry Tilt based on 0018,1120 15" in run.log
    assert sorted(run.volumes) == ["7_tilted_gantry", "7_tilted_gantry_Tilt_1"]
    raw = run.volumes["7_tilted_gantry"]
    off = 7 * 2.5 * (1 - np.cos(np.radians(15.0)))
    with pytest.raises(AssertionError, match=f"differ by up to {off:.4g} mm"):
        refs.assert_same_geometry(ours, volume, raw.affine_ras, raw.data, their_space="ras")
    theirs_described = ours.copy()
    theirs_described[:3, 0] = [0.0, 0.0, 2.5 * np.cos(np.radians(15.0))]
    refs.assert_same_geometry(theirs_described, volume, raw.affine_ras, raw.data, their_space="ras")
    assert run.volumes["7_tilted_gantry_Tilt_1"].data.shape == (80, 103, 8)
    itk_array, itk_affine = refs.sitk_series(series.folder)
    with pytest.raises(AssertionError, match="differ by up to 4.568 mm"):
        refs.assert_same_geometry(ours, volume, itk_affine, itk_array, their_space="lps")
    orthogonal = ours.copy()
    orthogonal[:3, 0] = sb.normal(series.orientation) * 2.5
    refs.assert_same_geometry(orthogonal, volume, itk_affine, itk_array, their_space="lps")


def test_dcm2niix_on_4d_and_dwi_series(tmp_path):
    four = sb.four_d(str(tmp_path / "4d"), times=3, z=4, orientation=sb.OBLIQUE)
    (nifti,) = refs.dcm2niix_volumes(four.folder, str(tmp_path / "4d_nifti"))
    assert nifti.data.shape == (48, 64, 4, 3) and nifti.bval is None
    for t in range(3):
        ours, volume = _contract(four, range(4 * t, 4 * t + 4))
        refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data[..., t], their_space="ras")
    assert refs.sitk_series(four.folder)[0].shape == (12, 64, 48)          # one 3-D stack of every file
    dwi = sb.dwi(str(tmp_path / "dwi"), orientation=sb.OBLIQUE)
    (nifti,) = refs.dcm2niix_volumes(dwi.folder, str(tmp_path / "dwi_nifti"))
    assert nifti.data.shape == (48, 64, 4, 4)
    assert nifti.bval is not None and nifti.bvec is not None
    np.testing.assert_allclose(nifti.bval, np.array(sb.DWI_BVALUES))
    np.testing.assert_allclose(refs.fsl_bvecs_to_lps(nifti.bvec, nifti.affine_ras), np.array(sb.DWI_GRADIENTS),
                               atol=1e-4)
    for v in range(4):
        ours, volume = _contract(dwi, range(4 * v, 4 * v + 4))
        refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data[..., v], their_space="ras")
