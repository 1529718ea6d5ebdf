"""The record's header elements (the needed set): those a record is made from, converted once and
looked up by keyword (HeaderValues); every other element stays raw."""
from __future__ import annotations

import functools
import warnings
from typing import Optional

from pydicom.datadict import tag_for_keyword
from pydicom.dataelem import RawDataElement, convert_raw_data_element
from pydicom.dataset import Dataset
from pydicom.tag import Tag

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.errors import Dcm2TfrecordError
from dcm2tfrecord.transforms.dicom.content import PIXEL_TAGS
from dcm2tfrecord.transforms.dicom.metadata import ALLOWED_NUMBERS, ALLOWED_TEXT, IDENTIFIERS
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.settings import DecodeSettings

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
    # the geometry and 4-D features (transforms.dicom.patient_space, volume_features) and the
    # volumes of a 4-D series (transforms.series.volumes): what tells repeated positions apart
    "TemporalPositionIdentifier",
    "TriggerTime", "EchoTime", "EchoNumbers", "AcquisitionNumber",
    # Siemens mosaics (transforms.dicom.mosaic): Manufacturer (in ALLOWED_TEXT) and Image Type
    # say whether to look; only then is the private CSA Image Header Info (0029,xx10) read,
    # raw from the Dataset (HeaderValues.ds) by nibabel's CSA reader: a private element,
    # never converted here, deferred at probe time (read from the file when asked for)
    "ImageType",
    # diffusion (transforms.dicom.diffusion): the standard attributes, and GE's phase encoding axis;
    # the vendors' private elements are converted only in their MR files (vendor_private_tags)
    "DiffusionBValue", "DiffusionGradientOrientation", "DiffusionDirectionality", "MRDiffusionSequence",
    "InPlanePhaseEncodingDirection",
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
# conversion key -> the value it converted to; and id(element) -> (the element, the
# encoding, that value) for an element object converted (or remembered) under its key:
# the head walk hands consecutive slices the very same RawDataElement for the same bytes
# at the same place (head_parse), found again by identity without building its key.
# An int never equals a key tuple; the element is held, so its id is not reused.
_CONVERTED: dict = {}
_CONVERTED_MAX = 50_000
_CONVERTED_VALUE_MAX = 256
_PIXEL_TAG_INTS = frozenset(int(tag) for tag in PIXEL_TAGS)
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


def converted_element(ds: Dataset, tag: int):
    """``ds[tag]``: the element, converted and kept converted in ``ds`` as
    Dataset.__getitem__ leaves it.

    A raw element of a concrete VR (_PURE_VRS: not SQ, not an ambiguous "US or SS"),
    public, read (not deferred), not pixel data and not Specific Character Set is
    converted here: for such an element __getitem__ only converts it with the dataset's
    character set and stores it, by way of Tag(), __setitem__'s checks and two more
    lookups of the element to read its VR, about 15 us. Anything else goes to ds[tag].
    """
    # (int tags: pydicom types Dataset._dict's keys as BaseTag, an int, which Tag() would make)
    elem = ds._dict[tag]  # type: ignore[index]
    if not isinstance(elem, RawDataElement):
        return elem
    if elem.VR in _PURE_VRS and elem.value is not None and not (tag >> 16) & 1 \
            and tag != 0x00080005 and tag not in _PIXEL_TAG_INTS:
        converted = ds._dict[tag] = convert_raw_data_element(  # type: ignore[index]
            elem, encoding=ds.original_character_set or ds._character_set, ds=ds)
        return converted
    return ds[tag]


_PER_FRAME_TAG = 0x52009230     # Per-frame Functional Groups Sequence


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
                elem = elements.get(tag)  # type: ignore[call-overload]  # an int tag, as above
                if elem is None:
                    continue
                if not isinstance(elem, RawDataElement):
                    values[tag] = elem.value
                    continue
                if elem.value is None and elem.length and tag in _PIXEL_TAG_INTS:
                    continue
                if tag == _PER_FRAME_TAG:       # an Enhanced file's frames bounded before they are parsed
                    from dcm2tfrecord.transforms.dicom.functional_groups import check_frame_count
                    size = len(elem.value) if isinstance(elem.value, bytes) else elem.length  # deferred: its length
                    check_frame_count(values, size if size != 0xFFFFFFFF else 0)
                if encoding is _MISSING:
                    encoding = ds.original_character_set or ds._character_set
                    encoding = tuple(encoding) if isinstance(encoding, list) else encoding
                seen = _CONVERTED.get(id(elem))
                if seen is not None and seen[0] is elem and seen[1] == encoding:
                    values[tag] = seen[2]        # this very element converted before (see _CONVERTED)
                    continue
                key = _conversion_key(elem, encoding)
                if key is not None:
                    value = _CONVERTED.get(key, _MISSING)
                    if value is _MISSING:
                        value = converted_element(ds, tag).value
                    if len(_CONVERTED) >= _CONVERTED_MAX:
                        _CONVERTED.clear()
                    _CONVERTED[key] = value
                    _CONVERTED[id(elem)] = (elem, encoding, value)
                    values[tag] = value          # the same bytes converted before, or now, to this value
                else:
                    values[tag] = converted_element(ds, tag).value
    except ConversionError:
        raise
    except Exception as exc:
        name = _keyword_of(tag)
        raise ConversionError(reasons.INVALID_VALUE, f"an element does not parse: {name}: "
                                                     f"{type(exc).__name__}: {exc}") from exc
    convert_vendor_elements(ds, values)


_MANUFACTURER_TAG, _MODALITY_TAG = 0x00080070, 0x00080060


def vendor_private_tags(ds: Dataset, values: dict) -> tuple[int, ...]:
    """The private tags transforms.dicom.diffusion reads in this file: none (one dict lookup)
    unless its Modality is MR and its Manufacturer one whose private elements hold diffusion
    (Siemens, GE, Philips); ``values``: convert_needed_elements' (Modality, Manufacturer)."""
    modality = values.get(_MODALITY_TAG)
    if modality is None or str(modality).strip().upper() != "MR" or _MANUFACTURER_TAG not in values:
        return ()
    from dcm2tfrecord.transforms.dicom import diffusion
    return diffusion.private_tags(ds)


def convert_vendor_elements(ds: Dataset, values: dict) -> None:
    """Converts the vendor's diffusion elements (vendor_private_tags) in ``ds`` now, reading a
    deferred one (a CSA header is some 10 KB) from the file as pydicom does. One that does not
    convert stays raw: a vendor's private data never fails the file (diffusion reads it as none)."""
    for tag in vendor_private_tags(ds, values):
        if tag not in ds._dict:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values[tag] = ds[tag].value
        except Exception:
            continue


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


class NotNeededError(Dcm2TfrecordError, LookupError):
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
    __slots__ = ("ds", "_elements", "_values", "_needed")

    def __init__(self, ds: Dataset, values: Optional[dict] = None, needed: tuple = ()):
        self.ds = ds
        self._elements = ds._dict
        self._values: dict = {} if values is None else values    # tags of ds only
        self._needed = frozenset(needed)

    def _present(self, tag: int) -> bool:
        """Whether ``ds`` holds the element: a tag with a value known is there; else its dict
        says (keyed by BaseTag, equal to the int; no set of the 265 ints built per header)."""
        return tag in self._values or tag in self._elements

    def _value(self, tag: int):
        try:
            return self._values[tag]
        except KeyError:
            if tag not in self._needed:
                raise NotNeededError(f"{_keyword_of(tag)} is read but not in "
                                     "transforms.dicom.record_elements.NEEDED_KEYWORDS") from None
            value = self._values[tag] = self.ds[tag].value
            return value

    def get(self, keyword: str, default=None):
        tag = _KEYWORD_TAGS.get(keyword)
        if tag is not None:
            value = self._values.get(tag, _MISSING)
            if value is not _MISSING:        # the common read: a keyword seen, its value known
                return value
        tag = _tag_for_keyword(keyword)
        if tag is None:
            return self.ds.get(keyword, default)
        if not self._present(tag):
            return default
        try:
            return self._value(tag)
        except AttributeError:      # as Dataset.get, which reads through getattr
            return default

    def __contains__(self, keyword: str) -> bool:
        tag = _tag_for_keyword(keyword)
        return self.ds.__contains__(keyword) if tag is None else self._present(tag)

    def __getattr__(self, name: str):
        tag = _KEYWORD_TAGS.get(name)
        if tag is not None:
            value = self._values.get(tag, _MISSING)
            if value is not _MISSING:        # as in get
                return value
        tag = _tag_for_keyword(name)
        if tag is not None and self._present(tag):
            return self._value(tag)
        return getattr(self.ds, name)
