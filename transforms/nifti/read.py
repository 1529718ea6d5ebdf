"""NIfTI-1 and NIfTI-2 files (``.nii``, ``.nii.gz``) read as volumes of the record contract.

A NIfTI stores its voxels as ``data[i, j, k(, t)]`` (i fastest on disk) with a RAS affine for that
index; a record holds ``[k, j, i, channels]`` (``[t, k, j, i, channels]`` for a 4-D file) with an
LPS affine for ``[k, j, i]`` (docs/DICOM.md, "Geometry"; transforms.dicom.patient_space). The voxels
are kept in their stored order, never reoriented or resampled: only the axis order is reversed,
so the affine may have any signs. Ours is the inverse of ``reader.geometry.nifti_affine``::

    lps[k, j, i] = diag(-1, -1, 1, 1) @ ras @ P         P: [k, j, i, 1] -> [i, j, k, 1]

and ``ours[..., k, j, i, :]`` is ``data[i, j, k, ...]``: on disk the i-fastest array read in C
order already is ``[t, k, j, i]``, so no voxel moves.

Which affine (nibabel's ``img.affine``, i.e. ``Nifti1Header.get_best_affine``): the sform when
sform_code is not 0, else the qform when qform_code is not 0, else ``"pixdim"``: nibabel's
ANALYZE-style fallback from the voxel sizes alone (x flipped, origin at the centre of the grid;
other tools, e.g. the NIfTI C library, put the origin at voxel 0 instead: such a file has no
place in the patient, only voxel sizes). ``NiftiSpec.affine_source`` says which. The header is
checked and fixed as ``nib.load`` does (nibabel's ``check_fix``: a qfac of 0 is 1, an unknown
sform/qform code is 0, ...). A spatial unit of metres or microns (xyzt_units) is scaled to mm.

Values, the DICOM rescale rule's spirit (transforms.dicom.spec.modality_dtype): with no scaling
(scl_slope 0 or not finite, or slope 1 and intercept 0) the record holds the stored dtype; an
integer dtype scaled by an integer slope and intercept keeps integers, the smallest dtype exact
over the stored dtype's whole scaled range; any other scaling gives float32 (float64 for float64
voxels). RGB24 / RGBA32 voxels are uint8 with 3 / 4 channels, never scaled (NIfTI-1 says so).

Pure functions: nibabel parses the header; no Beam. Bad input raises ConversionError: a file cut
short ``truncated_file``; a header that is no NIfTI (sizeof_hdr, magic, dims, datatype code,
quaternion) ``invalid_nifti``; a valid NIfTI no record holds (complex voxels, 5-D and up, a
``.hdr`` of a ``.hdr/.img`` pair) ``unsupported_nifti``; more voxels than ``max_pixels``
``too_many_pixels``; no voxels, a non-finite intercept or affine, or a slope and intercept that
scale a finite voxel to a value the record's dtype does not hold (+-inf), ``invalid_value``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gzip
import math
import os
import struct
import typing
import zlib
from typing import BinaryIO, Iterator, Optional, Union

import numpy as np
from nibabel.nifti1 import Nifti1Header
from nibabel.nifti2 import Nifti2Header
from nibabel.spatialimages import HeaderDataError

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dtypes import smallest_integer_dtype
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.settings import DEFAULT_MAX_PIXELS

Source = Union[str, "os.PathLike[str]", BinaryIO]

SUFFIXES = (".nii", ".nii.gz")   # the names a NIfTI input goes by (a .hdr/.img pair is not one)
HEAD_BYTES = 544                 # a plain file's head that shows either version's magic
GZIP_MAGIC = b"\x1f\x8b"
NIFTI1_MAGIC = (b"n+1\0", b"ni1\0")                      # bytes 344-347; ni1: a .hdr/.img pair
NIFTI2_MAGIC = (b"n+2\0\r\n\x1a\n", b"ni2\0\r\n\x1a\n")  # bytes 4-11
_PAIR_MAGIC = (NIFTI1_MAGIC[1], NIFTI2_MAGIC[1])
_SIZEOF_HDR = {348: 1, 540: 2}
LPS_FROM_RAS = np.diag([-1.0, -1.0, 1.0, 1.0])          # its own inverse
# [k, j, i, 1] -> [i, j, k, 1]: the voxel axes reversed (reader.geometry's)
_REVERSED = np.array([[0, 0, 1, 0], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 1]], dtype=float)
_TO_MM = {"meter": 1000.0, "mm": 1.0, "micron": 0.001, "unknown": 1.0}
_RECORD_DTYPES = ("uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float32", "float64")
_CHANNELS = {"RGB": 3, "RGBA": 4}
_MAX_INTEGER_SLOPE, _MAX_INTEGER_INTER = 2 ** 31, 2 ** 62     # transforms.dicom.spec's bounds


@dataclasses.dataclass(frozen=True, eq=False)
class NiftiSpec:
    """What a NIfTI header says, and the record it makes (no voxel read)."""
    version: int                       # 1 or 2
    compressed: bool                   # gzip (.nii.gz)
    nifti_shape: tuple[int, ...]       # as stored: (i, j, k) or (i, j, k, t); a 2-D file's k is 1
    volumes: int                       # t: 1 for a 3-D file (and a 4-D file of one volume)
    depth: int                         # k
    height: int                        # j
    width: int                         # i
    channels: int                      # 1; 3 for RGB24, 4 for RGBA32
    stored_dtype: str                  # on disk (native byte order name; uint8 for RGB)
    dtype: str                         # the record's (module docstring)
    slope: Optional[float]             # scl_slope; None when unset (0 or not finite)
    inter: Optional[float]             # scl_inter; None when the slope is unset
    affine: np.ndarray                 # 4 x 4 LPS mm for voxel [k, j, i, 1]
    affine_ras: np.ndarray             # nibabel's img.affine: RAS for [i, j, k, 1], the file's units
    affine_source: str                 # "sform", "qform" or "pixdim"
    spatial_unit: str                  # xyzt_units' space: "mm", "meter", "micron" or "unknown" (read as mm)
    time_step: float                   # pixdim[4] in time_unit, 0.0 for a 3-D file
    time_unit: str                     # xyzt_units' time: "sec", "msec", "usec", "hz", ... or "unknown"
    vox_offset: int                    # byte offset of the voxels in the (inflated) file

    @property
    def shape(self) -> tuple[int, ...]:
        """The pixels' shape: (k, j, i, channels), or (t, k, j, i, channels) with volumes > 1."""
        volume = (self.depth, self.height, self.width, self.channels)
        return ((self.volumes,) + volume) if self.volumes > 1 else volume

    @property
    def scaled(self) -> bool:
        return self.slope is not None and (self.slope, self.inter) != (1.0, 0.0)

    @property
    def num_pixels(self) -> int:
        return self.volumes * self.depth * self.height * self.width

    @property
    def num_pixel_bytes(self) -> int:
        return self.num_pixels * self.channels * np.dtype(self.dtype).itemsize

    @property
    def _stored_bytes(self) -> int:
        return self.num_pixels * self.channels * np.dtype(self.stored_dtype).itemsize


# ---------------------------------------------------------------- sniffing


def _plain_looks_like(data: bytes, name: str) -> bool:
    if len(data) < 4:
        return name.endswith(".nii")
    for endian in "<>":
        size = struct.unpack(endian + "i", data[:4])[0]
        start, valid = {348: (344, NIFTI1_MAGIC), 540: (4, NIFTI2_MAGIC)}.get(size, (0, ()))
        if valid:
            if len(data) >= start + len(valid[0]):
                return bytes(data[start:start + len(valid[0])]) in valid
            return name.endswith(".nii")           # too short a head to see the magic: the name decides
    return False


def looks_like_nifti(head: bytes, name: str) -> bool:
    """Whether a file whose first bytes are ``head`` (HEAD_BYTES show either magic) is a NIfTI:
    sizeof_hdr 348 and magic ``n+1``/``ni1`` at byte 344, or 540 and ``n+2``/``ni2`` at byte 4
    (a head too short to show the magic: sizeof_hdr and a ``.nii`` name). A gzip file counts when
    its name ends in ``.gz`` and its head inflates to such a header (a head too short to inflate
    that far: a ``.nii.gz`` name). Cheap: nothing is opened or read."""
    lower = name.lower()
    if head[:2] != GZIP_MAGIC:
        return _plain_looks_like(head, lower)
    if not lower.endswith(".gz"):
        return False
    try:
        inner = zlib.decompressobj(wbits=31).decompress(head, HEAD_BYTES)
    except zlib.error:
        return False
    return _plain_looks_like(inner, lower[:-len(".gz")])


# ---------------------------------------------------------------- reading


def _size(raw: BinaryIO) -> Optional[int]:
    try:
        here = raw.tell()
        end = raw.seek(0, os.SEEK_END)
        raw.seek(here)
        return int(end)
    except (AttributeError, OSError, ValueError):
        return None


@contextlib.contextmanager
def _stream(source: Source) -> Iterator[tuple[BinaryIO, Optional[int], bool]]:
    """(stream at byte 0 of the (inflated) NIfTI, the file's size when plain, compressed)."""
    with contextlib.ExitStack() as stack:
        if isinstance(source, (str, os.PathLike)):
            raw: BinaryIO = stack.enter_context(open(source, "rb"))
        else:
            raw = source
            raw.seek(0)
        magic = raw.read(2)
        raw.seek(0)
        if magic == GZIP_MAGIC:
            inflated = typing.cast(BinaryIO, stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")))
            yield inflated, None, True
        else:
            yield raw, _size(raw), False


def _read(stream: BinaryIO, count: int, what: str, compressed: bool) -> bytearray:
    """Up to ``count`` bytes (fewer at the end of the file); a cut or corrupt gzip stream fails."""
    buffer = bytearray(count)
    view = memoryview(buffer)
    got = 0
    try:
        while got < count:
            if hasattr(stream, "readinto"):
                n = stream.readinto(view[got:])
            else:
                chunk = stream.read(count - got)
                n = len(chunk)
                view[got:got + n] = chunk
            if not n:
                break
            got += n
    except EOFError as exc:
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the .nii.gz ends inside its compressed stream, {got} of {count} {what} bytes in: "
                              f"it was cut short; re-copy it") from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise ConversionError(reasons.INVALID_NIFTI,
                              f"the gzip stream is corrupt ({exc}) {got} {what} bytes in: re-copy the file") from exc
    finally:
        view.release()
    del buffer[got:]
    return buffer


def _header(stream: BinaryIO, compressed: bool):
    block = _read(stream, 4, "header", compressed)
    if len(block) < 4:
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the file ends inside its NIfTI header ({len(block)} bytes): it was cut short")
    sizes = [struct.unpack(e + "i", bytes(block))[0] for e in "<>"]
    size = next((s for s in sizes if s in _SIZEOF_HDR), None)
    if size is None:
        raise ConversionError(reasons.INVALID_NIFTI,
                              f"sizeof_hdr {sizes[0]} is neither 348 (NIfTI-1) nor 540 (NIfTI-2): not a NIfTI file")
    version = _SIZEOF_HDR[size]
    block += _read(stream, size - 4, "header", compressed)
    if len(block) < size:
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the file ends inside its NIfTI-{version} header ({len(block)} of {size} bytes): "
                              f"it was cut short; re-copy it")
    start, valid = (344, NIFTI1_MAGIC) if version == 1 else (4, NIFTI2_MAGIC)
    magic = bytes(block[start:start + len(valid[0])])
    if magic not in valid:
        raise ConversionError(reasons.INVALID_NIFTI,
                              f"NIfTI-{version} magic {magic!r} at byte {start} is not {valid[0]!r}: not a NIfTI "
                              f"file, or a damaged one")
    if magic in _PAIR_MAGIC:
        raise ConversionError(reasons.UNSUPPORTED_NIFTI,
                              f"the header of a NIfTI-{version} .hdr/.img pair (magic {magic!r}): its voxels are in "
                              f"the .img file; convert the pair to one .nii (e.g. nib.save(nib.load(hdr), 'x.nii'))")
    klass = Nifti1Header if version == 1 else Nifti2Header
    try:
        # nib.load's checks and fixes (a qfac of 0 is 1, an unknown sform/qform code is 0, ...)
        return klass(binaryblock=bytes(block), check=True), version
    except HeaderDataError as exc:
        raise ConversionError(reasons.INVALID_NIFTI, f"NIfTI-{version} header: {exc}") from exc


def _shape(header, max_pixels: int) -> tuple[tuple[int, ...], int]:
    dims = [int(d) for d in header["dim"]]
    ndim = dims[0]
    if not 1 <= ndim <= 7:
        raise ConversionError(reasons.INVALID_NIFTI, f"dim[0] = {ndim}: a NIfTI header has 1 to 7 dimensions")
    shape = dims[1:ndim + 1]
    if any(d < 0 for d in shape):
        raise ConversionError(reasons.INVALID_NIFTI, f"dims {shape}: a negative size")
    if any(d == 0 for d in shape):
        raise ConversionError(reasons.INVALID_VALUE, f"header claims an empty image (dims {shape})")
    if any(d > 1 for d in shape[4:]):
        intent = header.get_intent()[0]
        raise ConversionError(reasons.UNSUPPORTED_NIFTI,
                              f"{ndim}-D (dims {shape}, intent {intent!r}): only 3-D volumes and 4-D series of "
                              f"volumes convert")
    volumes = shape[3] if len(shape) > 3 else 1
    ijk = tuple((shape + [1, 1])[:3])
    pixels = math.prod(ijk) * volumes
    if pixels > max_pixels:
        claimed = "x".join(str(d) for d in ijk + ((volumes,) if volumes > 1 else ()))
        raise ConversionError(reasons.TOO_MANY_PIXELS,
                              f"header claims {claimed} = {pixels} pixels > --max_pixels {max_pixels}")
    return ijk + ((volumes,) if volumes > 1 else ()), volumes


def _stored(header) -> tuple[np.dtype, int]:
    """(stored dtype, channels); RGB voxels are uint8 channels."""
    code = int(header["datatype"])
    label = header._data_type_codes.label.get(code, str(code))
    if label in _CHANNELS:
        return np.dtype("uint8"), _CHANNELS[label]
    dtype = header.get_data_dtype()
    if dtype.newbyteorder("=").name not in _RECORD_DTYPES:
        raise ConversionError(reasons.UNSUPPORTED_NIFTI,
                              f"datatype {label} (code {code}): no record dtype holds it (records hold "
                              f"{', '.join(_RECORD_DTYPES)}); convert the voxels to one of them")
    return dtype, 1


def _record_dtype(stored: np.dtype, slope: Optional[float], inter: Optional[float]) -> tuple[str, Optional[str]]:
    """(the record's dtype, the integer dtype to scale in, None to scale in floats)."""
    name = stored.newbyteorder("=").name
    if slope is None or (slope, inter) == (1.0, 0.0):
        return name, None
    assert inter is not None
    if stored.kind in "iu" and slope.is_integer() and inter.is_integer() \
            and abs(slope) <= _MAX_INTEGER_SLOPE and abs(inter) <= _MAX_INTEGER_INTER:
        info, a, b = np.iinfo(stored), int(slope), int(inter)
        products = (int(info.min) * a, int(info.max) * a)
        values = sorted(p + b for p in products)
        try:
            work = smallest_integer_dtype(min(values + list(products) + [int(info.min)]),
                                          max(values + list(products) + [int(info.max)]))
            return smallest_integer_dtype(values[0], values[1]), work
        except OverflowError:
            pass
    return ("float64" if name == "float64" else "float32"), None


def _affine(header, version: int) -> tuple[np.ndarray, str]:
    try:
        if int(header["sform_code"]) != 0:
            return np.asarray(header.get_sform(), float), "sform"
        if int(header["qform_code"]) != 0:
            return np.asarray(header.get_qform(), float), "qform"
        return np.asarray(header.get_base_affine(), float), "pixdim"
    except (HeaderDataError, ValueError) as exc:      # ValueError: a quaternion of no rotation (b^2+c^2+d^2 > 1)
        raise ConversionError(reasons.INVALID_NIFTI, f"NIfTI-{version} header's affine: {exc}") from exc


def _spec(header, version: int, compressed: bool, size: Optional[int], max_pixels: int) -> NiftiSpec:
    nifti_shape, volumes = _shape(header, max_pixels)
    stored, channels = _stored(header)
    slope: Optional[float] = None
    inter: Optional[float] = None
    if channels == 1:
        try:
            slope, inter = header.get_slope_inter()
        except HeaderDataError as exc:
            raise ConversionError(reasons.INVALID_VALUE,
                                  f"scl_inter {float(header['scl_inter'])} is not finite while scl_slope "
                                  f"{float(header['scl_slope'])} scales the voxels") from exc
    dtype, _ = _record_dtype(stored, slope, inter)
    ras, source = _affine(header, version)
    unit, time_unit = header.get_xyzt_units()
    ras_mm = ras.copy()
    ras_mm[:3] *= _TO_MM.get(unit, 1.0)
    if not np.isfinite(ras_mm).all():
        raise ConversionError(reasons.INVALID_VALUE, f"the {source} affine holds a non-finite number: no geometry")
    offset = int(header.get_data_offset())
    if offset < header.sizeof_hdr:
        raise ConversionError(reasons.INVALID_NIFTI,
                              f"vox_offset {offset} lies inside the {header.sizeof_hdr}-byte header")
    spec = NiftiSpec(version=version, compressed=compressed, nifti_shape=nifti_shape, volumes=volumes,
                     depth=nifti_shape[2], height=nifti_shape[1], width=nifti_shape[0], channels=channels,
                     stored_dtype=stored.newbyteorder("=").name, dtype=dtype, slope=slope, inter=inter,
                     affine=LPS_FROM_RAS @ ras_mm @ _REVERSED, affine_ras=ras, affine_source=source,
                     spatial_unit=unit, time_step=float(header["pixdim"][4]) if volumes > 1 else 0.0,
                     time_unit=time_unit,
                     vox_offset=offset)
    if size is not None and offset + spec._stored_bytes > size:
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the file holds {size} bytes; its header puts {spec._stored_bytes} voxel bytes at "
                              f"byte {offset}: it was cut short; re-copy it")
    return spec


def probe(source: Source, max_pixels: int = DEFAULT_MAX_PIXELS) -> NiftiSpec:
    """A NIfTI's record plan from its header alone (no voxel is read): shape, dtypes, scaling,
    affine. ``source`` is a path or a binary file object (read from its start; a gzip stream is
    recognised by its magic). A plain file shorter than its voxels fails here already."""
    with _stream(source) as (stream, size, compressed):
        header, version = _header(stream, compressed)
        return _spec(header, version, compressed, size, max_pixels)


def _scaled(raw: np.ndarray, spec: NiftiSpec) -> np.ndarray:
    stored = np.dtype(spec.stored_dtype)
    dtype, work = _record_dtype(stored, spec.slope, spec.inter)
    if not spec.scaled:
        return raw
    assert spec.slope is not None and spec.inter is not None
    if work is not None:
        out = raw.astype(work)
        out *= int(spec.slope)
        out += int(spec.inter)
        return out.astype(dtype, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):       # refused below, never printed
        out = raw.astype(np.float64)
        out *= spec.slope
        out += spec.inter
        out = out.astype(dtype, copy=False)
    overflowed = ~np.isfinite(out)
    if raw.dtype.kind == "f":
        overflowed &= np.isfinite(raw)          # a NaN or inf stored is the file's own value, kept
    if overflowed.any():
        raise ConversionError(reasons.INVALID_VALUE,
                              f"scl_slope {spec.slope:g} and scl_inter {spec.inter:g} scale "
                              f"{int(np.count_nonzero(overflowed))} voxels past the {dtype} range (to +-inf "
                              f"or NaN): the scaled values are not numbers a record can hold")
    return out


def read(source: Source, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[NiftiSpec, np.ndarray]:
    """(the probe's spec, the pixels of ``spec.shape`` and ``spec.dtype``): ``pixels[..., k, j, i, c]``
    is the file's ``data[i, j, k, ...]`` (channel c of an RGB voxel), scaled by the dtype rule."""
    with _stream(source) as (stream, size, compressed):
        header, version = _header(stream, compressed)
        spec = _spec(header, version, compressed, size, max_pixels)
        stream.seek(spec.vox_offset)
        count = spec._stored_bytes
        buffer = _read(stream, count, "voxel", compressed)
        if compressed and len(buffer) == count:
            _read(stream, 1, "voxel", compressed)         # at the stream's end: gzip checks its CRC there
    if len(buffer) < count:
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the file ends {len(buffer)} of {count} voxel bytes in (its header claims "
                              f"{'x'.join(map(str, spec.nifti_shape))} {spec.stored_dtype}): it was cut short; "
                              f"re-copy it")
    stored = np.dtype("uint8") if spec.channels > 1 else header.get_data_dtype()
    # i fastest on disk: read in C order, the array already is [t, k, j, i] (the module docstring)
    raw = np.frombuffer(buffer, dtype=stored).reshape(spec.shape)
    if not raw.dtype.isnative:
        raw = raw.byteswap(inplace=True).view(raw.dtype.newbyteorder("="))
    pixels = _scaled(raw, spec)
    assert pixels.shape == spec.shape and pixels.dtype == np.dtype(spec.dtype), (pixels.shape, pixels.dtype)
    return spec, pixels


def read_volume(source: Source, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[np.ndarray, np.ndarray]:
    """(pixels ``[k, j, i, channels]``, or ``[t, k, j, i, channels]`` for a 4-D file of several
    volumes; the 4 x 4 LPS affine of voxel ``[k, j, i, 1]``): see ``read`` and the module docstring."""
    spec, pixels = read(source, max_pixels)
    return pixels, spec.affine
