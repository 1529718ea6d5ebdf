"""Whether a DICOM file is whole: read once, bounded, and checked against its own size.

pydicom forgives a file that ends early: it stops at the end of the file, keeps
what it parsed, and defers large values without looking whether their bytes
exist. A CT cut inside its header then looks like an object without pixel
data, and an element declaring 3 GB looks like a deferred value. The probe
reads each DICOM header through :func:`read_dataset` and then asks
:func:`check_whole` and :func:`check_frames_fit`, so that such a file fails as
``truncated_file`` (or ``pixel_data_length_mismatch``) once, at probe, before
any of its records is planned.

Deflated Explicit VR Little Endian (PS3.5 A.5) is inflated here, not by
pydicom, with a bound: what its header's pixel data needs plus
:data:`DEFLATE_HEADER_BYTES`. A file that inflates past it fails as
``inflated_too_large`` having held at most the bound in memory.
"""
from __future__ import annotations

import io
import warnings
import zlib
from typing import BinaryIO, Literal, Optional

import pydicom
from pydicom.dataelem import RawDataElement
from pydicom.filebase import DicomBytesIO
from pydicom.filereader import _read_file_meta_info, read_dataset as pydicom_read_dataset, read_preamble
from pydicom.dataset import Dataset
from pydicom.tag import Tag
from pydicom.uid import DeflatedExplicitVRLittleEndian

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom.elements import int_value
from dcm2tfrecord.transforms.dicom.syntax import NATIVE_SYNTAXES, transfer_syntax
from dcm2tfrecord.transforms.errors import ConversionError

DEFLATED = str(DeflatedExplicitVRLittleEndian)
_DEFLATED_BYTES = DEFLATED.encode("ascii")
_META_PEEK = 4096
DEFLATE_HEADER_BYTES = 32 << 20    # what a deflated file may hold besides its pixel data
_INFLATE_CHUNK = 1 << 20
_HEAD_BYTES = 1 << 20              # inflated bytes in which the pixel geometry is looked for
_UNDEFINED = 0xFFFFFFFF
_PIXEL_TAGS = frozenset({0x7FE00010, 0x7FE00008, 0x7FE00009})
_IMAGE_KEYWORDS = ("Rows", "Columns", "BitsAllocated")
_ITEM = (0xFFFE, 0xE000)


# ---------------------------------------------------------------- reading


def read_dataset(fileobj: BinaryIO, defer_size: int, max_pixels: int):
    """pydicom.dcmread(force=True, defer_size=...), with parse failures classified and
    Deflated files inflated within a bound (see the module docstring).

    pydicom turns an end of file inside an element into a warning and keeps what
    it read (sometimes nothing): that warning is a truncated file here.
    """
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = _read_deflated(fileobj, defer_size, max_pixels) if maybe_deflated(fileobj) else None
            if ds is None:
                ds = pydicom.dcmread(fileobj, force=True, defer_size=defer_size)
    except ConversionError:
        raise
    except Exception as exc:  # pydicom raises many types for a broken header
        raise parse_failure(exc, "header does not parse", _at_end(fileobj)) from exc
    for warning in caught:
        # Text, as no type exists: pydicom (3.0, filereader.read_dataset) turns the EOFError
        # of a short read into a plain UserWarning holding its message. Its RAISE reading
        # mode would re-raise the EOFError, but also raise on every value it now only warns of.
        text = str(warning.message)
        if "nexpected end of file" in text or "End of file reached" in text:
            raise ConversionError(reasons.TRUNCATED_FILE,
                                  f"the file ends inside an element: {text.split(' in file ')[0]}")
    return ds


def _at_end(fileobj: BinaryIO) -> bool:
    """Whether the reader stands at the end of the file (where a parse failed)."""
    try:
        here = fileobj.tell()
        return fileobj.seek(0, io.SEEK_END) <= here
    except Exception:
        return False


def parse_failure(exc: BaseException, what: str, at_end: bool = False) -> ConversionError:
    """The ConversionError for an exception pydicom raised while parsing; ``at_end``: it
    was raised with the whole file read (a short read inside an element)."""
    chain = _chain(exc)
    if any(isinstance(e, RecursionError) for e in chain):
        return ConversionError(reasons.INVALID_DICOM,
                               f"{what}: sequences are nested too deeply to parse (Python's recursion "
                               "limit); real files nest a few levels")
    if any(isinstance(e, MemoryError) for e in chain):
        return ConversionError(reasons.UNREADABLE,
                               f"{what}: out of memory (MemoryError) while parsing; an element declares "
                               "more bytes than this worker can hold")
    if at_end or any(_is_end_of_file(e) for e in chain):
        return ConversionError(reasons.TRUNCATED_FILE, f"the file ends inside its header ({exc})")
    return ConversionError(reasons.INVALID_DICOM, f"{what}: {exc}")


def _chain(exc: Optional[BaseException]) -> list:
    seen: list = []
    while exc is not None and all(exc is not e for e in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _is_end_of_file(exc: BaseException) -> bool:
    """pydicom's ways of saying the bytes ran out: EOFError, or an item tag it could not read.

    The latter by its text, as no type exists: pydicom (3.0, filereader.read_sequence_item)
    raises a plain OSError("No tag to read at file position ...") for a short item header."""
    return isinstance(exc, EOFError) or (isinstance(exc, OSError) and "No tag to read" in str(exc))


# ---------------------------------------------------------------- deflate


def maybe_deflated(fileobj: BinaryIO) -> bool:
    """A cheap filter: the Deflated transfer syntax UID among the first bytes (the file meta).

    Only a filter: the meta itself decides (_read_deflated).
    """
    start = fileobj.tell()
    head = fileobj.read(_META_PEEK)
    fileobj.seek(start)
    return _DEFLATED_BYTES in head


def _read_deflated(fileobj: BinaryIO, defer_size: int, max_pixels: int):
    """The dataset of a Deflated Explicit VR Little Endian file, inflated within a bound;
    None when the meta names another transfer syntax (pydicom reads those)."""
    start = fileobj.tell()
    preamble = read_preamble(fileobj, True)
    meta = _read_file_meta_info(fileobj)
    if str(meta.get("TransferSyntaxUID", "") or "") != DEFLATED:
        fileobj.seek(start)
        return None
    data = inflate_bounded(fileobj, max_pixels)
    buffer = DicomBytesIO(data)
    # (pydicom types DicomIO.name as str; inflated_size is ours, read back by stream_size;
    # read_dataset reads a DicomBytesIO as pydicom's own reader does, though typed BinaryIO)
    buffer.name = getattr(fileobj, "name", None)  # type: ignore[assignment]
    buffer.inflated_size = len(data)  # type: ignore[attr-defined]
    dataset = pydicom_read_dataset(buffer, False, True, defer_size=defer_size)  # type: ignore[arg-type]
    ds = pydicom.dataset.FileDataset(buffer, dataset, preamble, meta, False, True)
    ds.set_original_encoding(False, True, dataset._character_set)
    return ds


def inflate_bounded(fileobj: BinaryIO, max_pixels: int) -> bytes:
    """The raw-deflate rest of ``fileobj`` inflated, or ConversionError past the bound.

    The bound is the pixel data that the header (found in the first inflated
    MiB) describes, plus DEFLATE_HEADER_BYTES: never more is inflated, so a
    bomb costs at most that much memory and CPU.
    """
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out = bytearray()
    limit = None
    pending = b""
    while not inflater.eof:
        if not pending:
            pending = fileobj.read(_INFLATE_CHUNK)
            if not pending:
                raise ConversionError(reasons.TRUNCATED_FILE,
                                      "the file ends inside its deflated data (the deflate stream is cut)")
        try:
            out += inflater.decompress(pending, _INFLATE_CHUNK)
        except zlib.error as exc:
            raise ConversionError(reasons.INVALID_DICOM, f"deflated data does not inflate: {exc}") from exc
        pending = inflater.unconsumed_tail
        if limit is None and len(out) >= _HEAD_BYTES:
            limit = _inflate_limit(bytes(out[:_HEAD_BYTES]), max_pixels)
        if limit is not None and len(out) > limit:
            raise ConversionError(reasons.INFLATED_TOO_LARGE,
                                  f"Deflated Explicit VR Little Endian data inflates past {limit} bytes "
                                  f"(the pixel data its header describes plus {DEFLATE_HEADER_BYTES >> 20} "
                                  "MiB); inflating stopped there (a decompression bomb?)")
    return bytes(out)


def _inflate_limit(head: bytes, max_pixels: int) -> int:
    """DEFLATE_HEADER_BYTES plus the pixel bytes the header in ``head`` describes (0 if none)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom_read_dataset(DicomBytesIO(head), False, True,  # type: ignore[arg-type]  # as above
                                      stop_when=lambda tag, vr, length: int(tag) in _PIXEL_TAGS)
            rows, columns = int(ds.get("Rows", 0) or 0), int(ds.get("Columns", 0) or 0)
            frames = int(ds.get("NumberOfFrames", 1) or 1)
            samples = int(ds.get("SamplesPerPixel", 1) or 1)
            bits = int(ds.get("BitsAllocated", 0) or 0)
    except Exception:
        return DEFLATE_HEADER_BYTES
    if min(rows, columns, frames, samples, bits) <= 0:
        return DEFLATE_HEADER_BYTES
    if rows * columns * frames > max_pixels:
        raise ConversionError(reasons.TOO_MANY_PIXELS,
                              f"header claims {frames}x{rows}x{columns} = {rows * columns * frames} pixels "
                              f"> --max_pixels {max_pixels}")
    frame_bytes = (rows * columns * samples * min(bits, 64) + 7) // 8
    return DEFLATE_HEADER_BYTES + frame_bytes * frames


# ---------------------------------------------------------------- completeness


def stream_size(ds, file_size: int) -> int:
    """The size of what ``ds``'s element offsets refer to: the inflated bytes of a
    Deflated file, else the file."""
    inflated = getattr(getattr(ds, "buffer", None), "inflated_size", None)
    return file_size if inflated is None else inflated


def _extent(elem) -> Optional[tuple[int, int]]:
    """(value offset, end) of a top-level element as parsed, or None (undefined length)."""
    if isinstance(elem, RawDataElement):
        if elem.length == _UNDEFINED or elem.value_tell is None:
            return None
        return elem.value_tell, elem.value_tell + elem.length
    return None


def check_whole(ds, size: int, back_to_back: bool = False) -> None:
    """TRUNCATED_FILE when an element's value runs past the end of the file, or when
    the file ends before the pixel data its header describes.

    Checked on the raw elements as parsed (before any value is converted).
    ``size`` is the length of what the offsets refer to (stream_size). An object of an
    image SOP class without pixel data is truncated too: a file cut exactly between two
    elements before its Image Pixel module looks whole but for that (pydicom's header-only
    stubs of CT and MR images fail the same way). ``back_to_back``: the top-level
    elements are known to lie back to back up to ``size`` (head_parse walked them), so
    none runs past it and the last ends there; their extents are not looked at again.
    """
    last_end, last_tag = (size, None) if back_to_back else _last_extent(ds, size)
    if any(tag in ds._dict for tag in _PIXEL_TAGS):
        return
    image = [k for k in _IMAGE_KEYWORDS if k in ds]
    if image:
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the header describes an image ({', '.join(image)}) but the file ends at byte "
                              f"{size}, before any pixel data")
    if _ends_inside_an_element(ds, size, last_end):
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"the file ends at byte {size}, {size - last_end} bytes after its last whole "
                              f"element ({Tag(last_tag) if last_tag is not None else 'none'}): it is cut "
                              "inside the next one")
    # An image SOP class must hold pixel data (the Image Pixel module is mandatory in every
    # image IOD): one without it ends before its pixel data, even when it ends between two
    # elements (a cut there leaves nothing else to see).
    if "Image Storage" in _sop_class_name(ds):
        raise ConversionError(reasons.TRUNCATED_FILE,
                              f"a {_sop_class_name(ds)} object without pixel data: it ends at byte {size} (cut short "
                              "before its pixel data, or its pixel data was removed)")


def _last_extent(ds, size: int) -> tuple[int, Optional[int]]:
    """(end, tag) of the top-level element ending last; TRUNCATED_FILE for one running past ``size``."""
    last_end, last_tag = 0, None
    for tag, elem in ds._dict.items():
        extent = _extent(elem)
        if extent is None:
            continue
        start, end = extent
        if end > size:
            raise ConversionError(
                reasons.TRUNCATED_FILE,
                f"element {Tag(tag)} declares {elem.length} bytes from byte {start}, but the file ends at "
                f"byte {size}: the file is cut short (or the length is corrupt)")
        if end >= last_end:
            last_end, last_tag = end, tag
    return last_end, last_tag


def _sop_class_name(ds) -> str:
    """The name of the SOP class (the dataset's, else the file meta's), "" if none or unreadable
    (a mangled value is for the checks that convert it to report)."""
    try:
        meta = getattr(ds, "file_meta", None)
        sop = str(ds.get("SOPClassUID", "") or (meta.get("MediaStorageSOPClassUID", "") if meta else "") or "")
        return pydicom.uid.UID(sop).name if sop else ""
    except Exception:
        return ""


def _ends_inside_an_element(ds, size: int, last_end: int) -> bool:
    """Bytes after the last whole top-level element that pydicom did not parse.

    An undefined-length sequence as the last element has no recorded end: it was
    parsed to its delimiter, so nothing is known to be missing.
    """
    if not ds._dict or last_end == 0:
        return False
    last_tag = max(ds._dict, key=int)
    if _extent(ds._dict[last_tag]) is None:
        return False
    return last_end < size


# ---------------------------------------------------------------- frames


def _int(ds, keyword: str, default: int) -> int:
    try:
        value = ds.get(keyword, default)
        return int(value) if value not in (None, "") else default
    except Exception:      # a value that does not convert is for image_spec to report
        return default


def _photometric(ds) -> str:
    try:
        return str(ds.get("PhotometricInterpretation", "") or "").upper()
    except Exception:
        return ""


def check_frames_fit(ds, fileobj: BinaryIO, syntax: str) -> None:
    """PIXEL_DATA_LENGTH at probe when the header's frames cannot fit its pixel data.

    Native syntaxes: the byte length is exact (Rows x Columns x Samples x Bits
    per frame); shorter fails, as does more than a frame of excess. Encapsulated:
    each frame needs at least one fragment (an 8-byte item header and a value),
    and a Basic Offset Table, when present, lists every frame. Invalid geometry is
    left to the checks that name it (spec.validate_pixel_module).
    """
    elem = ds._dict.get(Tag(0x7FE0, 0x0010))
    if elem is None:
        return
    rows, columns = _int(ds, "Rows", 0), _int(ds, "Columns", 0)
    bits, samples = _int(ds, "BitsAllocated", 0), _int(ds, "SamplesPerPixel", 1)
    frames = _int(ds, "NumberOfFrames", 1) or 1
    if min(rows, columns, bits, samples, frames) <= 0:
        return
    if isinstance(elem, RawDataElement):
        length = elem.length
    else:                  # already converted: a small value
        length = _UNDEFINED if elem.is_undefined_length else len(elem.value or b"")
    if length == _UNDEFINED:
        _check_fragments(elem, fileobj, frames)
        return
    if syntax and syntax not in NATIVE_SYNTAXES:
        return
    frame_bits = rows * columns * samples * bits
    if _photometric(ds) == "YBR_FULL_422":
        frame_bits = frame_bits // 3 * 2    # two chroma samples shared by each pair of pixels
    expected = (frame_bits * frames + 7) // 8
    frame_bytes = (frame_bits + 7) // 8
    plural = "s" if frames != 1 else ""
    if length == 0:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"pixel data is empty; the header declares {frames} frame{plural} of "
                              f"{frame_bytes} bytes ({expected} bytes)")
    if length < expected:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"pixel data is {length} bytes, room for {frame_bits and length * 8 // frame_bits} "
                              f"of the {frames} frame{plural} of {frame_bytes} bytes the header declares "
                              f"({expected} bytes)")
    if length > expected + max(frame_bytes, 2):
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"pixel data is {length} bytes, {length - expected} more than the {frames} "
                              f"frame{plural} of {frame_bytes} bytes the header declares ({expected} bytes)")


def _check_fragments(elem, fileobj: BinaryIO, frames: int) -> None:
    """Encapsulated pixel data (PS3.5 A.4): a Basic Offset Table that is not empty lists
    every frame, and there is at least one fragment per frame. Reads the item headers
    only (8 bytes each, at most frames + 1 of them), never a fragment's data."""
    if frames <= 1:
        return
    value = elem.value
    if isinstance(value, (bytes, bytearray)):      # read already (small): its own bytes
        fileobj, start = io.BytesIO(value), 0
    elif isinstance(elem, RawDataElement) and elem.value_tell is not None:
        start = elem.value_tell
    else:
        return
    little = elem.is_little_endian if isinstance(elem, RawDataElement) else True
    order: Literal["little", "big"] = "little" if little else "big"
    try:
        here = fileobj.tell()
        try:
            table, fragments = _count_items(fileobj, start, order, frames)
        finally:
            fileobj.seek(here)
    except Exception:
        return    # unreadable here: the decoder says what is wrong, at write time
    if table is None:
        return    # not items: pydicom's own parse decides
    entries = table // 4
    if table and entries < frames:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"the Basic Offset Table lists {entries} frame(s); the header declares {frames}")
    if fragments < frames:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"encapsulated pixel data holds {fragments} fragment(s), too few for the "
                              f"{frames} frames the header declares (each frame has its own)")


def _count_items(fileobj: BinaryIO, start: int, order: Literal["little", "big"],
                 frames: int) -> tuple[Optional[int], int]:
    """(Basic Offset Table length, fragments seen up to ``frames``), or (None, 0) if the
    value does not start with an item."""
    fileobj.seek(start)
    table = None
    fragments = 0
    position = start
    while fragments < frames:
        header = fileobj.read(8)
        if len(header) < 8:
            break
        tag = (int.from_bytes(header[0:2], order), int.from_bytes(header[2:4], order))
        length = int.from_bytes(header[4:8], order)
        if tag != _ITEM or length == _UNDEFINED:
            break        # the sequence delimiter, or not an item: the fragments end here
        if table is None:
            table = length
        else:
            fragments += 1
        position += 8 + length
        fileobj.seek(position)
    return table, fragments


def check_native_length(ds: Dataset) -> None:
    """Native pixel data must hold Rows x Columns x Frames x Samples x Bits Allocated.

    Shorter fails; pydicom tolerates (and strips) small excess padding, as do
    we, but more than a whole frame of excess means the header is wrong.
    """
    if "PixelData" not in ds or ds["PixelData"].is_undefined_length:
        return
    syntax = transfer_syntax(ds)
    if syntax and syntax not in NATIVE_SYNTAXES:
        return
    frame_bits = int_value(ds, "Rows") * int_value(ds, "Columns") * int_value(ds, "SamplesPerPixel", 1) * \
        int_value(ds, "BitsAllocated")
    frames = int_value(ds, "NumberOfFrames", 1) or 1
    expected = (frame_bits * frames + 7) // 8
    actual = len(ds.PixelData or b"")
    frame_bytes = (frame_bits + 7) // 8
    if actual == 0:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH, f"pixel data is empty, {expected} bytes expected")
    if actual > expected + max(frame_bytes, 2):
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"pixel data is {actual} bytes, {actual - expected} more than Rows x Columns "
                              f"x Frames x Samples x Bits Allocated = {expected}: the header is wrong")
