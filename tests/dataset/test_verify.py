"""``dcm2tfrecord verify`` passes on good datasets and names what is wrong on damaged copies."""
from __future__ import annotations

import io
import json
import os
import shutil
import struct

import numpy as np
import pytest

from dcm2tfrecord.pipeline import cli
from tests.support import mask_datasets, run_convert, write_png_archive
from dcm2tfrecord.dataset.example import decode_example, encode_example
from dcm2tfrecord.dataset.tfrecord import FramingError, masked_crc, read_records
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.dataset.verify_records import check_example
from tests.support.shard_edits import payload as _payload, replace_record as _replace_record, stream as _stream

SMALL = dict(target_shard_mb=0.03, min_shard_mb=0.01, max_shard_mb=1.0)


@pytest.fixture(scope="module")
def png_datasets(tmp_path_factory):
    """{compression: dataset dir} for a 24-image archive in several shards, plain and gzip."""
    root = tmp_path_factory.mktemp("verify")
    write_png_archive(root / "archive", 24, 48, 48)
    (root / "archive" / "notes.txt").write_text("not an image")
    out = {}
    for compression in ("none", "gzip"):
        out[compression] = str(root / f"dataset_{compression}")
        run_convert(root / "archive", out[compression], compression=compression, **SMALL)
    return out


def _copy(src: str, tmp_path, name: str = "copy") -> str:
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def _manifest(path: str) -> dict:
    with open(os.path.join(path, "dataset.json")) as handle:
        return json.load(handle)


def _first_shard(path: str) -> dict:
    return _manifest(path)["splits"]["train"]["shards"][0]


def _index(path: str, shard: dict) -> list[tuple[int, int]]:
    with open(os.path.join(path, shard["index_file"])) as handle:
        return [tuple(int(v) for v in line.split()) for line in handle]


def _verify_cli(path: str, capsys) -> tuple[int, str]:
    code = cli.main(["verify", path])
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1, captured.out     # a one-line verdict
    return code, lines[0]


# ---------------------------------------------------------------- good datasets


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_good_png_dataset_passes(png_datasets, compression, capsys):
    path = png_datasets[compression]
    manifest = _manifest(path)
    report = verify_dataset(path)
    assert report.ok, report.problems
    assert report.records == manifest["counts"]["records"] == 24
    assert report.shards == manifest["splits"]["train"]["num_shards"] >= 2
    code, verdict = _verify_cli(path, capsys)
    assert code == 0 and verdict.startswith("OK ")


def test_good_dicom_and_image_dataset_passes(sample_dataset, capsys):
    report = verify_dataset(sample_dataset)
    assert report.ok, report.problems[:5]
    assert report.records == _manifest(sample_dataset)["counts"]["records"]
    code, verdict = _verify_cli(sample_dataset, capsys)
    assert code == 0 and verdict.startswith("OK ")


def test_wire_decoder_agrees_with_tensorflow(sample_dataset):
    """Our protobuf reader and TensorFlow's parse every written record identically."""
    import tensorflow as tf

    shard = _manifest(sample_dataset)["splits"]["train"]["shards"][0]
    with open(os.path.join(sample_dataset, shard["file"]), "rb") as handle:
        for framed in read_records(handle):
            ours = decode_example(framed.data)
            theirs = tf.train.Example.FromString(framed.data).features.feature
            assert set(ours) == set(theirs.keys())
            for name, (kind, values) in ours.items():
                expected = list(getattr(theirs[name], f"{kind}_list").value)
                got = [bytes(v) for v in values] if kind == "bytes" else list(values)
                assert got == pytest.approx(expected) if kind == "float" else got == expected, name


# ---------------------------------------------------------------- damaged copies


def test_flipped_byte_in_record_data_names_shard_record_and_offset(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["none"], tmp_path)
    shard = _first_shard(path)
    offset, size = _index(path, shard)[2]
    with open(os.path.join(path, shard["file"]), "r+b") as handle:
        handle.seek(offset + 12 + size // 2)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x10]))
    code, verdict = _verify_cli(path, capsys)
    assert code == 1
    assert verdict.startswith("CORRUPT ")
    assert f"{shard['file']}: record 2 at byte {offset}: data CRC32C mismatch" in verdict


def test_flipped_byte_in_length_field_is_a_framing_error(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["none"], tmp_path)
    shard = _first_shard(path)
    offset, _ = _index(path, shard)[1]
    with open(os.path.join(path, shard["file"]), "r+b") as handle:
        handle.seek(offset + 1)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0x01]))
    code, verdict = _verify_cli(path, capsys)
    assert code == 1
    assert f"{shard['file']}: record 1 at byte {offset}: length CRC32C mismatch" in verdict


def test_truncated_shard_names_the_cut_record(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["none"], tmp_path)
    shard = _first_shard(path)
    offsets = _index(path, shard)
    cut_record = len(offsets) // 2
    offset, size = offsets[cut_record]
    os.truncate(os.path.join(path, shard["file"]), offset + size - 7)
    code, verdict = _verify_cli(path, capsys)
    assert code == 1
    assert f"{shard['file']}: record {cut_record} at byte {offset}: truncated" in verdict
    problems = " | ".join(str(p) for p in verify_dataset(path).problems)
    assert f"holds {cut_record} readable records, dataset.json says {shard['num_records']}" in problems
    assert "sha256" in problems


def test_deleted_shard_is_named(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["none"], tmp_path)
    shard = _manifest(path)["splits"]["train"]["shards"][-1]
    os.remove(os.path.join(path, shard["file"]))
    code, verdict = _verify_cli(path, capsys)
    assert code == 1
    assert f"{shard['file']}: listed in dataset.json but missing" in verdict


@pytest.mark.parametrize("where", ["same shard", "other shard"])
def test_a_record_in_the_dataset_twice_is_named(png_datasets, tmp_path, capsys, where):
    path = _copy(png_datasets["none"], tmp_path)
    first = _manifest(path)["splits"]["train"]["shards"][0]["file"]
    source = 1 if where == "other shard" else 0
    _replace_record(path, 0, 2, _payload(path, source, 0))
    problems = verify_dataset(path).problems
    messages = [str(p) for p in problems]
    assert len(problems) == 1, messages
    origin = _manifest(path)["splits"]["train"]["shards"][source]["file"]
    copy, original = f"{first}: record 2", f"{origin}: record 0"     # either may be read first
    assert any(messages[0].startswith(f"{a}: record id") and f"repeats record {b.split(': record ')[1]} "
               f"of {b.split(':')[0]}: a record is in the dataset twice" in messages[0]
               for a, b in ((copy, original), (original, copy))), messages[0]
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and "in the dataset twice" in verdict


def _edit_num_records(m):
    m["splits"]["train"]["shards"][0]["num_records"] += 1
    return f"{m['splits']['train']['shards'][0]['file']}: holds"


def _edit_sha256(m):
    shard = m["splits"]["train"]["shards"][0]
    shard["sha256"] = "0" * 64
    return f"{shard['file']}: sha256"


def _edit_num_bytes(m):
    shard = m["splits"]["train"]["shards"][1]
    shard["num_bytes"] -= 1
    return f"{shard['file']}: is {shard['num_bytes'] + 1} bytes, dataset.json says {shard['num_bytes']}"


def _edit_schema(m):
    m["features"]["height"]["dtype"] = "float"
    return "feature 'height' is int64, the schema says float"


def _edit_counts(m):
    m["counts"]["matched"] += 1
    return "dataset.json: counts do not add up"


def _edit_split_total(m):
    m["splits"]["train"]["num_records"] -= 1
    return "dataset.json: split 'train': num_records"


def _drop_shard_entry(m):
    m["splits"]["train"]["shards"].pop()
    return "dataset.json: split 'train': num_shards"


def test_a_versioned_shard_name_in_a_plain_dataset_is_named(png_datasets, tmp_path):
    """A plain dataset's shards are {split}-{i}-of-{n}: one named like a version's
    ({split}-v0001-...) is listed as wrong even with its file renamed to match."""
    path = _copy(png_datasets["none"], tmp_path)
    manifest = _manifest(path)
    shard = manifest["splits"]["train"]["shards"][0]
    renamed = shard["file"].replace("train-", "train-v0001-", 1)
    for old, new in ((shard["file"], renamed), (shard["index_file"], renamed + ".idx")):
        os.rename(os.path.join(path, old), os.path.join(path, new))
    shard["file"], shard["index_file"] = renamed, renamed + ".idx"
    with open(os.path.join(path, "dataset.json"), "w") as handle:
        json.dump(manifest, handle)
    problems = [str(p) for p in verify_dataset(path).problems]
    assert any(f"shard 0 is named '{renamed}', expected train-00000-of-" in p for p in problems), problems


@pytest.mark.parametrize("edit", [_edit_num_records, _edit_sha256, _edit_num_bytes, _edit_schema,
                                  _edit_counts, _edit_split_total, _drop_shard_entry])
def test_edited_manifest_fails_naming_what_is_wrong(png_datasets, tmp_path, capsys, edit):
    path = _copy(png_datasets["none"], tmp_path)
    manifest = _manifest(path)
    expected = edit(manifest)
    with open(os.path.join(path, "dataset.json"), "w") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
    report = verify_dataset(path)
    assert not report.ok
    assert any(expected in str(p) for p in report.problems), report.problems
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and verdict.startswith("CORRUPT ")


def test_unparseable_or_missing_manifest_fails(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["none"], tmp_path)
    with open(os.path.join(path, "dataset.json"), "w") as handle:
        handle.write('{"splits": ')
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and "dataset.json: does not parse" in verdict
    os.remove(os.path.join(path, "dataset.json"))
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and "dataset.json: missing" in verdict


def test_wrong_index_line_is_named(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["none"], tmp_path)
    shard = _first_shard(path)
    offsets = _index(path, shard)
    offsets[3] = (offsets[3][0] + 1, offsets[3][1])
    with open(os.path.join(path, shard["index_file"]), "w") as handle:
        handle.write("".join(f"{o} {s}\n" for o, s in offsets))
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and f"{shard['index_file']}: record 3" in verdict and "index line 4" in verdict


def test_errors_file_must_match_counts(png_datasets, tmp_path):
    path = _copy(png_datasets["none"], tmp_path)
    with open(os.path.join(path, "errors.jsonl"), "w") as handle:
        handle.write("")
    report = verify_dataset(path)
    assert [p.file for p in report.problems] == ["errors.jsonl"]


@pytest.mark.parametrize("where", ["middle", "end"])
def test_gzip_shard_damage_is_found(png_datasets, tmp_path, capsys, where):
    path = _copy(png_datasets["gzip"], tmp_path)
    shard = _first_shard(path)
    file = os.path.join(path, shard["file"])
    with open(file, "r+b") as handle:
        handle.seek(os.path.getsize(file) // 2 if where == "middle" else os.path.getsize(file) - 6)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and f"CORRUPT {path}: {shard['file']}" in verdict


def test_truncated_gzip_shard_is_found(png_datasets, tmp_path, capsys):
    path = _copy(png_datasets["gzip"], tmp_path)
    shard = _first_shard(path)
    file = os.path.join(path, shard["file"])
    os.truncate(file, os.path.getsize(file) // 2)
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and f"{shard['file']}: record" in verdict and "gzip stream is corrupt" in verdict


# ---------------------------------------------------------------- the pure functions


def test_read_records_reports_offsets_and_both_crcs():
    data = bytearray(_stream(b"a" * 10, b"", b"b" * 100))
    found = list(read_records(io.BytesIO(bytes(data))))
    assert [(r.index, r.offset, r.size, r.data_crc_ok) for r in found] == \
        [(0, 0, 26, True), (1, 26, 16, True), (2, 42, 116, True)]
    data[42 + 12 + 50] ^= 1
    assert [r.data_crc_ok for r in read_records(io.BytesIO(bytes(data)))] == [True, True, False]
    data[26 + 8] ^= 1                       # the length CRC of record 1
    with pytest.raises(FramingError) as info:
        list(read_records(io.BytesIO(bytes(data))))
    assert (info.value.record, info.value.offset) == (1, 26)


def test_read_records_never_allocates_a_corrupt_length():
    length = struct.pack("<Q", 1 << 60)
    header = length + struct.pack("<I", masked_crc(length))
    with pytest.raises(FramingError, match="truncated"):
        list(read_records(io.BytesIO(header + b"x" * 10)))


def test_check_example_validates_kinds_counts_and_pixel_bytes():
    schema = {"image_raw": {"dtype": "bytes", "shape": [], "encoding": "raw"},
              "label": {"dtype": "int64", "shape": []}, "height": {"dtype": "int64", "shape": []},
              "width": {"dtype": "int64", "shape": []}, "channels": {"dtype": "int64", "shape": []},
              "depth": {"dtype": "int64", "shape": []}, "dtype": {"dtype": "bytes", "shape": []},
              "encoding": {"dtype": "bytes", "shape": []}, "format": {"dtype": "bytes", "shape": []},
              "dicom/pixel_spacing": {"dtype": "float", "shape": [2]}}
    good = {"image_raw": b"\0" * 2 * 3 * 4 * 2, "label": 1, "height": 3, "width": 4, "channels": 1,
            "depth": 2, "dtype": "int16", "encoding": "raw", "format": "image"}
    problems, summary = check_example(decode_example(encode_example(good)), schema)
    assert problems == [] and summary["shape"] == [2, 3, 4, 1] and summary["label"] == 1
    short = dict(good, image_raw=b"\0" * 47)
    assert "image_raw holds 47 bytes" in check_example(decode_example(encode_example(short)), schema)[0][0]
    dicom = dict(good, format="dicom")
    assert check_example(decode_example(encode_example(dicom)), schema)[0] == \
        ["feature 'dicom/pixel_spacing' is missing"]
    extra = dict(good, surprise=1)
    assert check_example(decode_example(encode_example(extra)), schema)[0] == \
        ["feature 'surprise' is not in the schema"]
    # A feature the schema marks optional (Enhanced files' per-frame geometry) may be absent
    # from a DICOM record; when present it is still checked against its kind.
    optional = dict(schema, **{"dicom/image_position_patient": {"dtype": "float", "shape": [-1],
                                                                "optional": True}})
    spaced = dict(dicom, **{"dicom/pixel_spacing": np.asarray([0.5, 0.5], np.float32)})
    assert check_example(decode_example(encode_example(spaced)), optional)[0] == []
    wrong = dict(spaced, **{"dicom/image_position_patient": b"x"})
    assert check_example(decode_example(encode_example(wrong)), optional)[0] == \
        ["feature 'dicom/image_position_patient' is bytes, the schema says float"]


def test_variable_length_features_accept_any_count():
    schema = {"dicom/pixel_spacing": {"dtype": "float", "shape": [-1]},
              "pairs": {"dtype": "int64", "shape": [-1, 2]}}
    for spacing, pairs, ok in (([], [], True), ([0.5, 0.5], [1, 2, 3, 4], True), ([1.0], [1, 2, 3], False)):
        features = decode_example(encode_example({"dicom/pixel_spacing": np.asarray(spacing, np.float32),
                                                 "pairs": np.asarray(pairs, np.int64)}))
        messages = [m for m in check_example(features, schema)[0] if "pairs" in m or "spacing" in m]
        assert (messages == []) == ok, messages


# ---------------------------------------------------------------- masks (--class_map)


@pytest.fixture(scope="module")
def mask_dataset(tmp_path_factory):
    """Two CT volumes with SEG masks (--unit series --class_map): two records of one shard."""
    root = tmp_path_factory.mktemp("verify_masks")
    for number in range(2):
        mask_datasets.annotated_series(root / "in", number, depth=3, shape=(16, 16))
    out = str(root / "out")
    summary = run_convert(root / "in", out, class_map=mask_datasets.class_map(root), unit="series",
                          mask_layout="binary", target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)
    assert summary["records"] == 2, summary
    return out


def test_an_intact_mask_dataset_passes(mask_dataset, capsys):
    assert verify_dataset(mask_dataset).problems == []
    code, verdict = _verify_cli(mask_dataset, capsys)
    assert code == 0, verdict


def _edit_mask(path: str, record: int, edit) -> None:
    import tensorflow as tf
    example = tf.train.Example.FromString(_payload(path, 0, record))
    edit(example.features.feature)
    _replace_record(path, 0, record, example.SerializeToString())


def test_a_cut_short_mask_is_named_with_its_shard_and_record(mask_dataset, tmp_path, capsys):
    path = _copy(mask_dataset, tmp_path)

    def cut(feature):
        raw = feature["mask_raw"].bytes_list.value[0]
        feature["mask_raw"].bytes_list.value[0] = raw[:-5]
    _edit_mask(path, 1, cut)
    shard = _first_shard(path)["file"]
    messages = [str(p) for p in verify_dataset(path).problems]
    assert len(messages) == 1, messages
    assert messages[0].startswith(f"{shard}: record 1 at byte ") and \
        "mask_raw holds 1531 bytes; shape [3, 16, 16, 2] of uint8 needs 1536" in messages[0], messages
    code, verdict = _verify_cli(path, capsys)
    assert code == 1 and "mask_raw holds" in verdict


def test_a_float_mask_dtype_and_bad_mask_classes_are_named(mask_dataset, tmp_path):
    path = _copy(mask_dataset, tmp_path)

    def floating(feature):
        feature["mask_dtype"].bytes_list.value[0] = b"float32"
    _edit_mask(path, 0, floating)
    manifest = _manifest(path)
    manifest["mask_classes"] = ["Liver", 2]
    with open(os.path.join(path, "dataset.json"), "w") as handle:
        json.dump(manifest, handle)
    messages = " | ".join(str(p) for p in verify_dataset(path).problems)
    assert "record 0 at byte 0: mask_dtype 'float32' is not an integer dtype" in messages, messages
    assert "'mask_classes' is ['Liver', 2], not a list of class names" in messages, messages


def test_a_mask_against_the_mask_format_rule_is_named(mask_dataset, tmp_path):
    """dataset/masks.py's rule, asked by verify: binary masks of 2 classes are uint8, 2 channels."""
    path = _copy(mask_dataset, tmp_path)

    def wider(feature):      # the right byte count for uint16: only the rule tells it is wrong
        raw = feature["mask_raw"].bytes_list.value[0]
        feature["mask_raw"].bytes_list.value[0] = raw + raw
        feature["mask_dtype"].bytes_list.value[0] = b"uint16"

    def one_channel(feature):
        raw = feature["mask_raw"].bytes_list.value[0]
        feature["mask_raw"].bytes_list.value[0] = raw[:len(raw) // 2]
        feature["mask_channels"].int64_list.value[0] = 1
    _edit_mask(path, 0, wider)
    _edit_mask(path, 1, one_channel)
    messages = [str(p) for p in verify_dataset(path).problems]
    assert len(messages) == 2, messages
    assert "record 0 at byte 0: mask_dtype 'uint16': masks of 2 classes are stored in uint8" in messages[0], messages
    assert "record 1 at byte" in messages[1] and \
        "mask_channels 1: masks of 2 classes in its layout have 2" in messages[1], messages
