"""Probing remembers which header elements converted: the outcome never depends on what came before.

transforms.dicom.record_elements.convert_needed_elements skips an element whose exact
bytes (tag, VR, value, encoding) already converted without error in the
process. Every file must probe to the same record, or fail with the same
reason, whether the process is fresh or has probed many similar files.
"""
import io
import os
import warnings

import pydicom
import pytest

from tests.support import ct_file_bytes, ct_vendor_file_bytes
from tests.support import pydicom_test_files
from dcm2tfrecord.transforms.dicom import head_parse, integrity, record_elements as dicom_needed
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

SRC = pydicom_test_files()
SETTINGS = DecodeSettings(id_salt="s")


def _outcome(path: str, rel: str):
    source = SourceFile(path, rel, os.path.getsize(path), 0.0)
    try:
        return probe_file(source, settings=SETTINGS)
    except ConversionError as exc:
        return ("error", exc.reason, exc.skipped)


def _cold(path: str, rel: str):
    dicom_needed._CONVERTED.clear()
    return _outcome(path, rel)


def _files(tmp_path) -> list[tuple[str, str]]:
    files = [(os.path.join(SRC, n), n) for n in sorted(os.listdir(SRC)) if os.path.isfile(os.path.join(SRC, n))]
    good = ct_file_bytes(0, 1, 0, 3, 10, 3)
    kvp = b"\x18\x00\x60\x00DS\x04\x00120 "         # (0018,0060) KVP, explicit VR little endian
    assert good.count(kvp) == 1
    for name, data in {"ct.dcm": good, "ct_bad_kvp.dcm": good.replace(kvp, kvp[:8] + b"1x0 "),
                       "ct_bad_length.dcm": good.replace(kvp, kvp[:4] + b"US\x03\x00" + b"120")}.items():
        (tmp_path / name).write_bytes(data)
        files.append((str(tmp_path / name), name))
    return files


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_probe_outcome_does_not_depend_on_earlier_files(tmp_path, order):
    files = _files(tmp_path)
    cold = {rel: _cold(path, rel) for path, rel in files}
    assert cold["ct.dcm"].spec.dtype == "int16"
    assert cold["ct_bad_length.dcm"] == ("error", "invalid_value", False)
    dicom_needed._CONVERTED.clear()
    for _ in range(2):    # the second pass sees every element it can remember
        for path, rel in (files if order == "forward" else files[::-1]):
            assert _outcome(path, rel) == cold[rel], rel
    assert dicom_needed._CONVERTED


class _Counting(io.BytesIO):
    """A file whose reads are counted (a storage stream stand-in)."""
    reads = 0

    def read(self, *args):
        self.reads += 1
        return super().read(*args)


def _full_parse(data: bytes):
    return pydicom.dcmread(io.BytesIO(data), force=True, defer_size=2048)._dict


def _same_parse(parsed, data: bytes) -> bool:
    """The elements (positions, and which are converted, included), the File Meta and the
    preamble of pydicom's full parse."""
    full = pydicom.dcmread(io.BytesIO(data), force=True, defer_size=2048)
    return (parsed._dict == full._dict and parsed.file_meta._dict == full.file_meta._dict
            and parsed.preamble == full.preamble and parsed.original_encoding == full.original_encoding
            and parsed.file_meta.original_encoding == full.file_meta.original_encoding)


@pytest.mark.parametrize("tail", [0, 1000, 70_000])
def test_header_parsed_in_memory_is_the_whole_files_parse(tail):
    """_parse_from_head gives exactly the elements (positions included) of the full parse,
    trailing elements after the pixel data too (CT_small.dcm's vendor header ends in Data
    Set Trailing Padding), in three reads; or None, never a different parse."""
    data = ct_vendor_file_bytes(0, 1, 0, 3, 10, 3)
    assert next(reversed(_full_parse(data))) == 0xFFFCFFFC
    if tail:
        ds = pydicom.dcmread(io.BytesIO(data))
        ds.DataSetTrailingPadding = b"\0" * tail
        out = io.BytesIO()
        ds.save_as(out)
        data = out.getvalue()
    fileobj = _Counting(data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parsed = head_parse.parse_from_head(fileobj, len(data))
        if tail > head_parse._HEAD_BYTES:
            assert parsed is None
            return
        assert parsed is not None and fileobj.reads <= 2
        assert _same_parse(parsed, data)


def _back_to_back(parsed, data: bytes) -> bool:
    """What parse_head's ``walked`` promises integrity.check_whole: no top-level element runs
    past the end of the file, and the last ends there."""
    try:
        return integrity._last_extent(parsed, len(data))[0] == len(data)
    except ConversionError:
        return False


def test_header_parsed_in_memory_or_not_at_all_for_every_pydicom_file():
    kinds, walks = set(), set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in sorted(os.listdir(SRC)):
            path = os.path.join(SRC, name)
            if not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                data = handle.read()
            for size in (len(data), len(data) + 1):     # the listed size is the file's, or not
                parsed, walked = head_parse.parse_head(io.BytesIO(data), size)
                kinds.add(parsed is not None)
                walks.add(walked)
                if parsed is not None:
                    assert size == len(data) and _same_parse(parsed, data), name
                    assert not walked or _back_to_back(parsed, data), name
    assert kinds == {True, False} and walks == {True, False}


def test_header_parsed_in_memory_or_not_at_all_for_the_fuzz_corpus():
    """The same on mutated headers (tests/support/fuzz.py's corpus): the Explicit VR Little
    Endian walk and the tail parse give pydicom's elements, or give up."""
    from tests.support.fuzz import _fuzz_corpus
    walked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, data in _fuzz_corpus():
            try:
                parsed, back_to_back = head_parse.parse_head(io.BytesIO(data), len(data))
            except Exception:      # a read error propagates; a BytesIO has none
                raise AssertionError(name)
            if parsed is None:
                continue
            walked += back_to_back
            try:
                same = _same_parse(parsed, data)
            except Exception:
                raise AssertionError(f"{name}: parsed in memory, but pydicom fails on it")
            assert same, name
            assert not back_to_back or _back_to_back(parsed, data), name
    assert walked > 100


def test_needed_elements_convert_as_pydicom_reads_them():
    """convert_needed_elements converts a pure element itself rather than through
    Dataset.__getitem__: the dataset is left as reading each needed element (and a vendor MR's
    diffusion elements, vendor_private_tags) there leaves it,
    and the values are that element's, on every pydicom test file and both CT kinds."""
    datas = [ct_file_bytes(0, 1, 0, 3, 10, 3), ct_vendor_file_bytes(0, 1, 0, 3, 10, 3)]
    for name in sorted(os.listdir(SRC)):
        if os.path.isfile(os.path.join(SRC, name)):
            with open(os.path.join(SRC, name), "rb") as handle:
                datas.append(handle.read())
    fast = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for data in datas:
            mine, theirs = (pydicom.dcmread(io.BytesIO(data), force=True, defer_size=2048) for _ in range(2))
            dicom_needed._CONVERTED.clear()
            values: dict = {}
            try:
                dicom_needed.convert_needed_elements(mine, SETTINGS, values=values)
            except ConversionError:
                continue
            for tag in dicom_needed.needed_tags(()):
                if tag in values:
                    fast += dicom_needed._conversion_key(theirs._dict[tag], "x") is not None \
                        if isinstance(theirs._dict[tag], pydicom.dataelem.RawDataElement) else 0
                    assert values[tag] == theirs[tag].value
            for tag in dicom_needed.vendor_private_tags(theirs, values):   # a vendor MR's diffusion elements
                if tag in theirs._dict:
                    assert values[tag] == theirs[tag].value
            assert mine._dict == theirs._dict
    assert fast > 100


def test_walk_reuses_only_elements_whose_bytes_are_the_same():
    """The walk takes an element of the last head walked again only where the bytes at its
    position are the same: consecutive slices share most of a vendor header, and a file
    differing from the last in one byte of a value (same length), or shifted by one element,
    still parses to pydicom's full parse of its own bytes."""
    first = ct_vendor_file_bytes(0, 1, 0, 3, 10, 3)
    second = ct_vendor_file_bytes(0, 1, 0, 3, 11, 3)
    kvp = b"\x18\x00\x60\x00DS\x04\x00120 "
    assert first.count(kvp) == 1
    one_byte = first.replace(kvp, kvp[:8] + b"130 ")
    ds = pydicom.dcmread(io.BytesIO(first))
    ds.add_new(0x00080050, "SH", "12")       # Accession Number: every later element moves
    out = io.BytesIO()
    ds.save_as(out)
    shifted = out.getvalue()
    parsed = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for data in (first, second, one_byte, first, shifted):
            ds = head_parse.parse_from_head(io.BytesIO(data), len(data))
            assert ds is not None and _same_parse(ds, data)
            parsed.append(ds)
    reused = lambda a, b: sum(x is b._dict.get(tag) for tag, x in a._dict.items())  # noqa: E731
    assert reused(parsed[1], parsed[0]) > len(parsed[1]._dict) // 2
    assert parsed[2]._dict[0x00180060].value == b"130 " and parsed[0]._dict[0x00180060].value == b"120 "
    assert reused(parsed[4], parsed[3]) < reused(parsed[1], parsed[0])


def test_header_values_answer_as_the_dataset():
    """HeaderValues (the probe's view of the header) says what the Dataset says for every
    keyword of the needed set, present or not (get, in, attribute access, the second read
    of each from the values known), and refuses a present element outside it."""
    from pydicom.datadict import keyword_for_tag
    from dcm2tfrecord.transforms.dicom.header import read_probe_header
    data = ct_vendor_file_bytes(0, 1, 0, 3, 10, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        header, _ = read_probe_header(io.BytesIO(data), SETTINGS, len(data))
        full = pydicom.dcmread(io.BytesIO(data), force=True, defer_size=2048)
        keywords = [keyword_for_tag(tag) for tag in dicom_needed.needed_tags(())]
        assert any(k not in full for k in keywords) and any(k in full for k in keywords)
        for keyword in keywords * 2:
            assert (keyword in header) == (keyword in full), keyword
            if keyword in ("PixelData",):
                continue     # deferred: the writer reads it
            assert header.get(keyword, "absent") == full.get(keyword, "absent"), keyword
            if keyword in full:
                assert getattr(header, keyword) == getattr(full, keyword), keyword
        outside = next(keyword_for_tag(t) for t in full._dict if t not in dicom_needed.needed_tags(())
                       and keyword_for_tag(t) and t >> 16 != 2)
        assert outside in header
        with pytest.raises(dicom_needed.NotNeededError):
            header.get(outside)
        assert header.get("LossyImageCompressionRatio", "absent") == "absent"


def _charset_pair() -> tuple[bytes, bytes]:
    """Two files whose bytes differ only in Specific Character Set, ISO_IR 192 (UTF-8) then
    ISO_IR 100 (Latin-1), same length: every element after it lies at the same place, so the
    head walk hands the second file the first file's very elements (same bytes)."""
    ds = pydicom.dcmread(io.BytesIO(ct_file_bytes(0, 1, 0, 3, 10, 3)))
    ds.SpecificCharacterSet = "ISO_IR 192"
    ds.PatientID = "Café"
    ds.Manufacturer = "Café"
    out = io.BytesIO()
    ds.save_as(out)
    utf8 = out.getvalue()
    assert utf8.count(b"ISO_IR 192") == 1 and utf8.count("Café".encode("utf-8")) == 2
    return utf8, utf8.replace(b"ISO_IR 192", b"ISO_IR 100")


@pytest.mark.parametrize("reuse", ["same_elements", "same_bytes"])
def test_an_element_read_again_under_another_character_set_is_read_under_it(tmp_path, reuse):
    """Issue 35, survivor 1: an element remembered from the previous file (the very element
    object the head walk reuses, or its bytes' conversion key) is that file's value only under
    the same Specific Character Set. Read after a UTF-8 file, the same bytes under ISO_IR 100
    are what pydicom reads in the file alone, ``CafÃ©``, not ``Café``: in the probe's header
    values and in the record's identifiers (label joins, split grouping)."""
    from dcm2tfrecord.transforms.dicom.header import read_probe_header
    files = _charset_pair()
    expected = [pydicom.dcmread(io.BytesIO(data)) for data in files]
    assert [str(ds.PatientID) for ds in expected] == ["Café", "CafÃ©"]
    assert [str(ds.Manufacturer) for ds in expected] == ["Café", "CafÃ©"]
    dicom_needed._CONVERTED.clear()
    for rounds in range(2):
        for data, theirs in zip(files, expected):
            if reuse == "same_bytes":
                head_parse._LAST_HEAD[0] = {}     # new element objects: only the key can match
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                header, _ = read_probe_header(io.BytesIO(data), SETTINGS, len(data))
            assert header.get("PatientID") == theirs.PatientID
            assert header.get("Manufacturer") == theirs.Manufacturer
    if reuse == "same_elements":     # the walk did reuse the first file's elements
        first, second = (head_parse.parse_from_head(io.BytesIO(data), len(data)) for data in files)
        assert first._dict[0x00100020] is second._dict[0x00100020]
    for rounds in range(2):
        for n, (data, theirs) in enumerate(zip(files, expected)):
            path = tmp_path / f"{n}.dcm"
            path.write_bytes(data)
            if reuse == "same_bytes":
                head_parse._LAST_HEAD[0] = {}
            assert _outcome(str(path), path.name).ids.patient_id == str(theirs.PatientID).strip()
