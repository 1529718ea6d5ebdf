"""The lean header probe plans exactly what the probe before it planned (issue "Lean pipeline"),
except where an element the record does not use fails to convert (issue 27).

The reference is the probe as it was before it was made cheaper (pydicom keyword
lookups throughout, no shared value table, every element converted): a frozen copy of
it (tests/reference_v0, now gone) was run once over every input here, and its outcomes
are recorded in tests/data/probe_v0_outcomes.json (tools/record_probe_reference.py
writes it, and says when and how to regenerate it). Every input here must probe to the
recorded outcome: the same ProbedRecord (spec, identifiers, slice info, native layout
including its packed ``dicom/*`` feature bytes; recorded as a digest of its repr) or the
same ConversionError reason and skipped flag; with one rule-checked exception
(_check_changed): the reference failed the file as invalid_value because of
elements outside the needed set (transforms.dicom.record_elements.NEEDED_KEYWORDS,
plus --keep_tags) and only those, which the probe now leaves raw, so the
file goes on to whatever the rest of the probe says. Which inputs change is
enumerated: none of pydicom's test files, the generated CT variants named in
CHANGED_CT_VARIANTS, and (by the rule alone) some of the fuzz corpus. Inputs: every file
``pydicom.data.get_testdata_files()`` lists, the generated CT slice variants of tests/support/ct_edits.py and
transforms/dicom/test_record_elements.py, and a derandomized fuzz corpus built with
test_fuzz's mutations (plus the inputs fuzzing found). The new probe runs
both cold (its conversion memo empty before each file) and warm (the memo
filled by every file before it), the reference was always cold.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import pickle
import os
import struct
import warnings

import numpy as np
import pydicom
import pydicom.data
import pytest

from dcm2tfrecord.dataset.features import RecordKind
from pydicom.dataelem import RawDataElement

from tests.support import ct_file_bytes, ct_vendor_file_bytes
from tests.support import ct_edits
from tests.support.fuzz import FUZZ_MAX_PIXELS, _fuzz_corpus
from dcm2tfrecord.transforms.dicom import metadata as dicom_metadata
from dcm2tfrecord.transforms.dicom import native as dicom_native
from dcm2tfrecord.transforms.dicom import record_elements as dicom_needed
from dcm2tfrecord.transforms.dicom import patient_space, volume_features
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.build import build_record
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

SETTINGS = {
    "default": DecodeSettings(id_salt="s"),
    "split_keep_tags": DecodeSettings(id_salt="t", frames="split", keep_source_path=True,
                                      keep_tags=("StudyDescription", "PatientName", "SliceLocation",
                                                 "ImageType", "NoSuchKeyword")),
    "window_burned_in": DecodeSettings(id_salt="s", dicom_values="window", allow_burned_in=True),
    "stored": DecodeSettings(dicom_values="stored", resize=(40, 30), channels="3"),
}
def _outcome(probe, name: str, data: bytes, settings: DecodeSettings, max_pixels: int):
    source = SourceFile(uri=f"mem://lean/{name}", rel_path=name, size=len(data), mtime=0.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = probe(source, max_pixels=max_pixels, opener=lambda _uri: io.BytesIO(data),
                           settings=settings)
    except ConversionError as exc:
        return ("error", exc.reason, exc.skipped)
    return ("record", _as_v0_saw(record, settings, data))   # repr: a NaN in a slice position equals itself


# What issue 32 added after the reference: the geometry and 4-D features in the native layout's
# packed dicom/* (transforms.dicom.patient_space, volume_features), SliceInfo's localizer and
ADDED_FEATURES = tuple(patient_space.FEATURES) + tuple(volume_features.FEATURES)
ADDED_REPR = (", localizer=False, volume_key=()",
              ", volumes=1, volume_index=0, annotation='', annotations=(), mask_bytes=0, mask_part=None")  # 32, 33


def _v0_packed(values: list, keys: tuple) -> bytes:
    """The packing the reference recorded (issue 32 packs float arrays as float32 bytes):
    float arrays as tuples of Python floats, hex digests as their bytes, pickled as a tuple."""
    out = [tuple(v.astype(np.float32).tolist()) if isinstance(v, np.ndarray)
           else bytes.fromhex(v) if k.endswith("_hash") and isinstance(v, str) and v else v
           for k, v in zip(keys, values)]
    return pickle.dumps(tuple(out), protocol=pickle.HIGHEST_PROTOCOL)


def _v0_floats(data: bytes, keyword: str) -> tuple:
    """The reference's reading of Image Position/Orientation (Patient): every value as float,
    any length, NaN and all (issue 32 reads only 3 finite numbers, and 6 making two unit,
    orthogonal vectors: the rest is no geometry)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = pydicom.dcmread(io.BytesIO(data), force=True, stop_before_pixels=True).get(keyword)
        return tuple(float(v) for v in value) if value else ()
    except Exception:
        return ()


def _as_v0_saw(record, settings: DecodeSettings, data: bytes) -> str:
    native = record.native
    if isinstance(native, dicom_native.NativePixels):
        keys = dicom_metadata.metadata_keys(settings)
        old_keys = tuple(k for k in keys if k not in ADDED_FEATURES)
        values = dicom_native.unpack_metadata(native.metadata, keys)
        packed = _v0_packed([values[k] for k in old_keys], old_keys)
        record = dataclasses.replace(record, native=dataclasses.replace(native, metadata=packed))
    if record.slice_info is not None:
        info = record.slice_info
        position, orientation = info.position, info.orientation
        if not position:
            position = _v0_floats(data, "ImagePositionPatient")
        if not orientation:
            orientation = _v0_floats(data, "ImageOrientationPatient")
        record = dataclasses.replace(record, slice_info=dataclasses.replace(
            info, localizer=False, volume_key=(), position=position, orientation=orientation))
    text = repr(record)
    for kind in RecordKind:     # a StrEnum since issue 42: the v0 repr held its plain string
        text = text.replace(repr(kind), repr(kind.value))
    for added in ADDED_REPR[0 if record.slice_info is not None else 1:]:
        assert added in text, (added, text)
        text = text.replace(added, "")
    return text


RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                        "probe_v0_outcomes.json")


def recorded_form(outcome) -> tuple:
    """An outcome as recorded: a record by a digest of its repr, an error as it is."""
    if outcome[0] == "record":
        return ("record", hashlib.sha256(outcome[1].encode()).hexdigest()[:16])
    return tuple(outcome)


@functools.lru_cache(maxsize=None)
def _recorded() -> dict:
    with open(RECORDED) as handle:
        return json.load(handle)["outcomes"]


def _unconvertible_elements(data: bytes) -> set:
    """The top-level (int) tags whose value pydicom fails to convert, each converted on its own."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = pydicom.dcmread(io.BytesIO(data), force=True, defer_size=2048)
        failing = set()
        for tag in list(ds._dict):
            try:
                ds[tag].value
            except Exception:
                failing.add(int(tag))
    return failing


# Refusals the probe gained after the reference (issue 25, "Reliability III"): a file that
# ends before its elements or pixel data do, frames that cannot fit their data, a Deflated
# file inflating past its bound. A changed outcome that is one of these is legitimate too.
INTEGRITY_REASONS = {"truncated_file", "pixel_data_length_mismatch", "inflated_too_large"}


def _check_changed(name: str, data: bytes, settings: DecodeSettings, reference, new) -> None:
    """A changed outcome is legitimate only as issue 27 allows it (see the module docstring),
    or as an integrity refusal (INTEGRITY_REASONS)."""
    if new[0] == "error" and new[1] in INTEGRITY_REASONS and not new[2]:
        return
    assert reference == ("error", "invalid_value", False), (name, reference, new)
    failing = _unconvertible_elements(data)
    needed = set(dicom_needed.needed_tags(tuple(settings.keep_tags)))
    assert failing and not failing & needed, (name, sorted(failing & needed))


def _check_same(inputs: list[tuple[str, bytes]], settings: DecodeSettings,
                max_pixels: int = 1 << 40, *, recorded: str) -> tuple[dict, dict]:
    """(outcome by name, changed: name -> (reference outcome as recorded, outcome)) of every
    input; ``recorded``: the group/mode whose reference outcomes RECORDED holds."""
    references = _recorded()[recorded]
    missing = sorted(set(references) - {name for name, _ in inputs})
    assert not missing, \
        f"recorded for {recorded} but not made now: {missing[:5]} (tools/record_probe_reference.py)"
    # an input the reference never saw (a pydicom data file downloaded to this machine's
    # cache, say) has nothing to compare with
    inputs = [(name, data) for name, data in inputs if name in references]
    expected, changed = {}, {}
    for name, data in inputs:
        dicom_needed._CONVERTED.clear()
        input_digest, *reference = references[name]
        assert input_digest == hashlib.sha256(data).hexdigest()[:16], f"{name}: not the input recorded"
        reference = tuple(reference)
        expected[name] = _outcome(probe_file, name, data, settings, max_pixels)
        if recorded_form(expected[name]) != reference:
            _check_changed(name, data, settings, reference, expected[name])
            changed[name] = (reference, expected[name])
    dicom_needed._CONVERTED.clear()
    for order in (inputs, inputs[::-1]):
        for name, data in order:
            assert _outcome(probe_file, name, data, settings, max_pixels) == expected[name], ("warm", name)
    return expected, changed


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


# pydicom's test files whose probe outcome changed with the integrity checks (issue 25), and
# why (CHANGELOG.md): files cut short, and header-only stubs of image objects (an image
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
    outcomes, changed = _check_same(_pydicom_files(), SETTINGS[mode], recorded=f"pydicom/{mode}")
    # CHANGELOG.md says so: no pydicom test file's outcome changes by issue 27; by
    # issue 25 those of CHANGED_PYDICOM_FILES and the TINY_ALPHA stubs do
    changed = {n: (r[:1] if r[0] == "record" else r[:2], c[:2]) for n, (r, c) in changed.items()}
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
    for name, (edit, _) in sorted(ct_edits.EDITS.items()):
        for syntax in (None, pydicom.uid.ImplicitVRLittleEndian):   # big endian: pydicom's files
            path = ct_edits._ct(tmp_path, f"{name}.dcm", edit, syntax)
            out.append((f"{name}_{syntax}.dcm", _read(path)))
    good = ct_file_bytes(0, 1, 0, 3, 10, 3)
    vendor = ct_vendor_file_bytes(0, 1, 0, 3, 10, 3)
    out.append(("ct_vendor.dcm", vendor))
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
            ("ct_instance_text.dcm", _with(good, lambda ds: setattr(ds, "InstanceNumber", ""))),
            # elements outside the needed set with values that do not convert (issue 27)
            ("ct_bad_private.dcm", _mangled(vendor, lambda tag: tag == _PRIVATE_SL)),
            ("ct_bad_description.dcm", _mangled(vendor, lambda tag: tag == _STUDY_DESCRIPTION)),
            ("ct_bad_unused.dcm", _mangled(vendor, lambda tag: tag not in _needed_in_any_mode())),
            # and one inside it: a used element still fails the file
            ("ct_bad_private_and_kvp.dcm",
             _mangled(vendor, lambda tag: tag in (_PRIVATE_SL, 0x00180060)))]
    for cut in (132, 300, 700, len(good) - 10):
        out.append((f"ct_cut_{cut}.dcm", good[:cut]))
    for i in range(3):                                # slices of one series: the memo matters
        out.append((f"ct_series_{i}.dcm", ct_file_bytes(0, 1, 0, 3, 10, i)))
    return out


_PRIVATE_SL = 0x00191002            # GE (0019,1002) Detector Channel, SL, in CT_small.dcm
_STUDY_DESCRIPTION = 0x00081030     # not used by a record, but kept by split_keep_tags' --keep_tags
# the variants whose outcome changes from the reference's (invalid_value) in these modes, and to what
CHANGED_CT_VARIANTS = {"ct_bad_private.dcm": set(SETTINGS), "ct_bad_unused.dcm": set(SETTINGS),
                       "ct_bad_description.dcm": set(SETTINGS) - {"split_keep_tags"}}


def _needed_in_any_mode() -> set:
    return set().union(*(dicom_needed.needed_tags(tuple(s.keep_tags)) for s in SETTINGS.values()))


def mangled_elements(data: bytes, which) -> bytes:
    """``data`` (Explicit VR Little Endian) with the VR of every top-level element with a
    2-byte length whose tag ``which`` accepts replaced by "QQ", an unknown VR: the file
    parses as before, byte for byte the same length, but those values no longer convert."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = pydicom.dcmread(io.BytesIO(data), force=True, defer_size=2048)
    out = bytearray(data)
    for tag, elem in ds._dict.items():
        if not isinstance(elem, RawDataElement):    # Specific Character Set: read as it is parsed
            continue
        start = elem.value_tell - 8
        if elem.VR in _LONG_VRS or int(tag) >> 16 == 0x0002 or not which(int(tag)):
            continue
        assert out[start:start + 6] == struct.pack("<HH", int(tag) >> 16, int(tag) & 0xFFFF) + \
            elem.VR.encode()
        out[start + 4:start + 6] = b"QQ"
    return bytes(out)


_LONG_VRS = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ", "SV", "UC", "UN", "UR", "UT", "UV"}
_mangled = mangled_elements


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
    inputs = _ct_variants(tmp_path)
    outcomes, changed = _check_same(inputs, SETTINGS[mode], recorded=f"ct_variants/{mode}")
    assert outcomes["ct_bad_length.dcm"] == ("error", "invalid_value", False)
    assert outcomes["ct_unknown_vr.dcm"][:2] == ("error", "invalid_value")
    assert outcomes["ct_bad_private_and_kvp.dcm"] == ("error", "invalid_value", False)
    assert outcomes["ct_series_0.dcm"][0] == "record"
    integrity = {n for n, (_, got) in changed.items() if got[0] == "error" and got[1] in INTEGRITY_REASONS}
    # cut short, no pixel data after Rows, or a 1-byte Rows that shifts every element after it
    assert integrity <= {n for n in outcomes if n.startswith("ct_cut_")} | {"ct_no_pixels.dcm",
                                                                            "ct_odd_rows.dcm"}
    changed = {n: c for n, c in changed.items() if n not in integrity}
    assert set(changed) == {name for name, modes in CHANGED_CT_VARIANTS.items() if mode in modes}
    # what the probe now plans for them is exactly the unmangled slice's record (under their name)
    vendor = dict(inputs)["ct_vendor.dcm"]
    for name in changed:
        assert outcomes[name] == _outcome(probe_file, name, vendor, SETTINGS[mode], 1 << 40), name
        assert outcomes[name][0] == "record"
    if mode == "split_keep_tags":
        assert outcomes["ct_bad_description.dcm"] == ("error", "invalid_value", False)


@pytest.mark.parametrize("mode", ["default", "split_keep_tags"])
def test_fuzz_corpus_probes_as_before(mode):
    outcomes, changed = _check_same(_fuzz_corpus(), SETTINGS[mode], max_pixels=FUZZ_MAX_PIXELS,
                                    recorded=f"fuzz/{mode}")
    kinds = {o[1] if o[0] == "error" else "record" for o in outcomes.values()}
    assert {"record", "invalid_value", "invalid_dicom"} <= kinds, kinds
    # mutations of unused elements: each rule-checked in _check_changed, some now records
    assert changed and any(new[0] == "record" for _, new in changed.values())


@pytest.mark.parametrize("mode", ["default", "split_keep_tags"])
def test_unused_elements_play_no_part_in_the_record_bytes(mode):
    """A vendor slice whose every unused top-level element (all its private ones among them)
    no longer converts writes the unmangled slice's record, byte for byte, on the native
    shortcut and on the general path: nothing outside the needed set reaches a record."""
    settings = SETTINGS[mode]
    clean = ct_vendor_file_bytes(0, 1, 0, 3, 10, 3)
    mangled = mangled_elements(clean, lambda tag: tag not in _needed_in_any_mode())
    assert len(_unconvertible_elements(mangled)) > 200 and not _unconvertible_elements(clean)
    built = []
    for data in (clean, mangled):
        source = SourceFile(uri="mem://lean/slice.dcm", rel_path="slice.dcm", size=len(data), mtime=0.0)
        opener = lambda _uri, data=data: io.BytesIO(data)      # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = probe_file(source, opener=opener, settings=settings)
            assert record.native is not None
            for planned in expand_frames(record, settings):
                built.append(build_record(planned, opener, settings))
                built.append(build_record(dataclasses.replace(planned, native=None), opener, settings))
    assert len(built) == 4 and all(b == built[0] for b in built)
