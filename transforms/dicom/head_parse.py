"""A DICOM file's header parsed in memory from its first 64 KiB, where that is provably
the parse pydicom would make of the whole file (see :func:`parse_from_head`)."""
from __future__ import annotations

import io
import struct
from typing import BinaryIO, Optional

import pydicom
from pydicom.charset import default_encoding
from pydicom.dataelem import RawDataElement, empty_value_for_VR
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.filereader import read_dataset, read_partial
from pydicom.tag import BaseTag
from pydicom.uid import ExplicitVRLittleEndian

from dcm2tfrecord.transforms.dicom.content import PIXEL_DATA_TAG
from dcm2tfrecord.transforms.dicom.record_elements import converted_element

DEFER_BYTES = 2048       # values longer than this stay unread on disk
_HEAD_BYTES = 64 << 10


def parse_from_head(fileobj: BinaryIO, file_size: int) -> Optional[Dataset]:
    """The file's header parsed in memory, or None where that is not provably the
    parse of the whole file (parse_head without its ``walked``)."""
    return parse_head(fileobj, file_size)[0]


def parse_head(fileobj: BinaryIO, file_size: int) -> tuple[Optional[Dataset], bool]:
    """(the file's header parsed in memory, or None where that is not provably the
    parse of the whole file; ``walked``).

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
    rather than pydicom's element generator where it can be; ``walked`` says it
    was, and so that its top-level elements lie back to back from the start of
    the dataset to the end of the file: none runs past it, the last ends there.
    """
    head = fileobj.read(_HEAD_BYTES)       # a read error propagates: the caller reports it
    try:
        ds = _walked_explicit_le(fileobj, head, file_size)
        if ds is not None:
            return ds, True
        ds = pydicom.dcmread(io.BytesIO(head), force=True, defer_size=DEFER_BYTES)
        if len(head) >= file_size:
            return (ds if len(head) == file_size else None), False
        elements = ds._dict
        # (Dataset._dict is a dict, which pydicom types as a MutableMapping: not reversible)
        last = elements[next(reversed(elements))] if elements else None  # type: ignore[arg-type]  # the last parsed
        if not (isinstance(last, RawDataElement) and int(last.tag) == int(PIXEL_DATA_TAG)
                and last.value is None and last.length != 0xFFFFFFFF):
            return None, False
        end = last.value_tell + last.length
        if end == file_size:
            return ds, False
        tail = _tail(fileobj, end, file_size)
        if tail is None:
            return None, False
        trailing = read_dataset(io.BytesIO(tail), last.is_implicit_VR, last.is_little_endian,
                                defer_size=DEFER_BYTES)
    except Exception:
        return None, False
    for tag, elem in trailing._dict.items():
        if not isinstance(elem, RawDataElement) or elem.value is None:
            return None, False
        elements[tag] = elem._replace(value_tell=elem.value_tell + end)
    return ds, False


def _tail(fileobj: BinaryIO, end: int, file_size: int) -> Optional[bytes]:
    """The file's bytes from ``end`` to ``file_size`` if at most 64 KiB and all there, else None."""
    if end > file_size or file_size - end > _HEAD_BYTES:
        return None
    fileobj.seek(end)
    tail = fileobj.read(file_size - end)
    return tail if len(tail) == file_size - end else None


# keyed by the VR's two bytes read as a little-endian uint16 (no bytes object per element)
_SHORT_VRS = {int.from_bytes(vr.encode(), "little"): vr
              for vr in "AE AS AT CS DA DS DT FL FD IS LO LT PN SH SL SS ST TM UI UL US".split()}
_LONG_VRS = {int.from_bytes(vr.encode(), "little"): vr
             for vr in "OB OD OF OL OV OW SQ SV UC UN UR UT UV".split()}
_EXPLICIT_LE = struct.Struct("<HHHH")
_UINT32_LE = struct.Struct("<L")


# The walk builds each RawDataElement (a NamedTuple) with tuple.__new__, skipping its
# Python-level __new__, so it fills the fields by position: in this pydicom's order, or
# (another pydicom) not at all, leaving the file to pydicom's own parse.
_RAW_FIELDS_KNOWN = RawDataElement._fields == (
    "tag", "VR", "length", "value", "value_tell", "is_implicit_VR", "is_little_endian", "is_raw",
    "is_buffered")


class _Tags(dict):
    """int tag -> its BaseTag, made once per process: the slices of a series repeat their
    tags, and a BaseTag (an immutable int) costs more to make than to look up."""
    def __missing__(self, tag: int) -> BaseTag:
        if len(self) >= 50_000:
            self.clear()
        key = self[tag] = BaseTag(tag)
        return key


_BASE_TAGS = _Tags()
_LAST_HEAD: list = [{}]   # the ``seen`` of the last head walked (see _walk_explicit_le)


def _stop_at_first(tag, vr, length) -> bool:
    return True


def _walk_explicit_le(buf: bytes, pos: int, base: int, out: dict, defer: int = DEFER_BYTES,
                      only_group: Optional[int] = None, known: Optional[dict] = None,
                      seen: Optional[dict] = None) -> Optional[int]:
    """Elements of an Explicit VR Little Endian dataset in ``buf`` from ``pos`` into ``out``
    (tag -> RawDataElement, as pydicom's data_element_generator yields them with this
    ``defer`` size; ``base``: the file offset of ``buf[0]``); returns where the walk ended
    (past a deferred value it may lie beyond ``buf``), or None at anything it does not
    handle exactly as pydicom does: an unknown VR, an undefined length, an item or
    delimiter tag, a value cut short. With ``only_group`` it stops (returning where) at
    the first element of another group, as pydicom's stop_when does for the File Meta.

    ``seen`` (with ``base`` 0, ``defer`` DEFER_BYTES, no ``only_group``) receives, per
    position, (the bytes the element was made from, the element, where the next one
    starts); ``known``, a ``seen`` of an earlier walk: an element whose bytes are the same
    at the same position is that walk's element again (an immutable tuple of immutable
    values, made from nothing else), not made anew. The slices of a series repeat most of
    their header at the same positions."""
    unpack, unpack_long = _EXPLICIT_LE.unpack_from, _UINT32_LE.unpack_from
    short, long_ = _SHORT_VRS, _LONG_VRS
    new_element, base_tags, raw_element = tuple.__new__, _BASE_TAGS, RawDataElement
    starts = buf.startswith
    end = len(buf)
    while pos + 8 <= end:
        if known is not None:
            same = known.get(pos)
            if same is not None and starts(same[0], pos):
                elem = same[1]
                out[elem[0]] = elem
                seen[pos] = same  # type: ignore[index]  # ``known`` comes with ``seen``
                pos = same[2]
                continue
        group, element, vr_code, length = unpack(buf, pos)
        if only_group is not None and group != only_group:
            return pos
        vr = short.get(vr_code)
        if vr is not None:
            value_tell = pos + 8
        else:
            vr = long_.get(vr_code)
            if vr is None or pos + 12 > end:
                return None
            length = unpack_long(buf, pos + 8)[0]
            value_tell = pos + 12
        if length == 0xFFFFFFFF or group == 0xFFFE:
            return None
        tag = group << 16 | element
        if length > defer and tag != 0x00080005:
            value = None
        elif length == 0:
            value = empty_value_for_VR(vr, raw=True)
        else:
            if value_tell + length > end:
                return None
            value = buf[value_tell:value_tell + length]
        key = base_tags[tag]
        # RawDataElement(...), see _RAW_FIELDS_KNOWN
        elem = out[key] = new_element(raw_element, (key, vr, length, value, base + value_tell, False,
                                                    True, True, False))
        if seen is not None:
            seen[pos] = (buf[pos:value_tell if value is None else value_tell + length], elem,
                         value_tell + length)
        pos = value_tell + length
    return pos if pos >= end else (None if end - pos else pos)


_PREAMBLE_END = 132        # 128 bytes of preamble, then b"DICM"
_GROUP_LENGTH, _TRANSFER_SYNTAX = 0x00020000, 0x00020010
_NO_DEFER = 1 << 62


def _walked_file_meta(head: bytes) -> Optional[tuple[bytes, FileMetaDataset, int]]:
    """(preamble, File Meta, where the dataset starts) of a file with a preamble, as
    pydicom's read_preamble and _read_file_meta_info make them, or None where the walk
    gives up (no preamble, a meta element it does not handle, a meta that reaches the end
    of ``head``): the caller then has pydicom read them.

    The File Meta group is always Explicit VR Little Endian, its values never deferred;
    pydicom converts its first element (to check that encoding) and, when present, the
    group length (to log a mismatch): so does this, to leave the same elements converted.
    """
    if head[128:_PREAMBLE_END] != b"DICM":
        return None
    raw: dict = {}
    pos = _walk_explicit_le(head, _PREAMBLE_END, 0, raw, _NO_DEFER, only_group=0x0002)
    if pos is None or pos >= len(head) or not raw:
        return None
    file_meta = FileMetaDataset(raw)
    file_meta.set_original_encoding(False, True, default_encoding)
    try:
        converted_element(file_meta, min(map(int, raw)))    # file_meta[its first element's tag]
    except NotImplementedError:     # pydicom then re-reads the meta as Implicit VR
        return None
    if _GROUP_LENGTH in raw:
        converted_element(file_meta, _GROUP_LENGTH)
    return head[:128], file_meta, pos


def _walked_explicit_le(fileobj: BinaryIO, head: bytes, file_size: int) -> Optional[Dataset]:
    """An Explicit VR Little Endian file's parse built from _walk_explicit_le, as pydicom's
    read_partial builds it (preamble and file meta walked by _walked_file_meta, else
    parsed by pydicom itself), or None."""
    if not _RAW_FIELDS_KNOWN:
        return None
    probe = io.BytesIO(head)
    meta = _walked_file_meta(head)
    preamble: Optional[bytes]
    if meta is not None:
        preamble, file_meta, start = meta
        if head[start:start + 2] == b"\0\0":      # a Command Set (group 0000): pydicom's to read
            return None
    else:
        meta_only = read_partial(probe, stop_when=_stop_at_first, defer_size=DEFER_BYTES, force=True)
        if meta_only.original_encoding != (False, True) or len(meta_only._dict):
            return None
        preamble, file_meta, start = meta_only.preamble, meta_only.file_meta, probe.tell()
    if _TRANSFER_SYNTAX not in file_meta._dict \
            or str(converted_element(file_meta, _TRANSFER_SYNTAX).value) != ExplicitVRLittleEndian:
        return None
    raw: dict = {}
    seen: dict = {}
    pos = _walk_explicit_le(head, start, 0, raw, known=_LAST_HEAD[0], seen=seen)
    if pos is None:
        return None
    _LAST_HEAD[0] = seen      # replaced, never changed: another thread may be reading the last
    if pos < file_size:
        if pos < len(head):
            return None
        tail = _tail(fileobj, pos, file_size)
        if tail is None:
            return None
        trailing: dict = {}
        pos = _walk_explicit_le(tail, 0, pos, trailing)
        if pos is None or any(e.value is None for e in trailing.values()):
            return None
        raw.update(trailing)
    elif pos > file_size or len(head) < file_size and pos != file_size:
        return None
    # read_partial wraps the elements in read_dataset's Dataset first, only to read its
    # character set: the FileDataset around the same dict reads the same one.
    ds = FileDataset(probe, raw, preamble, file_meta, False, True)
    ds.set_original_encoding(False, True, ds._character_set)
    return ds
