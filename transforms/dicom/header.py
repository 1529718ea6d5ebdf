"""What a DICOM file will decode to, read from its header only.

The Image Pixel module (PS3.3 C.7.6.3) gives the geometry; the Modality LUT
module (PS3.3 C.11.1) gives the value range after rescale, from which the
stored dtype follows. Pixel data is never read here: pydicom defers large
values, so probing costs a header read even for a 1 GB multi-frame file.
"""
from __future__ import annotations

import functools
import io
import logging
import math
import struct
import warnings
from typing import BinaryIO, Optional

import numpy as np
import pydicom
from pydicom.dataelem import RawDataElement
from pydicom.datadict import tag_for_keyword
from pydicom.charset import convert_encodings, default_encoding
from pydicom.dataelem import convert_raw_data_element, empty_value_for_VR
from pydicom.dataset import Dataset, FileDataset
from pydicom.filereader import read_dataset, read_partial
from pydicom.tag import BaseTag
from pydicom.tag import Tag
from pydicom.uid import (DeflatedExplicitVRLittleEndian, ExplicitVRBigEndian, ExplicitVRLittleEndian,
                         ImplicitVRLittleEndian)

from dataset import reasons
from transforms.dicom import functional_groups
from transforms.dtypes import smallest_integer_dtype
from transforms.errors import ConversionError
from transforms.values import ImageSpec
from transforms.settings import DecodeSettings

PIXEL_KEYWORDS = ("PixelData", "FloatPixelData", "DoubleFloatPixelData")
_DEFER_BYTES = 2048
_REQUIRED = ("Rows", "Columns", "BitsAllocated")
_PIXEL_DATA_TAG = Tag(0x7FE0, 0x0010)
# Pixel Data, Float Pixel Data, Double Float Pixel Data
_PIXEL_TAGS = {_PIXEL_DATA_TAG, Tag(0x7FE0, 0x0008), Tag(0x7FE0, 0x0009)}



def silence_pydicom() -> None:
    """Keeps pydicom's logging and warnings out of the run log (idempotent).

    pydicom logs and warns about every oddity it tolerates; what matters to a
    user ends up in errors.jsonl with a reason. Called by the steps that read
    DICOM (their ``setup``), never at import: importing this module changes
    nothing in the caller's process.
    """
    logging.getLogger("pydicom").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pydicom(\..*)?$")


def read_probe_header(fileobj: BinaryIO, settings: DecodeSettings = DecodeSettings(),
                      file_size: Optional[int] = None) -> tuple["HeaderValues", Optional[RawDataElement]]:
    """Every element parsed, large values (pixel data) left unread on disk, wrapped in the
    HeaderValues the probe reads; and the raw (7FE0,0010) Pixel Data element as parsed, if
    deferred (its ``value_tell`` and length let transforms.dicom.native read native pixels
    straight from the file bytes at write time).

    Only the elements a record is made from (needed_tags) are converted, here,
    once: every other element stays pydicom's RawDataElement, its bytes never
    interpreted, so a private or unused element with a mangled value does not
    fail the file. The converted values are the HeaderValues' from the start.
    With ``file_size`` the header is parsed from memory when it can be (see
    _parse_from_head).
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = _parse_from_head(fileobj, file_size) if file_size else None
            if ds is None:
                fileobj.seek(0)
                ds = pydicom.dcmread(fileobj, force=True, defer_size=_DEFER_BYTES)
    except Exception as exc:  # pydicom raises many types for a broken header
        raise ConversionError(reasons.INVALID_DICOM, f"header does not parse: {exc}") from exc
    raw = ds._dict.get(_PIXEL_DATA_TAG)
    if not (isinstance(raw, RawDataElement) and raw.value is None and raw.length):
        raw = None     # not deferred (small or empty): the general path handles it
    values: dict = {}
    convert_needed_elements(ds, settings, values=values)
    return HeaderValues(ds, values, needed_tags(tuple(settings.keep_tags))), raw


_HEAD_BYTES = 64 << 10


def _parse_from_head(fileobj: BinaryIO, file_size: int) -> Optional[Dataset]:
    """The file's header parsed in memory, or None where that is not provably the
    parse of the whole file.

    pydicom reads a header in a few hundred small reads and tells; from a file
    object (a TrackedReader over a storage stream) each is a Python call or two,
    a sixth of a vendor-header probe. From an io.BytesIO they cost nothing. The
    head (the first 64 KiB) is the whole file's parse when it is the whole
    file, or when the last element it parses is the deferred Pixel Data: the
    full parse reads the same bytes up to there and skips that value too. What
    follows the value to the end of the file (a vendor's Data Set Trailing
    Padding, say), if at most 64 KiB, is read and parsed in the same encoding,
    its positions moved to the file's; if any of it is deferred, or more
    follows, or anything fails (a header longer than the head, encapsulated
    pixel data, a parse error), the caller parses the file itself. The main
    dataset of an Explicit VR Little Endian file is walked by _walk_explicit_le
    rather than pydicom's element generator where it can be.
    """
    head = fileobj.read(_HEAD_BYTES)       # a read error propagates: the caller reports it
    try:
        ds = _walked_explicit_le(fileobj, head, file_size)
        if ds is not None:
            return ds
        ds = pydicom.dcmread(io.BytesIO(head), force=True, defer_size=_DEFER_BYTES)
        if len(head) >= file_size:
            return ds if len(head) == file_size else None
        elements = ds._dict
        last = elements[next(reversed(elements))] if elements else None    # the last one parsed
        if not (isinstance(last, RawDataElement) and int(last.tag) == int(_PIXEL_DATA_TAG)
                and last.value is None and last.length != 0xFFFFFFFF):
            return None
        end = last.value_tell + last.length
        if end == file_size:
            return ds
        tail = _tail(fileobj, end, file_size)
        if tail is None:
            return None
        trailing = read_dataset(io.BytesIO(tail), last.is_implicit_VR, last.is_little_endian,
                                defer_size=_DEFER_BYTES)
    except Exception:
        return None
    for tag, elem in trailing._dict.items():
        if not isinstance(elem, RawDataElement) or elem.value is None:
            return None
        elements[tag] = elem._replace(value_tell=elem.value_tell + end)
    return ds


def _tail(fileobj: BinaryIO, end: int, file_size: int) -> Optional[bytes]:
    """The file's bytes from ``end`` to ``file_size`` if at most 64 KiB and all there, else None."""
    if end > file_size or file_size - end > _HEAD_BYTES:
        return None
    fileobj.seek(end)
    tail = fileobj.read(file_size - end)
    return tail if len(tail) == file_size - end else None


_SHORT_VRS = {vr.encode(): vr for vr in "AE AS AT CS DA DS DT FL FD IS LO LT PN SH SL SS ST TM UI UL US"
              .split()}
_LONG_VRS = {vr.encode(): vr for vr in "OB OD OF OL OV OW SQ SV UC UN UR UT UV".split()}
_EXPLICIT_LE = struct.Struct("<HH2sH")
_UINT32_LE = struct.Struct("<L")


def _stop_at_first(tag, vr, length) -> bool:
    return True


def _walk_explicit_le(buf: bytes, pos: int, base: int, out: dict) -> Optional[int]:
    """Elements of an Explicit VR Little Endian dataset in ``buf`` from ``pos`` into ``out``
    (tag -> RawDataElement, as pydicom's data_element_generator yields them; ``base``: the
    file offset of ``buf[0]``); returns where the walk ended (past a deferred value it may
    lie beyond ``buf``), or None at anything it does not handle exactly as pydicom does:
    an unknown VR, an undefined length, an item or delimiter tag, a value cut short."""
    unpack, unpack_long = _EXPLICIT_LE.unpack_from, _UINT32_LE.unpack_from
    short, long_ = _SHORT_VRS, _LONG_VRS
    end = len(buf)
    while pos + 8 <= end:
        group, element, vr_bytes, length = unpack(buf, pos)
        vr = short.get(vr_bytes)
        if vr is not None:
            value_tell = pos + 8
        else:
            vr = long_.get(vr_bytes)
            if vr is None or pos + 12 > end:
                return None
            length = unpack_long(buf, pos + 8)[0]
            value_tell = pos + 12
        if length == 0xFFFFFFFF or group == 0xFFFE:
            return None
        tag = group << 16 | element
        if length > _DEFER_BYTES and tag != 0x00080005:
            value = None
        elif length == 0:
            value = empty_value_for_VR(vr, raw=True)
        else:
            if value_tell + length > end:
                return None
            value = buf[value_tell:value_tell + length]
        key = BaseTag(tag)
        out[key] = RawDataElement(key, vr, length, value, base + value_tell, False, True)
        pos = value_tell + length
    return pos if pos >= end else (None if end - pos else pos)


def _walked_explicit_le(fileobj: BinaryIO, head: bytes, file_size: int) -> Optional[Dataset]:
    """An Explicit VR Little Endian file's parse built from _walk_explicit_le, as pydicom's
    read_partial builds it (preamble and file meta parsed by pydicom itself), or None."""
    probe = io.BytesIO(head)
    meta_only = read_partial(probe, stop_when=_stop_at_first, defer_size=_DEFER_BYTES, force=True)
    if meta_only.original_encoding != (False, True) or len(meta_only._dict) \
            or str(meta_only.file_meta.get("TransferSyntaxUID", "")) != ExplicitVRLittleEndian:
        return None
    raw: dict = {}
    pos = _walk_explicit_le(head, probe.tell(), 0, raw)
    if pos is None:
        return None
    if pos < file_size:
        if pos < len(head):
            return None
        tail = _tail(fileobj, pos, file_size)
        if tail is None:
            return None
        pos = _walk_explicit_le(tail, 0, pos, raw)
        if pos is None or any(e.value is None for e in raw.values() if e.value_tell >= len(head)):
            return None
    elif pos > file_size or len(head) < file_size and pos != file_size:
        return None
    dataset = Dataset(raw, parent_encoding=default_encoding)
    charset = raw.get(0x00080005)
    encoding = convert_encodings(convert_raw_data_element(charset).value) if charset is not None \
        else default_encoding
    dataset.set_original_encoding(False, True, encoding)
    ds = FileDataset(probe, dataset, meta_only.preamble, meta_only.file_meta, False, True)
    ds.set_original_encoding(False, True, dataset._character_set)
    return ds


# ---------------------------------------------------------------- the needed set
#
# The one list of the header elements a record is made from: what the probe,
# native_layout, the general write path (pydicom's decoders and LUTs included)
# and dicom/* read. Only these are converted; everything else stays raw (a
# mangled value there fails nothing, and is never written: dicom/* holds only
# ALLOWED_TEXT, ALLOWED_NUMBERS, the hashed IDENTIFIERS and --keep_tags).
# A new reader of the header adds its keywords here.
NEEDED_KEYWORDS = (
    "SpecificCharacterSet",                              # decodes every text value below
    "SOPClassUID",                                       # the no_pixel_data message
    # Image Pixel module (PS3.3 C.7.6.3), as pydicom's decoders read it
    "SamplesPerPixel", "PhotometricInterpretation", "PlanarConfiguration", "NumberOfFrames",
    "Rows", "Columns", "BitsAllocated", "BitsStored", "HighBit", "PixelRepresentation",
    "PixelData", "FloatPixelData", "DoubleFloatPixelData",
    "ExtendedOffsetTable", "ExtendedOffsetTableLengths",
    # palette colour (C.7.9)
    "RedPaletteColorLookupTableDescriptor", "GreenPaletteColorLookupTableDescriptor",
    "BluePaletteColorLookupTableDescriptor", "AlphaPaletteColorLookupTableDescriptor",
    "RedPaletteColorLookupTableData", "GreenPaletteColorLookupTableData",
    "BluePaletteColorLookupTableData", "AlphaPaletteColorLookupTableData",
    "SegmentedRedPaletteColorLookupTableData", "SegmentedGreenPaletteColorLookupTableData",
    "SegmentedBluePaletteColorLookupTableData", "SegmentedAlphaPaletteColorLookupTableData",
    # Modality LUT (C.11.1) and VOI LUT (C.11.2)
    "ModalityLUTSequence", "RescaleSlope", "RescaleIntercept", "RescaleType",
    "VOILUTSequence", "WindowCenter", "WindowWidth", "VOILUTFunction",
    # Enhanced multi-frame (C.7.6.16): rescale, VOI, geometry per frame or shared, and the
    # stacks (transforms.dicom.functional_groups reads these at the top level)
    "SharedFunctionalGroupsSequence", "PerFrameFunctionalGroupsSequence", "DimensionIndexSequence",
    "BurnedInAnnotation",
    # --unit series: slice geometry and order (transforms.records.probe._slice_info)
    "ImageOrientationPatient", "ImagePositionPatient", "InstanceNumber", "PixelSpacing",
)


def _keyword_tags(keywords) -> frozenset:
    return frozenset(t for t in map(_tag_for_keyword, keywords) if t is not None)


@functools.lru_cache(maxsize=64)
def needed_tags(keep_tags: tuple[str, ...] = ()) -> tuple[int, ...]:
    """The (int) tags of the needed set with these --keep_tags, ascending."""
    return tuple(sorted(_keyword_tags(NEEDED_KEYWORDS + ALLOWED_TEXT + ALLOWED_NUMBERS
                                      + tuple(IDENTIFIERS.values()) + tuple(keep_tags))))


# Raw elements whose conversion is a pure function of their own bytes: explicit,
# concrete VRs (no SQ, no UN, no ambiguous "US or SS"), public tags outside the
# file meta group, and not Specific Character Set (whose conversion also sets
# state on the dataset). pydicom converts one of these from (tag, VR, length,
# value, endianness, implicitness) and the dataset's character set alone: its
# Dataset.__getitem__ consults the dataset only for SQ (pixel representation
# of the items), ambiguous VRs and private tags, none of which qualify. That
# holds for the Image Pixel group (0028) too, whose Rows, Columns, Bits and
# rescale elements are the same in every slice of a series.
_PURE_VRS = frozenset("AE AS AT CS DA DS DT FD FL IS LO LT OB OD OF OL OV OW PN SH SL SS ST SV "
                      "TM UC UI UL UR US UT UV".split())
_CONVERTED: dict = {}      # conversion key -> the value it converted to
_CONVERTED_MAX = 50_000
_CONVERTED_VALUE_MAX = 256
_PIXEL_TAG_INTS = frozenset(int(tag) for tag in _PIXEL_TAGS)
_MISSING = object()


def _conversion_key(elem: RawDataElement, encoding) -> Optional[tuple]:
    """A key under which a successful conversion of ``elem`` may be remembered, or None."""
    tag, value = int(elem.tag), elem.value
    group = tag >> 16
    if elem.VR not in _PURE_VRS or value is None or len(value) > _CONVERTED_VALUE_MAX \
            or group & 1 or group == 0x0002 or tag == 0x00080005:
        return None
    return (tag, elem.VR, elem.length, bytes(value), elem.is_little_endian, elem.is_implicit_VR,
            encoding)


def convert_needed_elements(ds: Dataset, settings: DecodeSettings = DecodeSettings(),
                            values: Optional[dict] = None) -> None:
    """Converts the needed set's elements now (needed_tags), so a mangled one fails here, classified.

    pydicom parses element values lazily, on first access; without this, an
    unknown VR would surface as NotImplementedError wherever the value is used.
    Elements outside the needed set are looked up by nobody and stay raw.
    Pixel data values that pydicom deferred stay on disk: reading them would
    read the whole file (once more, re-opened by name) only to convert a byte
    string; the writer reads and checks them. An element whose exact bytes
    (same tag, VR, value, encoding) already converted without error in this
    process (see _conversion_key) is not converted again: the slices of a
    series share most of their header, and converting the same bytes again
    cannot fail differently, nor give a different value. Such an element stays
    raw in ``ds`` (converted, with the same result, when read there);
    ``values`` (int tag -> value), when given, receives every value converted
    here or remembered.
    """
    if values is None:
        values = {}
    elements = ds._dict
    tag = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            encoding = _MISSING
            for tag in needed_tags(tuple(settings.keep_tags)):
                elem = elements.get(tag)
                if elem is None:
                    continue
                if not isinstance(elem, RawDataElement):
                    values[tag] = elem.value
                    continue
                if elem.value is None and elem.length and tag in _PIXEL_TAG_INTS:
                    continue
                if encoding is _MISSING:
                    encoding = ds.original_character_set or ds._character_set
                    encoding = tuple(encoding) if isinstance(encoding, list) else encoding
                key = _conversion_key(elem, encoding)
                if key is not None:
                    value = _CONVERTED.get(key, _MISSING)
                    if value is not _MISSING:
                        values[tag] = value      # the same bytes converted before, to this value
                        continue
                value = values[tag] = ds[tag].value
                if key is not None:
                    if len(_CONVERTED) >= _CONVERTED_MAX:
                        _CONVERTED.clear()
                    _CONVERTED[key] = value
    except Exception as exc:
        name = _keyword_of(tag)
        raise ConversionError(reasons.INVALID_VALUE, f"an element does not parse: {name}: "
                                                     f"{type(exc).__name__}: {exc}") from exc


def _keyword_of(tag) -> str:
    from pydicom.datadict import keyword_for_tag
    if tag is None:
        return "?"
    return keyword_for_tag(tag) or str(Tag(tag))


_KEYWORD_TAGS: dict = {}


def _tag_for_keyword(keyword: str) -> Optional[int]:
    tag = _KEYWORD_TAGS.get(keyword)
    if tag is None:
        tag = tag_for_keyword(keyword)
        if tag is not None:
            _KEYWORD_TAGS[keyword] = tag
    return tag


class NotNeededError(LookupError):
    """A reader of the probe's header asked for an element outside the needed set."""


class HeaderValues:
    """Keyword reads of one parsed header, each element looked up and converted at most once.

    Stands in for the Dataset where the probe reads it (``get``, ``in``,
    attribute access, as image_spec, metadata and native_layout do): the
    answers are the Dataset's own, but a value is taken from the element
    the first time (``ds[tag].value``, converting it as pydicom does) and
    kept, so the seventy-odd keyword reads of a probe do not each go through
    pydicom's keyword and tag machinery. ``values`` holds those known already
    (convert_needed_elements'). Reading a present element outside the needed
    set (``needed``, see NEEDED_KEYWORDS) is a programming error, raised as
    NotNeededError: the probe would otherwise depend on, and fail on, an
    element that the rule says stays raw. A failed conversion is not kept: it
    fails again when read again, as it would on the Dataset. Names that are
    not DICOM keywords go to the Dataset itself.
    """
    __slots__ = ("ds", "_tags", "_values", "_needed")

    def __init__(self, ds: Dataset, values: Optional[dict] = None, needed: tuple = ()):
        self.ds = ds
        self._tags = frozenset(map(int, ds._dict))
        self._values: dict = {} if values is None else values
        self._needed = frozenset(needed)

    def _value(self, tag: int):
        try:
            return self._values[tag]
        except KeyError:
            if tag not in self._needed:
                raise NotNeededError(f"{_keyword_of(tag)} is read but not in "
                                     "transforms.dicom.header.NEEDED_KEYWORDS") from None
            value = self._values[tag] = self.ds[tag].value
            return value

    def get(self, keyword: str, default=None):
        tag = _tag_for_keyword(keyword)
        if tag is None:
            return self.ds.get(keyword, default)
        if tag not in self._tags:
            return default
        try:
            return self._value(tag)
        except AttributeError:      # as Dataset.get, which reads through getattr
            return default

    def __contains__(self, keyword: str) -> bool:
        tag = _tag_for_keyword(keyword)
        return self.ds.__contains__(keyword) if tag is None else tag in self._tags

    def __getattr__(self, name: str):
        tag = _tag_for_keyword(name)
        if tag is not None and tag in self._tags:
            return self._value(tag)
        return getattr(self.ds, name)


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
    frame_bits = _int(ds, "Rows") * _int(ds, "Columns") * _int(ds, "SamplesPerPixel", 1) * \
        _int(ds, "BitsAllocated")
    frames = _int(ds, "NumberOfFrames", 1) or 1
    expected = (frame_bits * frames + 7) // 8
    actual = len(ds.PixelData or b"")
    frame_bytes = (frame_bits + 7) // 8
    if actual == 0:
        raise ConversionError(reasons.PIXEL_DATA_LENGTH, f"pixel data is empty, {expected} bytes expected")
    if actual > expected + max(frame_bytes, 2):
        raise ConversionError(reasons.PIXEL_DATA_LENGTH,
                              f"pixel data is {actual} bytes, {actual - expected} more than Rows x Columns "
                              f"x Frames x Samples x Bits Allocated = {expected}: the header is wrong")


NATIVE_SYNTAXES = {ImplicitVRLittleEndian, ExplicitVRLittleEndian, ExplicitVRBigEndian,
                   DeflatedExplicitVRLittleEndian}


def looks_like_dicom(ds: Dataset) -> bool:
    """True when a force-read dataset holds real DICOM elements, not noise."""
    try:
        tags = list(ds.keys())
    except Exception:
        return False
    if not tags:
        return False
    known = sum(1 for tag in tags if 0x0008 <= tag.group <= 0x7FE0 and tag.group % 2 == 0)
    return known >= 2 or any(tag.group in (0x0008, 0x0028) for tag in tags)


def has_float_pixels(ds: Dataset) -> bool:
    return "FloatPixelData" in ds or "DoubleFloatPixelData" in ds


def has_pixel_data(ds: Dataset) -> bool:
    return any(keyword in ds for keyword in PIXEL_KEYWORDS)


def _int(ds: Dataset, keyword: str, default=None) -> int:
    try:
        value = ds.get(keyword, default)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}: {exc}") from exc
    if value is None or value == "":
        if default is None:
            raise ConversionError(reasons.MISSING_ATTRIBUTE, f"missing required element {keyword}")
        return default
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}={value!r}: {exc}") from exc


def _float(ds: Dataset, keyword: str, default: float) -> float:
    try:
        value = ds.get(keyword, None)
        return default if value is None or value == "" else float(value)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"{keyword}: {exc}") from exc


def validate_pixel_module(ds: Dataset) -> None:
    """Rejects Image Pixel module values no real file has (PS3.3 C.7.6.3.1), before any use."""
    allocated = _int(ds, "BitsAllocated")
    stored = _int(ds, "BitsStored", allocated)
    checks = [
        (allocated in (1, 8, 16, 32, 64), f"Bits Allocated {allocated} is not 1, 8, 16, 32 or 64"),
        (1 <= stored <= allocated, f"Bits Stored {stored} outside 1..Bits Allocated ({allocated})"),
        (0 < _int(ds, "Rows") <= 65535, f"Rows {_int(ds, 'Rows')} outside 1..65535"),
        (0 < _int(ds, "Columns") <= 65535, f"Columns {_int(ds, 'Columns')} outside 1..65535"),
        (_int(ds, "SamplesPerPixel", 1) in (1, 3, 4),
         f"Samples per Pixel {_int(ds, 'SamplesPerPixel', 1)} is not 1, 3 or 4"),
        (_int(ds, "PixelRepresentation", 0) in (0, 1),
         f"Pixel Representation {_int(ds, 'PixelRepresentation', 0)} is not 0 or 1"),
        (0 < (_int(ds, "NumberOfFrames", 1) or 1) <= 1_000_000,
         f"Number of Frames {_int(ds, 'NumberOfFrames', 1)} is implausible"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConversionError(reasons.INVALID_VALUE, message)


def stored_range(ds: Dataset) -> tuple[int, int]:
    """Range of stored values from Bits Stored and Pixel Representation."""
    bits = _int(ds, "BitsStored", _int(ds, "BitsAllocated"))
    if _int(ds, "PixelRepresentation", 0) == 1:
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def modality_dtype(ds: Dataset) -> str:
    """dtype of the modality-LUT output, PS3.3 C.11.1.

    Rescale with integer slope and intercept keeps integers (CT in HU is
    int16); a fractional rescale needs float32; a Modality LUT Sequence maps
    into the LUT's bit depth. Colour images have no modality LUT. An Enhanced
    image's rescale is per frame (transforms.dicom.functional_groups): the
    dtype is the smallest exact over every frame's range.
    """
    views = None if has_float_pixels(ds) else functional_groups.value_views(ds)
    if not views:
        found = modality_range(ds)
        return found if isinstance(found, str) else smallest_integer_dtype(*found)
    ranges = [modality_range(view) for view in {id(v): v for v in views}.values()]
    floats = [r for r in ranges if isinstance(r, str)]
    if floats:
        return "float64" if "float64" in floats else "float32"
    return smallest_integer_dtype(min(r[0] for r in ranges), max(r[1] for r in ranges))


def modality_range(ds: Dataset):
    """The (lo, hi) integer range of the modality-LUT output, or the float dtype it needs."""
    if "FloatPixelData" in ds:
        return "float32"
    if "DoubleFloatPixelData" in ds:
        return "float64"
    lo, hi = stored_range(ds)
    if _int(ds, "SamplesPerPixel", 1) == 1:
        if "ModalityLUTSequence" in ds:
            descriptor = ds.ModalityLUTSequence[0].LUTDescriptor
            return (0, 255) if int(descriptor[2]) <= 8 else (0, 65535)
        if "RescaleSlope" in ds and "RescaleIntercept" in ds:
            slope = _float(ds, "RescaleSlope", 1.0)
            intercept = _float(ds, "RescaleIntercept", 0.0)
            if not (math.isfinite(slope) and math.isfinite(intercept)):
                raise ConversionError(reasons.INVALID_VALUE, f"rescale {slope}, {intercept} is not finite")
            if not (slope.is_integer() and intercept.is_integer()) or abs(slope) > 2 ** 31 \
                    or abs(intercept) > 2 ** 62:
                return "float32"
            lo, hi = sorted((lo * slope + intercept, hi * slope + intercept))
            if str(ds.get("Modality", "")).upper() == "CT":
                # Hounsfield units lie physically within int16 even when a
                # 16-bit signed stored range minus 1024 would not; a slice whose
                # values really exceed it decodes wider than planned, and the
                # shard writer refuses it (decoded_size_mismatch).
                lo, hi = max(lo, -32768), min(hi, 32767)
    return lo, hi


def _stored_dtype(ds: Dataset) -> str:
    if "FloatPixelData" in ds:
        return "float32"
    if "DoubleFloatPixelData" in ds:
        return "float64"
    return smallest_integer_dtype(*stored_range(ds))


def _palette_dtype(ds: Dataset) -> str:
    descriptor = ds.get("RedPaletteColorLookupTableDescriptor")
    bits = int(descriptor[2]) if descriptor is not None else 8
    return "uint8" if bits <= 8 else "uint16"


def value_dtype_and_channels(ds: Dataset, settings: DecodeSettings) -> tuple[str, int]:
    """(dtype, channels) of the mapped values, by --dicom_values, before geometry."""
    samples = _int(ds, "SamplesPerPixel", 1)
    photometric = str(ds.get("PhotometricInterpretation", "") or "").upper()
    if settings.dicom_values == "stored":
        return _stored_dtype(ds), samples
    if photometric == "PALETTE COLOR":
        return _palette_dtype(ds), 3
    if samples > 1:
        return _stored_dtype(ds), samples
    if settings.dicom_values == "window":
        return ("uint8" if settings.window_bits == 8 else "uint16"), 1
    return modality_dtype(ds), 1


def image_spec(ds: Dataset, settings: DecodeSettings = DecodeSettings()) -> ImageSpec:
    """Shape and dtype of the mapped values (all frames), before geometry."""
    for keyword in _REQUIRED:
        _int(ds, keyword)
    validate_pixel_module(ds)
    frames = _int(ds, "NumberOfFrames", 1) or 1
    dtype, channels = value_dtype_and_channels(ds, settings)
    return ImageSpec(depth=frames, height=_int(ds, "Rows"), width=_int(ds, "Columns"),
                     channels=channels, dtype=dtype)


def infer_transfer_syntax(ds: Dataset) -> None:
    """Files without (0002,0010): native pixel data is read the way the dataset was encoded."""
    meta = getattr(ds, "file_meta", None)
    if meta is not None and meta.get("TransferSyntaxUID"):
        return
    if "PixelData" not in ds or ds["PixelData"].is_undefined_length:
        return
    implicit, little = getattr(ds, "original_encoding", (None, None))
    if implicit is None:
        return
    from pydicom.dataset import FileMetaDataset
    if meta is None:
        ds.file_meta = meta = FileMetaDataset()
    meta.TransferSyntaxUID = (ImplicitVRLittleEndian if implicit
                              else ExplicitVRLittleEndian if little else ExplicitVRBigEndian)


def transfer_syntax(ds: Dataset) -> str:
    meta = getattr(ds, "file_meta", None)
    uid = meta.get("TransferSyntaxUID", None) if meta is not None else None
    return str(uid) if uid else ""


def burned_in_annotation(ds: Dataset) -> bool:
    return str(ds.get("BurnedInAnnotation", "") or "").strip().upper() == "YES"


# Non-identifying attributes written by default (PS3.15 Annex E keeps these).
ALLOWED_TEXT = ("Modality", "BodyPartExamined", "Manufacturer", "ManufacturerModelName",
                "PhotometricInterpretation", "ViewPosition", "Laterality", "ImageLaterality")
ALLOWED_NUMBERS = ("PixelSpacing", "ImagerPixelSpacing", "SliceThickness", "SpacingBetweenSlices",
                   "KVP", "BitsStored", "RescaleSlope", "RescaleIntercept")
IDENTIFIERS = {"patient_id": "PatientID", "study_uid": "StudyInstanceUID",
               "series_uid": "SeriesInstanceUID", "sop_uid": "SOPInstanceUID",
               "accession": "AccessionNumber"}


@functools.lru_cache(maxsize=1024)
def _snake(keyword: str) -> str:
    out = []
    for i, ch in enumerate(keyword):
        if ch.isupper() and i and (not keyword[i - 1].isupper() or
                                   (i + 1 < len(keyword) and keyword[i + 1].islower())):
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def _floats(values) -> np.ndarray:
    """A float32 array: encodes as FloatList even when empty, keeping one schema."""
    return np.asarray(values, dtype=np.float32).reshape(-1)


def _numbers(ds: Dataset, keyword: str) -> np.ndarray:
    try:
        value = ds.get(keyword)
        if value is None or value == "":
            return _floats([])
        if isinstance(value, (list, tuple)) or hasattr(value, "__iter__") and not isinstance(value, str):
            return _floats([float(v) for v in value])
        return _floats([float(value)])
    except Exception:
        return _floats([])


def metadata_feature_names(keep_tags: tuple[str, ...] = ()) -> dict:
    """The dicom/* feature schema, as dataset.json lists it."""
    out = {f"dicom/{_snake(k)}": {"dtype": "bytes", "shape": []} for k in ALLOWED_TEXT}
    out.update({f"dicom/{_snake(k)}": {"dtype": "float", "shape": [-1]} for k in ALLOWED_NUMBERS})
    out["dicom/transfer_syntax"] = {"dtype": "bytes", "shape": []}
    out["dicom/window"] = {"dtype": "float", "shape": [-1],
                           "description": "[center, width] applied with --dicom_values window"}
    out["dicom/slice_spacing"] = {"dtype": "float", "shape": [-1],
                                  "description": "--unit series: spacing between slices in mm"}
    out.update(functional_groups.RECORD_FEATURES)
    for name in IDENTIFIERS:
        out[f"dicom/{name}_hash"] = {"dtype": "bytes", "shape": [],
                                     "description": "HMAC-SHA256 with --id_salt, hex; empty if absent"}
    for keyword in keep_tags:
        out[f"dicom/{keyword}"] = {"dtype": "bytes", "shape": [], "description": "--keep_tags"}
    return out


def metadata_keys(settings: DecodeSettings) -> tuple[str, ...]:
    """The keys ``metadata`` returns, in its order (the DICOM shortcut carries values only)."""
    return (tuple(f"dicom/{_snake(k)}" for k in ALLOWED_TEXT + ALLOWED_NUMBERS)
            + ("dicom/transfer_syntax", "dicom/window", "dicom/slice_spacing")
            + tuple(f"dicom/{name}_hash" for name in IDENTIFIERS)
            + tuple(f"dicom/{keyword}" for keyword in settings.keep_tags))


def metadata(ds: Dataset, settings: DecodeSettings, window: dict) -> dict:
    """Allowlisted, non-identifying attributes under ``dicom/``; identifiers only hashed."""
    from transforms.hashing import identifier_hash
    out: dict = {}
    for keyword in ALLOWED_TEXT:
        try:
            out[f"dicom/{_snake(keyword)}"] = str(ds.get(keyword, "") or "")
        except Exception:
            out[f"dicom/{_snake(keyword)}"] = ""
    for keyword in ALLOWED_NUMBERS:
        out[f"dicom/{_snake(keyword)}"] = _numbers(ds, keyword)
    out["dicom/transfer_syntax"] = transfer_syntax(ds)
    out["dicom/window"] = _floats([window["center"], window["width"]] if window else [])
    out["dicom/slice_spacing"] = _floats([])
    for name, keyword in IDENTIFIERS.items():
        try:
            value = str(ds.get(keyword, "") or "").strip()
        except Exception:
            value = ""
        out[f"dicom/{name}_hash"] = identifier_hash(value, settings.id_salt) if value else ""
    for keyword in settings.keep_tags:
        try:
            out[f"dicom/{keyword}"] = str(ds.get(keyword, "") or "")
        except Exception:
            out[f"dicom/{keyword}"] = ""
    return out
