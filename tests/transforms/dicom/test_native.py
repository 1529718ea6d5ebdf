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

from tests.support import ct_file_bytes
from tests.support import pydicom_test_files
from dcm2tfrecord.transforms.dicom import metadata as dicom_metadata
from dcm2tfrecord.transforms.dicom import native as native_dicom
from dcm2tfrecord.transforms.records.build import build_record, decode_record
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.values import SourceFile
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


def _ct(tmp_path, name: str, edit=None, transfer_syntax=None) -> str:
    """A generated benchmark CT slice, optionally edited with pydicom and saved again."""
    data = ct_file_bytes(0, 1, 0, 3, 10, 3)
    if edit is not None or transfer_syntax is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = pydicom.dcmread(io.BytesIO(data))
            if edit is not None:
                edit(ds)
            if transfer_syntax is not None:
                ds.file_meta.TransferSyntaxUID = transfer_syntax
            out = io.BytesIO()
            ds.save_as(out, enforce_file_format=True)
            data = out.getvalue()
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _pixels(ds, values, dtype):
    ds.PixelData = np.asarray(values, dtype=dtype).tobytes()


def _bits_above_stored(ds):
    arr = np.frombuffer(ds.PixelData, "<i2").copy()
    arr[::7] |= 0x7000                               # garbage above Bits Stored (12)
    arr[1::11] = -5
    _pixels(ds, arr, "<i2")


def _unsigned_wide(ds):
    ds.PixelRepresentation, ds.BitsStored, ds.HighBit = 0, 16, 15
    arr = np.frombuffer(ds.PixelData, "<i2").astype(np.int64) * 30
    _pixels(ds, arr.astype("<u2"), "<u2")


def _ct_out_of_int16(ds):
    ds.BitsStored, ds.HighBit = 16, 15
    arr = np.frombuffer(ds.PixelData, "<i2").copy()
    arr[:100] = -32768                               # -32768 - 1024 needs int32: widened
    _pixels(ds, arr, "<i2")


def _slope_intercept(ds):
    ds.RescaleSlope, ds.RescaleIntercept = "3", "-40000"


def _negative_slope(ds):
    ds.RescaleSlope, ds.RescaleIntercept = "-2", "7"


def _no_rescale(ds):
    del ds.RescaleSlope
    del ds.RescaleIntercept


def _only_slope(ds):
    del ds.RescaleIntercept


def _fractional(ds):
    ds.RescaleSlope = "0.5"


def _eight_bit_mono1(ds):
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PhotometricInterpretation = "MONOCHROME1"
    ds.Rows, ds.Columns = 64, 48
    _pixels(ds, np.arange(64 * 48) % 256, "u1")


def _multi_frame(ds):
    ds.NumberOfFrames = 4
    ds.Rows, ds.Columns = 32, 16
    _pixels(ds, (np.arange(4 * 32 * 16) * 37) % 4000 - 1000, "<i2")


def _modality_lut(ds):
    item = pydicom.Dataset()
    item.LUTDescriptor = [4096, -2048, 16]
    item.add_new(0x00283006, "US", list(range(4096)))   # LUT Data
    ds.ModalityLUTSequence = [item]


EDITS = {
    "plain": (None, True), "bits_above_stored": (_bits_above_stored, True),
    "unsigned_wide": (_unsigned_wide, True), "ct_out_of_int16": (_ct_out_of_int16, True),
    "slope_intercept": (_slope_intercept, True), "negative_slope": (_negative_slope, True),
    "no_rescale": (_no_rescale, True), "eight_bit_mono1": (_eight_bit_mono1, True),
    "multi_frame": (_multi_frame, True),
    "only_slope": (_only_slope, False), "fractional": (_fractional, False),
    "modality_lut": (_modality_lut, False),
}


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
