"""DICOM pixel decoding and value mapping (PS3.3 C.7.6.3, C.11.1, C.11.2, C.7.9).

pydicom decodes every transfer syntax its handlers and the pylibjpeg plugins
support and converts YBR colour spaces to RGB (PS3.3 C.7.6.3.1.2). 12-bit
lossy JPEG (JPEG Extended), which none of those decode, falls back to
imagecodecs' libjpeg-turbo. Then, by ``--dicom_values``:

- ``modality``: the modality LUT (Rescale Slope/Intercept or Modality LUT
  Sequence, C.11.1) on grayscale; PALETTE COLOR through its LUT (C.7.9).
- ``stored``: stored values, Bits Stored respected, sign from Pixel Representation.
- ``window``: modality LUT, then the VOI (C.11.2): see transforms.dicom.voi.
"""
from __future__ import annotations

import dataclasses
import io
import threading
import warnings
from typing import BinaryIO, Optional, Sequence

import numpy as np
import pydicom
from pydicom import uid
from pydicom.dataset import Dataset
from pydicom.pixels import apply_color_lut, apply_modality_lut
from pydicom.pixels import pixel_array as decode_pixels

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import functional_groups, voi
from dcm2tfrecord.transforms.dicom.integrity import check_native_length
from dcm2tfrecord.transforms.dicom.mosaic import Mosaic, mosaic_layout, unmosaic
from dcm2tfrecord.transforms.dicom.record_elements import convert_needed_elements
from dcm2tfrecord.transforms.dicom.spec import DicomValues, image_spec
from dcm2tfrecord.transforms.dicom.syntax import infer_transfer_syntax
from dcm2tfrecord.transforms.dtypes import fit_integer_dtype
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.record_model import ImageSpec

_JPEG_FAMILY = {uid.JPEGBaseline8Bit, uid.JPEGExtended12Bit, uid.JPEGLossless, uid.JPEGLosslessSV1}


def _classify(exc: BaseException) -> str:
    # By the message, as no types exist: pydicom's pixel handlers and the decoder plugins
    # raise plain ValueError, RuntimeError or AttributeError for all of these (the reason
    # code only sorts the failure; DECODE_ERROR is the answer for anything else).
    text = str(exc).lower()
    if "bytes of pixel data" in text or "length of the pixel data" in text or "expected length" in text:
        return reasons.PIXEL_DATA_LENGTH
    if isinstance(exc, AttributeError) and ("missing required element" in text or "has no" in text):
        return reasons.MISSING_ATTRIBUTE
    if ("no pixel data decoders" in text or "not supported" in text or "unable to decode pixel data with" in text
            or isinstance(exc, NotImplementedError)):
        return reasons.UNSUPPORTED_TRANSFER_SYNTAX
    if "invalid literal" in text or "could not convert" in text:
        return reasons.INVALID_VALUE
    return reasons.DECODE_ERROR


def read_dataset(fileobj: BinaryIO, settings: DecodeSettings = DecodeSettings()) -> Dataset:
    """The whole file parsed, the needed set converted (as the probe does), the rest raw."""
    try:
        ds = pydicom.dcmread(fileobj, force=True)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_DICOM, f"file does not parse: {exc}") from exc
    convert_needed_elements(ds, settings)
    infer_transfer_syntax(ds)
    return ds


_J2K_SYNTAXES = {uid.JPEG2000Lossless, uid.JPEG2000, uid.HTJ2KLossless, uid.HTJ2KLosslessRPCL, uid.HTJ2K}
_JP2_SIGNATURE = b"\x00\x00\x00\x0c\x6a\x50\x20\x20"


def check_jp2_boxes(frame: bytes) -> None:
    """Rejects a JP2 box chain that never reaches its codestream (ISO/IEC 15444-1 I.4).

    pydicom's get_j2k_parameters walks these boxes by their lengths and never
    returns on a box of length 0; we walk them first, with a bound.
    """
    if not frame.startswith(_JP2_SIGNATURE):
        return
    offset = 12
    for _ in range(4096):
        if offset >= len(frame):
            return
        length = int.from_bytes(frame[offset:offset + 4], "big")
        if frame[offset + 4:offset + 8] == b"jp2c":
            return
        if length < 8:
            raise ConversionError(reasons.DECODE_ERROR,
                                  f"JPEG 2000 box of length {length} at byte {offset}: corrupt JP2 header")
        offset += length
    raise ConversionError(reasons.DECODE_ERROR, "JPEG 2000 header with too many boxes")


_SIZ = b"\xff\x4f\xff\x51"        # start of codestream, then the image and tile size marker


def check_j2k_size(frame: bytes) -> None:
    """Rejects a JPEG 2000 codestream whose SIZ marker (ISO/IEC 15444-1 A.5.1) describes an
    image no DICOM file holds (over 65535 columns or rows): its header is corrupt.

    pydicom's test file JPEG2000-embedded-sequence-delimiter.dcm has 4 bytes of its SIZ
    overwritten so; OpenJPEG (through pylibjpeg, and through GDCM's gdcmconv) fails on it
    with an opaque message, Pillow takes it for a decompression bomb. Named here instead.
    """
    start = frame.find(_SIZ, 0, 4096)
    if start < 0 or len(frame) < start + 22:
        return
    x, y, x0, y0 = (int.from_bytes(frame[start + 8 + 4 * k:start + 12 + 4 * k], "big") for k in range(4))
    columns, rows = x - x0, y - y0
    if not (0 < columns <= 65535 and 0 < rows <= 65535):
        raise ConversionError(reasons.DECODE_ERROR,
                              f"JPEG 2000 codestream header (SIZ) describes a {columns} x {rows} image: "
                              f"the codestream is corrupt, no decoder reads it")


def _check_encapsulated(ds: Dataset) -> None:
    syntax = str(ds.file_meta.get("TransferSyntaxUID", "")) if hasattr(ds, "file_meta") else ""
    if syntax not in _J2K_SYNTAXES or "PixelData" not in ds:
        return
    from pydicom.encaps import generate_frames
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    try:
        for frame in generate_frames(ds.PixelData, number_of_frames=frames):
            check_jp2_boxes(frame)
            check_j2k_size(frame)
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(reasons.DECODE_ERROR, f"encapsulated pixel data: {exc}") from exc


def _imagecodecs_jpeg(ds: Dataset, frame: Optional[int]) -> Optional[np.ndarray]:
    """libjpeg-turbo (via imagecodecs) for JPEG that pydicom's plugins cannot decode."""
    try:
        import imagecodecs
        from pydicom.encaps import generate_frames
    except ImportError:
        return None
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    decoded = [imagecodecs.jpeg8_decode(data)
               for i, data in enumerate(generate_frames(ds.PixelData, number_of_frames=frames))
               if frame is None or i == frame]
    arr = np.stack(decoded) if len(decoded) > 1 else decoded[0]
    signed = int(ds.get("PixelRepresentation", 0) or 0) == 1 and arr.dtype.kind == "u"
    return arr.view(arr.dtype.str.replace("u", "i")) if signed else arr


def _decode(ds: Dataset, frame: Optional[int], checked: bool = False) -> np.ndarray:
    if not checked:
        _check_encapsulated(ds)
    try:
        return decode_pixels(ds, index=frame) if frame is not None else ds.pixel_array
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # Rust decoders panic with a BaseException (pyo3 PanicException)
        syntax = str(ds.file_meta.get("TransferSyntaxUID", "")) if hasattr(ds, "file_meta") else ""
        if syntax in _JPEG_FAMILY:
            try:
                arr = _imagecodecs_jpeg(ds, frame)
            except Exception:
                arr = None
            if arr is not None:
                return arr
        raise ConversionError(_classify(exc), f"{type(exc).__name__}: {exc}") from exc


def _stored(arr: np.ndarray, ds: Dataset) -> np.ndarray:
    """Stored values with bits above Bits Stored masked off and the sign extended."""
    bits = int(ds.get("BitsStored", 0) or 0) or int(ds.BitsAllocated)
    if arr.dtype.kind not in "iu" or bits >= arr.dtype.itemsize * 8:
        return arr
    unsigned = arr.view(arr.dtype.str.replace("i", "u")) & ((1 << bits) - 1)
    if int(ds.get("PixelRepresentation", 0) or 0) == 1:
        signed = unsigned.astype(np.int64)
        signed = np.where(signed >= (1 << (bits - 1)), signed - (1 << bits), signed)
        return signed
    return unsigned


def _grayscale(ds: Dataset) -> bool:
    return int(ds.get("SamplesPerPixel", 1) or 1) == 1 and \
        str(ds.get("PhotometricInterpretation", "")).upper() != "PALETTE COLOR"


def modality_lut(arr: np.ndarray, ds: Dataset, target: Optional[str] = None) -> np.ndarray:
    """PS3.3 C.11.1. Integer slope and intercept stay in integer arithmetic.

    pydicom computes every rescale in float64; for the common CT case (slope 1,
    intercept -1024) an integer add gives the same exact values at a fraction
    of the cost and without the float round trip. ``target``: the record's planned
    integer dtype; where the stored values, their product with the slope and the
    result all provably fit it (from the values' own minimum and maximum), the
    arithmetic is done in it, one pass instead of a widening copy, an add and a
    narrowing copy (the same values: exact integers in range).
    """
    if arr.dtype.kind in "iu" and "ModalityLUTSequence" not in ds \
            and "RescaleSlope" in ds and "RescaleIntercept" in ds:
        try:
            slope, intercept = float(ds.RescaleSlope), float(ds.RescaleIntercept)
        except (TypeError, ValueError):
            slope = intercept = float("nan")
        if slope.is_integer() and intercept.is_integer():
            fitted = _rescaled_in(arr, int(slope), int(intercept), target)
            if fitted is not None:
                return fitted
            narrow = arr.dtype.itemsize <= 2 and abs(slope) <= 2 ** 14 and abs(intercept) <= 2 ** 29
            out: np.ndarray = arr.astype(np.int32 if narrow else np.int64)
            if slope != 1:
                out *= int(slope)
            if intercept:
                out += int(intercept)
            return out
    return apply_modality_lut(arr, ds)


def _rescaled_in(arr: np.ndarray, slope: int, intercept: int, target: Optional[str]) -> Optional[np.ndarray]:
    """``arr * slope + intercept`` computed in ``target``, or None where any step could leave
    its range (or there is no integer target)."""
    if target is None or np.dtype(target).kind not in "iu" or arr.size == 0:
        return None
    info = np.iinfo(target)
    lo, hi = int(arr.min()), int(arr.max())
    scaled = sorted((lo * slope, hi * slope))
    if not all(info.min <= v <= info.max for v in (lo, hi, *scaled, scaled[0] + intercept,
                                                    scaled[1] + intercept)):
        return None
    out = arr.astype(target)
    if slope != 1:
        out *= slope
    if intercept:
        out += intercept
    return out


def map_values(arr: np.ndarray, ds: Dataset, settings: DecodeSettings,
               target: Optional[str] = None) -> tuple[np.ndarray, dict]:
    """Decoded pixels -> values by --dicom_values; returns the values and the VOI used.
    ``target``: the record's planned dtype (see modality_lut), for --dicom_values modality."""
    photometric = str(ds.get("PhotometricInterpretation", "")).upper()
    if settings.dicom_values == DicomValues.STORED:
        return _stored(arr, ds), {}
    if photometric == "PALETTE COLOR":
        return apply_color_lut(arr, ds), {}
    if not _grayscale(ds):
        return arr, {}
    values = modality_lut(arr, ds, target if settings.dicom_values == DicomValues.MODALITY else None)
    if settings.dicom_values == DicomValues.WINDOW:
        return voi.apply_window(values, ds, settings.window, settings.window_bits)
    return values, {}


def map_frames(decoded: np.ndarray, ds: Dataset, views: list, settings: DecodeSettings,
               frame: Optional[int], frames: Optional[Sequence[int]],
               target: Optional[str] = None, in_order: bool = False) -> tuple[np.ndarray, list]:
    """An Enhanced image's frames mapped one by one, each through its own functional groups'
    rescale, Modality LUT and VOI (transforms.dicom.functional_groups.value_views), in record
    order: ``frames`` (stored indices), the one ``frame`` decoded, or all as stored.
    ``in_order``: ``decoded`` holds only the frames of ``frames``, in their order.
    Returns the values and the VOI used per frame."""
    if frame is not None:
        stored, indices = decoded[None], [frame]
        positions = [0]
    else:
        stored = decoded if len(views) > 1 or in_order else decoded[None]
        indices = list(range(len(views))) if frames is None else list(frames)
        positions = list(range(len(indices))) if in_order else indices
    mapped, windows = [], []
    for position, index in zip(positions, indices):
        values, window = map_values(stored[position], views[index], settings, target)
        mapped.append(values)
        windows.append(window)
    return np.stack(mapped), windows


def to_record_array(arr: np.ndarray, planned_dtype: str, depth: int, channels: int) -> np.ndarray:
    """Casts to the planned dtype (widening when needed) and reshapes to (D, H, W, C).

    Integer output must be exact: the mapped values are checked, never rounded.
    The result is little-endian and C-contiguous.
    """
    dtype = planned_dtype
    if np.dtype(planned_dtype).kind in "iu":
        if arr.dtype.kind == "f" and not np.array_equal(arr, np.round(arr)):
            dtype = "float32"
        else:
            dtype = fit_integer_dtype(arr, planned_dtype)
    out = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<"))
    rows, cols = out.shape[-2:] if channels == 1 else out.shape[-3:-1]
    if out.size != depth * rows * cols * channels:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"decoded {out.size} values {out.shape}, the header describes "
                              f"{depth} frame(s) of {rows}x{cols}x{channels}")
    return out.reshape(depth, rows, cols, channels)


def _tiles(values: np.ndarray, layout: Mosaic, channels: int, frame: Optional[int]) -> np.ndarray:
    """A mosaic's mapped values (Rows, Columns[, C]) as its slices (n, rows, columns[, C]),
    or the one slice ``frame``, in the layout to_record_array reads."""
    slices = unmosaic(values.reshape(1, layout.mosaic_rows, layout.mosaic_columns, channels), layout)
    if frame is not None:
        slices = slices[frame:frame + 1]
    return slices[..., 0] if channels == 1 else slices


@dataclasses.dataclass
class _Parsed:
    """A file's header as decode_dicom reads it: the dataset, mosaic layout, spec and the
    functional groups' value views, with the file's bytes they were parsed from."""
    data: bytes
    settings: DecodeSettings
    ds: Dataset
    layout: Optional[Mosaic]
    spec: ImageSpec
    views: Optional[list]
    kept: bool = False        # held in PARSED: its encapsulated frames were checked before
    cost: int = 0             # estimated bytes of memory held (see PARSED_COST)


# An Enhanced file written as several records (--frames split, or one record per stack) is read
# once per record: the parsed headers of such files are kept, by their exact bytes and the
# settings, so that a file's records after its first each cost their own frames, not a parse of
# the whole header and of every frame's functional groups (issue 35, item 7). The planner
# interleaves the records of many files in a shard, so many are kept: at most PARSED_FILES, and
# PARSED_COST bytes of estimated memory, a file's bytes plus PARSED_PER_HEADER_BYTE for each byte
# of its header (a parsed Per-frame Functional Groups Sequence takes some 60 times its encoded
# size). A kept file's records decode their own frames only: no decoded pixels are kept with it.
# (docs/DICOM.md, "Enhanced multi-frame")
PARSED_FILES = 256
PARSED_COST = 512 << 20
PARSED_PER_HEADER_BYTE = 64
PARSED: list = []
_PARSED_LOCK = threading.Lock()     # decode threads of one worker (transforms.sources.read.with_timeout)


def _parsed(fileobj: BinaryIO, settings: DecodeSettings, frame: Optional[int],
            frames: Optional[Sequence[int]]) -> _Parsed:
    """The file's parsed header: a kept one where the same bytes were parsed under the same
    settings, else parsed now (and kept when the file is an Enhanced one read for a part of
    its frames: one frame, or one stack of several)."""
    data = fileobj.getvalue() if isinstance(fileobj, io.BytesIO) else None
    if data is not None:
        with _PARSED_LOCK:
            for n, entry in enumerate(PARSED):
                if len(entry.data) == len(data) and (entry.settings is settings or entry.settings == settings) \
                        and entry.data == data:
                    PARSED.insert(0, PARSED.pop(n))
                    return entry
    ds = read_dataset(fileobj, settings)
    layout = mosaic_layout(ds)
    spec = image_spec(ds, settings, layout)
    check_native_length(ds)
    # the functional groups' rescale and VOI are grayscale's; colour frames are only reordered
    views = functional_groups.value_views(ds) if _grayscale(ds) and layout is None else None
    parsed = _Parsed(data or b"", settings, ds, layout, spec, views)
    part = frame is not None or (frames is not None and len(frames) < spec.depth)
    if data is not None and part and functional_groups.present(ds):
        parsed.cost = len(data) + PARSED_PER_HEADER_BYTE * _header_bytes(ds, len(data))
    if parsed.cost and parsed.cost <= PARSED_COST:
        _check_encapsulated(ds)
        parsed.kept = True
        with _PARSED_LOCK:
            PARSED.insert(0, parsed)
            _evict()
    return parsed


def _header_bytes(ds: Dataset, size: int) -> int:
    """The file's bytes other than its pixel data's."""
    element = ds._dict.get(0x7FE00010)  # type: ignore[call-overload]  # an int tag, as record_elements.py reads it
    value = getattr(element, "value", None)
    return max(size - len(value), 0) if isinstance(value, (bytes, bytearray)) else size


def _evict() -> None:
    total = 0
    for n, entry in enumerate(PARSED):
        total += entry.cost
        if n >= PARSED_FILES or total > PARSED_COST:
            del PARSED[n:]
            return


def decode_dicom(fileobj: BinaryIO, settings: DecodeSettings = DecodeSettings(),
                 frame: Optional[int] = None, frames: Optional[Sequence[int]] = None,
                 ) -> tuple[np.ndarray, Dataset, dict]:
    """One DICOM file (or one frame of it) -> ((D, H, W, C) values, dataset, VOI used).

    ``frames``: an Enhanced file's stored frame indices in record order (one stack),
    default all as stored. The VOI used of an Enhanced file is that of its first frame,
    with the list of every frame's under ``"frames"``.
    Geometry (resize, channels) is applied by the caller, after value mapping.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = _parsed(fileobj, settings, frame, frames)
        ds, layout, spec, views = parsed.ds, parsed.layout, parsed.spec, parsed.views
        own = parsed.kept and frame is None and frames is not None and layout is None
        if own and frames is not None:     # one stack of an Enhanced file of several: its own frames, in order
            decoded = np.stack([_decode(ds, i, checked=True) for i in frames])
        else:       # a Siemens mosaic is one stored frame; ``frame`` is then one of its tiles
            decoded = _decode(ds, None if layout is not None else frame, checked=parsed.kept)
        try:
            if views is None:
                values, window = map_values(decoded, ds, settings, spec.dtype)
                if layout is not None:
                    values = _tiles(values, layout, spec.channels, frame)
                elif frames is not None and frame is None and not own:
                    values = (values if spec.depth > 1 else values[None])[list(frames)]
            else:
                values, windows = map_frames(decoded, ds, views, settings, frame, frames, spec.dtype,
                                             in_order=own)
                window = dict(windows[0], frames=windows) if windows[0] else {}
        except ConversionError:
            raise
        except Exception as exc:
            raise ConversionError(reasons.INVALID_VALUE, f"value mapping failed: {exc}") from exc
    depth = 1 if frame is not None else spec.depth if frames is None else len(frames)
    return to_record_array(values, spec.dtype, depth, spec.channels), ds, window
