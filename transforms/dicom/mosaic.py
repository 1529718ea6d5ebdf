"""Siemens mosaics: the slices of one volume stored as tiles of one image.

A Siemens MR volume (EPI, fMRI, diffusion) is often stored as one classic MR image
whose Image Type holds MOSAIC: the slices tiled row by row, left to right, in a
square grid of ceil(sqrt(n)) tiles per side, the unused tiles at the end left blank.
The number of slices comes only from the Siemens CSA Image Header Info, private
element (0029,xx10) of the 'SIEMENS CSA HEADER' block, read here with nibabel's CSA
reader (nibabel.nicom.csareader). The Image Position (Patient) stored is not that of
any slice: it is the corner of the whole mosaic, as if it were one image of Rows x
Columns pixels of the tiles' pixel spacing centred on the first slice. The tile
geometry here is nibabel's (nibabel.nicom.dicomwrappers.MosaicWrapper) and
dcm2niix's; tests/transforms/dicom/test_mosaic.py compares against both.

mosaic_layout is cheap for every other file: the Manufacturer and Image Type are read
first, the CSA header is parsed only for a Siemens image of Image Type MOSAIC.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Optional

import numpy as np

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom.elements import int_value
from dcm2tfrecord.transforms.dicom import patient_space, quiet
from dcm2tfrecord.transforms.dicom.record_elements import HeaderValues
from dcm2tfrecord.transforms.errors import ConversionError

Vector = tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class Mosaic:
    """How a Siemens mosaic's image is tiled."""
    images: int        # NumberOfImagesInMosaic (CSA): the slices, in tile order
    tiles: int         # tiles per side of the grid: ceil(sqrt(images))
    rows: int          # rows of one tile: Rows / tiles (Rows a multiple of tiles)
    columns: int       # columns of one tile: Columns / tiles
    mosaic_rows: int   # Rows, Columns of the whole stored image
    mosaic_columns: int
    # unit slice normal (LPS): the cross product of the row and column directions of Image
    # Orientation (Patient), signed as the CSA SliceNormalVector (the direction slices step
    # in from tile to tile); the CSA vector alone without an orientation; () without either
    normal: tuple[float, ...] = ()

    @property
    def shape(self) -> tuple[int, int, int]:
        """(slices, rows, columns) of the un-mosaiced volume."""
        return (self.images, self.rows, self.columns)


def _text_values(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        return text.split("\\")
    try:
        return [str(v) for v in value]
    except TypeError:
        return [str(value)]


def maybe_mosaic(ds) -> bool:
    """Whether ``ds`` says it is a Siemens mosaic (Manufacturer and Image Type only, no CSA)."""
    try:
        manufacturer = ds.get("Manufacturer")
        if not manufacturer or "SIEMENS" not in str(manufacturer).upper():
            return False
        return any(v.strip().upper() == "MOSAIC" for v in _text_values(ds.get("ImageType")))
    except Exception:     # a mangled Manufacturer or Image Type: not read as a mosaic
        return False


def _invalid(message: str) -> ConversionError:
    return ConversionError(reasons.MOSAIC_INVALID, f"Siemens MOSAIC image: {message}")


def _csa_header(ds) -> dict:
    csareader = quiet.csareader()
    dataset = ds.ds if isinstance(ds, HeaderValues) else ds
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            csa = csareader.get_csa_header(dataset)
    except Exception as exc:      # nibabel's CSAReadError, or a private element that does not convert
        raise _invalid(f"its CSA Image Header Info (0029,xx10) does not parse: {type(exc).__name__}: "
                       f"{exc}") from exc
    if not isinstance(csa, dict):
        raise _invalid("no CSA Image Header Info (0029,xx10) of a 'SIEMENS CSA HEADER' block "
                       "(removed by anonymization?): the number of slices in the mosaic is unknown")
    return csa


def _floats(ds, keyword: str, count: int) -> Optional[np.ndarray]:
    """``count`` finite floats of ``keyword`` (patient_space.floats; one value as itself), or None."""
    try:
        value = ds.get(keyword)
    except Exception:
        return None
    if value is None or value == "":
        return None
    values = patient_space.floats(value if count > 1 else [value], count)
    return np.asarray(values, dtype=np.float64) if values else None


def _slice_normal(ds, csa: dict) -> tuple[float, ...]:
    csareader = quiet.csareader()
    try:
        csa_normal = csareader.get_slice_normal(csa)
        csa_vector = None if csa_normal is None else np.array([float(v) for v in csa_normal])
    except Exception:
        csa_vector = None
    if csa_vector is not None and (csa_vector.shape != (3,) or not np.all(np.isfinite(csa_vector))
                                   or np.linalg.norm(csa_vector) < 1e-6):
        csa_vector = None
    iop = _floats(ds, "ImageOrientationPatient", 6)
    normal = None
    if iop is not None:
        normal = np.cross(iop[:3], iop[3:])
        length = np.linalg.norm(normal)
        normal = normal / length if length > 1e-6 else None
    if normal is None:
        if csa_vector is None:
            return ()
        return tuple(float(v) for v in csa_vector / np.linalg.norm(csa_vector))
    if csa_vector is not None:
        # nibabel's SiemensWrapper.slice_normal: the cross product (the most orthogonal),
        # the CSA vector's sign (dcm2niix takes the same sign)
        dot = float(np.dot(normal, csa_vector / np.linalg.norm(csa_vector)))
        if abs(dot) < 1 - 1e-3:
            raise _invalid(f"the CSA SliceNormalVector {tuple(csa_vector.tolist())} is not normal to "
                           f"Image Orientation (Patient) {tuple(iop.tolist())}")  # type: ignore[union-attr]
        if dot < 0:
            normal = -normal
    return tuple(float(v) + 0.0 for v in normal)     # (+ 0.0: no -0.0)


def mosaic_layout(ds) -> Optional[Mosaic]:
    """The tiling of a Siemens mosaic, or None for any other image.

    ``ds``: a pydicom Dataset or the probe's HeaderValues. None unless the Manufacturer
    names Siemens and the Image Type holds MOSAIC (no CSA parse for other files). Such a
    file without a CSA Image Header Info, or whose header does not parse, or gives no
    plausible NumberOfImagesInMosaic for its Rows and Columns, raises ConversionError
    (reasons.MOSAIC_INVALID): its slices cannot be told apart. So does one whose Rows or
    Columns is not a multiple of the tiles per side (a resampled mosaic, as nibabel's test
    files 0.dcm and 1.dcm: its tiles and their pixel spacing are no longer the
    acquisition's; nibabel refuses it, dcm2niix reads all but the first row of tiles
    from the wrong bytes).
    """
    if not maybe_mosaic(ds):
        return None
    csareader = quiet.csareader()
    csa = _csa_header(ds)
    try:
        images = csareader.get_n_mosaic(csa)
        images = None if images is None else int(images)
    except Exception:
        images = None
    if images is None:
        raise _invalid("its CSA header has no NumberOfImagesInMosaic")
    rows, columns = int_value(ds, "Rows"), int_value(ds, "Columns")
    frames = int_value(ds, "NumberOfFrames", 1) or 1
    if frames != 1:
        raise _invalid(f"{frames} frames: a mosaic is one frame of tiles")
    tiles = math.ceil(math.sqrt(images)) if images > 0 else 0
    if images < 1 or rows // tiles < 1 or columns // tiles < 1 or rows % tiles or columns % tiles:
        raise _invalid(f"NumberOfImagesInMosaic {images} (a grid of {tiles} x {tiles} tiles) does not "
                       f"tile its {rows} x {columns} pixels")
    return Mosaic(images=images, tiles=tiles, rows=rows // tiles, columns=columns // tiles,
                  mosaic_rows=rows, mosaic_columns=columns, normal=_slice_normal(ds, csa))


def unmosaic(pixels: np.ndarray, layout: Mosaic) -> np.ndarray:
    """(images, rows, columns, C) slices from the decoded (1, Rows, Columns, C) mosaic.

    Tile k is grid row k // tiles, grid column k % tiles (row-major), as nibabel's
    MosaicWrapper.get_data and dcm2niix read them; slice k of the result is tile k.
    """
    if pixels.ndim != 4 or pixels.shape[0] != 1 or pixels.shape[1:3] != (layout.mosaic_rows,
                                                                           layout.mosaic_columns):
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"decoded {pixels.shape}, the mosaic header describes one "
                              f"{layout.mosaic_rows} x {layout.mosaic_columns} frame")
    t, h, w = layout.tiles, layout.rows, layout.columns
    channels = pixels.shape[3]
    grid = pixels[0].reshape(t, h, t, w, channels).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(grid.reshape(t * t, h, w, channels)[:layout.images])


def slice_spacing(ds) -> Optional[float]:
    """The distance between a mosaic's slices: Spacing Between Slices, else Slice Thickness
    (nibabel's Wrapper.voxel_sizes and dcm2niix read the same), None without either."""
    for keyword in ("SpacingBetweenSlices", "SliceThickness"):
        value = _floats(ds, keyword, 1)
        if value is not None and value[0] != 0:
            return abs(float(value[0]))
    return None


def slice_positions(ds, layout: Optional[Mosaic]) -> tuple[Vector, ...]:
    """Image Position (Patient) (LPS mm) of each slice in record order; () where unknown.

    A mosaic's stored position is the corner of the whole Rows x Columns image: the
    first tile's corner lies (mosaic size - tile size) / 2 pixels further along each
    in-plane direction (as nibabel's MosaicWrapper.image_position and dcm2niix compute
    it), and slice k one slice spacing (slice_spacing) k times further along the slice
    normal (Mosaic.normal). Without a layout (not a mosaic): the file's own Image Position
    (Patient), once (an Enhanced image's frames are transforms.dicom.functional_groups').
    """
    ipp = _floats(ds, "ImagePositionPatient", 3)
    if ipp is None:
        return ()
    if layout is None:
        return (tuple(float(v) for v in ipp),)  # type: ignore[return-value]
    iop = _floats(ds, "ImageOrientationPatient", 6)
    spacing = _floats(ds, "PixelSpacing", 2)
    step = slice_spacing(ds)
    if iop is None or spacing is None or len(layout.normal) != 3 or (step is None and layout.images > 1):
        return ()
    row_direction, column_direction = iop[:3], iop[3:]
    down = (layout.mosaic_rows - layout.rows) / 2              # rows of shift
    across = (layout.mosaic_columns - layout.columns) / 2      # columns of shift
    first = ipp + column_direction * spacing[0] * down + row_direction * spacing[1] * across
    normal = np.asarray(layout.normal) * (step or 0.0)
    return tuple(tuple(float(v) for v in first + k * normal) for k in range(layout.images))  # type: ignore[misc]
