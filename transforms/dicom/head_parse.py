"""A DICOM file's header parsed in memory from its first 64 KiB, where that is provably
the parse pydicom would make of the whole file (see :func:`parse_from_head`)."""
from __future__ import annotations

import io
import struct
from typing import BinaryIO, Optional

import pydicom
from pydicom.charset import convert_encodings, default_encoding
from pydicom.dataelem import RawDataElement, convert_raw_data_element, empty_value_for_VR
from pydicom.dataset import Dataset, FileDataset
from pydicom.filereader import read_dataset, read_partial
from pydicom.tag import BaseTag
from pydicom.uid import ExplicitVRLittleEndian

from transforms.dicom.content import PIXEL_DATA_TAG

DEFER_BYTES = 2048       # values longer than this stay unread on disk
_HEAD_BYTES = 64 << 10


def parse_from_head(fileobj: BinaryIO, file_size: int) -> Optional[Dataset]:
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
        ds = pydicom.dcmread(io.BytesIO(head), force=True, defer_size=DEFER_BYTES)
        if len(head) >= file_size:
            return ds if len(head) == file_size else None
        elements = ds._dict
        last = elements[next(reversed(elements))] if elements else None    # the last one parsed
        if not (isinstance(last, RawDataElement) and int(last.tag) == int(PIXEL_DATA_TAG)
                and last.value is None and last.length != 0xFFFFFFFF):
            return None
        end = last.value_tell + last.length
        if end == file_size:
            return ds
        tail = _tail(fileobj, end, file_size)
        if tail is None:
            return None
        trailing = read_dataset(io.BytesIO(tail), last.is_implicit_VR, last.is_little_endian,
                                defer_size=DEFER_BYTES)
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
        if length > DEFER_BYTES and tag != 0x00080005:
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
    meta_only = read_partial(probe, stop_when=_stop_at_first, defer_size=DEFER_BYTES, force=True)
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
