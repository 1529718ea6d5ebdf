"""What TFDS users reach for: ``DatasetInfo.int2str``/``str2int`` (ClassLabel) and
``reader.as_numpy`` (tfds.as_numpy), on manifests and datasets written by hand."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support.reader_datasets import _write_png_dataset

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _info(labels) -> "reader.DatasetInfo":
    return reader.DatasetInfo({"splits": {}, "labels": labels}, "/data/cxr")


def test_int2str_and_str2int_map_labels_and_class_names_both_ways():
    meta = _info({"kind": "class", "class_names": ["cat", "dog", "fox"]})
    for i, name in enumerate(meta.class_names):
        assert meta.int2str(i) == meta.int2str(np.int64(i)) == meta.int2str(np.uint8(i)) == name
        assert meta.str2int(name) == i and type(meta.str2int(name)) is int
    labels = np.array([2, 0, 1], np.int64)                # as a batch of labels comes out of as_numpy
    assert [meta.str2int(meta.int2str(x)) for x in labels] == labels.tolist()


@pytest.mark.parametrize("call,error,message", [
    (lambda m: m.int2str(3), ValueError, r"label 3 is not a class index of /data/cxr: 0\.\.2 for 3 classes "
                                         r"\('cat', 'dog', 'fox'\)"),
    (lambda m: m.int2str(-1), ValueError, r"label -1 .*\(-1 marks an unlabeled record\)"),
    (lambda m: m.int2str(1.0), TypeError, r"int2str takes an integer label, not float 1\.0"),
    (lambda m: m.str2int("cow"), ValueError, r"'cow' is not a class of /data/cxr: 3 classes \('cat', 'dog', "
                                             r"'fox'\)"),
])
def test_unknown_labels_and_names_are_errors_naming_the_classes(call, error, message):
    with pytest.raises(error, match=message):
        call(_info({"kind": "class", "class_names": ["cat", "dog", "fox"]}))


def test_many_classes_are_listed_truncated():
    meta = _info({"kind": "class", "class_names": [f"c{i}" for i in range(500)]})
    with pytest.raises(ValueError) as error:
        meta.str2int("x")
    assert "500 classes ('c0', 'c1'," in str(error.value) and "'c19', ...)" in str(error.value)
    assert "'c20'" not in str(error.value)


@pytest.mark.parametrize("labels,what", [({"kind": "none", "class_names": []}, "has no labels"),
                                         ({"kind": "float"}, "has float labels"), (None, "has no labels")])
def test_labels_that_are_not_class_names_are_an_error_saying_so(labels, what):
    for call in (lambda m: m.int2str(0), lambda m: m.str2int("cat")):
        with pytest.raises(ValueError, match=f"/data/cxr {what}, not class names"):
            call(_info(labels))


def test_as_numpy_turns_tensors_into_arrays_keeping_bytes_and_ragged_rows():
    element = {"image": tf.ones([2, 3], tf.uint8), "id": tf.constant([b"a", b"b"]), "name": tf.constant(b"x"),
               "spacing": tf.ragged.constant([[0.5, 0.7], []]), "meta": (tf.constant(3), "text")}
    ds = tf.data.Dataset.from_tensors(element).repeat(2)
    out = list(reader.as_numpy(ds))
    assert len(out) == len(reader.as_numpy(ds)) == 2
    first = out[0]
    assert isinstance(first["image"], np.ndarray) and first["image"].dtype == np.uint8
    assert first["id"].tolist() == [b"a", b"b"] and first["name"] == b"x"
    assert first["spacing"].dtype == object and [row.tolist() for row in first["spacing"]] == [
        [0.5, pytest.approx(0.7)], []]
    assert first["meta"][0] == 3 and isinstance(first["meta"][0], np.integer) and first["meta"][1] == b"text"
    assert list(reader.as_numpy(ds))[1]["id"].tolist() == [b"a", b"b"]        # iterates afresh
    single = reader.as_numpy((tf.constant([1, 2]), {"y": tf.constant(1.5), "z": "as it is"}))
    assert single[0].tolist() == [1, 2] and single[1]["y"] == np.float32(1.5)
    assert single[1]["z"] == "as it is"                    # not a tensor: passed through


def test_as_numpy_of_reader_load_yields_numpy_batches(tmp_path):
    images = [np.full((4, 4, 3), i, np.uint8) for i in range(5)]
    _write_png_dataset(tmp_path / "ds", images)
    batches = list(reader.as_numpy(reader.load(str(tmp_path / "ds"), batch_size=2, shuffle=False)))
    assert [type(x) for batch in batches for x in batch] == [np.ndarray] * 6
    assert np.concatenate([labels for _, labels in batches]).tolist() == [0, 1, 2, 3, 4]
    assert np.array_equal(np.concatenate([images for images, _ in batches]), np.stack(images))


def test_as_numpy_is_exported_without_importing_tensorflow_before_use():
    code = textwrap.dedent("""
        import sys
        from dcm2tfrecord import reader
        assert "as_numpy" in reader.__all__
        assert "tensorflow" not in sys.modules
        reader.as_numpy
        assert "tensorflow" in sys.modules
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_int2str_names_the_class_of_every_record_of_a_real_conversion(tmp_path):
    """--labels_from_dirs on folders whose names sort otherwise than they were written:
    int2str of each record's label is the folder it came from (--keep_source_path says which)."""
    from tests.support import run_convert, write_png_archive
    folders = {"zebra": 2, "Ant": 1, "moth": 3}
    for seed, (name, count) in enumerate(folders.items()):
        write_png_archive(tmp_path / "in" / name, count, 8, 8, seed=seed)
    run_convert(tmp_path / "in", tmp_path / "out", labels_from_dirs=True, keep_source_path=True,
                target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=4)
    info = reader.info(str(tmp_path / "out"))
    assert info.class_names == sorted(folders)
    seen = []
    for batch in reader.as_numpy(reader.load(str(tmp_path / "out"), batch_size=2, shuffle=False,
                                             output="dict")):
        for label, path in zip(batch["label"], batch["source_path"]):
            folder = os.path.basename(os.path.dirname(path.decode()))
            assert info.int2str(label) == folder and info.str2int(folder) == label
            seen.append(folder)
    assert sorted(seen) == sorted(n for n, c in folders.items() for _ in range(c))
