"""Datasets the reader tests read (tests/reader/): the two-class archive converted into 14
small shards, plain and gzip; the every-dtype archive; and a dataset written by hand to
the dataset.json contract."""
from __future__ import annotations

import csv
import io
import json
import os
import pathlib
import warnings

import numpy as np
import pydicom
import pytest
import tensorflow as tf
from PIL import Image
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.pixels import apply_modality_lut
from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

from tests.support import pydicom_test_files, run_convert, write_png_archive


SMALL_SHARDS = dict(target_shard_mb=0.002, min_shard_mb=0.001, max_shard_mb=0.01)


RECORDS = 48


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("reader_training") / "archive"
    write_png_archive(root / "cat", count=RECORDS // 2, height=8, width=8, channels=3, seed=1)
    write_png_archive(root / "dog", count=RECORDS // 2, height=8, width=8, channels=3, seed=2)
    return root


@pytest.fixture(scope="module")
def plain(archive, tmp_path_factory):
    out = tmp_path_factory.mktemp("plain") / "dataset"
    run_convert(archive, out, labels_from_dirs=True, **SMALL_SHARDS)
    return str(out)


@pytest.fixture(scope="module")
def gzipped(archive, tmp_path_factory):
    out = tmp_path_factory.mktemp("gzipped") / "dataset"
    run_convert(archive, out, labels_from_dirs=True, compression="gzip", **SMALL_SHARDS)
    return str(out)


DTYPES = ("uint8", "uint16", "int16", "int32", "uint32", "float32")


# name: (frames, rows, columns, samples)
LAYOUTS = {"2d": (1, 5, 6, 1), "rgb": (1, 5, 6, 3), "volume": (3, 5, 6, 1), "volume_rgb": (3, 5, 6, 3)}


FILES_PER_SPLIT = 3


def dicom_bytes(stored: np.ndarray, *, signed: bool, bits: int, bits_stored=None, modality="OT",
                rescale=None, float_pixels=False) -> bytes:
    """A minimal DICOM file holding ``stored`` (frames, rows, cols, samples), little endian."""
    frames, rows, cols, samples = stored.shape
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset("", {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = SecondaryCaptureImageStorage
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = modality
    ds.Rows, ds.Columns, ds.SamplesPerPixel = rows, cols, samples
    ds.PhotometricInterpretation = "MONOCHROME2" if samples == 1 else "RGB"
    if samples > 1:
        ds.PlanarConfiguration = 0
    if frames > 1:
        ds.NumberOfFrames = frames
    ds.BitsAllocated = bits
    if float_pixels:
        ds.FloatPixelData = np.ascontiguousarray(stored, "<f4").tobytes()
    else:
        ds.BitsStored = bits_stored or bits
        ds.HighBit = ds.BitsStored - 1
        ds.PixelRepresentation = int(signed)
        ds.PixelData = np.ascontiguousarray(stored).tobytes()
    if rescale is not None:
        ds.RescaleSlope, ds.RescaleIntercept = (str(v) for v in rescale)
    buf = io.BytesIO()
    ds.save_as(buf, enforce_file_format=True)
    return buf.getvalue()


def _extremes(arr: np.ndarray, lo, hi) -> np.ndarray:
    """Puts the range ends into the array, so the stored dtype is really needed."""
    flat = arr.reshape(-1)
    flat[0], flat[-1] = lo, hi
    return arr


def generated_file(dtype: str, shape: tuple, rng: np.random.Generator) -> tuple[bytes, np.ndarray]:
    """(DICOM bytes, the values the converter must store) for one dtype and layout.

    Grayscale takes the modality LUT path where it decides the dtype (PS3.3
    C.11.1.1.2: CT in HU is int16, a 16-bit MR with intercept -1024 needs
    int32, a fractional slope float32); colour has no modality LUT, so the
    stored sample type decides.
    """
    gray = shape[-1] == 1
    if dtype == "uint8":
        s = _extremes(rng.integers(0, 256, shape).astype("u1"), 0, 255)
        return dicom_bytes(s, signed=False, bits=8), s
    if dtype == "uint16":
        s = _extremes(rng.integers(0, 65536, shape).astype("<u2"), 0, 65535)
        return dicom_bytes(s, signed=False, bits=16), s
    if dtype == "int16" and gray:
        s = _extremes(rng.integers(0, 4096, shape).astype("<u2"), 0, 4095)
        return (dicom_bytes(s, signed=False, bits=16, bits_stored=12, modality="CT", rescale=(1, -1024)),
                s.astype(np.int16) - 1024)
    if dtype == "int16":
        s = _extremes(rng.integers(-32768, 32768, shape).astype("<i2"), -32768, 32767)
        return dicom_bytes(s, signed=True, bits=16), s
    if dtype == "int32" and gray:
        s = _extremes(rng.integers(0, 65536, shape).astype("<u2"), 0, 65535)
        return (dicom_bytes(s, signed=False, bits=16, modality="MR", rescale=(1, -1024)),
                s.astype(np.int32) - 1024)
    if dtype == "int32":
        s = _extremes(rng.integers(-2**31, 2**31, shape).astype("<i4"), -2**31, 2**31 - 1)
        return dicom_bytes(s, signed=True, bits=32), s
    if dtype == "uint32":
        s = _extremes(rng.integers(0, 2**32, shape).astype("<u4"), 0, 2**32 - 1)
        return dicom_bytes(s, signed=False, bits=32), s
    if dtype == "float32" and gray:
        s = rng.integers(0, 4096, shape).astype("<u2")
        return (dicom_bytes(s, signed=False, bits=16, bits_stored=12, rescale=(0.25, -3.5)),
                (s.astype(np.float64) * 0.25 - 3.5).astype(np.float32))
    s = (rng.standard_normal(shape) * 1e4).astype("<f4")
    return dicom_bytes(s, signed=False, bits=32, float_pixels=True), s


def _pydicom_values(path: str) -> np.ndarray:
    """pydicom's decode with the modality LUT, as (frames, rows, cols, samples)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = pydicom.dcmread(path)
        arr = apply_modality_lut(ds.pixel_array, ds)
    frames = int(ds.get("NumberOfFrames", 1) or 1)
    return arr.reshape(frames, ds.Rows, ds.Columns, int(ds.SamplesPerPixel))


# split: (pydicom test file, dtype the converter stores it in)
REAL_FILES = {"real_ct": ("CT_small.dcm", "int16"), "real_mr": ("MR_small.dcm", "int16"),
              "real_rtdose": ("rtdose.dcm", "uint32")}


MIXED = [("uint8", (1, 4, 7, 1)), ("int16", (1, 6, 5, 1)), ("uint32", (1, 3, 3, 1)),
         ("float32", (1, 5, 6, 1))]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(dataset dir, {label: (split, dtype, expected (D, H, W, C) values)})."""
    root = tmp_path_factory.mktemp("reader_dtypes")
    archive = root / "archive"
    rng = np.random.default_rng(2024)
    rows, expected = [], {}

    def add(rel: str, data: bytes, split: str, dtype: str, values: np.ndarray):
        path = archive / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        label = len(rows)
        rows.append((rel, label, split))
        expected[label] = (split, dtype, values)

    for dtype in DTYPES:
        for layout, shape in LAYOUTS.items():
            for k in range(FILES_PER_SPLIT):
                data, values = generated_file(dtype, shape, rng)
                add(f"{dtype}_{layout}/{k}.dcm", data, f"{dtype}_{layout}", dtype, values)
    for split, (name, dtype) in REAL_FILES.items():
        src = os.path.join(pydicom_test_files(), name)
        add(f"real/{name}", open(src, "rb").read(), split, dtype, _pydicom_values(src))
    for k in range(FILES_PER_SPLIT):
        gray16 = rng.integers(0, 65536, (7, 9), dtype=np.uint16)
        buf = io.BytesIO()
        Image.fromarray(gray16).save(buf, format="PNG")
        add(f"png16/{k}.png", buf.getvalue(), "uint16_png", "uint16", gray16.reshape(1, 7, 9, 1))
        rgb = rng.integers(0, 256, (7, 9, 3), dtype=np.uint8)
        buf = io.BytesIO()
        Image.fromarray(rgb, mode="RGB").save(buf, format="PNG")
        add(f"png_rgb/{k}.png", buf.getvalue(), "uint8_png_rgb", "uint8", rgb.reshape(1, 7, 9, 3))
    for k, (dtype, shape) in enumerate(MIXED):
        data, values = generated_file(dtype, shape, rng)
        add(f"mixed/{k}.dcm", data, "mixed", dtype, values)

    labels = root / "labels.csv"
    with open(labels, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "split"])
        writer.writerows(rows)
    out = root / "dataset"
    run_convert(archive, out, labels=str(labels), label_key="path", label_column="label",
                split_column="split")
    return str(out), expected


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr if arr.shape[-1] != 1 else arr[..., 0]).save(buf, format="PNG")
    return buf.getvalue()


def _write_png_dataset(root: pathlib.Path, images: list[np.ndarray]) -> None:
    """A dataset written to the dataset.json contract with PNG-encoded pixels."""
    root.mkdir(parents=True)
    shard = "train-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(root / shard)) as writer:
        for label, arr in enumerate(images):
            h, w, c = arr.shape
            ints = {"label": label, "height": h, "width": w, "channels": c, "depth": 1}
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=[v])) for k, v in ints.items()}
            for key, value in {"image_raw": _png(arr), "dtype": arr.dtype.name.encode(),
                               "encoding": b"png", "id": f"r{label}".encode()}.items():
                feature[key] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    shapes = sorted({(1,) + a.shape for a in images})
    manifest = {
        "format_version": 1,
        "features": {"image_raw": {"dtype": "bytes", "shape": [], "encoding": "png"},
                     "label": {"dtype": "int64", "shape": []}},
        "splits": {"train": {"num_records": len(images), "num_shards": 1, "num_bytes": 1,
                             "dtypes": sorted({a.dtype.name for a in images}),
                             "shapes": [list(s) for s in shapes], "fixed_shape": len(shapes) == 1,
                             "max_depth": 1,
                             "shards": [{"file": shard, "num_records": len(images)}]}},
        "options": {"compression": "none"},
    }
    (root / "dataset.json").write_text(json.dumps(manifest))
