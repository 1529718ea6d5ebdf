"""transforms.record_codec: what crosses the planning shuffles decodes to the very record that was
planned (every field, of the same type), in fewer bytes than pickle, the same bytes every time."""
from __future__ import annotations

import os
import pickle

import pytest
from apache_beam.coders.coders import FastPrimitivesCoder

from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.planning.shards import entry_record, for_planning, planning_entry
from dcm2tfrecord.transforms.record_codec import pack_record, pack_records, unpack_record, unpack_records
from dcm2tfrecord.transforms.record_model import (Identifiers, ImageSpec, MaskPart, ProbedRecord, ShardPlan,
                                                  SliceInfo, SourceFile, field_names, from_bytes,
                                                  to_bytes)
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.settings import DecodeSettings
from tests.support import TEST_SALT, pydicom_test_files


def _probed():
    settings = DecodeSettings(id_salt=TEST_SALT)
    root = pydicom_test_files()
    records = []
    for path in sorted(os.path.join(folder, name) for folder, _, names in os.walk(root) for name in names):
        source = SourceFile(path, os.path.relpath(path, root), os.path.getsize(path), 1.0)
        try:
            records.append(probe_file(source, settings=settings))
        except Exception:   # noqa: BLE001 - files the probe refuses have their own tests
            continue
    return records


def _odd_records():
    odd = SourceFile("/in/x.dcm", "elsewhere/x.dcm", 3, 2.5, b"\x00" * 12)
    return [
        ProbedRecord(odd, "rid-not-hex", "dicom", ImageSpec(2, 4, 4, 1, "int16"), split="test",
                     label=(0, 1), ids=Identifiers("p", "st", "se", ""), frame=3,
                     slice_info=SliceInfo((1.0,) * 6, (0.0, -0.0, 1.5), 7, volume_key=(("echo", 2),)),
                     members=(odd, SourceFile("/in/y.dcm", "y.dcm", 4, 3)),
                     slice_spacing=1.5, order=(1 << 64) - 1, source_frames=2),
        ProbedRecord(SourceFile("", "", 0, 0.0), "0" * 32, RecordKind.IMAGE, ImageSpec(1, 1, 1, 3, "uint8"),
                     split="mine \udcff é", label=-2.5, order=0, annotation="seg",
                     annotations=((odd, "rtstruct"),), mask_bytes=1 << 40,
                     mask_part=MaskPart("1.2.3", ((1, 0),), True, (0, 2), False), volumes=3, volume_index=-1),
        ProbedRecord(SourceFile("s3://b/k", "k", 1 << 70, float("inf")), "A" * 32, "nifti",
                     ImageSpec(1, 1, 1, 1, "float16"), label=True, frame=0, native={"not": "coded"}),
    ]


def _same(back, record):
    """``back`` is what pickle (the encoding before) gave back for ``record``: every field equal,
    of the same type (a kind that names a RecordKind comes back as the member, as it did)."""
    record = from_bytes(to_bytes(record))
    assert back == record and type(back) is ProbedRecord
    for name in field_names(ProbedRecord):
        a, b = getattr(back, name), getattr(record, name)
        assert type(a) is type(b) and repr(a) == repr(b), name
    assert back.source.uri == record.source.uri and type(back.source.mtime) is type(record.source.mtime)


@pytest.fixture(scope="module")
def probed():
    records = _probed()
    assert any(r.native is not None for r in records) and any(r.ids is not None for r in records)
    return records


def test_every_field_comes_back(probed):
    for record in probed + _odd_records():
        for context in (None, {"split": record.split}, {"order": record.order, "record_id": record.record_id}):
            _same(unpack_record(pack_record(record, context), context), record)
        assert isinstance(unpack_record(pack_record(record)).kind, str)
    kinds = {type(unpack_record(pack_record(r)).kind) for r in probed}
    assert kinds == {RecordKind}


def test_planning_entry_and_shard_plan_give_back_the_record(probed):
    coder = FastPrimitivesCoder()
    planned = [for_planning(r, seed=3) for r in probed + _odd_records()]
    for record in planned:
        _, entry = planning_entry(record, 3)
        _same(entry_record(coder.decode(coder.encode(entry))), record)
    plan = ShardPlan("train", 2, 5, tuple(planned))
    back = coder.decode(coder.encode(plan))
    assert back == plan
    for a, b in zip(back.records, planned):
        _same(a, b)
    assert unpack_records(pack_records(planned, {"split": "x"}), {"split": "x"}) == tuple(planned)


def test_deterministic_and_smaller_than_pickle(probed):
    for record in probed:
        slim = for_planning(record)
        first = pack_record(slim)
        # equal values that are distinct objects (pickle's memo would write them otherwise)
        copy = pickle.loads(pickle.dumps(slim))
        assert pack_record(copy) == first == pack_record(unpack_record(first))
        assert len(first) < len(pickle.dumps(slim, pickle.HIGHEST_PROTOCOL))
