"""The division of a split series' annotations between its records (transforms/masks/slices.py
``divide``, --unit series with --series_gaps split), as a property over real probed files: a CT
series of three evenly spaced runs and highdicom SEGs, each covering a subset of the runs.

Whatever SEGs reference the series and whatever ``--missing_mask`` says: every slice file is
either a member of exactly one record or named in exactly one outcome; every SEG is accounted
for by exactly one record (``ProbedRecord.sources``), one it lies on; a record is given exactly
the SEGs that lie on it, and a record no SEG lies on follows ``--missing_mask``."""
from __future__ import annotations

import itertools
import os

import numpy as np
import pydicom
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.masks import classes, slices
from dcm2tfrecord.transforms.masks.settings import MaskSettings, MissingMask
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.series import volumes
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.record_model import ProbedRecord, SourceFile
from tests.support import mask_datasets as md

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

CLASS_MAP = classes.parse_mapping(md.CLASS_MAP_YAML, "classes.yaml")
RUNS = 3
GONE = (2, 5)          # slices (record order) left out of 8: runs of 2, 2 and 2


def _source(path) -> SourceFile:
    stat = os.stat(str(path))
    return SourceFile(str(path), os.path.basename(str(path)), stat.st_size, stat.st_mtime)


def _probed(paths, masks: MaskSettings) -> list[ProbedRecord]:
    return [probe_file(_source(p), settings=DecodeSettings(masks=masks)) for p in paths]


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """(slice records, {covered runs: SEG record}) for every non-empty subset of the runs."""
    root = tmp_path_factory.mktemp("divide")
    whole = md.series(root / "ct", n=8, seed=9, shape=(8, 8))
    for k in GONE:
        os.remove(whole.written.paths[whole.order[k]])
    kept = [d for k, d in enumerate(whole.datasets) if k not in GONE]
    runs = [kept[2 * r:2 * r + 2] for r in range(RUNS)]
    masks = MaskSettings(class_map=CLASS_MAP)
    notes = {}
    for size in range(1, RUNS + 1):
        for cover in itertools.combinations(range(RUNS), size):
            datasets = [d for r in cover for d in runs[r]]
            path = root / f"seg_{''.join(map(str, cover))}.dcm"
            drawn = np.zeros((1, len(datasets), 8, 8), bool)
            drawn[:, :, 2:5, 3:6] = True            # a frame on every slice it covers
            md.save_seg(datasets, drawn, path, f"divide_{cover}", md.SEGMENTS)
            [notes[cover]] = _probed([path], masks)
    run_of = {str(d.SOPInstanceUID): r for r, run in enumerate(runs) for d in run}
    return _probed([d.filename for run in runs for d in run], masks), notes, run_of


def _read(note: ProbedRecord):
    return pydicom.dcmread(note.source.uri, stop_before_pixels=True, force=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.sets(st.sampled_from([c for n in range(1, RUNS + 1) for c in itertools.combinations(range(RUNS), n)]),
                      max_size=3),
       missing=st.sampled_from(list(MissingMask)))
def test_every_file_and_annotation_once(archive, chosen, missing):
    parts, notes, run_of = archive
    masks = MaskSettings(class_map=CLASS_MAP, missing=missing)
    built = volumes.volume_records("s", parts, "salt", "split")
    assert len(built) == RUNS
    picked = {notes[c].source.uri: c for c in chosen}
    out = list(slices.divide(built, parts, [notes[c] for c in chosen], _read, masks))
    records = [r for r in out if isinstance(r, ProbedRecord)]
    outcomes = [r for r in out if isinstance(r, Outcome)]
    members = [m.uri for r in records for m in r.members]
    named = [o.uri for o in outcomes]
    assert sorted(members + named) == sorted(p.source.uri for p in parts)          # each slice once
    counted = [s.uri for r in records for s in r.sources if s.uri in picked]
    assert sorted(counted) == sorted(picked)                                        # each SEG once
    for record in records:
        run = run_of[record.ids.sop_uid]
        assert {s.uri for s, _ in record.annotations} == {u for u, c in picked.items() if run in c}
        assert {s.uri for s in record.sources if s.uri in picked} <= {s.uri for s, _ in record.annotations}
    covered = {r for c in chosen for r in c}
    for outcome in outcomes:
        assert run_of[pydicom.dcmread(outcome.uri, stop_before_pixels=True).SOPInstanceUID] not in covered
        assert outcome.reason == reasons.MISSING_MASK
        assert outcome.status == (reasons.SKIPPED if missing == MissingMask.SKIP else reasons.FAILED)
    expected_records = RUNS if missing == MissingMask.EMPTY else len(covered)
    assert len(records) == expected_records
