"""Enhanced multi-frame files cost work linear in their frames (issue 35, item 7).

Linearity is asserted by counting, never by timing: the whole-header parses
(``pixels.read_dataset``) and the per-frame functional group lifts (``functional_groups._lift``)
that writing every record of one file makes, each counted by a wrapper that calls the real
function. Before the fix, each of a file's N records parsed the whole header and lifted every
frame's groups again (N parses, N x N lifts).
"""
from __future__ import annotations

import io
import os
import warnings


from dcm2tfrecord.transforms.dicom import functional_groups, pixels
from dcm2tfrecord.transforms.records.build import build_record, decode_record
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.values import SourceFile
from tests.support import TEST_SALT
from tests.support import enhanced_objects as eo


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
