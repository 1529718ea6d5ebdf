"""A DICOM file's header, read for the probe: parsed (in memory where head_parse can,
otherwise through integrity), checked, and its needed set converted (record_elements.py).

Pixel data is never read here: pydicom defers large values, so probing costs a
header read even for a 1 GB multi-frame file.
"""
from __future__ import annotations

import warnings
from typing import BinaryIO, Callable, Optional

from pydicom.dataelem import RawDataElement
from pydicom.dataset import Dataset

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import integrity
from dcm2tfrecord.transforms.dicom.content import PIXEL_DATA_TAG
from dcm2tfrecord.transforms.dicom.head_parse import DEFER_BYTES, parse_head
from dcm2tfrecord.transforms.dicom.record_elements import HeaderValues, convert_needed_elements, needed_tags
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.settings import DEFAULT_MAX_PIXELS, DecodeSettings


def read_probe_header(fileobj: BinaryIO, settings: DecodeSettings = DecodeSettings(),
                      file_size: Optional[int] = None, max_pixels: int = DEFAULT_MAX_PIXELS,
                      check: Optional[Callable[[Dataset, bool], None]] = None,
                      ) -> tuple["HeaderValues", Optional[RawDataElement]]:
    """Every element parsed, large values (pixel data) left unread on disk, wrapped in the
    HeaderValues the probe reads; and the raw (7FE0,0010) Pixel Data element as parsed, if
    deferred (its ``value_tell`` and length let transforms.dicom.native read native pixels
    straight from the file bytes at write time).

    Only the elements a record is made from (needed_tags) are converted, here,
    once: every other element stays pydicom's RawDataElement, its bytes never
    interpreted, so a private or unused element with a mangled value does not
    fail the file. The converted values are the HeaderValues' from the start.
    With ``file_size`` the header is parsed from memory when it can be (see
    parse_from_head); otherwise, and always for a Deflated file, through
    transforms.dicom.integrity (parse failures classified, inflation bounded by
    ``max_pixels``). ``check`` sees the dataset as parsed, before any value is
    converted (the probe's completeness checks, integrity.check_whole), and
    whether parse_head walked it (its elements back to back to the file's end).
    """
    walked = False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds, walked = parse_head(fileobj, file_size) \
                if file_size and not integrity.maybe_deflated(fileobj) else (None, False)
    except Exception as exc:  # pydicom raises many types for a broken header
        raise ConversionError(reasons.INVALID_DICOM, f"header does not parse: {exc}") from exc
    if ds is None:
        fileobj.seek(0)
        ds = integrity.read_dataset(fileobj, DEFER_BYTES, max_pixels)
    if check is not None:
        check(ds, walked)
    raw = ds._dict.get(PIXEL_DATA_TAG)
    if not (isinstance(raw, RawDataElement) and raw.value is None and raw.length):
        raw = None     # not deferred (small or empty): the general path handles it
    values: dict = {}
    convert_needed_elements(ds, settings, values=values)
    return HeaderValues(ds, values, needed_tags(tuple(settings.keep_tags))), raw
