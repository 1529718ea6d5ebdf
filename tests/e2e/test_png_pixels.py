"""--pixel_encoding png (issue 36, item 3): each record's pixels one PNG image, compressed and
still entered at its .idx offset. The same records, value for value, as --pixel_encoding raw,
through reader.load (tf.io.decode_png), RandomAccess (NumPy alone) and independent PNG decoders
(imagecodecs, Pillow) of the bytes in the shard; verify checks each image whole."""
from __future__ import annotations

import io
import json
import os
import shutil

import imagecodecs
import numpy as np
import pytest
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.example import decode_example
from dcm2tfrecord.dataset.features import DTYPE, ENCODING, IMAGE_RAW, SHAPE_FEATURES
from dcm2tfrecord.dataset.tfrecord import read_records
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import run_convert
from tests.support.pinned import archive  # noqa: F401 - fixture

UNITS = ["file", "series"]      # series: volumes of several depths; file: 2-D records, RGB among them


# the pinned archive's inputs whose pixels no PNG holds: float32 CRs (modality values of a
# fractional rescale) and a uint32 RT dose (its copies are duplicates of it, skipped)
NOT_ENCODABLE = ["6154", "6247", "6278", "rtdose.dcm"]


@pytest.fixture(scope="module")
def converted(archive, tmp_path_factory):  # noqa: F811
    full, _ = archive
    root = str(tmp_path_factory.mktemp("encodable") / "archive")
    shutil.copytree(full, root, ignore=lambda folder, found: [n for n in found
                                                              if n in NOT_ENCODABLE or n.startswith("rtdose")])
    out = {}
    path = tmp_path_factory.mktemp("file_png_all")
    run_convert(full, path, pixel_encoding="png", target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)
    out["all"] = str(path)
    for unit in UNITS:
        for encoding in ("raw", "png"):
            path = tmp_path_factory.mktemp(f"{unit}_{encoding}")
            run_convert(root, path, unit=unit, pixel_encoding=encoding, target_shard_mb=4, min_shard_mb=1,
                        max_shard_mb=64)
            out[unit, encoding] = str(path)
    return out


def _manifest(path):
    with open(os.path.join(path, names.MANIFEST_NAME)) as handle:
        return json.load(handle)


def _by_id(path) -> dict:
    access = reader.RandomAccess(path)
    return {record["id"]: record for record in (access[i] for i in range(len(access)))}


def _not_encodable(path) -> list[str]:
    with open(os.path.join(path, names.ERRORS_NAME)) as handle:
        return sorted(line["uri"] for line in map(json.loads, handle) if line["reason"] == "not_png_encodable")


@pytest.mark.parametrize("unit", UNITS)
def test_random_access_reads_the_raw_runs_records_value_for_value(converted, unit):
    raw, png = _by_id(converted[unit, "raw"]), _by_id(converted[unit, "png"])
    assert raw.keys() == png.keys() and len(raw) >= 5
    kinds = set()
    for key, record in png.items():
        image, expected = record["image"], raw[key]["image"]
        assert image.dtype == expected.dtype and np.array_equal(image, expected), key
        assert record["label"] == raw[key]["label"]
        kinds.add(image.shape[-1])
    # what the archive exercises: signed 16-bit CT, 16- and 8-bit gray, RGB; volumes
    stored = {d for entry in _manifest(converted[unit, "png"])["splits"].values() for d in entry["dtypes"]}
    assert {"int16", "uint16", "uint8"} <= stored and {1, 3} <= kinds, (stored, kinds)
    if unit == "series":
        assert any(len(record["image"]) > 1 for record in png.values())


@pytest.mark.parametrize("unit", UNITS)
def test_reader_load_decodes_the_png_records_in_the_graph_as_the_raw_ones(converted, unit):
    def images(path):
        dataset = reader.load(path, "train", pad=True, batch_size=1, output="dict")
        return {bytes(batch["id"].numpy()[0]).decode(): batch["image"].numpy()[0] for batch in dataset}
    raw, png = images(converted[unit, "raw"]), images(converted[unit, "png"])
    assert raw.keys() == png.keys()
    for key in raw:
        assert png[key].dtype == raw[key].dtype and np.array_equal(png[key], raw[key]), key


def test_records_no_png_holds_fail_named_and_the_others_are_written(converted):
    failed = _not_encodable(converted["all"])
    assert [os.path.basename(uri) for uri in failed] == NOT_ENCODABLE, failed
    with open(os.path.join(converted["all"], names.ERRORS_NAME)) as handle:
        messages = [line["message"] for line in map(json.loads, handle) if line["reason"] == "not_png_encodable"]
    assert all("--pixel_encoding raw" in m and ("float32" in m or "uint32" in m) for m in messages), messages
    counts = _manifest(converted["all"])["counts"]
    assert counts["records"] == _manifest(converted["file", "png"])["counts"]["records"]


def test_the_shard_holds_standard_pngs_that_other_decoders_read(converted):
    path = converted["series", "png"]
    manifest = _manifest(path)
    assert manifest["features"][IMAGE_RAW]["encoding"] == "png"
    expected = _by_id(converted["series", "raw"])
    checked = 0
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            with open(os.path.join(path, shard["file"]), "rb") as handle:
                for framed in read_records(handle):
                    features = decode_example(framed.data)
                    data = features[IMAGE_RAW][1][0]
                    assert features[ENCODING][1][0] == b"png"
                    d, h, w, c = (features[k][1][0] for k in SHAPE_FEATURES)
                    dtype = np.dtype(features[DTYPE][1][0].decode())
                    want = expected[features["id"][1][0]]["image"].astype(dtype).reshape(d * h, w, c)
                    bits = want.view(np.uint16 if dtype.itemsize == 2 else np.uint8)
                    decoded = imagecodecs.png_decode(data).reshape(d * h, w, c)
                    assert decoded.dtype == bits.dtype and np.array_equal(decoded, bits)
                    if c == 1 or dtype.itemsize == 1:        # Pillow reads 16-bit colour as 8-bit
                        with Image.open(io.BytesIO(data)) as image:
                            assert np.array_equal(np.asarray(image).reshape(d * h, w, c).astype(bits.dtype), bits)
                    checked += 1
    assert checked == len(expected)


def test_png_shards_are_smaller_and_verify_checks_every_image(converted, tmp_path):
    for unit in UNITS:
        raw, png = _manifest(converted[unit, "raw"]), _manifest(converted[unit, "png"])
        raw_bytes = sum(s["num_bytes"] for e in raw["splits"].values() for s in e["shards"])
        png_bytes = sum(s["num_bytes"] for e in png["splits"].values() for s in e["shards"])
        assert png_bytes < 0.8 * raw_bytes, (unit, png_bytes, raw_bytes)
        assert png["counts"]["records"] == raw["counts"]["records"]
        assert verify_dataset(converted[unit, "png"]).ok


def test_verify_names_a_png_that_does_not_fill_its_record():
    from dcm2tfrecord.dataset import png
    from dcm2tfrecord.dataset.features import image_features, serialize_record
    from dcm2tfrecord.dataset.verify_records import check_example
    from dcm2tfrecord.dataset.features import CORE_FEATURES
    schema = {**CORE_FEATURES, **image_features("png")}
    pixels = np.arange(24, dtype=np.int16).reshape(1, 4, 6, 1)
    good = decode_example(serialize_record(pixels, "a", "image", encoding="png"))
    assert check_example(good, schema)[0] == []
    other = png.encode(np.zeros((1, 6, 4, 1), np.int16))           # a PNG of another shape
    bad = dict(good, **{IMAGE_RAW: ("bytes", [other])})
    (problem,) = check_example(bad, schema)[0]
    assert "image_raw is no PNG image of shape [1, 4, 6, 1] and int16" in problem and "6x4" in problem
    cut = dict(good, **{IMAGE_RAW: ("bytes", [good[IMAGE_RAW][1][0][:-20]])})
    assert "cut short" in check_example(cut, schema)[0][0]
