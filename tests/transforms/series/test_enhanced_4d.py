"""A 4-D Enhanced MR (2 phases x 6 slices, its Temporal Position Index disagreeing with its
Dimension Index Values, as the reported file's): one record per phase with --unit series, or one
record of both with --series_4d stack."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support import run_convert
from tests.support.enhanced_objects import enhanced_mr_4d


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("enhanced_4d") / "in"
    folder.mkdir()
    enhanced_mr_4d(phases=2, slices=6, size=8, temporal_indices=lambda t, s: 1 + (t * 6 + s) % 4).save_as(
        str(folder / "mr4d.dcm"))
    return str(folder)


def _records(out: str) -> list[dict]:
    records = reader.RandomAccess(out, "train")
    return sorted((records[i] for i in range(len(records))), key=lambda r: int(r["dicom/volume_index"]))


def test_split_and_stack_hold_the_same_volumes(archive, tmp_path):
    run_convert(archive, str(tmp_path / "split"), unit="series")
    split = _records(str(tmp_path / "split"))
    assert [int(r["dicom/volume_index"]) for r in split] == [0, 1]
    assert {int(r["dicom/volumes"]) for r in split} == {2}
    for t, record in enumerate(split):
        assert set(np.unique(record["image"])) == {t * 1000 + s for s in range(6)}
    run_convert(archive, str(tmp_path / "stack"), unit="series", series_4d="stack")
    [stacked] = _records(str(tmp_path / "stack"))
    assert (int(stacked["dicom/volume_index"]), int(stacked["dicom/volumes"])) == (-1, 2)
    volumes = reader.geometry.volumes(stacked["image"], stacked)
    assert volumes.shape == (2, 6, 8, 8, 1)
    for t in range(2):
        np.testing.assert_array_equal(volumes[t], split[t]["image"])
    # the stacked record's affine is a volume's: equal to each split record's
    np.testing.assert_allclose(reader.geometry.affine(stacked), reader.geometry.affine(split[0]), atol=1e-4)
    np.testing.assert_allclose(reader.geometry.affine(split[1]), reader.geometry.affine(split[0]), atol=1e-4)
    assert len(stacked["dicom/image_position_patient"]) == 3 * 12


def test_an_enhanced_stack_with_a_gap_fails_naming_it(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    ds = enhanced_mr_4d(phases=1, slices=6, size=8)
    item = ds.PerFrameFunctionalGroupsSequence[5].PlanePositionSequence[0]
    first = ds.PerFrameFunctionalGroupsSequence[0].PlanePositionSequence[0].ImagePositionPatient
    step = np.subtract([float(v) for v in ds.PerFrameFunctionalGroupsSequence[1].PlanePositionSequence[0]
                        .ImagePositionPatient], [float(v) for v in first])
    item.ImagePositionPatient = [float(v) for v in np.asarray([float(v) for v in first]) + 9 * step]
    ds.save_as(str(folder / "gap.dcm"))
    summary = run_convert(str(folder), str(tmp_path / "out"), allow_empty=True)
    assert summary["written"] == 0 and list(summary["failed"]) == ["frames_uneven_spacing"], summary
    errors = (tmp_path / "out" / "errors.jsonl").read_text()
    assert "frames not evenly spaced" in errors and "frames 5 (" in errors
