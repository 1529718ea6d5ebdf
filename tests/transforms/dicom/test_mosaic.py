"""Siemens mosaics become volumes of their slices (transforms.dicom.mosaic), checked on the
real Siemens files nibabel ships against nibabel's MosaicWrapper and dcm2niix.

The files (nibabel/nicom/tests/data): siemens_dwi_0 and siemens_dwi_1000 (896 x 896, 48
tiles of 128 x 128, Implicit VR; their pixel data is all zeros, so random 12-bit values
are written over its bytes, the header left byte for byte); csa_slice_norm.dcm (384 x 384,
32 tiles of 64, oblique, Explicit VR; no pixel data: random values added); 0.dcm and 1.dcm
(256 x 256, "48 tiles": resampled, Rows not a multiple of the 7 tiles per side; nibabel
refuses them, dcm2niix reads all but the first row of tiles from the wrong bytes; so do we,
mosaic_invalid).

Axis conventions (the tests find or check them, then compare world coordinates, so no
convention can make a wrong geometry pass):
- ours: image_raw [k, j, i, channel], k the slice (tile) in record order, j the row,
  i the column of a tile; the affine of the record contract maps [k, j, i, 1] to LPS.
- nibabel 5's wrapper.get_data() is [j, i, k] (its docstring: "first dimension is rows,
  second dimension is columns"; MosaicWrapper.get_unscaled_data transposes the tile grid
  to the end): ours[k, j, i] == nibabel[j, i, k]; its wrapper.affine maps [j, i, k, 1] to LPS.
- dcm2niix writes NIfTI (RAS): the permutation and flips from ours to its array are found
  from the data (exactly one of the 48 must match), its world x and y negated for LPS.
"""
from __future__ import annotations

import dataclasses
import gzip
import io
import itertools
import os
import shutil
import subprocess
import warnings

import dcm2niix
import nibabel
import numpy as np
import pydicom
import pytest
from pydicom.pixels import apply_modality_lut

from tests.support.diffusion_objects import with_random_pixels
from tests.support import pydicom_test_files
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import mosaic
from dcm2tfrecord.transforms.dicom.native import NativePixels
from dcm2tfrecord.transforms.dicom.pixels import decode_dicom
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.build import build_record, decode_record
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")        # "The DICOM readers are highly experimental" (at import)
    from nibabel.nicom import dicomwrappers

NICOM_DATA = os.path.join(os.path.dirname(dicomwrappers.__file__), "tests", "data")
SETTINGS = DecodeSettings(id_salt="s")
PIXEL_DATA = 0x7FE00010
CSA_IMAGE = 0x00291010
# name -> (nibabel's file, slices, tile rows = columns, whether random pixels are written)
FILES = {
    "dwi_0": ("siemens_dwi_0.dcm.gz", 48, 128, True),
    "dwi_1000": ("siemens_dwi_1000.dcm.gz", 48, 128, True),
    "oblique": ("csa_slice_norm.dcm", 32, 64, True),
}
NIBABEL_READS = ("dwi_0", "dwi_1000", "oblique")


def _real_file(name: str, folder) -> str:
    """nibabel's file ``name`` (see FILES) in ``folder``: gunzipped, with random pixels where noted."""
    source, _, _, random_pixels = FILES[name]
    path = os.path.join(str(folder), name + ".dcm")
    with open(os.path.join(NICOM_DATA, source), "rb") as handle:
        data = handle.read()
    if source.endswith(".gz"):
        data = gzip.decompress(data)
    if random_pixels:
        data = with_random_pixels(data, seed=len(name))
    with open(path, "wb") as handle:
        handle.write(data)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("mosaics")
    return {name: _real_file(name, folder) for name in FILES}


def _source(path: str) -> SourceFile:
    return SourceFile(path, os.path.basename(path), os.path.getsize(path), 0.0)


def _decoded(record, settings=SETTINGS) -> np.ndarray:
    with open(record.source.uri, "rb") as handle:
        return decode_record(record, handle, settings)[0]


def _volume(path: str) -> np.ndarray:
    """Our (k, j, i) volume of the file, through probe and the write path (native where the
    file qualifies, and the general path, which must agree)."""
    record = probe_file(_source(path), settings=SETTINGS)
    volume = _decoded(record)
    assert np.array_equal(_decoded(dataclasses.replace(record, native=None)), volume)
    return volume[..., 0]


def _dataset(path: str) -> pydicom.Dataset:
    return pydicom.dcmread(path)


def _affine(path: str) -> np.ndarray:
    """The record contract's affine from mosaic.slice_positions: [k, j, i, 1] -> LPS mm."""
    ds = _dataset(path)
    positions = np.array(mosaic.slice_positions(ds, mosaic.mosaic_layout(ds)))
    iop = np.array([float(v) for v in ds.ImageOrientationPatient])
    spacing = [float(v) for v in ds.PixelSpacing]
    affine = np.eye(4)
    affine[:3, 0] = (positions[-1] - positions[0]) / (len(positions) - 1)
    affine[:3, 1] = iop[3:] * spacing[0]
    affine[:3, 2] = iop[:3] * spacing[1]
    affine[:3, 3] = positions[0]
    return affine


def _corners(shape) -> list[tuple[int, ...]]:
    return [tuple(c) for c in itertools.product(*[(0, n - 1) for n in shape])]


def _world(affine: np.ndarray, index) -> np.ndarray:
    return (affine @ np.array([*index, 1.0]))[:3]


def _nibabel(path: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # "the DICOM readers are highly experimental"
        wrapper = dicomwrappers.wrapper_from_file(path)
    assert isinstance(wrapper, dicomwrappers.MosaicWrapper)
    return wrapper


def _dcm2niix(path: str, folder) -> nibabel.Nifti1Image:
    """dcm2niix's NIfTI of the one file ``path``."""
    given, out = os.path.join(str(folder), "in"), os.path.join(str(folder), "out")
    os.makedirs(given)
    os.makedirs(out)
    shutil.copy(path, given)
    done = subprocess.run([dcm2niix.bin, "-z", "n", "-b", "n", "-f", "out", "-o", out, given],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    image = nibabel.load(os.path.join(out, "out.nii"))
    image.get_fdata()       # read now: the folder is the test's
    return image


def _index_map(ours: np.ndarray, theirs: np.ndarray) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """(perm, flips): theirs == ours transposed by ``perm`` then flipped on the axes named;
    exactly one of the 48 must give it (random pixels tell them apart)."""
    found = []
    for perm in itertools.permutations(range(3)):
        moved = np.transpose(ours, perm)
        if moved.shape != theirs.shape:
            continue
        for flips in itertools.product((False, True), repeat=3):
            flipped = np.flip(moved, [axis for axis in range(3) if flips[axis]]) if any(flips) else moved
            if np.array_equal(flipped, theirs):
                found.append((perm, flips))
    assert len(found) == 1, found
    return found[0]


def _their_index(index, perm, flips, shape) -> tuple[int, ...]:
    return tuple(shape[a] - 1 - index[perm[a]] if flips[a] else index[perm[a]] for a in range(3))


# ---------------------------------------------------------------- (a) pixels


@pytest.mark.parametrize("name", NIBABEL_READS)
def test_slices_are_nibabels(files, name):
    _, slices, tile, _ = FILES[name]
    ours = _volume(files[name])
    assert ours.shape == (slices, tile, tile)
    assert np.unique(ours).size > 1000       # random pixels: a wrong tile order cannot match
    theirs = _nibabel(files[name]).get_data()
    assert np.array_equal(np.transpose(ours, (1, 2, 0)), theirs)      # ours[k, j, i] == nibabel[j, i, k]


@pytest.mark.parametrize("name", sorted(FILES))
def test_slices_are_dcm2niixs(files, name, tmp_path):
    _, slices, tile, _ = FILES[name]
    ours = _volume(files[name])
    assert ours.shape == (slices, tile, tile)
    theirs = np.asanyarray(_dcm2niix(files[name], tmp_path).dataobj)
    _index_map(ours, theirs.reshape(theirs.shape[:3]))


def test_unmosaic_is_row_major_tiles():
    layout = mosaic.Mosaic(images=5, tiles=3, rows=2, columns=4, mosaic_rows=6, mosaic_columns=12)
    frame = np.arange(6 * 12 * 2).reshape(1, 6, 12, 2)
    slices = mosaic.unmosaic(frame, layout)
    assert slices.shape == (5, 2, 4, 2) and slices.flags.c_contiguous
    for k in range(5):
        row, column = divmod(k, 3)
        assert np.array_equal(slices[k], frame[0, row * 2:row * 2 + 2, column * 4:column * 4 + 4])
    with pytest.raises(ConversionError) as caught:
        mosaic.unmosaic(frame[:, :5], layout)
    assert caught.value.reason == reasons.PIXEL_DATA_LENGTH


# ---------------------------------------------------------------- (b) geometry


@pytest.mark.parametrize("name", NIBABEL_READS)
def test_positions_are_nibabels(files, name):
    """Every corner voxel at the same place (LPS) by our affine and by nibabel's."""
    wrapper = _nibabel(files[name])
    ds = _dataset(files[name])
    layout = mosaic.mosaic_layout(ds)
    positions = mosaic.slice_positions(ds, layout)
    assert len(positions) == layout.images
    np.testing.assert_allclose(positions[0], wrapper.image_position, atol=1e-3)
    np.testing.assert_allclose(layout.normal, wrapper.slice_normal, atol=1e-6)
    ours = _affine(files[name])
    for k, j, i in _corners(layout.shape):
        np.testing.assert_allclose(_world(ours, (k, j, i)), _world(wrapper.affine, (j, i, k)), atol=1e-3)


@pytest.mark.parametrize("name", sorted(FILES))
def test_positions_are_dcm2niixs(files, name, tmp_path):
    """Every corner voxel at the same place by our affine and by dcm2niix's (RAS -> LPS), the
    voxels matched by the index map the pixels give."""
    image = _dcm2niix(files[name], tmp_path)
    theirs = np.asanyarray(image.dataobj)
    theirs = theirs.reshape(theirs.shape[:3])
    ours = _volume(files[name])
    perm, flips = _index_map(ours, theirs)
    lps = np.diag([-1.0, -1.0, 1.0, 1.0]) @ image.affine
    affine = _affine(files[name])
    for index in _corners(ours.shape):
        np.testing.assert_allclose(_world(affine, index),
                                   _world(lps, _their_index(index, perm, flips, theirs.shape)), atol=1e-3)


def test_oblique_slices_step_along_the_csa_normal(files):
    ds = _dataset(files["oblique"])
    layout = mosaic.mosaic_layout(ds)
    positions = np.array(mosaic.slice_positions(ds, layout))
    steps = np.diff(positions, axis=0)
    np.testing.assert_allclose(steps, np.tile(np.array(layout.normal) * 1.5000000530107, (31, 1)), atol=1e-9)
    assert np.dot(layout.normal, [0.0, 0.43994078, 0.89802679]) > 0.9999      # the CSA SliceNormalVector


# ---------------------------------------------------------------- (c) probe and write


def test_probe_and_build_give_the_slices(files):
    path = files["dwi_0"]
    record = probe_file(_source(path), settings=SETTINGS)
    assert record.spec.shape == (48, 128, 128, 1) and record.spec.dtype == "uint16"
    assert isinstance(record.native, NativePixels) and record.native.mosaic == mosaic.mosaic_layout(_dataset(path))
    ds = _dataset(path)
    assert record.slice_info.position == mosaic.slice_positions(ds, mosaic.mosaic_layout(ds))[0]
    assert record.slice_info.orientation == tuple(float(v) for v in ds.ImageOrientationPatient)
    assert tuple(record.slice_info.position) != tuple(float(v) for v in ds.ImagePositionPatient)
    _, dtype, shape = build_record(record, settings=SETTINGS)
    assert (dtype, shape) == ("uint16", (48, 128, 128, 1))
    frame = ds.pixel_array
    volume = _decoded(record)
    assert np.array_equal(volume[5, :, :, 0], frame[0:128, 5 * 128:6 * 128])       # tile 5: grid row 0, column 5
    assert np.array_equal(volume[47, :, :, 0], frame[6 * 128:7 * 128, 5 * 128:6 * 128])
    with open(path, "rb") as handle:
        pixels, _, _ = decode_dicom(handle, SETTINGS)
    assert np.array_equal(pixels, volume)


def test_frames_split_gives_one_slice_per_record(files):
    settings = DecodeSettings(id_salt="s", frames="split")
    record = probe_file(_source(files["oblique"]), settings=settings)
    volume = _decoded(record)
    split = expand_frames(record, settings)
    assert len(split) == 32 and {r.spec.shape for r in split} == {(1, 64, 64, 1)}
    for part in (split[0], split[9], split[31]):
        assert np.array_equal(_decoded(part, settings), volume[part.frame:part.frame + 1])
        general = dataclasses.replace(part, native=None)
        assert np.array_equal(_decoded(general, settings), volume[part.frame:part.frame + 1])


# ---------------------------------------------------------------- (d) other files, broken mosaics


@pytest.mark.parametrize("path", [os.path.join(pydicom_test_files(), "CT_small.dcm"),
                                  os.path.join(pydicom_test_files(), "MR_small.dcm"),
                                  os.path.join(NICOM_DATA, "decimal_rescale.dcm")])     # Siemens, not MOSAIC
def test_other_images_are_untouched(path):
    ds = _dataset(path)
    assert mosaic.mosaic_layout(ds) is None
    record = probe_file(_source(path), settings=SETTINGS)
    assert record.spec.shape[:3] == (int(ds.get("NumberOfFrames", 1) or 1), ds.Rows, ds.Columns)
    assert record.slice_info.position == tuple(float(v) for v in ds.ImagePositionPatient)
    expected = apply_modality_lut(ds.pixel_array, ds).reshape(record.spec.shape[:3])
    assert np.array_equal(_decoded(dataclasses.replace(record, native=None))[..., 0], expected)


def _csa_value(data: bytes) -> tuple[int, int]:
    raw = pydicom.dcmread(io.BytesIO(data), defer_size=1024)._dict[CSA_IMAGE]
    return raw.value_tell, raw.length


def _broken(files, tmp_path, how: str) -> str:
    with open(files["dwi_0"], "rb") as handle:
        data = handle.read()
    if how == "garbage":
        start, length = _csa_value(data)
        data = data[:start] + b"\xff" * length + data[start + length:]
    else:
        ds = pydicom.dcmread(io.BytesIO(data))
        del ds[CSA_IMAGE]
        out = io.BytesIO()
        ds.save_as(out)
        data = out.getvalue()
    path = tmp_path / f"{how}.dcm"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("how, says", [("garbage", "does not parse"), ("removed", "no CSA Image Header Info")])
def test_a_mosaic_without_its_csa_header_fails_in_one_line(files, tmp_path, how, says):
    path = _broken(files, tmp_path, how)
    with open(path, "rb") as handle:
        data = handle.read()
    for attempt in (lambda: probe_file(_source(path), settings=SETTINGS),
                    lambda: decode_dicom(io.BytesIO(data), SETTINGS)):
        with pytest.raises(ConversionError) as caught:
            attempt()
        assert caught.value.reason == reasons.MOSAIC_INVALID
        message = str(caught.value)
        assert "\n" not in message and message.startswith("Siemens MOSAIC image: ") and says in message
    assert reasons.MOSAIC_INVALID in reasons.DOCUMENTED


@pytest.mark.parametrize("name", ["0.dcm", "1.dcm"])
def test_a_resampled_mosaic_fails_in_one_line(name):
    path = os.path.join(NICOM_DATA, name)
    with pytest.raises(ConversionError) as caught:
        probe_file(_source(path), settings=SETTINGS)
    assert caught.value.reason == reasons.MOSAIC_INVALID
    assert str(caught.value) == ("Siemens MOSAIC image: NumberOfImagesInMosaic 48 (a grid of 7 x 7 tiles) "
                                 "does not tile its 256 x 256 pixels")


def test_the_shift_follows_each_in_plane_direction(files):
    """Rows and columns of different spacings (the files' are equal): nibabel's corrected
    position of the same header, edited."""
    ds = _dataset(files["oblique"])
    ds.PixelSpacing = [1.25, 2.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapper = dicomwrappers.wrapper_from_data(ds)
    positions = mosaic.slice_positions(ds, mosaic.mosaic_layout(ds))
    np.testing.assert_allclose(positions[0], wrapper.image_position, atol=1e-6)
    np.testing.assert_allclose(positions[-1], _world(wrapper.affine, (0, 0, 31)), atol=1e-6)
