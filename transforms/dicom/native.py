"""A write-time shortcut for uncompressed little-endian grayscale DICOM.

The general write path parses the whole header again with pydicom, converts
every element, asks pydicom for ``pixel_array`` and maps values through the
modality LUT: for a 512x512 CT slice that is most of the write stage's CPU,
spent re-deriving what the probe already knew. For the simplest and most
common layout the probe instead records, in a :class:`NativePixels`, where
the Pixel Data value lies in the file, how to read it, the rescale, and the
``dicom/*`` features (computed by the same ``dicom_metadata.metadata`` from the
same header). The writer then reads the file once, checks that the Pixel Data
element header is still at the recorded offset, and maps the samples with
numpy: the record it serializes is byte-identical to the general path's
(``tests/transforms/dicom/test_native.py`` proves it over pydicom's test files and
generated CT slices).

Only files where that equivalence is simple to reason about qualify (see
:func:`native_layout`): Explicit or Implicit VR Little Endian named in the
file meta, defined-length (7FE0,0010) Pixel Data of OB/OW at the top level,
1 sample per pixel, MONOCHROME1/2, 8 or 16 bits allocated, no Modality LUT
Sequence, integer rescale slope and intercept (or none at all), pixel data
length as the header describes, ``--dicom_values modality``. Everything else
(compressed, big endian, deflated, palette, colour, float pixels, fractional
rescale, LUT sequences, window mode, odd lengths or padding) keeps the
general path. With ``--frames split`` each frame reads its own slice of the
value.
"""
from __future__ import annotations

import dataclasses
import pickle
from typing import Optional

import numpy as np
from pydicom import uid

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import metadata as dicom_metadata
from dcm2tfrecord.transforms.dicom.mosaic import Mosaic, unmosaic
from dcm2tfrecord.transforms.dicom.spec import DicomValues
from dcm2tfrecord.transforms.dtypes import fit_range
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.record_model import field_names

EXPLICIT_LITTLE = uid.ExplicitVRLittleEndian
IMPLICIT_LITTLE = uid.ImplicitVRLittleEndian
_TAG_BYTES = b"\xe0\x7f\x10\x00"        # (7FE0,0010) little endian


@dataclasses.dataclass(frozen=True)
class NativePixels:
    """Where a native pixel value lies in its file and how it maps to record values."""
    offset: int            # file offset of the Pixel Data value
    header: bytes          # the element header just before it (tag, [VR], length), checked at write
    sample_dtype: str      # numpy dtype of the stored samples, little endian: <u1 <i1 <u2 <i2
    bits_stored: int
    frames: int
    rows: int
    columns: int
    slope: Optional[int]   # integer rescale; None: no Rescale Slope/Intercept at all
    intercept: Optional[int]
    value_dtype: str       # planned dtype of the mapped values (transforms.dicom.spec.image_spec)
    metadata: bytes        # packed dicom/* features, see pack_metadata
    # a Siemens mosaic's tiling (transforms.dicom.mosaic.Mosaic): the frame read is un-mosaiced.
    # Out of the repr, which tests/transforms/records/test_probe_equivalence.py records every
    # other file's probe by (the record's spec says a mosaic's slices)
    mosaic: Optional[Mosaic] = dataclasses.field(default=None, repr=False)

    def __reduce__(self):
        # positional, without field names: this travels with every planned record
        return NativePixels, tuple([getattr(self, name) for name in field_names(NativePixels)])

    @property
    def frame_bytes(self) -> int:
        return self.rows * self.columns * np.dtype(self.sample_dtype).itemsize


def _int_or_none(value) -> Optional[int]:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def native_layout(ds, raw_pixel_element, value_dtype: str,
                  settings, file_size: int, mosaic: Optional[Mosaic] = None) -> Optional[NativePixels]:
    """The layout of a probed file if it qualifies for the shortcut, else None.

    ``ds`` is the probe's header (every element but pixel data converted),
    ``raw_pixel_element`` the deferred raw Pixel Data element it was parsed
    with, ``value_dtype`` the planned dtype before geometry, ``file_size``
    the size the file was matched with (a value running past it is truncated),
    ``mosaic`` a Siemens mosaic's transforms.dicom.mosaic.Mosaic (None for others).
    """
    try:
        return _native_layout(ds, raw_pixel_element, value_dtype, settings, file_size, mosaic)
    except Exception:   # anything unexpected: the general path decides
        return None


def _native_layout(ds, raw, value_dtype: str, settings, file_size: int,
                   mosaic: Optional[Mosaic] = None) -> Optional[NativePixels]:
    if raw is None or settings.dicom_values != DicomValues.MODALITY:
        return None
    meta = getattr(ds, "file_meta", None)
    syntax = str(meta.get("TransferSyntaxUID", "") or "") if meta is not None else ""
    if syntax not in (EXPLICIT_LITTLE, IMPLICIT_LITTLE):
        return None
    implicit = syntax == IMPLICIT_LITTLE
    if not raw.is_little_endian or bool(raw.is_implicit_VR) != implicit \
            or getattr(ds, "original_encoding", (None, None)) != (implicit, True):
        return None
    if raw.length == 0xFFFFFFFF or raw.VR not in ("OB", "OW") and not implicit:
        return None
    if any(k in ds for k in ("FloatPixelData", "DoubleFloatPixelData", "ModalityLUTSequence")):
        return None
    if int(ds.get("SamplesPerPixel", 1) or 1) != 1:
        return None
    if str(ds.get("PhotometricInterpretation", "") or "").upper() not in ("MONOCHROME1", "MONOCHROME2"):
        return None
    allocated = int(ds.BitsAllocated)
    stored = int(ds.get("BitsStored", 0) or 0) or allocated
    signed = int(ds.get("PixelRepresentation", 0) or 0)
    if allocated not in (8, 16) or not 1 <= stored <= allocated or signed not in (0, 1):
        return None
    rows, columns = int(ds.Rows), int(ds.Columns)
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    sample = f"<{'iu'[signed == 0]}{allocated // 8}"
    expected = rows * columns * frames * allocated // 8
    if raw.length != expected:
        return None      # odd padding, short or long data: the general path reports or trims it
    has_slope, has_intercept = "RescaleSlope" in ds, "RescaleIntercept" in ds
    slope = intercept = None
    if has_slope or has_intercept:
        if not (has_slope and has_intercept):
            return None
        slope, intercept = _int_or_none(ds.RescaleSlope), _int_or_none(ds.RescaleIntercept)
        # the range dicom_pixels.modality_lut computes in int32
        if slope is None or intercept is None or abs(slope) > 2 ** 14 or abs(intercept) > 2 ** 29:
            return None
    if np.dtype(value_dtype).kind not in "iu":
        return None
    header_len = 8 if implicit else 12
    offset = raw.value_tell
    if implicit:
        header = _TAG_BYTES + raw.length.to_bytes(4, "little")
    else:
        header = _TAG_BYTES + raw.VR.encode("ascii") + b"\x00\x00" + raw.length.to_bytes(4, "little")
    if offset < header_len or offset + raw.length > file_size:
        return None
    return NativePixels(offset=offset, header=header, sample_dtype=sample, bits_stored=stored,
                        frames=frames, rows=rows, columns=columns, slope=slope, intercept=intercept,
                        value_dtype=value_dtype, mosaic=mosaic,
                        metadata=pack_metadata(dicom_metadata.metadata(ds, settings, {}),
                                               dicom_metadata.metadata_keys(settings)))


# ---------------------------------------------------------------- metadata


def pack_metadata(metadata: dict, keys: tuple) -> bytes:
    """dicom/* feature values, in the order of ``keys``, as one compact byte string.

    Strings stay strings, float32 arrays their little-endian float32 bytes (exact
    both ways, 4 bytes a number where a pickled float takes 9), hex digests their
    32 bytes; the tuple of values is pickled
    once here, so every shuffle between probe and write moves one bytes
    object instead of two dozen small ones. Keys are not carried: they follow
    from the settings (dicom_metadata.metadata_keys).
    """
    if tuple(metadata) != tuple(keys):
        raise ValueError("metadata keys differ from dicom_metadata.metadata_keys")
    out = []
    for key, value in metadata.items():
        if isinstance(value, np.ndarray):
            value = value.astype("<f4").tobytes()
        elif key.endswith("_hash") and isinstance(value, str) and value:
            value = bytes.fromhex(value)
        out.append(value)
    return pickle.dumps(tuple(out), protocol=pickle.HIGHEST_PROTOCOL)


def unpack_metadata(packed: bytes, keys: tuple) -> dict:
    out = {}
    for key, value in zip(keys, pickle.loads(packed), strict=True):
        if isinstance(value, bytes):
            value = value.hex() if key.endswith("_hash") else np.frombuffer(value, "<f4").astype(np.float32)
        out[key] = value
    return out


# ---------------------------------------------------------------- pixels


def file_bytes(fileobj) -> memoryview:
    """The whole file, without a copy when it is already in memory (io.BytesIO)."""
    getbuffer = getattr(fileobj, "getbuffer", None)
    if getbuffer is not None:
        return getbuffer()
    fileobj.seek(0)
    return memoryview(fileobj.read())


def decode_native(data, native: NativePixels, frame: Optional[int]) -> np.ndarray:
    """(D, H, W, 1) record values from the file bytes, as dicom_pixels.decode_dicom would give.

    Steps, each the general path's: pydicom's native read (the first
    Rows x Columns x Frames samples, little endian); its unused-bits correction
    (Bits Stored < Bits Allocated: shift left then right, sign-extending for
    Pixel Representation 1); dicom_pixels.modality_lut's integer rescale; and
    to_record_array's dtype choice (the planned dtype, widened only if a value
    does not fit). The correction is skipped when every sample already lies in
    the Bits Stored range (where it is the identity), the rescale is computed
    in the output dtype only when that dtype provably holds every result.
    """
    if native.mosaic is not None:       # one stored frame of tiles: ``frame`` is a tile (--frames split)
        slices = unmosaic(decode_native(data, dataclasses.replace(native, mosaic=None), None), native.mosaic)
        return slices if frame is None else np.ascontiguousarray(slices[frame:frame + 1])
    start = native.offset - len(native.header)
    if bytes(data[start:native.offset]) != native.header:
        raise ConversionError(reasons.CHANGED_DURING_RUN,
                              "the Pixel Data element is no longer where the probe found it")
    frame_bytes = native.frame_bytes
    depth = native.frames if frame is None else 1
    first = native.offset + (0 if frame is None else frame * frame_bytes)
    count = native.rows * native.columns * depth
    if first + frame_bytes * depth > len(data):
        raise ConversionError(reasons.CHANGED_DURING_RUN, "the file is shorter than when probed")
    samples = np.frombuffer(data, dtype=native.sample_dtype, count=count, offset=first)
    lo, hi = (int(samples.min()), int(samples.max())) if count else (0, 0)
    bits = native.bits_stored
    allocated = samples.dtype.itemsize * 8
    signed = samples.dtype.kind == "i"
    if bits < allocated:
        stored_lo, stored_hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if lo < stored_lo or hi > stored_hi:
            shift = allocated - bits
            samples = samples.copy()
            np.left_shift(samples, shift, out=samples)
            np.right_shift(samples, shift, out=samples)
            lo, hi = int(samples.min()), int(samples.max())
    if native.slope is not None and native.intercept is not None:     # (set together)
        slope, intercept = native.slope, native.intercept
        lo, hi = sorted((lo * slope + intercept, hi * slope + intercept))
    out_dtype = np.dtype(fit_range(lo, hi, native.value_dtype) if count else native.value_dtype)
    if native.slope is None or (slope == 1 and intercept == 0):
        values = samples.astype(out_dtype.newbyteorder("<"), copy=samples.dtype != out_dtype)
    elif slope == 1 and out_dtype == samples.dtype:
        # every result fits out_dtype, so the modular sum is the exact one
        values = np.add(samples, np.asarray(intercept).astype(out_dtype), dtype=out_dtype)
    else:
        values = samples.astype(np.int64)
        values *= slope
        values += intercept
        values = values.astype(out_dtype.newbyteorder("<"))
    return np.ascontiguousarray(values).reshape(depth, native.rows, native.columns, 1)

