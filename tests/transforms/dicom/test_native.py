"""The native DICOM shortcut (transforms.dicom.native) writes exactly what the general path writes.

Every record is built twice from the same probed record: once as probed (the
shortcut where the probe allowed it) and once with ``native=None`` (pydicom's
full parse, pixel_array, modality LUT). The serialized Examples must be
byte-identical, or both must fail with the same reason.
"""
import dataclasses
import io
import os
import pickle
import warnings

import numpy as np
import pydicom
import pytest

from tests.support import pydicom_test_files
from tests.support.ct_edits import EDITS, _bits_above_stored, _ct
from dcm2tfrecord.transforms.dicom import metadata as dicom_metadata
from dcm2tfrecord.transforms.dicom import native as native_dicom
from dcm2tfrecord.transforms.records.build import build_record, decode_record
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

SRC = pydicom_test_files()
SETTINGS = {
    "default": DecodeSettings(id_salt="s"),
    "frames_split": DecodeSettings(id_salt="s", frames="split"),
    "keep_tags_path": DecodeSettings(id_salt="s", keep_tags=("StudyDescription", "PatientName"),
                                     keep_source_path=True),
    "resize_rgb": DecodeSettings(id_salt="s", resize=(40, 30), channels="3"),
    "window": DecodeSettings(id_salt="s", dicom_values="window"),
}


def _source(path: str, rel: str) -> SourceFile:
    return SourceFile(path, rel, os.path.getsize(path), os.path.getmtime(path))


def _build(record, settings):
    try:
        return build_record(record, settings=settings)
    except ConversionError as exc:
        return ("error", exc.reason)


def _compare(path: str, rel: str, settings: DecodeSettings) -> int:
    """Builds every record of one file both ways; returns how many took the shortcut."""
    try:
        probed = probe_file(_source(path, rel), settings=settings)
    except ConversionError:
        return 0
    used = 0
    for record in expand_frames(probed, settings):
        general = _build(dataclasses.replace(record, native=None), settings)
        fast = _build(record, settings)
        assert fast == general, (rel, record.frame)
        used += record.native is not None
    return used


def _test_files():
    return sorted(name for name in os.listdir(SRC) if os.path.isfile(os.path.join(SRC, name)))


@pytest.mark.parametrize("mode", sorted(SETTINGS))
def test_pydicom_test_files_identical_both_ways(mode):
    settings = SETTINGS[mode]
    used = [name for name in _test_files() if _compare(os.path.join(SRC, name), name, settings)]
    if mode == "window":
        assert used == []           # the shortcut is for --dicom_values modality only
    else:
        # native little-endian grayscale files do take it; compressed / big endian never do
        assert {"CT_small.dcm", "MR_small.dcm", "MR_small_implicit.dcm"} <= set(used), used
        assert not {"MR_small_bigendian.dcm", "MR_small_RLE.dcm", "JPEG2000.dcm",
                    "MR_small_expb.dcm", "SC_rgb.dcm"} & set(used), used


@pytest.mark.parametrize("name", sorted(EDITS))
@pytest.mark.parametrize("syntax", ["explicit", "implicit"])
def test_generated_ct_variants_identical_both_ways(tmp_path, name, syntax):
    edit, eligible = EDITS[name]
    # (big endian: pydicom's MR_small_bigendian.dcm above)
    uid = {"explicit": None, "implicit": pydicom.uid.ImplicitVRLittleEndian}[syntax]
    path = _ct(tmp_path, f"{name}.dcm", edit, uid)
    for mode in ("default", "frames_split", "keep_tags_path"):
        used = _compare(path, f"{name}.dcm", SETTINGS[mode])
        assert bool(used) == eligible, (name, syntax, mode)


def test_bits_above_stored_really_exercise_the_correction(tmp_path):
    path = _ct(tmp_path, "b.dcm", _bits_above_stored)
    record = probe_file(_source(path, "b.dcm"), settings=SETTINGS["default"])
    with open(path, "rb") as handle:
        pixels, _ = decode_record(record, handle, SETTINGS["default"])
    assert record.native is not None and pixels.min() == -5 - 1024


def test_moved_pixel_element_is_detected(tmp_path):
    path = _ct(tmp_path, "m.dcm")
    settings = SETTINGS["default"]
    record = probe_file(_source(path, "m.dcm"), settings=settings)
    data = bytearray(open(path, "rb").read())
    start = record.native.offset - len(record.native.header)
    data[start:start + 4] = b"\0\0\0\0"
    with pytest.raises(ConversionError) as info:
        decode_record(record, io.BytesIO(bytes(data)), settings)
    assert info.value.reason == "changed_during_run"


def test_metadata_keys_and_packing_round_trip():
    settings = DecodeSettings(id_salt="s", keep_tags=("StudyDescription",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = pydicom.dcmread(os.path.join(SRC, "CT_small.dcm"))
    meta = dicom_metadata.metadata(ds, settings, {})
    keys = dicom_metadata.metadata_keys(settings)
    assert tuple(meta) == keys
    back = native_dicom.unpack_metadata(native_dicom.pack_metadata(meta, keys), keys)
    assert list(back) == list(meta)
    for key, value in meta.items():
        if isinstance(value, np.ndarray):
            assert back[key].dtype == value.dtype and np.array_equal(back[key], value), key
        else:
            assert back[key] == value, key


def test_probed_record_with_layout_pickles_compactly():
    settings = DecodeSettings(id_salt="s")
    path = os.path.join(SRC, "CT_small.dcm")
    record = probe_file(_source(path, "CT_small.dcm"), settings=settings)
    assert record.native is not None
    assert pickle.loads(pickle.dumps(record)) == record
    assert len(pickle.dumps(record.native)) < 600
