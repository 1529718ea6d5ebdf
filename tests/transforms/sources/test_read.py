"""Reading a source at write time: what it became since it was probed (issue 43, item 5)."""
from __future__ import annotations

import os

import pytest

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.sources.read import fingerprint, fingerprint_length, open_source, read_unchanged
from dcm2tfrecord.transforms.record_model import SourceFile


def _probed(path) -> SourceFile:
    data = open(path, "rb").read()
    stat = os.stat(path)
    return SourceFile(str(path), os.path.basename(path), len(data), stat.st_mtime,
                      fingerprint(data, fingerprint_length(len(data))))


def test_an_unchanged_file_reads_whole(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(b"\x89PNG" + bytes(range(256)) * 4)
    assert read_unchanged(_probed(path), open_source).getvalue() == path.read_bytes()


@pytest.mark.parametrize("opener", [open_source, lambda uri: open(uri, "rb")], ids=["open_source", "builtin"])
def test_an_input_replaced_by_a_directory_is_changed_during_run_not_unreadable(tmp_path, opener):
    path = tmp_path / "a.png"
    path.write_bytes(b"\x89PNG" + bytes(range(256)) * 4)
    source = _probed(path)
    path.unlink()
    path.mkdir()                       # swapped in between probe and write
    (path / "inside.png").write_bytes(b"x")
    with pytest.raises(ConversionError) as caught:
        read_unchanged(source, opener)
    assert caught.value.reason == reasons.CHANGED_DURING_RUN, (caught.value.reason, str(caught.value))
    assert "directory" in str(caught.value) and "convert again" in str(caught.value)


def test_an_input_that_vanished_is_still_unreadable(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(b"\x89PNG" + bytes(range(256)) * 4)
    source = _probed(path)
    path.unlink()
    with pytest.raises(ConversionError) as caught:
        read_unchanged(source, open_source)
    assert caught.value.reason == reasons.UNREADABLE
