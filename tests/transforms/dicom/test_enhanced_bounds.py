"""Enhanced multi-frame files cost work linear in their frames, within a documented limit (issue 35,
item 7), and the advice for the reasons they fail with is true.

Linearity is asserted by counting, never by timing: the whole-header parses
(``pixels.read_dataset``) and the per-frame functional group lifts (``functional_groups._lift``)
that writing every record of one file makes, each counted by a wrapper that calls the real
function. Before the fix, each of a file's N records parsed the whole header and lifted every
frame's groups again (N parses, N x N lifts).
"""
from __future__ import annotations

import io
import math
import os
import warnings

import pytest
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import functional_groups, pixels
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.build import build_record, decode_record
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.record_model import SourceFile
from tests.support import TEST_SALT, run_convert
from tests.support import enhanced_objects as eo

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)


def _save(ds, path) -> SourceFile:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.save_as(str(path))
    return SourceFile(str(path), os.path.basename(str(path)), os.path.getsize(path), os.path.getmtime(path))


def _counting(monkeypatch, module, name: str) -> list:
    """Counts the calls of ``module.name``, which still does its work."""
    calls: list = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(module, name, counted)
    return calls


def _write_all(source: SourceFile, settings: DecodeSettings, monkeypatch) -> tuple[list, list, list]:
    """Every record of the file probed, then written: (records, header parses, lifts) of the writes
    (none where this process wrote a part of the same file before: its parsed header is kept)."""
    records = expand_frames(probe_file(source, settings=settings), settings)
    parses = _counting(monkeypatch, pixels, "read_dataset")
    lifts = _counting(monkeypatch, functional_groups, "_lift")
    for record in records:
        build_record(record, settings=settings)
    return records, parses, lifts


def test_split_frames_parse_the_file_once_not_once_per_frame(tmp_path, monkeypatch):
    frames = 40
    source = _save(eo.enhanced_mr_4d(phases=1, slices=frames, size=4), tmp_path / "split.dcm")
    settings = DecodeSettings(id_salt=TEST_SALT, frames="split")
    records, parses, lifts = _write_all(source, settings, monkeypatch)
    assert len(records) == frames
    assert len(parses) <= 1                   # was 40: the whole header again for every frame
    assert len(lifts) <= frames + 1           # each frame's groups and the shared ones, once; was 40 x 41


def test_the_stacks_of_a_file_parse_it_once_and_keep_their_values(tmp_path, monkeypatch):
    phases, slices = 12, 3
    # stored slice-major: the phases interleaved, each stack's frames far apart in the file
    order = [(t, s) for s in range(slices) for t in range(phases)]
    source = _save(eo.enhanced_mr_4d(phases=phases, slices=slices, size=4, order=order), tmp_path / "4d.dcm")
    settings = DecodeSettings(id_salt=TEST_SALT)
    records, parses, lifts = _write_all(source, settings, monkeypatch)
    assert len(records) == phases
    assert len(parses) <= 1 and len(lifts) <= phases * slices + 1
    for t, record in enumerate(records):      # each phase's own frames, in slice order
        with open(source.uri, "rb") as handle:
            values, _ = decode_record(record, io.BytesIO(handle.read()), settings)
        assert [int(v) for v in values[:, 0, 0, 0]] == [t * 1000 + s for s in range(slices)]


def test_the_records_of_files_interleaved_parse_each_file_once(tmp_path, monkeypatch):
    """The planner places records by a hash of their ids: a shard holds the frames of many files
    interleaved. Each file is still parsed once."""
    settings = DecodeSettings(id_salt=TEST_SALT, frames="split")
    files = []
    for n in range(12):
        made = eo.enhanced_mr_4d(phases=1, slices=6, size=4)
        made.SOPInstanceUID = made.file_meta.MediaStorageSOPInstanceUID = f"1.2.826.0.1.3680043.10.511.{n + 1}"
        files.append(expand_frames(probe_file(_save(made, tmp_path / f"f{n}.dcm"), settings=settings), settings))
    parses = _counting(monkeypatch, pixels, "read_dataset")
    for k in range(6):
        for records in files:
            build_record(records[k], settings=settings)
    assert len(parses) <= len(files)          # was 72: every record its file's whole header


def _frames_file(frames: int, items: int, sop_class: str = "1.2.840.10008.5.1.4.1.1.4.1") -> Dataset:
    """A 1 x 1 8-bit Enhanced MR claiming ``frames`` frames, its pixel data that long, with
    ``items`` Per-frame Functional Groups items."""
    from pydicom.dataset import FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.file_meta.MediaStorageSOPClassUID = ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[str(frames), sop_class])
    ds.Modality, ds.PatientID = "MR", "LIMIT"
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.Rows = ds.Columns = 1
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.NumberOfFrames = frames
    shared = Dataset()
    shared.PixelMeasuresSequence = Sequence([Dataset()])
    shared.PixelMeasuresSequence[0].PixelSpacing = [1, 1]
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    ds.PerFrameFunctionalGroupsSequence = Sequence([Dataset() for _ in range(items)])
    ds.PixelData = bytes(frames)
    return ds


def test_an_enhanced_file_past_the_frame_limit_fails_before_its_groups_are_parsed(tmp_path, monkeypatch):
    limit = 50_000        # docs/DICOM.md, "Enhanced multi-frame"; functional_groups.MAX_FRAMES
    lifts = _counting(monkeypatch, functional_groups, "_lift")
    over = _save(_frames_file(limit + 1, 2), tmp_path / "over.dcm")
    with pytest.raises(ConversionError) as caught:
        probe_file(over, settings=DecodeSettings(id_salt=TEST_SALT))
    assert caught.value.reason == reasons.TOO_MANY_FRAMES and f"{limit + 1}" in str(caught.value)
    assert lifts == []
    with open(over.uri, "rb") as handle:          # the writer's parse is bounded the same way
        with pytest.raises(ConversionError) as caught:
            pixels.read_dataset(handle)
    assert caught.value.reason == reasons.TOO_MANY_FRAMES
    # at the limit the groups are read (and these 2 items for as many frames are wrong)
    at = _save(_frames_file(limit, 2), tmp_path / "at.dcm")
    with pytest.raises(ConversionError) as caught:
        probe_file(at, settings=DecodeSettings(id_salt=TEST_SALT))
    assert caught.value.reason == reasons.INVALID_VALUE and f"2 items for {limit} frames" in str(caught.value)
    # a Segmentation's groups are not read: it is not counted
    seg = _save(_frames_file(limit + 1, 2, sop_class="1.2.840.10008.5.1.4.1.1.66.4"), tmp_path / "seg.dcm")
    assert probe_file(seg, settings=DecodeSettings(id_salt=TEST_SALT)).spec.depth == limit + 1
    assert functional_groups.MAX_FRAMES == limit
    # one frame whose Per-frame Functional Groups Sequence takes more than 64 MiB: Number of Frames
    # may understate what the sequence holds, whose parse costs some 60 times its bytes
    big = _frames_file(1, 1)
    lifts.clear()
    big.PerFrameFunctionalGroupsSequence[0].add_new(0x00420011, "OB", bytes((64 << 20) + 1))
    with pytest.raises(ConversionError) as caught:
        probe_file(_save(big, tmp_path / "big.dcm"), settings=DecodeSettings(id_salt=TEST_SALT))
    assert caught.value.reason == reasons.TOO_MANY_FRAMES and "64 MiB" in str(caught.value)
    assert lifts == []


def _same_position(made) -> None:
    items = made.PerFrameFunctionalGroupsSequence
    items[1].PlanePositionSequence[0].ImagePositionPatient = items[0].PlanePositionSequence[0].ImagePositionPatient


def _uneven(made) -> None:
    position = made.PerFrameFunctionalGroupsSequence[3].PlanePositionSequence[0]
    position.ImagePositionPatient = [position.ImagePositionPatient[0], position.ImagePositionPatient[1],
                                     float(position.ImagePositionPatient[2]) + 7.0]


@pytest.mark.parametrize("edit, reason", [(_same_position, reasons.FRAMES_UNORDERED),
                                          (_uneven, reasons.FRAMES_UNEVEN_SPACING)])
def test_the_advice_for_frames_that_cannot_be_stacked_is_true(tmp_path, edit, reason):
    """docs/CONVERTING.md: "Convert it with `--frames split`": the file fails as a stack, and converts
    so, one record per frame."""
    made = eo.legacy_enhanced(eo.slices("advice", 4), "advice")
    edit(made)
    os.makedirs(tmp_path / "in")
    source = _save(made, tmp_path / "in" / "advice.dcm")
    with pytest.raises(ConversionError) as caught:
        probe_file(source, settings=DecodeSettings(id_salt=TEST_SALT))
    assert caught.value.reason == reason
    split = run_convert(tmp_path / "in", tmp_path / "split", frames="split", **OPTIONS)
    assert split["failed"] == {} and split["records"] == 4, split


def _nan_positions(tmp_path, which: str) -> SourceFile:
    made = eo.enhanced_mr_4d(phases=1, slices=4, size=4)
    items = made.PerFrameFunctionalGroupsSequence
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for item in (items if which == "all" else items[2:3]):
            item.PlanePositionSequence[0].ImagePositionPatient = [math.nan, 0.0, 0.0]
    os.makedirs(tmp_path / "in", exist_ok=True)
    return _save(made, tmp_path / "in" / "nan.dcm")


@pytest.mark.parametrize("which", ["all", "one"])
def test_a_nan_position_is_invalid_value_naming_the_attribute(tmp_path, which):
    source = _nan_positions(tmp_path, which)
    with pytest.raises(ConversionError) as caught:
        probe_file(source, settings=DecodeSettings(id_salt=TEST_SALT, frames="stack"))
    assert caught.value.reason == reasons.INVALID_VALUE
    assert "Image Position (Patient) of frame" in str(caught.value) and "nan" in str(caught.value).lower()


@pytest.mark.parametrize("which", ["all", "one"])
def test_frames_split_writes_the_frames_that_lie_somewhere_and_fails_the_nan_ones(tmp_path, which):
    """Issue 43, item 5: the docs advise --frames split for a file whose frames cannot be
    ordered; a NaN position failed the whole file at probe, no frame written. Now each frame is
    its own record: those with a position are written with their geometry, a frame whose
    position is NaN fails alone (invalid_value, naming it), and the file counts as failed."""
    import json

    import numpy as np

    from dcm2tfrecord import reader
    source = _nan_positions(tmp_path, which)
    settings = DecodeSettings(id_salt=TEST_SALT, frames="split")
    records = expand_frames(probe_file(source, settings=settings), settings)
    assert len(records) == 4                     # planned frame by frame, nothing refused at probe
    with pytest.raises(ConversionError) as caught:
        build_record(records[2], settings=settings)
    assert caught.value.reason == reasons.INVALID_VALUE and "frame number 3)" in str(caught.value), str(caught.value)
    summary = run_convert(tmp_path / "in", tmp_path / "out", frames="split", allow_empty=True, **OPTIONS)
    assert summary["failed"] == {reasons.INVALID_VALUE: 1}, summary
    assert summary["records"] == (0 if which == "all" else 3), summary
    [line] = [json.loads(x) for x in open(tmp_path / "out" / "errors.jsonl")]
    assert line["reason"] == reasons.INVALID_VALUE and "Image Position (Patient) (the file's frame number" \
        in line["message"], line["message"]
    if which == "one":                           # record ids count frames from 0 (path#frame=2)
        assert "1 of 4 frames did not convert (frame 2), 3 written" in line["message"], line["message"]
        got = reader.RandomAccess(str(tmp_path / "out"), "train")
        for i in range(len(got)):
            assert np.isfinite(got[i]["dicom/affine"]).all() and got[i]["dicom/affine"].size == 16
            assert got[i]["dicom/image_position_patient"].size == 3
