"""Issue 32's geometry end to end: real conversions (``run_convert``, Beam's local runner) of
real DICOM files, the records read back with ``reader.RandomAccess``, their pixels and
``dicom/affine`` checked against independent readers of the same files: dcm2niix, SimpleITK
and nibabel (tests/support/geometry_refs.py), voxel by voxel in world coordinates
(``assert_same_geometry``: the axis mapping found by value, then the 8 corner voxels within
1e-3 mm).

What the references are trusted for (measured, geometry_refs' docstring and
tests/transforms/series/test_geometry_refs.py):

- regular and oblique series: all three (dcm2niix's plain NAME.nii, not a resampled _Eq_ file).
- a tilted gantry: nibabel and the contract's formula (our_affine_from_slices) only. dcm2niix's
  plain NAME.nii keeps the tilted in-plane axes but steps |step| cos(tilt) along z per slice,
  so its slice 7 of 8 lies 7 x 2.5 x (1 - cos 15 deg) = 0.596 mm from where the DICOM puts it;
  SimpleITK steps along the normal instead of the table (4.568 mm off). Both are asserted to
  be off by exactly those amounts, which pins what we compare against.
- the relation of ``reader.geometry.nifti_affine`` to dcm2niix's NIfTI, worked out on a regular
  axial series whose record order is ascending along the normal: dcm2niix stores
  ``np.flip(ours.transpose(2, 1, 0), axis=1)`` (the row axis reversed: j -> h - 1 - j) and its
  affine is ``nifti_affine(ours) @ FLIP_J`` with FLIP_J = [[1,0,0,0],[0,-1,0,h-1],[0,0,1,0],
  [0,0,0,1]]: the same voxels in the same places, the array stored the other way up.
"""
from __future__ import annotations

import gzip
import io
import os
import shutil
import warnings

import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from pydicom.data import get_testdata_file
from pydicom.pixels import apply_modality_lut

from dcm2tfrecord import reader
from tests.support import geometry_refs as refs
from tests.support import run_convert
from tests.support import series_builders as sb
from tests.support.processes import errors_of

with warnings.catch_warnings():
    warnings.simplefilter("ignore")          # "The DICOM readers are highly experimental"
    from nibabel.nicom import csareader, dicomwrappers

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True)
NICOM_DATA = os.path.join(os.path.dirname(dicomwrappers.__file__), "tests", "data")
MM = refs.TOLERANCE_MM


# ---------------------------------------------------------------- helpers


def _convert(inputs, out, **options) -> tuple[dict, list[dict]]:
    """(summary, records): every record of the run, ordered by (volume index, first position)."""
    summary = run_convert(inputs, out, **OPTIONS, **options)
    if not summary["records"]:
        return summary, []
    access = reader.RandomAccess(str(out), "train")
    records = [access[i] for i in range(len(access))]
    records.sort(key=lambda r: (int(r["dicom/volume_index"]), tuple(r["dicom/image_position_patient"][:3])))
    return summary, records


def _only(records: list[dict]) -> dict:
    assert len(records) == 1, [r["image"].shape for r in records]
    return records[0]


def _lps(record: dict) -> np.ndarray:
    affine = reader.geometry.affine(record)
    assert affine is not None, "the record has no dicom/affine"
    return affine


def _pixels(record: dict) -> np.ndarray:
    """[depth, height, width]; a split of single images gives [height, width, channels]: depth 1."""
    image = record["image"]
    if image.ndim == 3:
        assert int(record["depth"]) == 1, record["depth"]
        image = image[None]
    assert image.ndim == 4 and image.shape[-1] == 1, image.shape
    return image[..., 0]


def _modality(path: str) -> np.ndarray:
    ds = pydicom.dcmread(path)
    return np.asarray(apply_modality_lut(ds.pixel_array, ds))


def _along_normal(series: sb.WrittenSeries, indices=None) -> list[int]:
    """Build indices (all by default) sorted along the slice normal: the record order."""
    chosen = list(range(len(series.slices))) if indices is None else list(indices)
    n = sb.normal(series.orientation)
    return sorted(chosen, key=lambda i: float(np.dot(series.positions[i], n)))


def _contract(series: sb.WrittenSeries, indices, single_slice_spacing=None) -> np.ndarray:
    return refs.our_affine_from_slices(series.positions[list(indices)], series.orientation, series.pixel_spacing,
                                       single_slice_spacing)


def _nifti(folder: str, tmp) -> refs.NiftiVolume:
    """dcm2niix's plain NIfTI of ``folder`` (not an _Eq_ or _Tilt_ file)."""
    run = refs.dcm2niix_run(folder, str(tmp))
    plain = [v for name, v in run.volumes.items() if "_Eq_" not in name and "_Tilt_" not in name]
    assert len(plain) == 1, (sorted(run.volumes), run.log)
    return plain[0]


def _sitk_image(folder: str):
    names = sitk.ImageSeriesReader.GetGDCMSeriesFileNames(folder, sitk.ImageSeriesReader.GetGDCMSeriesIDs(folder)[0])
    series_reader = sitk.ImageSeriesReader()
    series_reader.SetFileNames(names)
    return series_reader.Execute()


def _flip_j(height: int) -> np.ndarray:
    flip = np.eye(4)
    flip[1, 1], flip[1, 3] = -1.0, height - 1.0
    return flip


# ---------------------------------------------------------------- 1. --unit series, 3-D


SERIES = {
    "regular": lambda f: sb.regular(f, 7, 2.5, shuffle_names=False),
    "shuffled_names": lambda f: sb.regular(f, 7, 2.5, shuffle_names=True, seed=3),
    "oblique": lambda f: sb.oblique(f, n=6, spacing=2.0),
    "oblique_built_against_the_normal": lambda f: sb.oblique(f, n=6, spacing=-2.0, seed=1),
}


@pytest.fixture(scope="module", params=sorted(SERIES))
def converted(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    series = SERIES[request.param](str(root / "dicom"))
    summary, records = _convert(series.folder, root / "out", unit="series")
    assert summary["failed"] == {} and summary["written"] == len(series.slices), summary
    return request.param, series, _only(records), root


def test_a_series_record_holds_its_slices_in_order_along_the_normal(converted):
    _, series, record, _ = converted
    order = _along_normal(series)
    volume = _pixels(record)
    assert volume.shape == (len(series.slices), *series.slices[0].pixels.shape)
    for k, i in enumerate(order):
        np.testing.assert_array_equal(volume[k], _modality(series.paths[i]))
    np.testing.assert_allclose(record["dicom/image_position_patient"].reshape(-1, 3), series.positions[order],
                               atol=1e-4)
    np.testing.assert_allclose(record["dicom/image_orientation_patient"], series.orientation, atol=1e-6)
    np.testing.assert_allclose(_lps(record), _contract(series, order), atol=1e-4)
    assert int(record["dicom/volume_index"]) == 0 and int(record["dicom/volumes"]) == 1


def test_a_series_record_is_where_dcm2niix_simpleitk_and_nibabel_put_it(converted):
    _, series, record, root = converted
    ours, volume = _lps(record), _pixels(record)
    nifti = _nifti(series.folder, root / "nifti")
    assert refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data, their_space="ras") < MM
    itk_array, itk_affine = refs.sitk_series(series.folder)
    assert refs.assert_same_geometry(ours, volume, itk_affine, itk_array, their_space="lps") < MM
    nib_array, nib_affine = refs.nibabel_series([series.paths[i] for i in _along_normal(series)])
    assert refs.assert_same_geometry(ours, volume, nib_affine, nib_array, their_space="lps") < MM


def test_nifti_affine_is_dcm2niixs_up_to_its_row_flip(tmp_path):
    """Worked out on a regular axial series (the module docstring)."""
    series = sb.regular(str(tmp_path / "dicom"), 7, 2.5, shuffle_names=True, seed=5)
    record = _only(_convert(series.folder, tmp_path / "out", unit="series")[1])
    ours, volume = _lps(record), _pixels(record)
    nifti = _nifti(series.folder, tmp_path / "nifti")
    transposed = volume.transpose(2, 1, 0)                                  # [i, j, k]
    height = volume.shape[1]
    # dcm2niix stores the row axis reversed; its values are ours (both rescaled to HU)
    np.testing.assert_array_equal(nifti.data, np.flip(transposed, axis=1).astype(np.float64))
    np.testing.assert_allclose(nifti.affine_ras, reader.geometry.nifti_affine(ours) @ _flip_j(height), atol=MM)
    # and ours without the flip: every voxel of the transposed array where dcm2niix puts it
    refs.assert_same_geometry(ours, volume, reader.geometry.nifti_affine(ours), transposed, their_space="ras")


def test_itk_geometry_is_simpleitks(converted):
    _, series, record, _ = converted
    origin, spacing, direction = reader.geometry.itk_geometry(_lps(record))
    image = _sitk_image(series.folder)
    np.testing.assert_allclose(origin, image.GetOrigin(), atol=MM)
    np.testing.assert_allclose(spacing, image.GetSpacing(), atol=1e-5)
    np.testing.assert_allclose(direction, image.GetDirection(), atol=1e-5)
    np.testing.assert_array_equal(_pixels(record), sitk.GetArrayFromImage(image))
    ours = sitk.GetImageFromArray(_pixels(record))
    ours.SetOrigin(origin)
    ours.SetSpacing(spacing)
    ours.SetDirection(direction)
    for index in [(0, 0, 0), (79, 95, 0), (5, 7, 3), tuple(n - 1 for n in image.GetSize())]:
        index = tuple(min(v, n - 1) for v, n in zip(index, image.GetSize()))
        np.testing.assert_allclose(ours.TransformIndexToPhysicalPoint(index),
                                   image.TransformIndexToPhysicalPoint(index), atol=MM)


def test_a_tilted_gantry_keeps_its_shear_where_nibabel_puts_it(tmp_path):
    series = sb.tilted_gantry(str(tmp_path / "dicom"), n=8, table_step=2.5, tilt_degrees=15.0)
    summary, records = _convert(series.folder, tmp_path / "out", unit="series")
    assert summary["failed"] == {}, summary
    record = _only(records)
    ours, volume = _lps(record), _pixels(record)
    order = _along_normal(series)
    assert order == list(range(8))
    np.testing.assert_allclose(ours, _contract(series, order), atol=1e-4)
    np.testing.assert_allclose(ours[:3, 0], [0.0, 0.0, 2.5], atol=1e-5)         # the table's step, sheared
    for k, written in enumerate(series.slices):
        np.testing.assert_allclose((ours @ [k, 0, 0, 1])[:3], written.position, atol=1e-4)
    nib_array, nib_affine = refs.nibabel_series(series.paths)
    assert refs.assert_same_geometry(ours, volume, nib_affine, nib_array, their_space="lps") < MM
    # dcm2niix's plain file steps 2.5 cos(15) along z: 0.596 mm off at slice 7 (the docstring)
    nifti = _nifti(series.folder, tmp_path / "nifti")
    off = 7 * 2.5 * (1 - np.cos(np.radians(15.0)))
    with pytest.raises(AssertionError, match=f"differ by up to {off:.4g} mm"):
        refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data, their_space="ras")
    described = ours.copy()
    described[:3, 0] = [0.0, 0.0, 2.5 * np.cos(np.radians(15.0))]
    refs.assert_same_geometry(described, volume, nifti.affine_ras, nifti.data, their_space="ras")


# ---------------------------------------------------------------- 2. --unit file, real single files


@pytest.mark.parametrize("name", ["CT_small.dcm", "MR_small.dcm"])
def test_a_single_file_is_where_nibabel_and_dcm2niix_put_it(tmp_path, name):
    folder = tmp_path / "dicom"
    folder.mkdir()
    path = str(folder / name)
    shutil.copy(get_testdata_file(name), path)
    summary, records = _convert(str(folder), tmp_path / "out", unit="file")
    assert summary["failed"] == {}, summary
    record = _only(records)
    ours, volume = _lps(record), _pixels(record)
    ds = pydicom.dcmread(path)
    assert volume.shape == (1, ds.Rows, ds.Columns)
    np.testing.assert_array_equal(volume[0], _modality(path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapper = dicomwrappers.wrapper_from_file(path)
    theirs = np.asarray(wrapper.affine, float)                          # [row, column, slice] -> LPS
    np.testing.assert_allclose(ours[:3, 1], theirs[:3, 0], atol=1e-5)      # column cosines x row spacing
    np.testing.assert_allclose(ours[:3, 2], theirs[:3, 1], atol=1e-5)      # row cosines x column spacing
    np.testing.assert_allclose(ours[:3, 3], theirs[:3, 3], atol=MM)
    # one slice: along the normal row x column by Spacing Between Slices, else Slice Thickness
    # (nibabel's length; nibabel's own normal is column x row, the other sign)
    iop = np.array([float(v) for v in ds.ImageOrientationPatient])
    length = float(ds.get("SpacingBetweenSlices") or ds.get("SliceThickness") or 1.0)
    np.testing.assert_allclose(ours[:3, 0], np.cross(iop[:3], iop[3:]) * length, atol=1e-5)
    np.testing.assert_allclose(ours[:3, 0], -theirs[:3, 2], atol=1e-5)
    in_plane = [(0, 0), (0, ds.Columns - 1), (ds.Rows - 1, 0), (ds.Rows - 1, ds.Columns - 1)]
    for j, i in in_plane:
        np.testing.assert_allclose((ours @ [0, j, i, 1])[:3], (theirs @ [j, i, 0, 1])[:3], atol=MM)
    nib_data = np.asarray(wrapper.get_data())[..., None]
    assert refs.assert_same_geometry(ours, volume, theirs, nib_data, their_space="lps") < MM
    nifti = _nifti(str(folder), tmp_path / "nifti")
    assert refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data, their_space="ras") < MM
    ras = refs.RAS_FROM_LPS @ nifti.affine_ras
    # dcm2niix's in-plane columns, whatever its axis order: the same two vectors up to sign
    theirs_in_plane = sorted([tuple(np.round(np.abs(ras[:3, a]), 4)) for a in (0, 1)])
    ours_in_plane = sorted([tuple(np.round(np.abs(ours[:3, a]), 4)) for a in (1, 2)])
    assert theirs_in_plane == ours_in_plane


# ---------------------------------------------------------------- 3. Siemens mosaics


def _mosaic_file(folder, source: str, seed: int) -> str:
    """nibabel's ``source`` (siemens_dwi_0 or _1000.dcm.gz), gunzipped, random 12-bit pixels
    written over its all-zero pixel data (the header byte for byte), as
    tests/transforms/dicom/test_mosaic.py does."""
    with open(os.path.join(NICOM_DATA, source), "rb") as handle:
        data = gzip.decompress(handle.read())
    ds = pydicom.dcmread(io.BytesIO(data), defer_size=1024)
    raw = ds._dict[0x7FE00010]
    samples = np.random.default_rng(seed).integers(0, 1 << 12, ds.Rows * ds.Columns, dtype="<u2").tobytes()
    assert raw.length == len(samples)
    data = data[:raw.value_tell] + samples + data[raw.value_tell + raw.length:]
    os.makedirs(str(folder), exist_ok=True)
    path = os.path.join(str(folder), source[:-len(".dcm.gz")] + ".dcm")
    with open(path, "wb") as handle:
        handle.write(data)
    return path


def test_siemens_mosaics_are_where_nibabel_and_dcm2niix_put_them_with_their_diffusion(tmp_path):
    """nibabel's two DTI mosaics (b = 0 and b = 1000 of one series), each a record of 48 tile
    slices with ``--unit file``. dcm2niix, given the two files, writes one 4-D NIfTI and the
    .bval 0, 1000 (given the b = 1000 file alone it writes .bval 0 and a zero .bvec: its
    diffusion reading needs the series, so the pair is the reference). nibabel's b_value (992)
    is the B matrix's trace, not the CSA B_value (1000) that dcm2niix and we report, and its
    b_vector is in its voxel axes with the sign lost: the CSA header's values are read directly."""
    paths = [_mosaic_file(tmp_path / "dicom", "siemens_dwi_0.dcm.gz", 1),
             _mosaic_file(tmp_path / "dicom", "siemens_dwi_1000.dcm.gz", 2)]
    summary, records = _convert(str(tmp_path / "dicom"), tmp_path / "out", unit="file")
    assert summary["failed"] == {} and summary["written"] == 2, summary
    records.sort(key=lambda r: float(r["dicom/diffusion_bvalue"][0]) if r["dicom/diffusion_bvalue"].size else -1)
    nifti = _nifti(str(tmp_path / "dicom"), tmp_path / "nifti")
    assert nifti.data.shape == (128, 128, 48, 2), nifti.data.shape
    assert nifti.bval is not None and nifti.bvec is not None
    np.testing.assert_allclose(nifti.bval, [0.0, 1000.0])
    dcm2niix_gradients = refs.fsl_bvecs_to_lps(nifti.bvec, nifti.affine_ras)
    for volume_number, (path, record) in enumerate(zip(paths, records)):
        ours, volume = _lps(record), _pixels(record)
        assert volume.shape == (48, 128, 128)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            wrapper = dicomwrappers.wrapper_from_file(path)
            nib_data = np.asarray(wrapper.get_data())                   # [j, i, k]
        assert isinstance(wrapper, dicomwrappers.MosaicWrapper)
        np.testing.assert_array_equal(np.transpose(volume, (1, 2, 0)), nib_data)
        nib_affine = np.asarray(wrapper.affine, float)
        assert refs.assert_same_geometry(ours, volume, nib_affine, nib_data, their_space="lps") < MM
        np.testing.assert_allclose(ours, nib_affine[:, [2, 0, 1, 3]], atol=MM)
        assert refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data[..., volume_number],
                                         their_space="ras") < MM
        bvalue = record["dicom/diffusion_bvalue"]
        gradient = record["dicom/diffusion_gradient"]
        np.testing.assert_allclose(bvalue, [nifti.bval[volume_number]])
        np.testing.assert_allclose(bvalue, [csareader.get_b_value(wrapper.csa_header)])
        if volume_number == 0:
            assert gradient.size == 0 or np.allclose(gradient, 0.0), gradient
            continue
        np.testing.assert_allclose(gradient, dcm2niix_gradients[1], atol=MM)
        g_vector = np.asarray(csareader.get_g_vector(wrapper.csa_header), float)
        np.testing.assert_allclose(gradient, g_vector / np.linalg.norm(g_vector), atol=MM)
        lps = wrapper.rotation_matrix @ np.asarray(wrapper.b_vector, float)
        assert min(np.abs(lps - gradient).max(), np.abs(lps + gradient).max()) < MM


# ---------------------------------------------------------------- 4. gaps, localizers, repeats


@pytest.mark.parametrize("builder, reason, named", [
    (sb.ge_gap, "series_uneven_spacing", "202.50 mm"),
    (sb.missing_slices, "series_missing_slices", "1 slice(s) missing from 10"),
    (sb.localizer_included, "series_localizer", "LOCALIZER"),
    (sb.repeated_position, "series_duplicate_position", "repeated position"),
])
def test_an_uneven_series_fails_by_default_with_its_reason(tmp_path, builder, reason, named):
    series = builder(str(tmp_path / "dicom"))
    summary, records = _convert(series.folder, tmp_path / "out", unit="series")
    assert records == []
    assert summary["failed"] == {reason: len(series.slices)}, summary
    errors = errors_of(tmp_path / "out")
    assert sorted(e["uri"] for e in errors) == sorted(series.paths)
    assert {e["reason"] for e in errors} == {reason}
    assert all(named in e["message"] for e in errors), errors[0]["message"]


def test_split_writes_the_ge_gap_as_two_runs_each_where_its_slices_are(tmp_path):
    """sb.GE_GAP_Z is the reported case (-99.5, 103.0, 104.25, 105.5)."""
    series = sb.ge_gap(str(tmp_path / "dicom"))
    summary, records = _convert(series.folder, tmp_path / "out", unit="series", series_gaps="split")
    assert summary["failed"] == {} and summary["written"] == 4, summary
    assert [r["image"].shape[0] for r in records] == [1, 3], [r["dicom/image_position_patient"] for r in records]
    single = pydicom.dcmread(series.paths[0])
    thickness = float(single.get("SpacingBetweenSlices") or single.get("SliceThickness") or 1.0)
    for record, indices in reversed(list(zip(records, ([0], [1, 2, 3])))):     # the 3-slice run first
        want = _contract(series, indices, single_slice_spacing=thickness if len(indices) == 1 else None)
        np.testing.assert_allclose(_lps(record), want, atol=1e-4)
        for k, i in enumerate(indices):
            np.testing.assert_array_equal(_pixels(record)[k], _modality(series.paths[i]))
        nib_array, nib_affine = refs.nibabel_series([series.paths[i] for i in indices])
        if len(indices) > 1:
            assert refs.assert_same_geometry(_lps(record), _pixels(record), nib_affine, nib_array,
                                             their_space="lps") < MM


# ---------------------------------------------------------------- 5. 4-D and diffusion


def _four_d(folder):
    return sb.four_d(folder, times=3, z=4, orientation=sb.OBLIQUE)


def _dwi(folder):
    return sb.dwi(folder, orientation=sb.OBLIQUE)


@pytest.mark.parametrize("builder", [_four_d, _dwi], ids=["four_d", "dwi"])
def test_a_4d_series_splits_into_volumes_each_where_dcm2niix_puts_it(tmp_path, builder):
    series = builder(str(tmp_path / "dicom"))
    count = len(series.slices) // 4
    summary, records = _convert(series.folder, tmp_path / "out", unit="series")
    assert summary["failed"] == {} and summary["written"] == len(series.slices), summary
    assert [int(r["dicom/volume_index"]) for r in records] == list(range(count))
    assert {int(r["dicom/volumes"]) for r in records} == {count}
    nifti = _nifti(series.folder, tmp_path / "nifti")
    assert nifti.data.shape[3] == count
    for t, record in enumerate(records):
        assert record["image"].shape == (4, 64, 48, 1)
        np.testing.assert_allclose(_lps(record), _lps(records[0]), atol=1e-6)
        np.testing.assert_allclose(_lps(record), _contract(series, range(4 * t, 4 * t + 4)), atol=1e-4)
        for k in range(4):
            np.testing.assert_array_equal(_pixels(record)[k], _modality(series.paths[4 * t + k]))
        assert refs.assert_same_geometry(_lps(record), _pixels(record), nifti.affine_ras, nifti.data[..., t],
                                         their_space="ras") < MM
        if nifti.bval is not None:
            np.testing.assert_allclose(record["dicom/diffusion_bvalue"], [nifti.bval[t]])
            want = refs.fsl_bvecs_to_lps(nifti.bvec, nifti.affine_ras)[t]
            gradient = record["dicom/diffusion_gradient"]
            if nifti.bval[t] == 0:
                assert gradient.size == 0 or np.allclose(gradient, 0.0), gradient   # docs/DICOM.md: empty
            else:
                np.testing.assert_allclose(gradient, want, atol=MM)
        else:
            assert record["dicom/diffusion_bvalue"].size == 0


@pytest.mark.parametrize("builder", [_four_d, _dwi], ids=["four_d", "dwi"])
def test_a_stacked_4d_series_is_one_record_of_dcm2niixs_volumes(tmp_path, builder):
    series = builder(str(tmp_path / "dicom"))
    count = len(series.slices) // 4
    summary, records = _convert(series.folder, tmp_path / "out", unit="series", series_4d="stack")
    assert summary["failed"] == {} and summary["written"] == len(series.slices), summary
    record = _only(records)
    assert record["image"].shape == (4 * count, 64, 48, 1)
    assert int(record["dicom/volume_index"]) == -1 and int(record["dicom/volumes"]) == count
    volumes = reader.geometry.volumes(record["image"], record)
    assert volumes.shape == (count, 4, 64, 48, 1)
    ours = _lps(record)
    np.testing.assert_allclose(ours, _contract(series, range(4)), atol=1e-4)
    nifti = _nifti(series.folder, tmp_path / "nifti")
    assert nifti.data.shape == (48, 64, 4, count)
    for t in range(count):
        volume = volumes[t, ..., 0]
        for k in range(4):
            np.testing.assert_array_equal(volume[k], _modality(series.paths[4 * t + k]))
        assert refs.assert_same_geometry(ours, volume, nifti.affine_ras, nifti.data[..., t], their_space="ras") < MM
        # the axis mapping: dcm2niix's volume t is ours transposed to [i, j, k] with rows reversed
        np.testing.assert_array_equal(nifti.data[..., t], np.flip(volume.transpose(2, 1, 0), axis=1))
    split = _convert(series.folder, tmp_path / "split", unit="series")[1]
    for t, one in enumerate(split):
        np.testing.assert_array_equal(one["image"], volumes[t])
    if builder is _dwi:
        np.testing.assert_allclose(record["dicom/diffusion_bvalue"], nifti.bval)
        np.testing.assert_allclose(record["dicom/diffusion_bvalue"], sb.DWI_BVALUES)
        gradients = record["dicom/diffusion_gradient"].reshape(count, 3)
        np.testing.assert_allclose(gradients, refs.fsl_bvecs_to_lps(nifti.bvec, nifti.affine_ras), atol=MM)
        np.testing.assert_allclose(gradients, sb.DWI_GRADIENTS, atol=1e-5)
    else:
        assert nifti.bval is None and record["dicom/diffusion_bvalue"].size == 0
