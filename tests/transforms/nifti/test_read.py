"""transforms.nifti.read against files nibabel and dcm2niix write.

The axis mapping under test (the module's docstring): our ``pixels[..., k, j, i, c]`` is the
file's ``data[i, j, k, ...]`` and our affine maps ``[k, j, i, 1]`` to LPS, so that it is
``diag(-1, -1, 1, 1) @ img.affine`` with the voxel axes reversed; nibabel (``nib.load``,
``apply_affine``) and dcm2niix are the independent references, and a dcm2niix NIfTI of a DICOM
series must put every voxel where our DICOM path (probe_file, volume_records, decode_volume)
puts it.
"""
from __future__ import annotations

import gzip
import io
import itertools
import os

import nibabel as nib
import numpy as np
import pytest
from nibabel.affines import apply_affine, from_matvec
from nibabel.eulerangles import euler2mat
from nibabel.volumeutils import array_to_file
from pydicom.data import get_testdata_file

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.nifti import read as nifti
from dcm2tfrecord.transforms.records.build import decode_volume
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.series.volumes import volume_records
from dcm2tfrecord.transforms.sources.read import open_source
from dcm2tfrecord.transforms.record_model import SourceFile
from tests.support import geometry_refs as refs
from tests.support import series_builders as sb

RAS_LPS = np.diag([-1.0, -1.0, 1.0, 1.0])
ZOOMS = (0.7, 0.9, 2.5)
OBLIQUE = from_matvec(euler2mat(0.3, -0.2, 0.45) @ np.diag(ZOOMS), [-101.5, 40.25, -12.0])
SHEARED = np.array([[0.8, 0.15, 0.0, 10.0], [0.1, -1.1, 0.3, -20.0], [0.0, 0.25, 2.4, 5.5], [0, 0, 0, 1.0]])
FLIPPED = from_matvec(np.diag([-0.8, 1.2, -3.0]), [60.0, -70.0, 90.0])
# (sform, qform): each an affine or None (code 0); sform code 1 (scanner), qform code 1
GEOMETRIES = {
    "oblique_sform_and_qform": (OBLIQUE, OBLIQUE),
    "sheared_sform_only": (SHEARED, None),
    "flipped_sform_only": (FLIPPED, None),
    "sform_wins_over_another_qform": (SHEARED, OBLIQUE),
    "qform_only_oblique": (None, OBLIQUE),
    "qform_only_flipped": (None, FLIPPED),              # qfac -1
    "pixdim_only": (None, None),
}
SOURCES = {"oblique_sform_and_qform": "sform", "sheared_sform_only": "sform", "flipped_sform_only": "sform",
           "sform_wins_over_another_qform": "sform", "qform_only_oblique": "qform", "qform_only_flipped": "qform",
           "pixdim_only": "pixdim"}


def _data(dtype: str, shape=(5, 6, 7), seed: int = 0) -> np.ndarray:
    """Random voxels over the dtype's whole range (non-square, so a swapped axis shows)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.normal(0, 1000, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def _save(path, data, sform=OBLIQUE, qform=None, *, version: int = 1, zooms=ZOOMS, header=None):
    klass = nib.Nifti1Image if version == 1 else nib.Nifti2Image
    image = klass(data, None, header)
    image.header.set_data_dtype(data.dtype)
    image.header.set_zooms((tuple(zooms) + image.header.get_zooms()[len(zooms):])[:data.ndim])
    image.header.set_xyzt_units("mm", "sec")
    image.set_sform(sform, code=1 if sform is not None else 0)
    image.set_qform(qform, code=1 if qform is not None else 0)
    nib.save(image, str(path))
    return str(path)


def _raw_file(path, raw: np.ndarray, header: nib.Nifti1Header) -> str:
    """``raw`` stored unscaled under ``header`` as is (nibabel's save would choose its own
    scaling): the header, then the voxels at vox_offset, both written by nibabel."""
    header = header.copy()
    header.set_data_shape(raw.shape)
    header.set_data_dtype(raw.dtype)
    header.set_data_offset(352)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(str(path), "wb") as handle:
        header.write_to(handle)
        array_to_file(raw, handle, raw.dtype, offset=352, order="F")
    return str(path)


def _corners(shape):
    """The corner voxels (i, j, k) of a file of ``shape`` (a 2-D file's k is 0)."""
    return np.array(list(itertools.product(*[(0, n - 1) for n in (tuple(shape) + (1, 1))[:3]])), float)


def _check_geometry(lps: np.ndarray, image) -> None:
    """Every corner voxel (i, j, k) of the file where nibabel puts it, in LPS, via our [k, j, i]."""
    ijk = _corners(image.shape)
    theirs = apply_affine(RAS_LPS @ image.affine, ijk)     # nibabel's affine maps (i, j, k) in 2-D too
    ours = apply_affine(lps, ijk[:, ::-1])
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-9)
    np.testing.assert_allclose(reader.geometry.nifti_affine(lps), image.affine, rtol=0, atol=1e-12)


def _reason(call, *args) -> ConversionError:
    with pytest.raises(ConversionError) as caught:
        call(*args)
    message = str(caught.value)
    assert message and "\n" not in message, message
    return caught.value


# ---------------------------------------------------------------- voxels and geometry vs nibabel


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("dtype", ["int16", "uint8", "float32"])
@pytest.mark.parametrize("suffix", [".nii", ".nii.gz"])
def test_voxels_and_world_coordinates_are_nibabels(tmp_path, geometry, dtype, suffix):
    data = _data(dtype, seed=len(geometry))
    sform, qform = GEOMETRIES[geometry]
    path = _save(tmp_path / f"x{suffix}", data, sform, qform)
    image = nib.load(path)
    spec, pixels = nifti.read(path)
    assert pixels.shape == (7, 6, 5, 1) == spec.shape and pixels.dtype == data.dtype
    assert spec.dtype == spec.stored_dtype == dtype and not spec.scaled
    np.testing.assert_array_equal(pixels[..., 0], data.transpose(2, 1, 0))
    np.testing.assert_array_equal(pixels[..., 0].transpose(2, 1, 0), np.asanyarray(image.dataobj))
    assert (spec.depth, spec.height, spec.width, spec.volumes) == (7, 6, 5, 1)
    assert spec.affine_source == SOURCES[geometry] and spec.compressed == suffix.endswith(".gz")
    _check_geometry(spec.affine, image)
    if geometry == "pixdim_only":       # nibabel's fallback: voxel sizes only
        np.testing.assert_allclose(np.abs(np.diag(spec.affine_ras)[:3]), ZOOMS, rtol=1e-6)
    probed = nifti.probe(path)
    np.testing.assert_array_equal(probed.affine, spec.affine)
    assert probed.shape == spec.shape and probed.dtype == spec.dtype


def test_the_affines_are_those_written(tmp_path):
    """Not only nibabel's reading: the sform written is the one used, whichever qform is there."""
    path = _save(tmp_path / "x.nii", _data("int16"), SHEARED, OBLIQUE)
    ours = nifti.probe(path).affine
    np.testing.assert_allclose(ours, (RAS_LPS @ SHEARED)[:, [2, 1, 0, 3]], atol=1e-6)
    # column 0 of ours steps k (the file's third axis), column 2 steps i; column 3 is voxel 0
    np.testing.assert_allclose(ours[:3, 0], (RAS_LPS @ SHEARED)[:3, 2], atol=1e-6)
    np.testing.assert_allclose(ours[:3, 3], [-10.0, 20.0, 5.5], atol=1e-6)


def test_file_objects_as_the_pipeline_opens_them(tmp_path):
    """A .nii.gz and a .nii through Beam's FileSystems.open (what gs:// inputs are read with) and
    from memory: the same voxels and affine as from the path."""
    data = _data("int16", (9, 4, 3), seed=5)
    for suffix in (".nii.gz", ".nii"):
        path = _save(tmp_path / f"y{suffix}", data, FLIPPED)
        want_pixels, want_affine = nifti.read_volume(path)
        with open_source(path) as handle:
            spec = nifti.probe(handle)
            pixels, affine = nifti.read_volume(handle)       # read from its start again
        assert spec.compressed == suffix.endswith(".gz")
        np.testing.assert_array_equal(pixels, want_pixels)
        np.testing.assert_array_equal(affine, want_affine)
        with open(path, "rb") as handle:
            pixels, affine = nifti.read_volume(io.BytesIO(handle.read()))
        np.testing.assert_array_equal(pixels[..., 0], data.transpose(2, 1, 0))
        np.testing.assert_array_equal(affine, want_affine)


def test_nifti2_and_big_endian(tmp_path):
    data = _data("int16", seed=7)
    path = _save(tmp_path / "two.nii.gz", data, OBLIQUE, version=2)
    spec, pixels = nifti.read(path)
    assert spec.version == 2 and spec.vox_offset >= 540
    np.testing.assert_array_equal(pixels[..., 0], data.transpose(2, 1, 0))
    _check_geometry(spec.affine, nib.load(path))
    big = nib.Nifti1Header(endianness=">")
    path = _save(tmp_path / "big.nii", data.astype(">i2"), SHEARED, header=big)
    with open(path, "rb") as handle:
        assert handle.read(4) == b"\0\0\x01\x5c"                  # sizeof_hdr 348, big-endian
    spec, pixels = nifti.read(path)
    assert spec.stored_dtype == "int16" and pixels.dtype == np.dtype("int16") and pixels.dtype.isnative
    np.testing.assert_array_equal(pixels[..., 0], data.transpose(2, 1, 0))
    _check_geometry(spec.affine, nib.load(path))


def test_a_4d_file_is_volumes(tmp_path):
    data = _data("int16", (5, 6, 4, 3), seed=2)
    path = _save(tmp_path / "t.nii.gz", data, OBLIQUE, zooms=ZOOMS + (2.0,))
    spec, pixels = nifti.read(path)
    assert spec.volumes == 3 and spec.shape == (3, 4, 6, 5, 1) == pixels.shape
    assert (spec.time_step, spec.time_unit) == (2.0, "sec")
    np.testing.assert_array_equal(pixels[..., 0], data.transpose(3, 2, 1, 0))
    for t in range(3):
        np.testing.assert_array_equal(pixels[t, ..., 0], data[..., t].transpose(2, 1, 0))
    _check_geometry(spec.affine, nib.load(path))
    one = _save(tmp_path / "one.nii", data[..., :1], OBLIQUE)           # 4-D of one volume: a volume
    assert nifti.probe(one).shape == (4, 6, 5, 1) and nifti.read_volume(one)[0].shape == (4, 6, 5, 1)


def test_a_2d_file_is_one_slice(tmp_path):
    data = _data("uint8", (5, 6), seed=3)
    path = _save(tmp_path / "flat.nii", data, OBLIQUE)
    pixels, affine = nifti.read_volume(path)
    assert pixels.shape == (1, 6, 5, 1)
    np.testing.assert_array_equal(pixels[0, ..., 0], data.T)
    _check_geometry(affine, nib.load(path))


def test_rgb_voxels_are_channels(tmp_path):
    rgb = np.dtype([("R", "u1"), ("G", "u1"), ("B", "u1")])
    planes = _data("uint8", (5, 6, 7, 3), seed=4)
    data = np.zeros((5, 6, 7), rgb)
    for c, name in enumerate("RGB"):
        data[name] = planes[..., c]
    path = _save(tmp_path / "rgb.nii", data, OBLIQUE)
    spec, pixels = nifti.read(path)
    assert spec.channels == 3 and pixels.shape == (7, 6, 5, 3) and pixels.dtype == np.uint8
    np.testing.assert_array_equal(pixels, planes.transpose(2, 1, 0, 3))


def test_metres_are_millimetres(tmp_path):
    path = _save(tmp_path / "m.nii", _data("int16"), OBLIQUE)
    image = nib.load(path)
    image.header.set_xyzt_units("meter")
    nib.save(image, str(tmp_path / "metres.nii"))
    spec = nifti.probe(str(tmp_path / "metres.nii"))
    assert spec.spatial_unit == "meter"
    want = reader.geometry.nifti_affine(nifti.probe(path).affine)
    want[:3] *= 1000.0
    np.testing.assert_allclose(reader.geometry.nifti_affine(spec.affine), want, atol=1e-9)


# ---------------------------------------------------------------- scaling and the record dtype


@pytest.mark.parametrize("stored, slope, inter, dtype", [
    ("int16", 2.0, -1024.0, "int32"),          # int16's range x 2 - 1024 leaves int16
    ("uint8", 2.0, -1024.0, "int16"),
    ("uint16", 1.0, -1024.0, "int32"),
    ("int16", 1.0, 0.0, "int16"),              # the identity: stored as is
    ("int16", 0.0, 5.0, "int16"),              # slope 0: unset, no scaling
    ("int16", 0.5, 0.25, "float32"),
    ("uint8", 3.0, 0.5, "float32"),
    ("float32", 2.0, -1024.0, "float32"),
    ("float64", 0.1, 3.0, "float64"),
])
def test_scaled_values_follow_the_dicom_rescale_rule(tmp_path, stored, slope, inter, dtype):
    raw = _data(stored, seed=9)
    header = nib.Nifti1Header()
    header.set_sform(OBLIQUE, code=1)
    header["scl_slope"], header["scl_inter"] = slope, inter
    path = _raw_file(tmp_path / "scaled.nii.gz", raw, header)
    spec, pixels = nifti.read(path)
    assert spec.stored_dtype == stored and spec.dtype == dtype == pixels.dtype.name
    if slope == 0.0:
        assert spec.slope is None and not spec.scaled
        np.testing.assert_array_equal(pixels[..., 0], raw.transpose(2, 1, 0))
        return
    assert (spec.slope, spec.inter) == (slope, inter) or np.float32(spec.slope) == np.float32(slope)
    scaled = nib.load(path).get_fdata(dtype=np.float64)                 # nibabel's scaling, in float64
    if np.dtype(dtype).kind == "i":
        exact = raw.astype(np.int64) * int(slope) + int(inter)          # integers: exactly
        np.testing.assert_array_equal(pixels[..., 0], exact.transpose(2, 1, 0))
        np.testing.assert_array_equal(exact, scaled)
    else:
        np.testing.assert_array_equal(pixels[..., 0], scaled.astype(dtype).transpose(2, 1, 0))


# ---------------------------------------------------------------- a real NIfTI of a DICOM series


def _dicom_volume(series: sb.WrittenSeries) -> tuple[np.ndarray, np.ndarray]:
    """Our DICOM path's record of the series: (pixels [k, j, i], LPS affine)."""
    slices = [probe_file(SourceFile(p, os.path.basename(p), os.path.getsize(p), 0.0)) for p in series.paths]
    (record,) = volume_records("series", slices, salt="")
    pixels, metadata = decode_volume(record, open_source)
    affine = np.asarray(metadata[patient_space.AFFINE], np.float64).reshape(4, 4)
    return pixels[..., 0] if pixels.ndim == 4 else pixels, affine


@pytest.mark.parametrize("build", ["regular", "oblique"])
def test_dcm2niixs_nifti_of_a_series_lies_where_our_dicom_record_does(tmp_path, build):
    if build == "regular":
        series = sb.regular(str(tmp_path / "dicom"), 5, 2.5, seed=1)
    else:
        series = sb.oblique(str(tmp_path / "dicom"), n=5, spacing=-2.0, seed=2)
    run = refs.dcm2niix_run(series.folder, str(tmp_path / "nifti"))
    (name,) = run.volumes
    path = str(tmp_path / "nifti" / f"{name}.nii")
    with open(path, "rb") as plain, gzip.open(path + ".gz", "wb") as packed:
        packed.write(plain.read())
    dicom_pixels, dicom_affine = _dicom_volume(series)
    for source in (path, path + ".gz"):
        spec, pixels = nifti.read(source)
        assert spec.affine_source == "sform" and pixels.shape[-1] == 1
        # dcm2niix stores CT as int16 with scl_inter -1024: exact over int16's whole range is int32
        # (the DICOM path's CT rule keeps int16: Hounsfield units; a NIfTI names no modality)
        assert (spec.stored_dtype, spec.slope, spec.inter, spec.dtype) == ("int16", 1.0, -1024.0, "int32")
        # every corner voxel at one LPS point, the axes matched by value (tests.support.geometry_refs)
        assert refs.assert_same_geometry(dicom_affine, dicom_pixels, spec.affine, pixels[..., 0],
                                         their_space="lps") < refs.TOLERANCE_MM
    # dcm2niix keeps its slices ascending along the normal and stores the rows the other way up
    # (geometry_refs' docstring): the record's voxels with j reversed, values (HU) equal
    np.testing.assert_array_equal(pixels[..., 0], np.flip(dicom_pixels, axis=1))
    flip_j = np.eye(4)
    flip_j[1, 1], flip_j[1, 3] = -1.0, dicom_pixels.shape[1] - 1.0
    np.testing.assert_allclose(spec.affine, dicom_affine @ flip_j, atol=refs.TOLERANCE_MM)


# ---------------------------------------------------------------- sniffing


def test_looks_like_nifti(tmp_path):
    data = _data("int16", seed=11)
    one, two = _save(tmp_path / "a.nii", data), _save(tmp_path / "b.nii", data, version=2)
    packed = _save(tmp_path / "c.nii.gz", data)
    for path, name in ((one, "a.nii"), (two, "b.nii"), (packed, "c.nii.gz")):
        with open(path, "rb") as handle:
            head = handle.read(nifti.HEAD_BYTES)
        assert nifti.looks_like_nifti(head, name)
        assert nifti.looks_like_nifti(head[:132], name)          # the pipeline's sniff head
    with open(one, "rb") as handle:
        head = handle.read(nifti.HEAD_BYTES)
    assert nifti.looks_like_nifti(head, "no_extension")          # the magic decides
    assert not nifti.looks_like_nifti(head[:132], "a.dcm")       # too short for it: the name
    assert not nifti.looks_like_nifti(head[:344] + b"XXXX" + head[348:], "a.nii")
    assert not nifti.looks_like_nifti(gzip.compress(b"\0" * 600), "x.nii.gz")
    with open(packed, "rb") as handle:
        assert not nifti.looks_like_nifti(handle.read(132), "c.gz.bak")
    with open(get_testdata_file("CT_small.dcm"), "rb") as handle:
        assert not nifti.looks_like_nifti(handle.read(nifti.HEAD_BYTES), "CT_small.nii")
    assert not nifti.looks_like_nifti(b"\x89PNG\r\n\x1a\n" + b"\0" * 600, "x.nii")


# ---------------------------------------------------------------- bad files


def _bytes(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _write(path, data: bytes) -> str:
    with open(path, "wb") as handle:
        handle.write(data)
    return str(path)


def test_a_truncated_file(tmp_path):
    path = _save(tmp_path / "x.nii.gz", _data("int16", (20, 20, 20)), OBLIQUE)
    cut = _write(tmp_path / "cut.nii.gz", _bytes(path)[:len(_bytes(path)) // 2])
    assert nifti.probe(cut).shape == (20, 20, 20, 1)                       # its header is whole
    assert _reason(nifti.read_volume, cut).reason == reasons.TRUNCATED_FILE
    plain = _save(tmp_path / "x.nii", _data("int16", (20, 20, 20)), OBLIQUE)
    cut = _write(tmp_path / "cut.nii", _bytes(plain)[:-1])
    assert _reason(nifti.probe, cut).reason == reasons.TRUNCATED_FILE      # a plain file: at probe
    assert _reason(nifti.read_volume, cut).reason == reasons.TRUNCATED_FILE
    header_only = _write(tmp_path / "h.nii", _bytes(plain)[:200])
    assert _reason(nifti.probe, header_only).reason == reasons.TRUNCATED_FILE
    corrupt = bytearray(_bytes(path))
    corrupt[-6] ^= 0xFF                                                     # the gzip trailer's CRC
    assert _reason(nifti.read_volume, _write(tmp_path / "crc.nii.gz", bytes(corrupt))).reason == \
        reasons.INVALID_NIFTI


def test_a_bad_magic_and_sizeof_hdr(tmp_path):
    good = _bytes(_save(tmp_path / "x.nii", _data("int16"), OBLIQUE))
    bad = _write(tmp_path / "magic.nii", good[:344] + b"n+9\0" + good[348:])
    error = _reason(nifti.probe, bad)
    assert error.reason == reasons.INVALID_NIFTI and "magic" in str(error)
    bad = _write(tmp_path / "size.nii", b"\x00\x01\x00\x00" + good[4:])
    error = _reason(nifti.read_volume, bad)
    assert error.reason == reasons.INVALID_NIFTI and "sizeof_hdr" in str(error)
    pair = _write(tmp_path / "pair.hdr", good[:344] + b"ni1\0" + good[348:])
    assert _reason(nifti.probe, pair).reason == reasons.UNSUPPORTED_NIFTI


def _with_header(tmp_path, name: str, **fields) -> str:
    """A real file's header with ``fields`` set, its voxels (of the real shape) after it."""
    path = _save(tmp_path / "base.nii", _data("int16"), OBLIQUE)
    edited = nib.Nifti1Header(binaryblock=_bytes(path)[:348], check=False)
    for key, value in fields.items():
        edited[key] = value
    return _write(tmp_path / name, edited.binaryblock + _bytes(path)[348:])


def test_headers_claiming_absurd_shapes(tmp_path):
    huge = _with_header(tmp_path, "huge.nii", dim=[3, 32767, 32767, 32767, 1, 1, 1, 1])
    error = _reason(nifti.probe, huge)
    assert error.reason == reasons.TOO_MANY_PIXELS and "32767x32767x32767" in str(error)
    assert _reason(nifti.read_volume, huge).reason == reasons.TOO_MANY_PIXELS
    assert _reason(nifti.probe, huge, 10).reason == reasons.TOO_MANY_PIXELS
    assert nifti.probe(_with_header(tmp_path, "small.nii"), 5 * 6 * 7).num_pixels == 210
    assert _reason(nifti.probe, _with_header(tmp_path, "big.nii"), 209).reason == reasons.TOO_MANY_PIXELS
    negative = _with_header(tmp_path, "negative.nii", dim=[3, 5, -6, 7, 1, 1, 1, 1])
    assert _reason(nifti.probe, negative).reason == reasons.INVALID_NIFTI
    many = _with_header(tmp_path, "ndim.nii", dim=[9, 5, 6, 7, 1, 1, 1, 1])
    assert _reason(nifti.probe, many).reason == reasons.INVALID_NIFTI
    empty = _with_header(tmp_path, "empty.nii", dim=[3, 5, 0, 7, 1, 1, 1, 1])
    assert _reason(nifti.probe, empty).reason == reasons.INVALID_VALUE
    five = _with_header(tmp_path, "five.nii", dim=[5, 5, 6, 7, 1, 3, 1, 1])
    assert _reason(nifti.probe, five).reason == reasons.UNSUPPORTED_NIFTI
    unknown = _with_header(tmp_path, "code.nii", datatype=12345)
    assert _reason(nifti.probe, unknown).reason == reasons.INVALID_NIFTI
    complex_ = _with_header(tmp_path, "complex.nii", datatype=32, bitpix=64)
    assert _reason(nifti.probe, complex_).reason == reasons.UNSUPPORTED_NIFTI
    quaternion = _with_header(tmp_path, "quat.nii", sform_code=0, qform_code=1, quatern_b=0.9, quatern_c=0.9)
    assert _reason(nifti.probe, quaternion).reason == reasons.INVALID_NIFTI
    nan = _with_header(tmp_path, "nan.nii", scl_slope=2.0, scl_inter=np.inf)
    assert _reason(nifti.probe, nan).reason == reasons.INVALID_VALUE


class _Counting(io.BytesIO):
    """Remembers the furthest byte read."""
    furthest = 0

    def read(self, size=-1):
        out = super().read(size)
        self.furthest = max(self.furthest, self.tell())
        return out

    def readinto(self, buffer):
        n = super().readinto(buffer)
        self.furthest = max(self.furthest, self.tell())
        return n


def test_probe_reads_the_header_only(tmp_path):
    path = _save(tmp_path / "x.nii", _data("float32", (40, 40, 40)), OBLIQUE)
    handle = _Counting(_bytes(path))
    spec = nifti.probe(handle)
    assert spec.shape == (40, 40, 40, 1) and handle.furthest <= 348
    read_all = _Counting(_bytes(path))
    nifti.read_volume(read_all)
    assert read_all.furthest == len(_bytes(path))


@pytest.mark.parametrize("stored,value,slope,inter", [
    ("int16", 100, 1e38, 0.0),         # 100 x 1e38 is past float32's 3.4e38: +-inf
    ("int16", -100, 1e38, 0.0),        # -inf
    ("uint8", 100, 3e38, 0.0),
    ("float64", 1e300, 1e38, 0.0),     # past float64 itself (a float64 record)
    ("int16", 100, 1e37, 3e38),        # slope and intercept together
])
def test_a_scaling_that_overflows_to_infinity_is_refused_quietly(tmp_path, stored, value, slope, inter):
    """Issue 43, item 4: scl_slope 1e38 wrote records of +-inf pixels; now invalid_value, no
    numpy warning printed."""
    raw = np.full((5, 6, 7), value, dtype=stored)
    raw[0, 0, 0] = 0
    header = nib.Nifti1Header()
    header.set_sform(OBLIQUE, code=1)
    header["scl_slope"], header["scl_inter"] = slope, inter
    path = _raw_file(tmp_path / "overflow.nii", raw, header)
    assert nifti.probe(path).scaled             # the header alone does not tell: the voxels do
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # numpy's "overflow encountered" would raise here
        error = _reason(nifti.read, path)
    assert error.reason == reasons.INVALID_VALUE and "scl_slope" in str(error), str(error)


def test_a_large_slope_that_stays_finite_and_stored_nans_are_kept(tmp_path):
    raw = np.zeros((5, 6, 7), dtype="int16")
    raw[1, 2, 3] = 3
    header = nib.Nifti1Header()
    header.set_sform(OBLIQUE, code=1)
    header["scl_slope"], header["scl_inter"] = 1e38, 0.0
    _, pixels = nifti.read(_raw_file(tmp_path / "finite.nii", raw, header))
    assert np.isfinite(pixels).all() and pixels.max() == np.float32(3e38)
    floats = np.ones((5, 6, 7), dtype="float32")
    floats[0, 0, 0] = np.nan                     # the file's own NaN (a masked-out voxel): not ours to refuse
    header["scl_slope"], header["scl_inter"] = 2.0, 1.0
    _, pixels = nifti.read(_raw_file(tmp_path / "nan.nii", floats, header))
    assert np.isnan(pixels[0, 0, 0, 0]) and np.count_nonzero(np.isnan(pixels)) == 1 and pixels[1, 1, 1, 0] == 3.0
