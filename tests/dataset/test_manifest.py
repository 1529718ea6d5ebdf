"""dataset.json typed: ``Manifest``, ``SplitEntry``, ``ShardEntry`` (dataset/manifest.py).

What a conversion writes parses into them and encodes back to the very same
bytes; keys this code does not know survive a round trip; values of the wrong
kind are refused by name; and a dataset.json of a newer format_version than
this code reads is refused, in one line naming both versions, by every reader:
``reader.info``/``reader.load``, ``RandomAccess``, ``verify`` and ``inspect``.
"""
from __future__ import annotations

import json
import os
import shutil

import pytest

from dcm2tfrecord.dataset.features import FORMAT_VERSION, READABLE_FORMAT_VERSION
from dcm2tfrecord.dataset.manifest import (Manifest, ManifestError, NewerFormatError, ShardEntry, SplitEntry,
                                           encode_manifest, parse_manifest)
from tests.support import run_convert, write_png_archive


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("manifest_types")
    write_png_archive(root / "archive", 6, 8, 8)
    out = str(root / "dataset")
    run_convert(root / "archive", out)
    return out


def _bytes(dataset_dir: str) -> bytes:
    with open(os.path.join(dataset_dir, "dataset.json"), "rb") as handle:
        return handle.read()


def _with_manifest(dataset_dir: str, tmp_path, edit) -> str:
    copy = str(tmp_path / "copy")
    shutil.copytree(dataset_dir, copy)
    manifest = json.loads(_bytes(copy))
    edit(manifest)
    with open(os.path.join(copy, "dataset.json"), "w") as handle:
        json.dump(manifest, handle)
    return copy


def test_a_written_manifest_parses_and_encodes_back_to_its_bytes(dataset):
    data = _bytes(dataset)
    manifest = parse_manifest(data)
    assert isinstance(manifest, Manifest) and manifest.format_version == FORMAT_VERSION
    train = manifest.splits["train"]
    assert isinstance(train, SplitEntry) and train.num_records == 6 == sum(train.shard_records)
    assert all(isinstance(s, ShardEntry) and s.index == s.file + ".idx" for s in train.shards)
    assert manifest.adapter.name == "none" and manifest.compression == "none"
    assert encode_manifest(manifest).encode("utf-8") == data
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_keys_this_code_does_not_know_survive_a_round_trip(dataset):
    data = json.loads(_bytes(dataset))
    data["written_by_a_newer_tool"] = {"x": [1, 2]}
    data["splits"]["train"]["checksum_kind"] = "blake3"
    data["splits"]["train"]["shards"][0]["crc_of_idx"] = 7
    manifest = Manifest.from_json(data)
    assert manifest.extra == {"written_by_a_newer_tool": {"x": [1, 2]}}
    assert manifest.splits["train"].extra == {"checksum_kind": "blake3"}
    assert manifest.splits["train"].shards[0].extra == {"crc_of_idx": 7}
    assert manifest.to_json() == data
    assert encode_manifest(manifest) == json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_a_hand_written_manifest_keeps_what_it_leaves_out():
    data = {"features": {"image_raw": {"dtype": "bytes", "shape": [], "encoding": "raw"}},
            "splits": {"train": {"num_records": 2, "dtypes": ["uint8"], "shapes": [[1, 2, 2, 1]],
                                 "fixed_shape": True, "max_depth": 1,
                                 "shards": [{"file": "train-00000-of-00001.tfrecord", "num_records": 2}]}}}
    manifest = Manifest.from_json(data)
    shard = manifest.splits["train"].shards[0]
    assert (shard.num_bytes, shard.sha256, shard.index_file) == (None, None, None)
    assert shard.index == "train-00000-of-00001.tfrecord.idx"
    assert manifest.format_version is None and manifest.options is None and manifest.class_names == []
    assert manifest.to_json() == data


def test_mask_classes_and_layout_are_typed_and_written_back_to_the_same_keys(dataset):
    data = json.loads(_bytes(dataset))
    assert "mask_classes" not in data
    plain = Manifest.from_json(data)
    assert plain.mask_classes is None and plain.mask_layout is None and "mask_classes" not in plain.to_json()
    assert data["options"]["mask_layout"] == "label_map"          # recorded as every option is
    data["mask_classes"] = ["Liver", "Tumour"]
    data["options"]["mask_layout"] = "binary"
    data["features"]["mask_raw"] = {"dtype": "bytes", "shape": [], "encoding": "raw"}
    manifest = Manifest.from_json(data)
    assert manifest.mask_classes == ("Liver", "Tumour") and manifest.mask_layout == "binary"
    assert manifest.extra == {}                                   # owned by a field, not kept in extra
    assert manifest.to_json() == data
    assert encode_manifest(manifest) == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert Manifest.from_json(json.loads(encode_manifest(manifest))) == manifest
    # not a list of names: not typed, kept as written for verify to name (dataset/verify_manifest.py)
    data["mask_classes"] = ["Liver", 2]
    odd = Manifest.from_json(data)
    assert odd.mask_classes is None and odd.extra == {"mask_classes": ["Liver", 2]} and odd.to_json() == data


@pytest.mark.parametrize("edit,named", [
    (lambda m: m["splits"]["train"].update(num_records="6"), "split 'train': num_records is '6'"),
    (lambda m: m["splits"]["train"]["shards"][0].pop("file"), "split 'train': shard 0 has no 'file'"),
    (lambda m: m["splits"]["train"].update(shapes=[["a"]]), "split 'train': a shape is 'a'"),
    (lambda m: m.update(options=[]), "'options' is not a JSON object"),
    (lambda m: m.update(splits=[]), "no 'splits' object"),
    (lambda m: m.update(format_version="1"), "format_version '1', not a whole number"),
])
def test_a_value_of_the_wrong_kind_is_refused_by_name(dataset, edit, named):
    data = json.loads(_bytes(dataset))
    edit(data)
    with pytest.raises(ManifestError, match="^/x/dataset.json ") as caught:
        Manifest.from_json(data, "/x/dataset.json")
    assert named in str(caught.value)


# ---------------------------------------------------------------- format_version


NEWER = FORMAT_VERSION + 2
REFUSAL = (f"has format_version {NEWER}; this dcm2tfrecord reads up to {READABLE_FORMAT_VERSION}: "
           "upgrade dcm2tfrecord")


@pytest.fixture
def newer(dataset, tmp_path) -> str:
    return _with_manifest(dataset, tmp_path, lambda m: m.update(format_version=NEWER))


def test_the_reader_refuses_a_newer_format_version(newer):
    from dcm2tfrecord import reader
    path = os.path.join(newer, "dataset.json")
    for call in (lambda: reader.info(newer), lambda: reader.load(newer, batch_size=2)):
        with pytest.raises(NewerFormatError) as caught:
            call()
        message = str(caught.value)
        assert message == f"{path} {REFUSAL} (or dcm2tfrecord-reader)" and "\n" not in message
        assert isinstance(caught.value, ManifestError) and caught.value.found == NEWER


def test_random_access_refuses_a_newer_format_version(newer):
    from dcm2tfrecord.reader.random_access import RandomAccess
    with pytest.raises(NewerFormatError, match=REFUSAL):
        RandomAccess(newer)


def test_verify_refuses_a_newer_format_version_instead_of_calling_it_corrupt(newer, capsys):
    from dcm2tfrecord.dataset.verify import verify_dataset
    from dcm2tfrecord.pipeline import cli
    with pytest.raises(NewerFormatError, match=REFUSAL):
        verify_dataset(newer)
    assert cli.main(["verify", newer]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and REFUSAL in captured.err


def test_inspect_refuses_a_newer_format_version(newer, capsys):
    from dcm2tfrecord.pipeline import cli
    assert cli.main(["inspect", newer]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and REFUSAL in captured.err
    assert "LATEST" not in captured.err


def test_this_version_and_an_absent_one_are_read(dataset, tmp_path):
    from dcm2tfrecord import reader
    from dcm2tfrecord.dataset.verify import verify_dataset
    from dcm2tfrecord.reader.random_access import RandomAccess
    assert reader.info(dataset).manifest.format_version == FORMAT_VERSION
    absent = _with_manifest(dataset, tmp_path, lambda m: m.pop("format_version"))
    assert reader.info(absent).num_records("train") == 6 and len(RandomAccess(absent)) == 6
    assert verify_dataset(absent).ok


# ---------------------------------------------------------------- feature names from one place


def test_core_feature_names_are_spelled_only_in_dataset_features():
    """Every product module names the record's features through dataset/features.py's constants."""
    import ast
    import glob
    from dcm2tfrecord.dataset import features
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # ("width" is also a VOI window's, "label" a CSV column's, "dtype" a feature description's key)
    core = {features.IMAGE_RAW, features.HEIGHT, features.CHANNELS, features.DEPTH, features.SOURCE_PATH}
    assert set(features.CORE_FEATURES) >= core - {features.SOURCE_PATH}
    stray = []
    for package in ("dataset", "reader", "pipeline", "transforms"):
        for path in glob.glob(os.path.join(root, package, "**", "*.py"), recursive=True):
            rel = os.path.relpath(path, root)
            if rel == os.path.join("dataset", "features.py"):
                continue
            with open(path) as handle:
                tree = ast.parse(handle.read(), path)
            stray += [f"{rel}:{node.lineno} {node.value!r}" for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and node.value in core]
    # "channels" is also the --channels option's name
    stray = [s for s in stray if not s.startswith(os.path.join("pipeline", "options", "table.py"))]
    assert not stray, f"feature names spelled outside dataset/features.py: {stray}"


def test_an_incremental_run_refuses_to_build_on_a_newer_version(tmp_path):
    from dcm2tfrecord.pipeline.options.usage import UsageError
    write_png_archive(tmp_path / "archive", 3, 8, 8)
    root = tmp_path / "root"
    run_convert(tmp_path / "archive", root, incremental=True)
    path = root / "versions" / "0001" / "dataset.json"
    manifest = json.loads(path.read_text())
    manifest["format_version"] = NEWER
    path.write_text(json.dumps(manifest))
    with pytest.raises(UsageError, match=f"^--incremental cannot build on version 0001: {path} {REFUSAL}"):
        run_convert(tmp_path / "archive", root, incremental=True)
