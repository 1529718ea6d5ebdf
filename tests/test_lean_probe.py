"""The lean header probe plans exactly what the probe before it planned (issue "Lean pipeline").

``tests/reference_v0`` is a frozen copy of the probe as it was before it was
made cheaper (pydicom keyword lookups throughout, no shared value table).
Every input here must probe to the same outcome both ways: the same
ProbedRecord (spec, identifiers, slice info, native layout including its
packed ``dicom/*`` feature bytes) or the same ConversionError reason and
skipped flag. Inputs: every file ``pydicom.data.get_testdata_files()``
lists, the generated CT slice variants of test_speed_native_dicom and
test_speed_probe, and a derandomized fuzz corpus built with
test_fuzz's mutations (plus the inputs fuzzing found). The new probe runs
both cold (its conversion memo empty before each file) and warm (the memo
filled by every file before it), the reference always cold.
"""
from __future__ import annotations

import io
import os
import random
import warnings

import pydicom
import pydicom.data
import pytest

from benchmarks.archives import ct_file_bytes
from tests import test_fuzz, test_speed_native_dicom
from tests.reference_v0 import header as reference_header
from tests.reference_v0 import probe as reference_probe
from transforms.dicom import header as dicom_header
from transforms.errors import ConversionError
from transforms.records.probe import probe_file
from transforms.records.values import SourceFile
from transforms.settings import DecodeSettings

SETTINGS = {
    "default": DecodeSettings(id_salt="s"),
    "split_keep_tags": DecodeSettings(id_salt="t", frames="split", keep_source_path=True,
                                      keep_tags=("StudyDescription", "PatientName", "SliceLocation",
                                                 "ImageType", "NoSuchKeyword")),
    "window_burned_in": DecodeSettings(id_salt="s", dicom_values="window", allow_burned_in=True),
    "stored": DecodeSettings(dicom_values="stored", resize=(40, 30), channels="3"),
}
FUZZ_CASES = 600          # per run; each is probed by both implementations, cold and warm


def _outcome(probe, name: str, data: bytes, settings: DecodeSettings, max_pixels: int):
    source = SourceFile(uri=f"mem://lean/{name}", rel_path=name, size=len(data), mtime=0.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = probe(source, max_pixels=max_pixels, opener=lambda _uri: io.BytesIO(data),
                           settings=settings)
    except ConversionError as exc:
        return ("error", exc.reason, exc.skipped)
    return ("record", repr(record))   # repr: a NaN in a slice position compares equal to itself


# Refusals the probe gained after the reference (issue "Reliability III"): a file that
# ends before its elements or pixel data do, frames that cannot fit their data, a
# Deflated file inflating past its bound. Where the probe now refuses a file with one
# of these that the reference planned or skipped, the file is in ``changed``; any other
# difference fails.
INTEGRITY_REASONS = {"truncated_file", "pixel_data_length_mismatch", "inflated_too_large"}


def _check_same(inputs: list[tuple[str, bytes]], settings: DecodeSettings,
                max_pixels: int = 1 << 40, changed: dict | None = None) -> dict:
    expected = {}
    changed = {} if changed is None else changed
    for name, data in inputs:
        reference_header._CONVERTED.clear()
        dicom_header._CONVERTED.clear()
        expected[name] = _outcome(reference_probe.probe_file, name, data, settings, max_pixels)
        got = _outcome(probe_file, name, data, settings, max_pixels)
        if got != expected[name] and got[0] == "error" and got[1] in INTEGRITY_REASONS:
            changed[name] = (expected[name][:1] if expected[name][0] == "record" else expected[name][:2],
                             got[:2])
            expected[name] = got
        assert got == expected[name], ("cold", name)
    dicom_header._CONVERTED.clear()
    for order in (inputs, inputs[::-1]):
        for name, data in order:
            assert _outcome(probe_file, name, data, settings, max_pixels) == expected[name], ("warm", name)
    return expected


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _pydicom_files() -> list[tuple[str, bytes]]:
    root = os.path.dirname(pydicom.data.get_testdata_file("CT_small.dcm"))
    files = sorted(p for p in pydicom.data.get_testdata_files() if os.path.isfile(p))
    assert len(files) > 150
    out = []
    for path in files:
        rel = os.path.relpath(path, root)
        # as named, and as a file whose name does not say DICOM
        out += [(rel, _read(path)), (rel + ".bin", _read(path))]
    return out


# pydicom's test files whose probe outcome changed with the integrity checks, and why
# (README changelog): files cut short, and header-only stubs of image objects (an image
# SOP class, no pixel data: the 50 CT stubs of dicomdirtests/TINY_ALPHA and three below),
# once skipped as no_pixel_data.
CHANGED_PYDICOM_FILES = {
    "MR_truncated.dcm": (("record",), ("error", "truncated_file")),     # inside its pixel data
    "rtplan_truncated.dcm": (("error", "no_pixel_data"), ("error", "truncated_file")),  # inside a sequence
    "no_meta_group_length.dcm": (("error", "no_pixel_data"), ("error", "truncated_file")),  # RT Image stub
    "priv_SQ.dcm": (("error", "no_pixel_data"), ("error", "truncated_file")),               # MR Image stub
    "UN_sequence.dcm": (("error", "no_pixel_data"), ("error", "truncated_file")),           # CT Image stub
}
TINY_ALPHA_STUBS = "dicomdirtests/TINY_ALPHA/PT000000/ST000000/SE000000/IM0000"


@pytest.mark.parametrize("mode", sorted(SETTINGS))
def test_every_pydicom_test_file_probes_as_before(mode):
    changed: dict = {}
    outcomes = _check_same(_pydicom_files(), SETTINGS[mode], changed=changed)
    stubs = {n: c for n, c in changed.items() if n.startswith(TINY_ALPHA_STUBS)}
    assert len(stubs) == 100 and set(stubs.values()) == {(("error", "no_pixel_data"),
                                                          ("error", "truncated_file"))}
    assert {n: c for n, c in changed.items() if n not in stubs} == {
        **CHANGED_PYDICOM_FILES, **{f"{n}.bin": c for n, c in CHANGED_PYDICOM_FILES.items()}}
    records = [o for o in outcomes.values() if o[0] == "record"]
    assert len(records) > 100 and len(outcomes) - len(records) > 50
    if mode == "default":
        assert sum("native=NativePixels" in o[1] for o in records) >= 6


def _ct_variants(tmp_path) -> list[tuple[str, bytes]]:
    out = []
    for name, (edit, _) in sorted(test_speed_native_dicom.EDITS.items()):
        for syntax in (None, pydicom.uid.ImplicitVRLittleEndian):   # big endian: pydicom's files
            path = test_speed_native_dicom._ct(tmp_path, f"{name}.dcm", edit, syntax)
            out.append((f"{name}_{syntax}.dcm", _read(path)))
    good = ct_file_bytes(0, 1, 0, 3, 10, 3)
    kvp = b"\x18\x00\x60\x00DS\x04\x00120 "         # (0018,0060) KVP, explicit VR little endian
    rows = b"\x28\x00\x10\x00US\x02\x00" + (512).to_bytes(2, "little")
    assert good.count(kvp) == 1 and good.count(rows) == 1
    out += [("ct_bad_kvp.dcm", good.replace(kvp, kvp[:8] + b"1x0 ")),
            ("ct_bad_length.dcm", good.replace(kvp, kvp[:4] + b"US\x03\x00" + b"120")),
            ("ct_unknown_vr.dcm", good.replace(kvp, kvp[:4] + b"QQ" + kvp[6:])),
            ("ct_burned_in.dcm", _with(good, lambda ds: setattr(ds, "BurnedInAnnotation", "YES"))),
            ("ct_no_pixels.dcm", _with(good, lambda ds: delattr(ds, "PixelData"))),
            ("ct_no_rows.dcm", _with(good, lambda ds: delattr(ds, "Rows"))),
            ("ct_text_rows.dcm", good.replace(rows, b"\x28\x00\x10\x00IS\x02\x00ab")),
            ("ct_odd_rows.dcm", good.replace(rows, b"\x28\x00\x10\x00US\x01\x00\x01\x00")),
            ("ct_nan_position.dcm", _with(good, lambda ds: setattr(ds, "ImagePositionPatient",
                                                                    ["nan", "1", "inf"]))),
            ("ct_instance_text.dcm", _with(good, lambda ds: setattr(ds, "InstanceNumber", "")))]
    for cut in (132, 300, 700, len(good) - 10):
        out.append((f"ct_cut_{cut}.dcm", good[:cut]))
    for i in range(3):                                # slices of one series: the memo matters
        out.append((f"ct_series_{i}.dcm", ct_file_bytes(0, 1, 0, 3, 10, i)))
    return out


def _with(data: bytes, edit) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = pydicom.dcmread(io.BytesIO(data))
        edit(ds)
        out = io.BytesIO()
        ds.save_as(out)
        return out.getvalue()


@pytest.mark.parametrize("mode", sorted(SETTINGS))
def test_generated_ct_variants_probe_as_before(tmp_path, mode):
    outcomes = _check_same(_ct_variants(tmp_path), SETTINGS[mode])
    assert outcomes["ct_bad_length.dcm"] == ("error", "invalid_value", False)
    assert outcomes["ct_unknown_vr.dcm"][:2] == ("error", "invalid_value")
    assert outcomes["ct_series_0.dcm"][0] == "record"


def _fuzz_corpus() -> list[tuple[str, bytes]]:
    rng = random.Random(20240611)
    cases = list(test_fuzz.FOUND_BY_FUZZING)
    cases += [test_fuzz.random_case(rng, "dicom") for _ in range(FUZZ_CASES)]
    out = []
    for i, case in enumerate(cases):
        try:
            data = case.build()
        except Exception:
            continue
        if data:
            out.append((f"{i}/{case.name}", data))
    return out


@pytest.mark.parametrize("mode", ["default", "split_keep_tags"])
def test_fuzz_corpus_probes_as_before(mode):
    outcomes = _check_same(_fuzz_corpus(), SETTINGS[mode], max_pixels=test_fuzz.FUZZ_MAX_PIXELS)
    kinds = {o[1] if o[0] == "error" else "record" for o in outcomes.values()}
    assert {"record", "invalid_value", "invalid_dicom"} <= kinds, kinds
