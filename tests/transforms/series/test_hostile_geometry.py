"""Positions no record can hold (issue 43, item 4): DICOM slices at 1e300 mm and beyond are refused
with a reason under --unit file and --unit series, never written with an infinite affine, and
copies of one slice at one such position are a repeated position."""
from __future__ import annotations

import json
import os

import numpy as np
import pydicom
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import reasons
from tests.support import run_convert
from tests.support import series_builders as sb


def _archive(folder, positions: list[list[str]]) -> list[str]:
    """A regular CT series (distinct Instance Numbers), each slice's Image Position (Patient)
    rewritten to ``positions[i]`` as the strings a DS holds."""
    series = sb.regular(str(folder), len(positions), 2.0)
    for path, position in zip(sorted(series.paths), positions):
        ds = pydicom.dcmread(path)
        ds.ImagePositionPatient = position
        ds.save_as(path)
    return sorted(series.paths)


def _outcomes(out) -> dict[str, str]:
    path = os.path.join(str(out), "errors.jsonl")
    lines = [json.loads(line) for line in open(path)] if os.path.exists(path) else []
    return {os.path.basename(e["uri"]): e["reason"] for e in lines}


def _convert(archive, out, unit: str, capfd) -> dict[str, str]:
    try:
        run_convert(archive, out, unit=unit, allow_empty=True)
    finally:
        printed = capfd.readouterr()
    assert "Warning" not in printed.out + printed.err, printed.err[-2000:]
    if os.path.exists(os.path.join(str(out), "dataset.json")):
        for split in reader.info(str(out)).split_names:
            records = reader.RandomAccess(str(out), split)
            for i in range(len(records)):
                assert np.isfinite(records[i]["dicom/affine"]).all()
    return _outcomes(out)


@pytest.mark.parametrize("unit", ["file", "series"])
@pytest.mark.parametrize("z", ["1e300", "1e308", "-1.7e308"])
def test_slices_at_positions_beyond_float32_are_invalid_value(tmp_path, capfd, unit, z):
    paths = _archive(tmp_path / "in", [["0", "0", z], ["0", "0", f"{z[:-3]}{int(z[-3:]) - 1}"],
                                       ["0", "0", f"{z[:-3]}{int(z[-3:]) - 2}"]])
    got = _convert(tmp_path / "in", tmp_path / "out", unit, capfd)
    assert got == {os.path.basename(p): reasons.INVALID_VALUE for p in paths}, got


@pytest.mark.parametrize("z", ["1e300", "1e308"])
def test_three_slices_at_one_such_position(tmp_path, capfd, z):
    paths = _archive(tmp_path / "in", [["0", "0", z]] * 3)
    names = [os.path.basename(p) for p in paths]
    assert _convert(tmp_path / "in", tmp_path / "series", "series", capfd) == \
        {n: reasons.SERIES_DUPLICATE_POSITION for n in names}
    assert _convert(tmp_path / "in", tmp_path / "file", "file", capfd) == {n: reasons.INVALID_VALUE for n in names}


def test_a_series_at_ordinary_positions_is_still_written(tmp_path, capfd):
    _archive(tmp_path / "in", [["0", "0", "1e30"], ["0", "0", "2e30"], ["0", "0", "3e30"]])
    assert _convert(tmp_path / "in", tmp_path / "out", "series", capfd) == {}
    assert reader.info(str(tmp_path / "out"))["counts"]["records"] == 1
