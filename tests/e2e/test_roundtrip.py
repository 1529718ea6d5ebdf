"""End to end on the sample archive: pixel-exact round trip and complete accounting."""
import json
import os
import warnings

import numpy as np
import pydicom
import pytest
from PIL import Image
from pydicom.pixels import apply_color_lut, apply_modality_lut

from dcm2tfrecord import reader
from tests.support import pydicom_test_files
from tests.support import rid


def _records_by_id(dataset_dir):
    out = {}
    exact = reader.info(dataset_dir).layout("train").dtype   # the sample mixes dtypes: float64
    for batch in reader.load(dataset_dir, batch_size=1, shuffle=False, output="dict", dtype=exact):
        key = batch["id"][0].numpy().decode()
        out[key] = {"image": batch["image"][0].numpy(), "dtype": batch["dtype"][0].numpy().decode(),
                    "label": int(batch["label"][0])}
    return out


@pytest.fixture(scope="module")
def records(sample_dataset):
    return _records_by_id(sample_dataset)


def _imagecodecs_reference(ds):
    """12-bit lossy JPEG, which no pydicom plugin decodes: libjpeg-turbo via imagecodecs."""
    import imagecodecs
    from pydicom.encaps import generate_frames
    if str(ds.file_meta.TransferSyntaxUID) != "1.2.840.10008.1.2.4.51":
        return None
    return imagecodecs.jpeg8_decode(next(generate_frames(ds.PixelData, number_of_frames=1)))


def _pydicom_reference(path):
    """pydicom's decode, palette LUT or modality LUT applied; None if nothing decodes it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ds = pydicom.dcmread(path, force=True)
        except Exception:
            return None
        try:
            arr = ds.pixel_array
        except Exception:
            try:
                arr = _imagecodecs_reference(ds)
            except Exception:
                arr = None
            if arr is None:
                return None
        if str(ds.get("PhotometricInterpretation", "")) == "PALETTE COLOR":
            arr = apply_color_lut(arr, ds)
        elif int(ds.get("SamplesPerPixel", 1)) == 1:
            arr = apply_modality_lut(arr, ds)
    return arr


def _dicom_files(archive):
    root = os.path.join(archive, "dicom")
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            path = os.path.join(folder, name)
            yield os.path.relpath(path, archive), path


def test_every_decodable_pydicom_file_round_trips_pixel_exact(sample_archive, records):
    compared = 0
    for rel, path in _dicom_files(sample_archive):
        ref = _pydicom_reference(path)
        if ref is None:
            assert rid(rel) not in records, f"{rel}: pydicom cannot decode it, yet it was written"
            continue
        got = records.get(rid(rel))
        assert got is not None, f"{rel}: decodable by pydicom but missing from the dataset"
        stored = np.dtype(got["dtype"])
        if stored.kind in "iu":
            assert np.array_equal(ref.astype(stored), ref), f"{rel}: stored dtype {stored} not exact"
            expected = ref.astype(stored)
        else:
            expected = ref.astype(stored)
        image = got["image"].reshape(expected.shape)
        assert np.array_equal(image.astype(stored), expected), rel
        compared += 1
    assert compared >= 88   # pydicom 3.0 decodes 89 of its bundled files, imagecodecs one more


def test_big_endian_sources_come_back_little_endian_and_equal(sample_archive, records):
    for rel in ("dicom/MR_small_bigendian.dcm", "dicom/rtdose_expb.dcm"):
        ref = _pydicom_reference(os.path.join(sample_archive, rel))
        got = records[rid(rel)]
        assert np.array_equal(got["image"].reshape(ref.shape), ref)


def test_ct_in_hounsfield_units_is_int16(sample_archive, records):
    got = records[rid("dicom/CT_small.dcm")]
    assert got["dtype"] == "int16"
    assert got["image"].min() == 128 - 1024   # stored 128 with intercept -1024, in HU


def test_multiframe_is_one_record_with_depth(records, sample_dataset):
    got = records[rid("dicom/examples_ybr_color.dcm")]
    assert got["image"].shape == (30, 240, 320, 3)


def test_images_equal_pillow_decode(sample_archive, records):
    folder = os.path.join(sample_archive, "images")
    for name in sorted(os.listdir(folder)):
        with Image.open(os.path.join(folder, name)) as im:
            if im.mode in ("RGBA", "P"):
                im = im.convert("RGB")
            ref = np.asarray(im)
        got = records[rid(f"images/{name}")]
        image = got["image"].reshape(got["image"].shape[-3:])
        if ref.ndim == 2:
            ref = ref[..., None]
        assert image.shape == ref.shape, name
        assert np.array_equal(image, ref), name
        assert got["dtype"] == ("uint16" if ref.dtype == np.uint16 else "uint8")
        assert got["label"] == -1


def test_accounting_adds_up_with_reasons(sample_dataset, sample_archive):
    manifest = reader.info(sample_dataset)
    counts = manifest["counts"]
    assert counts["matched"] == sum(len(f) for _, _, f in os.walk(sample_archive))
    assert counts["matched"] == (counts["written"] + sum(counts["skipped"].values())
                                 + sum(counts["failed"].values()))
    assert counts["unaccounted"] == 0
    assert counts["skipped"]["no_pixel_data"] >= 10      # SR, RT plan, DICOMDIRs
    with open(os.path.join(sample_dataset, "errors.jsonl")) as handle:
        errors = [json.loads(line) for line in handle]
    assert len(errors) == sum(counts["skipped"].values()) + sum(counts["failed"].values())
    by_name = {os.path.basename(e["uri"]): e for e in errors}
    assert by_name["MR_truncated.dcm"]["reason"] == "truncated_file"
    assert by_name["MR_truncated.dcm"]["status"] == "failed"
    assert by_name["rtplan.dcm"]["reason"] == "no_pixel_data"
    assert by_name["rtplan.dcm"]["status"] == "skipped"
    for e in errors:
        assert set(e) == {"uri", "stage", "reason", "message", "status"}
        assert e["message"]


def test_manifest_describes_every_shard(sample_dataset):
    import hashlib
    manifest = reader.info(sample_dataset)
    assert manifest["format_version"] == 1
    assert manifest["tool"]["name"] == "dcm2tfrecord"
    assert {"image_raw", "label", "height", "width", "channels", "depth", "dtype", "id"} <= set(manifest["features"])
    split = manifest["splits"]["train"]
    assert split["num_records"] == manifest["counts"]["records"]
    for shard in split["shards"]:
        path = os.path.join(sample_dataset, shard["file"])
        with open(path, "rb") as handle:
            data = handle.read()
        assert len(data) == shard["num_bytes"]
        assert hashlib.sha256(data).hexdigest() == shard["sha256"]
    listed = sorted(s["file"] for s in split["shards"])
    on_disk = sorted(f for f in os.listdir(sample_dataset) if f.endswith(".tfrecord"))
    assert listed == on_disk
    assert not os.path.exists(os.path.join(sample_dataset, ".incomplete"))


def test_no_patient_identity_in_records(sample_dataset, sample_archive):
    ds = pydicom.dcmread(os.path.join(sample_archive, "dicom", "CT_small.dcm"))
    name = str(ds.PatientName).encode()
    pid = str(ds.PatientID).encode()
    for shard in reader.info(sample_dataset)["splits"]["train"]["shards"]:
        with open(os.path.join(sample_dataset, shard["file"]), "rb") as handle:
            data = handle.read()
        assert name not in data and pid not in data


EXPECTED_FAILURES = {
    "JPEG2000-embedded-sequence-delimiter.dcm": "decode_error",   # J2K stream cut by a delimiter
    "MR_truncated.dcm": "truncated_file",                           # cut inside its pixel data
    "badVR.dcm": "invalid_value",                                  # Number of Frames '1A'
    "meta_missing_tsyntax.dcm": "missing_attribute",               # no Rows/Columns at all
    "nested_priv_SQ.dcm": "missing_attribute",                     # pixel data without Bits Allocated
    "no_meta.dcm": "invalid_dicom",                                # parses to no DICOM elements
    "rtplan_truncated.dcm": "truncated_file",                       # cut inside a sequence
    # header-only stubs of image objects (an image SOP class without pixel data)
    "UN_sequence.dcm": "truncated_file", "priv_SQ.dcm": "truncated_file",
    "no_meta_group_length.dcm": "truncated_file",
    **{name: "truncated_file" for name in os.listdir(os.path.join(
        pydicom_test_files(), "dicomdirtests", "TINY_ALPHA", "PT000000", "ST000000", "SE000000"))},
}


def test_files_that_do_not_convert_fail_with_their_precise_reason(sample_dataset, sample_archive):
    with open(os.path.join(sample_dataset, "errors.jsonl")) as handle:
        errors = {os.path.relpath(e["uri"], sample_archive): e for e in map(json.loads, handle)}
    failed = {os.path.basename(rel): e["reason"] for rel, e in errors.items() if e["status"] == "failed"}
    assert failed == EXPECTED_FAILURES
    for rel, e in errors.items():
        if e["status"] == "skipped":
            assert e["reason"] == "no_pixel_data", rel
