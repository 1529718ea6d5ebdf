"""Probing remembers which header elements converted: the outcome never depends on what came before.

transforms.dicom.header.convert_all_elements skips an element whose exact
bytes (tag, VR, value, encoding) already converted without error in the
process. Every file must probe to the same record, or fail with the same
reason, whether the process is fresh or has probed many similar files.
"""
import os

import pytest

from benchmarks.archives import ct_file_bytes
from pipeline.sample_archive import pydicom_test_files
from transforms.dicom import header as dicom_header
from transforms.errors import ConversionError
from transforms.records.probe import probe_file
from transforms.values import SourceFile
from transforms.settings import DecodeSettings

SRC = pydicom_test_files()
SETTINGS = DecodeSettings(id_salt="s")


def _outcome(path: str, rel: str):
    source = SourceFile(path, rel, os.path.getsize(path), 0.0)
    try:
        return probe_file(source, settings=SETTINGS)
    except ConversionError as exc:
        return ("error", exc.reason, exc.skipped)


def _cold(path: str, rel: str):
    dicom_header._CONVERTED.clear()
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
    dicom_header._CONVERTED.clear()
    for _ in range(2):    # the second pass sees every element it can remember
        for path, rel in (files if order == "forward" else files[::-1]):
            assert _outcome(path, rel) == cold[rel], rel
    assert dicom_header._CONVERTED
