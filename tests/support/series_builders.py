"""Real single-frame DICOM series written to a folder, for issue 32's geometry tests.

Every builder edits pydicom's real CT_small.dcm (GE CT, 128 x 128) or MR_small.dcm (Toshiba MR,
64 x 64): it crops the image to ``shape`` (non-square by default, so that a swapped row/column
axis cannot pass unnoticed), sets Pixel Spacing (anisotropic by default, for the same reason),
Image Position / Orientation (Patient), a new Series Instance UID and one SOP Instance UID per
file (pydicom.uid.generate_uid with a fixed entropy source: the same call writes the same
bytes on every run), and gives every file its own pixel data (the source image rolled and
offset by the file's index), so that a slice written out of order is visible in the values.

File names are shuffled (a fixed permutation) unless ``shuffle_names=False``, so that the
order of names on disk is not the anatomical order. Every builder returns a ``WrittenSeries``:
the files in the order they were built (slice order along the normal for 3-D series, time- or
b-value-major for 4-D ones), each file's position, orientation, pixels and the tags set on it.
"""
from __future__ import annotations

import dataclasses
import os
import random
import warnings
from typing import Any, Callable, Sequence

import numpy as np
import pydicom
from pydicom.data import get_testdata_file
from pydicom.uid import generate_uid

AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
CORONAL = (1.0, 0.0, 0.0, 0.0, 0.0, -1.0)
SAGITTAL = (0.0, 1.0, 0.0, 0.0, 0.0, -1.0)
DEFAULT_SHAPE = {"CT": (96, 80), "MR": (64, 48)}            # rows, columns: non-square
DEFAULT_PIXEL_SPACING = (0.7, 0.9)                         # row spacing, column spacing (mm)
DEFAULT_ORIGIN = (-120.0, -95.0, -40.0)
_SOURCES = {"CT": "CT_small.dcm", "MR": "MR_small.dcm"}
_ENTROPY = "dcm2tfrecord-tests series_builders"
Vector = Sequence[float] | np.ndarray


@dataclasses.dataclass(frozen=True)
class WrittenSlice:
    path: str
    position: tuple[float, float, float]           # Image Position (Patient), LPS mm
    orientation: tuple[float, ...]                 # Image Orientation (Patient), 6 cosines
    pixels: np.ndarray                             # stored values, [rows, columns]
    tags: dict[str, Any]                           # the extra elements set on this file


@dataclasses.dataclass(frozen=True)
class WrittenSeries:
    folder: str
    series_uid: str
    pixel_spacing: tuple[float, float]             # (row spacing, column spacing) as in DICOM
    slices: list[WrittenSlice]                     # in build order (see the module docstring)
    modality: str

    @property
    def paths(self) -> list[str]:
        return [s.path for s in self.slices]

    @property
    def positions(self) -> np.ndarray:
        return np.array([s.position for s in self.slices], float)

    @property
    def orientation(self) -> tuple[float, ...]:
        """The first file's orientation (all files' in every builder but localizer_included)."""
        return self.slices[0].orientation

    def volume(self, indices: Sequence[int] | None = None) -> np.ndarray:
        """The stored pixels of ``indices`` (all files by default) stacked to [k, rows, columns]."""
        chosen = range(len(self.slices)) if indices is None else indices
        return np.stack([self.slices[i].pixels for i in chosen])


def normal(orientation: Vector) -> np.ndarray:
    """The slice normal row x column of an Image Orientation (Patient)."""
    return np.cross(np.asarray(orientation[:3], float), np.asarray(orientation[3:6], float))


def rotated(orientation: Sequence[float], degrees_about_xyz: Sequence[float]) -> tuple[float, ...]:
    """``orientation``'s row and column cosines rotated about x, then y, then z (LPS axes)."""
    ax, ay, az = np.radians(np.asarray(degrees_about_xyz, float))
    rx = np.array([[1, 0, 0], [0, np.cos(ax), -np.sin(ax)], [0, np.sin(ax), np.cos(ax)]])
    ry = np.array([[np.cos(ay), 0, np.sin(ay)], [0, 1, 0], [-np.sin(ay), 0, np.cos(ay)]])
    rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
    rot = rz @ ry @ rx
    row, col = rot @ np.asarray(orientation[:3], float), rot @ np.asarray(orientation[3:6], float)
    return tuple(float(v) for v in np.round(np.concatenate([row, col]), 9))


OBLIQUE = rotated(AXIAL, (20.0, -12.0, 30.0))


@dataclasses.dataclass
class _Spec:
    position: Vector
    orientation: Vector
    tags: dict[str, Any] = dataclasses.field(default_factory=dict)
    edit: Callable[[pydicom.Dataset], None] | None = None


def _uid(*parts: object) -> str:
    return str(generate_uid(entropy_srcs=[_ENTROPY, *(str(p) for p in parts)]))


def _source(modality: str) -> pydicom.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        path = get_testdata_file(_SOURCES[modality])
        assert isinstance(path, str), f"pydicom's {_SOURCES[modality]} is missing"
        return pydicom.dcmread(path)


def _slice_pixels(base: np.ndarray, index: int, shape: tuple[int, int]) -> np.ndarray:
    """The source image rolled and offset by ``index``, cropped to ``shape``: no two alike."""
    rows, cols = shape
    if rows > base.shape[0] or cols > base.shape[1]:
        raise ValueError(f"shape {shape} exceeds the source image {base.shape}")
    image = np.roll(base.astype(np.int32), (2 * index, 3 * index), axis=(0, 1)) + 7 * index
    return image[:rows, :cols].astype(base.dtype)


def _write(folder: str, name: str, specs: Sequence[_Spec], modality: str, shape: tuple[int, int] | None,
           pixel_spacing: Sequence[float], shuffle_names: bool, seed: int) -> WrittenSeries:
    os.makedirs(folder, exist_ok=True)
    template = _source(modality)
    base = template.pixel_array
    shape = tuple(shape or DEFAULT_SHAPE[modality])                      # type: ignore[assignment]
    series_uid = _uid(name, seed, "series")
    order = list(range(len(specs)))
    if shuffle_names:
        random.Random(f"{name}-{seed}").shuffle(order)
    written = []
    for index, spec in enumerate(specs):
        ds = template.copy()
        pixels = _slice_pixels(base, index, shape)                      # type: ignore[arg-type]
        for keyword in ("SmallestImagePixelValue", "LargestImagePixelValue"):
            if keyword in ds:
                delattr(ds, keyword)
        ds.Rows, ds.Columns = pixels.shape
        ds.PixelData = pixels.tobytes()
        ds.PixelSpacing = [f"{v:g}" for v in pixel_spacing]
        ds.ImagePositionPatient = [f"{v:.6f}" for v in spec.position]
        ds.ImageOrientationPatient = [f"{v:.9f}" for v in spec.orientation]
        ds.SliceLocation = f"{float(np.dot(spec.position, normal(spec.orientation))):.6f}"
        ds.SeriesInstanceUID = series_uid
        ds.SOPInstanceUID = _uid(name, seed, "sop", index)
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
        ds.FrameOfReferenceUID = _uid(name, seed, "frame")
        ds.InstanceNumber = index + 1
        ds.SeriesNumber = 7
        ds.SeriesDescription = ds.ProtocolName = name
        if not ds.get("AcquisitionTime"):
            ds.AcquisitionTime = "101500.000000"
        for keyword, value in spec.tags.items():
            setattr(ds, keyword, value)
        if spec.edit is not None:
            spec.edit(ds)
        path = os.path.join(folder, f"IM{order[index]:04d}.dcm")
        ds.save_as(path, enforce_file_format=True)
        written.append(WrittenSlice(path, tuple(float(v) for v in spec.position),          # type: ignore[arg-type]
                                    tuple(float(v) for v in spec.orientation), pixels, dict(spec.tags)))
    return WrittenSeries(folder, series_uid, (float(pixel_spacing[0]), float(pixel_spacing[1])), written,
                         modality)


def _along_normal(origin: Vector, orientation: Vector, offsets: Sequence[float]) -> list[np.ndarray]:
    return [np.asarray(origin, float) + float(s) * normal(orientation) for s in offsets]


def at_offsets(folder: str, offsets: Sequence[float], orientation: Sequence[float] = AXIAL,
               origin: Sequence[float] = DEFAULT_ORIGIN, *, modality: str = "CT",
               shape: tuple[int, int] | None = None, pixel_spacing: Sequence[float] = DEFAULT_PIXEL_SPACING,
               shuffle_names: bool = True, seed: int = 0, name: str = "at_offsets") -> WrittenSeries:
    """One slice at origin + s * normal for each s of ``offsets`` (mm along the normal), in that order."""
    specs = [_Spec(p, orientation) for p in _along_normal(origin, orientation, offsets)]
    return _write(folder, name, specs, modality, shape, pixel_spacing, shuffle_names, seed)


def regular(folder: str, n: int, spacing: float, orientation: Sequence[float] = AXIAL,
            origin: Sequence[float] = DEFAULT_ORIGIN, shuffle_names: bool = True, *, modality: str = "CT",
            shape: tuple[int, int] | None = None, pixel_spacing: Sequence[float] = DEFAULT_PIXEL_SPACING,
            seed: int = 0) -> WrittenSeries:
    """``n`` slices ``spacing`` mm apart along the normal of ``orientation``, starting at ``origin``
    (a negative spacing steps against the normal)."""
    return at_offsets(folder, [k * spacing for k in range(n)], orientation, origin, modality=modality,
                      shape=shape, pixel_spacing=pixel_spacing, shuffle_names=shuffle_names, seed=seed,
                      name=f"regular_{n}")


# the reported GE case: one slice far from three. The report rounds to one decimal (104.3); its
# "dicom/slice_spacing 1.25" (the median step) says the third slice lies at 104.25
GE_GAP_Z = (-99.5, 103.0, 104.25, 105.5)


def ge_gap(folder: str, z_positions: Sequence[float] = GE_GAP_Z, **kwargs: Any) -> WrittenSeries:
    """Axial slices at ``z_positions`` (mm, z = the axial normal): uneven steps, one huge gap."""
    origin = kwargs.pop("origin", (DEFAULT_ORIGIN[0], DEFAULT_ORIGIN[1], 0.0))
    return at_offsets(folder, z_positions, AXIAL, origin, name="ge_gap", **kwargs)


def missing_slices(folder: str, n: int = 10, spacing: float = 2.5, missing: Sequence[int] = (4,),
                   orientation: Sequence[float] = AXIAL, **kwargs: Any) -> WrittenSeries:
    """A regular run of ``n`` positions with the slices at indices ``missing`` left out."""
    offsets = [k * spacing for k in range(n) if k not in set(missing)]
    return at_offsets(folder, offsets, orientation, name="missing_slices", **kwargs)


def localizer_included(folder: str, n: int = 6, spacing: float = 3.0, localizer_index: int = 2,
                       **kwargs: Any) -> WrittenSeries:
    """A regular axial run with one file (at build index ``localizer_index``) replaced by a
    coronal LOCALIZER (ImageType ORIGINAL\\PRIMARY\\LOCALIZER) in the same series, positioned
    mid-volume; that file's own orientation is in its WrittenSlice."""
    origin = np.asarray(kwargs.pop("origin", DEFAULT_ORIGIN), float)
    specs = [_Spec(p, AXIAL) for p in _along_normal(origin, AXIAL, [k * spacing for k in range(n)])]
    specs[localizer_index] = _Spec(origin + np.array([0.0, 30.0, 60.0]), CORONAL,
                                   {"ImageType": ["ORIGINAL", "PRIMARY", "LOCALIZER"]})
    return _write_kw(folder, "localizer_included", specs, kwargs)


def repeated_position(folder: str, n: int = 5, spacing: float = 2.0, repeated: int = 2,
                      **kwargs: Any) -> WrittenSeries:
    """A regular axial run with a second file at the position of slice ``repeated`` (same
    Acquisition Time, own SOP Instance UID and pixels), built right after it."""
    origin = kwargs.pop("origin", DEFAULT_ORIGIN)
    positions = _along_normal(origin, AXIAL, [k * spacing for k in range(n)])
    positions.insert(repeated + 1, positions[repeated])
    specs = [_Spec(p, AXIAL) for p in positions]
    return _write_kw(folder, "repeated_position", specs, kwargs)


def tilted_gantry(folder: str, n: int = 8, table_step: float = 2.5, tilt_degrees: float = 15.0,
                  **kwargs: Any) -> WrittenSeries:
    """A CT with Gantry/Detector Tilt (0018,1120) = ``tilt_degrees``: the image plane is tilted
    about the x axis (row (1, 0, 0), column (0, cos t, -sin t)) while the table steps
    ``table_step`` mm along z, so successive positions do not step along the slice normal
    (each slice is offset in its own plane by table_step * sin t along the column direction)."""
    t = np.radians(tilt_degrees)
    orientation = (1.0, 0.0, 0.0, 0.0, float(np.cos(t)), float(-np.sin(t)))
    origin = np.asarray(kwargs.pop("origin", DEFAULT_ORIGIN), float)
    specs = [_Spec(origin + np.array([0.0, 0.0, k * table_step]), orientation,
                   {"GantryDetectorTilt": f"{tilt_degrees:g}"}) for k in range(n)]
    return _write_kw(folder, "tilted_gantry", specs, kwargs)


def oblique(folder: str, n: int = 6, spacing: float = 2.0, orientation: Sequence[float] = OBLIQUE,
            **kwargs: Any) -> WrittenSeries:
    """A regular series in a rotated (double-oblique) plane."""
    return regular(folder, n, spacing, orientation, **kwargs)


def four_d(folder: str, times: int = 3, z: int = 4, spacing: float = 3.0, orientation: Sequence[float] = AXIAL,
           **kwargs: Any) -> WrittenSeries:
    """MR, ``times`` time points x ``z`` positions in one series, built time-major (file index =
    t * z + k), each time point with its own TemporalPositionIdentifier (t + 1),
    NumberOfTemporalPositions, AcquisitionTime (10 s apart) and TriggerTime (100 ms apart)."""
    kwargs.setdefault("modality", "MR")
    origin = kwargs.pop("origin", DEFAULT_ORIGIN)
    positions = _along_normal(origin, orientation, [k * spacing for k in range(z)])
    specs = [_Spec(p, orientation, {"TemporalPositionIdentifier": t + 1, "NumberOfTemporalPositions": times,
                                    "AcquisitionTime": f"1015{10 * t:02d}.000000", "TriggerTime": f"{100 * t}",
                                    "AcquisitionNumber": t + 1})
             for t in range(times) for p in positions]
    return _write_kw(folder, "four_d", specs, kwargs)


DWI_BVALUES = (0.0, 1000.0, 1000.0, 1000.0)
DWI_GRADIENTS = ((0.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.6, 0.8), (0.0, -0.8, 0.6))


def dwi(folder: str, bvalues: Sequence[float] = DWI_BVALUES,
        gradients: Sequence[Sequence[float]] = DWI_GRADIENTS, z: int = 4, spacing: float = 3.0,
        orientation: Sequence[float] = AXIAL, **kwargs: Any) -> WrittenSeries:
    """MR diffusion: one volume of ``z`` slices per (b-value, gradient) pair at the same
    positions, built volume-major, each file with DiffusionBValue (0018,9087) and
    DiffusionGradientOrientation (0018,9089) (LPS unit vector; zeros for b = 0) and its own
    AcquisitionTime; the volume index goes to AcquisitionNumber."""
    kwargs.setdefault("modality", "MR")
    if len(bvalues) != len(gradients):
        raise ValueError("one gradient per b-value")
    origin = kwargs.pop("origin", DEFAULT_ORIGIN)
    positions = _along_normal(origin, orientation, [k * spacing for k in range(z)])
    specs = [_Spec(p, orientation, {"DiffusionBValue": float(b),
                                    "DiffusionGradientOrientation": [float(g) for g in grad],
                                    "AcquisitionTime": f"1015{5 * v:02d}.000000", "AcquisitionNumber": v + 1})
             for v, (b, grad) in enumerate(zip(bvalues, gradients)) for p in positions]
    return _write_kw(folder, "dwi", specs, kwargs)


def _write_kw(folder: str, name: str, specs: Sequence[_Spec], kwargs: dict[str, Any]) -> WrittenSeries:
    modality, shape = kwargs.pop("modality", "CT"), kwargs.pop("shape", None)
    pixel_spacing = kwargs.pop("pixel_spacing", DEFAULT_PIXEL_SPACING)
    shuffle_names, seed = kwargs.pop("shuffle_names", True), kwargs.pop("seed", 0)
    if kwargs:
        raise TypeError(f"unknown arguments {sorted(kwargs)}")
    return _write(folder, name, specs, modality, shape, pixel_spacing, shuffle_names, seed)
