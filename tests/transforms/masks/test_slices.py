"""The join of annotations to a series' slice records (transforms/masks/slices.py) and the parsed
annotation cache (transforms/masks/annotation_cache.py), on real probed files: CT slices
(tests/support/series_builders), a highdicom SEG and an rt-utils RTSTRUCT of them."""
from __future__ import annotations

import dataclasses
import io
import os

import numpy as np
import pydicom
import pytest

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.masks import annotation_cache, classes, slices
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.record_model import ProbedRecord, SourceFile
from tests.support import mask_datasets as md

pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

CLASS_MAP = classes.parse_mapping(md.CLASS_MAP_YAML, "classes.yaml")
MASKS = MaskSettings(class_map=CLASS_MAP)
SETTINGS = DecodeSettings(masks=MASKS)


def _source(path) -> SourceFile:
    stat = os.stat(str(path))
    return SourceFile(str(path), os.path.basename(str(path)), stat.st_size, stat.st_mtime)


def _probed(paths) -> list[ProbedRecord]:
    return [probe_file(_source(p), settings=SETTINGS) for p in paths]


def _read(note: ProbedRecord):
    return pydicom.dcmread(note.source.uri, stop_before_pixels=True, force=True)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    root = tmp_path_factory.mktemp("slices")
    series = md.series(root / "ct", n=5, spacing=2.5, shape=(md.RT_SIZE, md.RT_SIZE), pixel_spacing=(0.8, 0.8))
    known = md.random_masks(series, 2, seed=21)
    md.write_seg(series, known, root / "seg.dcm", "slices_seg")
    liver = np.zeros((series.depth, md.RT_SIZE, md.RT_SIZE), bool)
    liver[1:4] = md.disc((40, 50), 20)
    md.write_rtstruct(series, {"liver": liver}, root / "rt.dcm")
    parts = _probed(series.written.paths)
    seg_note, rt_note = _probed([root / "seg.dcm", root / "rt.dcm"])
    assert seg_note.annotation == "seg" and rt_note.annotation == "rtstruct"
    return series, parts, seg_note, rt_note


def test_each_record_gets_its_part_and_one_accounts_for_the_annotations(archive):
    series, parts, seg_note, rt_note = archive
    joined = list(slices.join(parts + [rt_note, seg_note], _read, MASKS))
    assert all(isinstance(r, ProbedRecord) for r in joined) and len(joined) == series.depth
    assert [s.uri for s, _ in joined[0].annotations] == sorted([seg_note.source.uri, rt_note.source.uri])
    counting = [r for r in joined if r.mask_part.counts_annotations]
    assert len(counting) == 1
    notes = {seg_note.source, rt_note.source}
    for record in joined:
        assert set(record.inputs) == {record.source} | notes
        assert set(record.sources) == ({record.source} | notes if record is counting[0] else {record.source})
        assert record.mask_bytes == 96 * 96                      # one uint8 label map channel
        assert record.mask_part.uid == record.ids.sop_uid
        seg_part, rt_part = record.mask_part.contours[1], record.mask_part.contours[0]
        assert seg_part == ()
        k = [str(ds.SOPInstanceUID) for ds in series.datasets].index(record.ids.sop_uid)
        assert bool(rt_part) == (1 <= k <= 3), (k, rt_part)        # the contours of its own slice


@pytest.mark.parametrize("missing_mask", ["skip", "error", "empty"])
def test_an_unannotated_series(archive, missing_mask):
    series, parts, _, _ = archive
    masks = dataclasses.replace(MASKS, missing=missing_mask)
    joined = list(slices.join(parts, _read, masks))
    if missing_mask == "empty":
        assert [type(r) for r in joined] == [ProbedRecord] * series.depth
        assert all(r.annotations == () and r.mask_bytes and r.mask_part.contours == () for r in joined)
        return
    assert all(isinstance(o, Outcome) and o.reason == reasons.MISSING_MASK for o in joined)
    assert sorted(o.uri for o in joined) == sorted(series.written.paths)
    assert {o.status for o in joined} == {reasons.SKIPPED if missing_mask == "skip" else reasons.FAILED}


def test_an_annotation_without_its_series(archive):
    _, _, seg_note, rt_note = archive
    joined = list(slices.join([seg_note, rt_note], _read, MASKS))
    assert [(o.uri, o.reason) for o in joined] == sorted((n.source.uri, reasons.MASK_WITHOUT_IMAGE)
                                                         for n in (seg_note, rt_note))


def test_a_seg_of_slices_not_among_the_records_fails_the_series_once(archive):
    series, parts, seg_note, _ = archive
    joined = list(slices.join(parts[1:] + [seg_note], _read, MASKS))      # one slice's file left out
    assert {o.reason for o in joined} == {reasons.MASK_UNREFERENCED}
    assert sorted(o.uri for o in joined) == sorted([p.source.uri for p in parts[1:]] + [seg_note.source.uri])
    assert all("\n" not in o.message and o.message.startswith("series of 4 files") for o in joined)


def test_an_rtstruct_over_frames_is_unsupported(archive):
    _, parts, _, rt_note = archive
    framed = [dataclasses.replace(p, frame=0, source_frames=2) for p in parts]
    joined = list(slices.join(framed + [rt_note], _read, MASKS))
    assert {o.reason for o in joined} == {reasons.MASK_UNSUPPORTED}


def test_the_cache_parses_once_and_holds_a_few(archive, tmp_path):
    _, _, seg_note, rt_note = archive
    cache = annotation_cache.ParsedAnnotations(capacity=2)
    reads = []

    def reader(note):
        def read():
            reads.append(note.source.uri)
            with open(note.source.uri, "rb") as handle:
                return io.BytesIO(handle.read())
        return read
    first = cache.get(rt_note.source, "rtstruct", reader(rt_note))
    assert cache.get(rt_note.source, "rtstruct", reader(rt_note)) is first
    seg = cache.get(seg_note.source, "seg", reader(seg_note))
    # pydicom's dataset, parsed once; highdicom's Segmentation is built from it per segment set
    assert isinstance(seg, pydicom.Dataset) and cache.get(seg_note.source, "seg", reader(seg_note)) is seg
    assert cache.parses == {rt_note.source.uri: 1, seg_note.source.uri: 1}
    assert cache.hits == {rt_note.source.uri: 1, seg_note.source.uri: 1}
    changed = dataclasses.replace(rt_note.source, mtime=rt_note.source.mtime + 1)     # another file now
    cache.get(changed, "rtstruct", reader(rt_note))
    assert cache.parses[rt_note.source.uri] == 2 and len(reads) == 3
    cache.get(rt_note.source, "rtstruct", reader(rt_note))                         # evicted: capacity 2
    assert len(reads) == 4 and len(cache._entries) == 2
