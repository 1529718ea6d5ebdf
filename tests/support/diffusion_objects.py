"""Diffusion-weighted MR files for the tests: real vendor files (nibabel's Siemens DTI mosaics)
and GE / Philips / Siemens private / standard-attribute files made by editing pydicom's MR_small.dcm, with
the private elements (private creators, VRs) where dcm2niix reads them."""
from __future__ import annotations

import copy
import gzip
import io
import os

import numpy as np
import pydicom
from pydicom.data import get_testdata_file
from pydicom.uid import generate_uid

NIBABEL_DATA = os.path.join(os.path.dirname(pydicom.__file__), "..", "nibabel", "nicom", "tests", "data")
SIEMENS_DWI = ("siemens_dwi_0.dcm.gz", "siemens_dwi_1000.dcm.gz")
AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
# oblique: rows along a vector in the x-y plane, columns tilted out of it
OBLIQUE = (0.866025, 0.5, 0.0, -0.353553, 0.612372, -0.707107)
CORONAL = (1.0, 0.0, 0.0, 0.0, 0.0, -1.0)


def nibabel_file(name: str) -> str:
    return os.path.normpath(os.path.join(NIBABEL_DATA, name))


def siemens_dwi(folder) -> list[str]:
    """nibabel's two Siemens DTI mosaics (b = 0, b = 1000), un-gzipped into ``folder``."""
    os.makedirs(str(folder), exist_ok=True)
    out = []
    for name in SIEMENS_DWI:
        path = os.path.join(str(folder), name[:-3])
        with gzip.open(nibabel_file(name)) as src, open(path, "wb") as dst:
            dst.write(src.read())
        out.append(path)
    return out


def _normal(orientation) -> tuple[float, float, float]:
    r, c = orientation[:3], orientation[3:]
    return (r[1] * c[2] - r[2] * c[1], r[2] * c[0] - r[0] * c[2], r[0] * c[1] - r[1] * c[0])


def _mr(series: str, index: int, orientation, position=(-83.9063, -91.2, 6.6406)) -> pydicom.Dataset:
    ds = copy.deepcopy(pydicom.dcmread(get_testdata_file("MR_small.dcm")))
    ds.ImagePositionPatient = [f"{v:.4f}" for v in position]
    ds.SeriesInstanceUID = generate_uid(entropy_srcs=["series", series])
    ds.SOPInstanceUID = generate_uid(entropy_srcs=["sop", series, str(index)])
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    ds.InstanceNumber = index + 1
    ds.AcquisitionNumber = 1
    ds.ImageOrientationPatient = [f"{v:g}" for v in orientation]
    ds.ScanningSequence = "EP"
    ds.SequenceVariant = "NONE"
    ds.PatientPosition = "HFS"
    ds.InPlanePhaseEncodingDirection = "COL"
    ds.ImageType = ["ORIGINAL", "PRIMARY", "DIFFUSION", "NONE"]
    return ds


def _slices(series: str, volumes, orientation, slices: int):
    """(volume's (b, g), a new MR_small dataset) per slice of each volume: ``slices`` slices 5 mm
    apart along the normal (dcm2niix needs two to tell the slice orientation, its sliceDir)."""
    normal = _normal(orientation)
    base = (-83.9063, -91.2, 6.6406)
    index = 0
    for volume in volumes:
        for s in range(slices):
            position = tuple(p + 5.0 * s * n for p, n in zip(base, normal))
            yield volume, _mr(series, index, orientation, position)
            index += 1


def ge_dwi(series: str, volumes, orientation=AXIAL, phase: str = "COL", slices: int = 2) -> list:
    """MR_small slices per (b, (x, y, z)) in ``volumes``, as GE stores diffusion:
    (0043,1039) IS 'b + 1e9\\8\\0\\0' (GEMS_PARM_01), (0019,10BB..BD) DS (GEMS_ACQU_01)."""
    out = []
    for (b, g), ds in _slices(series, volumes, orientation, slices):
        ds.Manufacturer = "GE MEDICAL SYSTEMS"
        ds.InPlanePhaseEncodingDirection = phase
        ds.add_new(0x00190010, "LO", "GEMS_ACQU_01")
        for offset, value in zip((0xBB, 0xBC, 0xBD), g):
            ds.add_new(0x00191000 | offset, "DS", f"{value:.6f}")
        ds.add_new(0x00430010, "LO", "GEMS_PARM_01")
        ds.add_new(0x00431039, "IS", [str(1_000_000_000 + int(b)), "8", "0", "0"])
        out.append(ds)
    return out


def philips_dwi(series: str, volumes, orientation=AXIAL, slices: int = 2) -> list:
    """MR_small slices per (b, (rl, ap, fh)): (2001,1003) FL (Philips Imaging DD 001),
    (2005,10B0..B2) FL (Philips MR Imaging DD 001)."""
    out = []
    for (b, g), ds in _slices(series, volumes, orientation, slices):
        ds.Manufacturer = "Philips Medical Systems"
        ds.add_new(0x20010010, "LO", "Philips Imaging DD 001")
        ds.add_new(0x20011003, "FL", float(b))
        ds.add_new(0x20050010, "LO", "Philips MR Imaging DD 001")
        for offset, value in zip((0xB0, 0xB1, 0xB2), g):
            ds.add_new(0x20051000 | offset, "FL", float(value))
        out.append(ds)
    return out


def siemens_private_dwi(series: str, volumes, orientation=AXIAL, slices: int = 2, block: int = 0x10,
                        creator: bool = True) -> list:
    """MR_small slices per (b, (x, y, z) in LPS), as Siemens non-mosaic images keep diffusion without a
    CSA header: (0019,xx0C) IS B_value, (0019,xx0E) FD DiffusionGradientDirection (left out where
    b = 0, as nibabel's real b = 0 mosaic has it), (0019,xx0D) CS DiffusionDirectionality, in the
    ``SIEMENS MR HEADER`` block at ``block`` (its Private Creator (0019,00bb) left out: ``creator``
    False)."""
    out = []
    for (b, g), ds in _slices(series, volumes, orientation, slices):
        ds.Manufacturer = "SIEMENS"
        base = 0x00190000 | block << 8
        if creator:
            ds.add_new(0x00190000 | block, "LO", "SIEMENS MR HEADER")
        ds.add_new(base | 0x0C, "IS", str(int(b)))
        ds.add_new(base | 0x0D, "CS", "DIRECTIONAL")
        if b:
            ds.add_new(base | 0x0E, "FD", [float(v) for v in g])
        out.append(ds)
    return out


def standard_dwi(series: str, volumes, orientation=AXIAL, manufacturer: str = "SIEMENS", slices: int = 2) -> list:
    """MR_small slices per (b, gradient), in Diffusion b-value (0018,9087) and Diffusion
    Gradient Orientation (0018,9089) at the top level (gradient None: left out)."""
    out = []
    for (b, g), ds in _slices(series, volumes, orientation, slices):
        ds.Manufacturer = manufacturer
        ds.DiffusionBValue = float(b)
        if g is not None:
            ds.DiffusionGradientOrientation = [float(v) for v in g]
        out.append(ds)
    return out


def write(folder, datasets) -> list[str]:
    os.makedirs(str(folder), exist_ok=True)
    paths = []
    for i, ds in enumerate(datasets):
        path = os.path.join(str(folder), f"dwi_{i:03d}.dcm")
        ds.save_as(path, enforce_file_format=True)
        paths.append(path)
    return paths


def with_random_pixels(data: bytes, seed: int) -> bytes:
    """The file with random 12-bit samples as its pixels: written over the Pixel Data value's
    bytes where it has one (the rest of the file unchanged), else added by pydicom."""
    rng = np.random.default_rng(seed)
    ds = pydicom.dcmread(io.BytesIO(data), defer_size=1024)
    samples = rng.integers(0, 1 << 12, ds.Rows * ds.Columns, dtype="<u2").tobytes()
    raw = ds._dict.get(0x7FE00010)
    if raw is not None:
        assert raw.length == len(samples)
        return data[:raw.value_tell] + samples + data[raw.value_tell + raw.length:]
    ds.PixelData = samples
    ds["PixelData"].VR = "OW"
    out = io.BytesIO()
    ds.save_as(out)
    return out.getvalue()
