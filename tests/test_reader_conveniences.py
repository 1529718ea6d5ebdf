"""What TFDS users reach for: ``DatasetInfo.int2str``/``str2int`` (ClassLabel), on manifests
written by hand."""
from __future__ import annotations

import numpy as np
import pytest

import reader


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
