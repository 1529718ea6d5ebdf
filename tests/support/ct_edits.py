"""Generated CT slices edited with pydicom: the variants the native shortcut must write as
the general path does (transforms/dicom/test_native.py), probed also by
transforms/records/test_probe_equivalence.py."""
import io
import warnings

import numpy as np
import pydicom

from tests.support import ct_file_bytes


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
