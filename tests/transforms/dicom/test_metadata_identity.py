"""No identity in the records, asserted on their structure (docs/CONVERTING.md, "Patient safety").

tests/e2e/test_no_identity_in_outputs.py searches every written byte for long
values; a byte search cannot look for short values ("F", "066Y") or Coded
Strings (they occur in pixel bytes and in the standard's own words). This
test reads each record as a tf.train.Example instead and asserts:

- the set of dicom/* features is exactly docs/CONVERTING.md's allowlist, the *_hash
  features and the --keep_tags asked for (restated here, not imported);
- no value of any text element outside the allowlist (CS and short values
  included: PatientSex "F", PatientAge "066Y", ImageType's "ORIGINAL"), file
  meta and sequences included, is the value of any string feature of the
  record, nor a component of one (multi-valued "a\\b"); values of 4 or more
  characters must not occur inside any string feature either;
- each *_hash feature is HMAC-SHA256 of that file's identifier keyed with the
  salt, computed here with hmac; a second salt gives other hashes.

Over seven pydicom test files (native, RLE, JPEG 2000, JPEG baseline, RGB,
multi-frame), each identified as a patient, under every --dicom_values mode
and with --keep_tags.
"""
from __future__ import annotations

import hashlib
import hmac
import os

import pydicom
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support import pydicom_test_files
from tests.support import run_convert
from tests.support.identity import STANDARD_UID_ROOT, TEXT_VRS, _identify

SALT = "identity-structure-salt"
TEMPLATES = ("CT_small.dcm", "MR_small.dcm", "rtdose.dcm", "JPEG2000.dcm", "MR_small_RLE.dcm",
             "SC_rgb_rle.dcm", "SC_rgb_jpeg_gdcm.dcm")
# docs/CONVERTING.md, "Patient safety": what reaches dicom/ by default (feature names as dataset.json lists them)
ALLOWLIST = {
    "modality": "Modality", "body_part_examined": "BodyPartExamined", "manufacturer": "Manufacturer",
    "manufacturer_model_name": "ManufacturerModelName",
    "photometric_interpretation": "PhotometricInterpretation", "view_position": "ViewPosition",
    "laterality": "Laterality", "image_laterality": "ImageLaterality", "pixel_spacing": "PixelSpacing",
    "imager_pixel_spacing": "ImagerPixelSpacing", "slice_thickness": "SliceThickness",
    "spacing_between_slices": "SpacingBetweenSlices", "kvp": "KVP", "bits_stored": "BitsStored",
    "rescale_slope": "RescaleSlope", "rescale_intercept": "RescaleIntercept",
    "transfer_syntax": "TransferSyntaxUID", "window": None, "slice_spacing": None,
    # geometry and 4-D (docs/DICOM.md): where the image lies, never who it is
    "image_position_patient": "ImagePositionPatient", "image_orientation_patient": "ImageOrientationPatient",
    "affine": None, "diffusion_bvalue": "DiffusionBValue", "diffusion_gradient": "DiffusionGradientOrientation",
    "volumes": None, "volume_index": None}
HASHED = {"patient_id": "PatientID", "study_uid": "StudyInstanceUID", "series_uid": "SeriesInstanceUID",
          "sop_uid": "SOPInstanceUID", "accession": "AccessionNumber"}
KEEP = ("PatientSex", "StudyDescription")
MODES = {"modality": {}, "stored": dict(dicom_values="stored"), "window": dict(dicom_values="window"),
         "keep_tags": dict(keep_tags=KEEP)}
SHORT = 4


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity") / "in"
    os.makedirs(root)
    for n, name in enumerate(TEMPLATES):
        ds = pydicom.dcmread(os.path.join(pydicom_test_files(), name))
        _identify(ds, f"Patient^Number{n}", f"{9100 + n}", n)
        ds.PatientSex, ds.PatientAge = "F", f"0{60 + n}Y"
        ds.save_as(str(root / name))
    return root


def _elements(ds):
    return list(ds.file_meta.iterall()) + list(ds.iterall())


def _text_values(elem) -> list[str]:
    values = elem.value if isinstance(elem.value, (list, tuple, pydicom.multival.MultiValue)) else [elem.value]
    out = []
    for value in values:
        text = str(value).strip()
        out.append(text)
        if elem.VR == "PN":
            out += [p for p in text.replace("=", "^").split("^") if p]
    return [t for t in out if t]


def _needles(ds, kept: tuple) -> set[str]:
    """Values of text elements neither allowlisted nor kept; minus those an allowlisted
    element of the same file also holds (then the feature holds it by design)."""
    allowed = {k for k in ALLOWLIST.values() if k} | set(kept)
    by_design = {v for e in _elements(ds) if e.keyword in allowed and e.VR in TEXT_VRS
                 for v in _text_values(e)}
    out = set()
    for elem in _elements(ds):
        if elem.VR in TEXT_VRS and elem.keyword not in allowed:
            out |= {v for v in _text_values(elem) if not v.startswith(STANDARD_UID_ROOT)}
    return out - by_design


def _records(dataset_dir: str):
    info = reader.info(dataset_dir)
    for entry in info["splits"].values():
        for shard in entry["shards"]:
            for raw in tf.data.TFRecordDataset(os.path.join(dataset_dir, shard["file"])):
                yield tf.train.Example.FromString(raw.numpy()).features.feature


def _strings(feature) -> list[str]:
    return [v.decode("utf-8", "replace") for v in feature.bytes_list.value]


def _hmac(value: str, salt: str) -> str:
    return hmac.new(salt.encode(), value.encode(), hashlib.sha256).hexdigest()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_records_hold_exactly_the_allowlist_and_no_other_value(archive, tmp_path, mode):
    options = MODES[mode]
    kept = options.get("keep_tags", ())
    out = tmp_path / "out"
    run_convert(archive, out, id_salt=SALT, target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=16,
                keep_source_path=False, **options)
    sources = {name: pydicom.dcmread(str(archive / name)) for name in TEMPLATES}
    by_sop = {_hmac(str(ds.SOPInstanceUID), SALT): ds for ds in sources.values()}
    expected = ({f"dicom/{k}" for k in ALLOWLIST} | {f"dicom/{k}_hash" for k in HASHED}
                | {f"dicom/{k}" for k in kept})
    seen = set()
    for feature in _records(str(out)):
        assert {k for k in feature if k.startswith("dicom/")} == expected
        ds = by_sop[_strings(feature["dicom/sop_uid_hash"])[0]]
        seen.add(ds.SOPInstanceUID)
        for name, keyword in HASHED.items():
            value = str(ds.get(keyword, "") or "").strip()
            assert _strings(feature[f"dicom/{name}_hash"]) == [_hmac(value, SALT) if value else ""], name
        for keyword in kept:
            assert _strings(feature[f"dicom/{keyword}"]) == [str(ds.get(keyword))]
        values = [(key, text) for key in feature if key != "image_raw" for text in _strings(feature[key])]
        parts = {(key, part) for key, text in values for part in [text, *text.split("\\")]}
        for needle in _needles(ds, kept):
            hits = [key for key, part in parts if part == needle]
            if len(needle) >= SHORT:
                hits += [key for key, text in values if needle in text]
            assert not hits, f"{ds.filename}: value {needle!r} of an element outside the allowlist in {hits}"
    assert len(seen) == len(TEMPLATES)


# docs/CONVERTING.md: "record ids are salted hashes of them" (the paths relative to the input root);
# the key is restated here, not imported from the code under test
RECORD_ID_KEY = b"dcm2tfrecord/record-id/v1"


def test_identifier_hashes_and_record_ids_change_with_the_salt(archive, tmp_path):
    hashes = {}
    for salt in (SALT, SALT + "-other"):
        run_convert(archive, tmp_path / salt, id_salt=salt, target_shard_mb=1, min_shard_mb=0.5,
                    max_shard_mb=16)
        hashes[salt] = {k: {v for f in _records(str(tmp_path / salt)) for v in _strings(f[f"dicom/{k}_hash"])}
                        for k in ("patient_id", "study_uid", "sop_uid")}
        ids = {v for f in _records(str(tmp_path / salt)) for v in _strings(f["id"])}
        assert ids == {hmac.new(RECORD_ID_KEY + salt.encode(), name.encode(), hashlib.sha256).hexdigest()[:32]
                       for name in TEMPLATES}, "record ids are not HMAC(key + salt, relative path)"
    for key in hashes[SALT]:
        assert len(hashes[SALT][key]) == len(TEMPLATES) and not hashes[SALT][key] & hashes[SALT + "-other"][key]
        plain = {hashlib.sha256(str(getattr(pydicom.dcmread(str(archive / n)), HASHED[key])).encode()).hexdigest()
                 for n in TEMPLATES}
        assert not hashes[SALT][key] & plain, "unsalted SHA-256"
