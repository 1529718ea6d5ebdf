"""Issue 43 item 3, end to end: annotations follow their series through ``--series_gaps split``.

A CT series with a gap (one slice of seven left out) is two records with ``--unit series
--series_gaps split``. Its SEG or RTSTRUCT is divided between the records it lies on (each gets
the frames or contours on its own slices: the masks equal to the slices' own); a record it does
not cover follows ``--missing_mask``; each input is accounted for exactly once (matched =
written + skipped + failed) and the run commits. Before, the SEG was counted written and failed
(the run ended "-1 unaccounted"), the uncovered part failed as ``mask_unreferenced`` and an
annotation spanning both parts was refused for each.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support import run_convert
from tests.support import mask_datasets as md
from tests.support.processes import errors_of

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, unit="series",
               series_gaps="split")
GAP = 3                 # the slice (in record order) left out: runs of 3 and 3 slices


def _gapped(folder, n: int = 7, seed: int = 5, **kwargs) -> md.Series:
    """A regular series of ``n`` slices with the slice GAP (record order) deleted."""
    whole = md.series(folder, n=n, seed=seed, **kwargs)
    os.remove(whole.written.paths[whole.order[GAP]])
    order = [i for k, i in enumerate(whole.order) if k != GAP]
    return md.Series(whole.written, order, [d for k, d in enumerate(whole.datasets) if k != GAP])


def _records(out) -> list[dict]:
    """The written records, the run lowest along the normal first."""
    access = reader.RandomAccess(str(out), "train")
    records = [access[i] for i in range(len(access))]
    return sorted(records, key=lambda r: float(np.asarray(r["dicom/affine"]).reshape(4, 4)[2, 3]))


def _files(root) -> list[str]:
    return sorted(os.path.join(folder, name) for folder, _, names in os.walk(str(root)) for name in names)


def _assert_accounted(summary, out, inputs) -> None:
    """matched = written + skipped + failed, every input named once: written (a record's) or in
    errors.jsonl, and the run committed."""
    assert os.path.exists(os.path.join(str(out), "dataset.json")), summary
    failed, skipped = sum(summary["failed"].values()), sum(summary["skipped"].values())
    assert summary["matched"] == len(inputs), summary
    assert summary["written"] + failed + skipped == summary["matched"], summary
    named = [e["uri"] for e in errors_of(out)]
    assert len(named) == len(set(named)) == failed + skipped, named


@pytest.fixture(scope="module")
def gap_seg(tmp_path_factory):
    """``in/ct``: the gapped series; ``in/seg_a.dcm``: a SEG of its first run only; ``both/``: the
    same series with ``seg_both.dcm``, a SEG over both runs."""
    root = tmp_path_factory.mktemp("gap_seg")
    series = _gapped(root / "in" / "ct")
    known = md.random_masks(series, 2, seed=11)
    md.save_seg(series.datasets[:GAP], known[:, :GAP], root / "in" / "seg_a.dcm", "seg_a", md.SEGMENTS)
    both = _gapped(root / "both" / "ct")
    md.save_seg(both.datasets, known, root / "both" / "seg_both.dcm", "seg_both", md.SEGMENTS)
    return root, series, both, known


@pytest.mark.parametrize("missing_mask", ["skip", "empty", "error"])
def test_seg_of_one_run_the_other_follows_missing_mask(gap_seg, tmp_path, missing_mask):
    root, series, _, known = gap_seg
    out = tmp_path / "out"
    summary = run_convert(root / "in", out, class_map=md.class_map(tmp_path), missing_mask=missing_mask,
                          **OPTIONS)
    inputs = _files(root / "in")
    _assert_accounted(summary, out, inputs)
    other = sorted(os.path.basename(str(d.filename)) for d in series.datasets[GAP:])
    missing = sorted(os.path.basename(e["uri"]) for e in errors_of(out))
    records = _records(out)
    if missing_mask == "empty":
        assert summary["failed"] == {} and summary["skipped"] == {}, summary
        assert missing == [] and len(records) == 2
        assert not records[1]["mask"].any()
    else:
        reason = {"skip": "skipped", "error": "failed"}[missing_mask]
        assert summary[reason] == {"missing_mask": len(other)}, summary
        assert missing == other
        assert len(records) == 1
    assert summary["written"] == GAP + 1 + (len(other) if missing_mask == "empty" else 0), summary
    np.testing.assert_array_equal(records[0]["mask"], md.label_map(known[:, :GAP]))


def test_seg_over_both_runs_is_divided(gap_seg, tmp_path):
    root, _, both, known = gap_seg
    out = tmp_path / "out"
    summary = run_convert(root / "both", out, class_map=md.class_map(tmp_path), **OPTIONS)
    _assert_accounted(summary, out, _files(root / "both"))
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    first, second = _records(out)
    assert int(first["depth"]) == GAP and int(second["depth"]) == both.depth - GAP
    np.testing.assert_array_equal(first["mask"], md.label_map(known[:, :GAP]))
    np.testing.assert_array_equal(second["mask"], md.label_map(known[:, GAP:]))


def test_rtstruct_over_both_runs_is_divided(tmp_path):
    root = tmp_path / "in"
    whole = md.series(root / "ct", n=7, spacing=2.5, shape=(md.RT_SIZE, md.RT_SIZE), pixel_spacing=(0.8, 0.8),
                      seed=6)
    liver = np.zeros((whole.depth, md.RT_SIZE, md.RT_SIZE), bool)
    for k in (1, 2, 5):
        liver[k] = md.disc((40 + 2 * k, 50), 12 + k)
    md.write_rtstruct(whole, {"liver": liver}, tmp_path / "rt.dcm")
    os.rename(tmp_path / "rt.dcm", root / "rt.dcm")
    os.remove(whole.written.paths[whole.order[GAP]])        # the contour-free slice: a gap
    out = tmp_path / "out"
    summary = run_convert(root, out, class_map=md.class_map(tmp_path), mask_layout="binary", **OPTIONS)
    _assert_accounted(summary, out, _files(root))
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    first, second = _records(out)
    kept = np.delete(liver, GAP, axis=0)
    for record, part in ((first, kept[:GAP]), (second, kept[GAP:])):
        drawn = record["mask"][..., 0].astype(bool)
        assert drawn.any(axis=(1, 2)).tolist() == part.any(axis=(1, 2)).tolist()
        assert 2 * (drawn & part).sum() / (drawn.sum() + part.sum()) >= 0.99


# ---------------------------------------------------------------- accounting over every split


def _parts(kind: str, folder) -> list[list]:
    """A series made into two records by --unit series: its two runs (``gap``) or its two time
    points (``4d``, --series_4d split), each its datasets in order along the normal."""
    import pydicom
    from tests.support import series_builders as sb
    if kind == "gap":
        series = _gapped(folder, n=5, seed=7, shape=(16, 16))
        return [series.datasets[:GAP], series.datasets[GAP:]]
    written = sb.four_d(str(folder), times=2, z=3, shape=(16, 16))
    datasets = [pydicom.dcmread(p) for p in written.paths]
    return [sorted(datasets[t * 3:(t + 1) * 3], key=lambda d: float(d.ImagePositionPatient[2])) for t in (0, 1)]


@pytest.mark.parametrize("unit", ["series", "file"])
@pytest.mark.parametrize("kind,cover", [("gap", (0,)), ("gap", (1,)), ("gap", (0, 1)), ("4d", (0,)), ("4d", (1,))])
def test_every_input_is_accounted_once(tmp_path, unit, kind, cover):
    root = tmp_path / "in"
    parts = _parts(kind, root / "ct")
    covered = [d for n in cover for d in parts[n]]
    masks = np.random.default_rng(len(covered)).random((1, len(covered), 16, 16)) < 0.3
    md.save_seg(covered, masks, root / "seg.dcm", f"seg_{kind}_{cover}", md.SEGMENTS)
    out = tmp_path / "out"
    options = dict(OPTIONS) if unit == "series" else {**OPTIONS, "unit": "file", "series_gaps": "fail"}
    summary = run_convert(root, out, class_map=md.class_map(tmp_path), **options)
    _assert_accounted(summary, out, _files(root))
    uncovered = [d for n in range(2) if n not in cover for d in parts[n]]
    if unit == "series":
        assert summary["skipped"] == ({"missing_mask": len(uncovered)} if uncovered else {}), summary
        assert summary["failed"] == {} and summary["records"] == len(cover), summary
    else:       # one series of slices: the SEG covers it, a slice without a frame is background
        assert summary["skipped"] == {} and summary["failed"] == {}, summary
        assert summary["records"] == len(parts[0]) + len(parts[1]), summary


def test_rtstruct_of_one_volume_of_a_4d_series(tmp_path):
    """--series_4d split: an RTSTRUCT drawn on the first time point's slices gives that volume its
    contours; the other volume, on none of whose slices a contour lies, follows --missing_mask."""
    import shutil

    import pydicom
    from tests.support import series_builders as sb
    root = tmp_path / "in"
    written = sb.four_d(str(root / "mr"), times=2, z=3, shape=(64, 64), pixel_spacing=(0.8, 0.8))
    first = tmp_path / "first"
    first.mkdir()
    datasets = [pydicom.dcmread(p) for p in written.paths]
    volume0 = [p for p, d in zip(written.paths, datasets) if int(d.TemporalPositionIdentifier) == 1]
    for path in volume0:
        shutil.copy(path, first / os.path.basename(path))
    ordered = sorted((pydicom.dcmread(p) for p in volume0), key=lambda d: float(d.ImagePositionPatient[2]))
    series = md.Series(sb.WrittenSeries(str(first), written.series_uid, written.pixel_spacing, [], "MR"),
                       list(range(3)), ordered)
    jj, ii = np.mgrid[:64, :64]
    liver = np.repeat((((jj - 30) ** 2 + (ii - 34) ** 2) <= 15 ** 2)[None], 3, axis=0)
    md.write_rtstruct(series, {"liver": liver}, root / "rt.dcm")
    out = tmp_path / "out"
    summary = run_convert(root, out, class_map=md.class_map(tmp_path), mask_layout="binary", **OPTIONS)
    _assert_accounted(summary, out, _files(root))
    assert summary["skipped"] == {"missing_mask": 3} and summary["failed"] == {}, summary
    [record] = _records(out)
    drawn = record["mask"][..., 0].astype(bool)
    assert 2 * (drawn & liver).sum() / (drawn.sum() + liver.sum()) >= 0.99
    skipped = sorted(os.path.basename(e["uri"]) for e in errors_of(out))
    assert skipped == sorted(os.path.basename(p) for p in written.paths if p not in volume0)
