"""Lean pipeline: how local runs execute, and what crosses a shuffle per record."""
from __future__ import annotations

import os
import pickle

import pytest
from apache_beam.coders.coders import FastPrimitivesCoder
from apache_beam.options.pipeline_options import DirectOptions

from dcm2tfrecord.pipeline.launch import runner
from tests.support import pydicom_test_files
from tests.support import TEST_SALT, run_convert, write_png_archive
from dcm2tfrecord.transforms.planning.shards import for_planning
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.record_model import ImageSpec, SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.sources.match import expand_pattern, survey_local


def _direct(options):
    direct = options.view_as(DirectOptions)
    return direct.direct_num_workers, direct.direct_running_mode


def test_survey_counts_local_inputs_and_stops_past_a_limit(tmp_path):
    write_png_archive(tmp_path / "a", 5, 8, 8)
    (tmp_path / "b.png").write_bytes((tmp_path / "a" / "img_0000.png").read_bytes())
    size = sum(s.size for s in expand_pattern(str(tmp_path / "a"))) + (tmp_path / "b.png").stat().st_size
    patterns = [str(tmp_path / "a"), str(tmp_path / "b.png")]
    assert survey_local(patterns, 100, 1 << 30) == (6, size)
    assert survey_local(patterns, 5, 1 << 30) is None             # one file too many
    assert survey_local(patterns, 100, size - 1) is None          # one byte too many
    assert survey_local([str(tmp_path / "a" / "*.png")], 100, 1 << 30)[0] == 5
    assert survey_local(["gs://bucket/archive"], 100, 1 << 30) is None   # remote: not surveyed


def test_small_local_archives_run_in_one_process(tmp_path, monkeypatch):
    write_png_archive(tmp_path / "in", 3, 8, 8)
    patterns = [str(tmp_path / "in")]
    assert _direct(runner.make_pipeline_options([], patterns)) == (1, "in_memory")
    cores = os.cpu_count() or 1
    monkeypatch.setattr(runner, "IN_PROCESS_MAX_FILES", 2)
    many = runner.make_pipeline_options([], patterns)
    assert _direct(many) == (cores, "multi_processing" if cores != 1 else "in_memory")
    # the user's choice always wins
    assert _direct(runner.make_pipeline_options(["--direct_num_workers=3"], patterns)) == \
        (3, "multi_processing")
    monkeypatch.setattr(runner, "IN_PROCESS_MAX_FILES", 256)
    assert _direct(runner.make_pipeline_options(["--direct_running_mode=multi_processing"],
                                                 patterns)) == (cores, "multi_processing")
    assert runner.local_execution(runner.make_pipeline_options([], patterns)) == "one process"
    assert runner.local_execution(runner.make_pipeline_options(
        ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])) == \
        "2 worker processes (multi_processing)"
    assert runner.local_execution(runner.make_pipeline_options(
        ["--direct_num_workers=2", "--direct_running_mode=multi_threading"])) == \
        "2 worker threads (multi_threading)"


def test_summary_says_how_the_run_executed(tmp_path, capsys):
    from dcm2tfrecord.pipeline.summary import format_summary
    write_png_archive(tmp_path / "in", 2, 8, 8)
    summary = run_convert(tmp_path / "in", tmp_path / "out", beam_args=[])
    assert summary["execution"] == "one process"
    assert "s (one process)," in format_summary(summary).splitlines()[-1]


def _probed_slices():
    settings = DecodeSettings(id_salt=TEST_SALT)
    records = []
    root = pydicom_test_files()
    for path in sorted(os.path.join(folder, name) for folder, _, names in os.walk(root)
                       for name in names):
        source = SourceFile(path, os.path.relpath(path, root), os.path.getsize(path), 1.0)
        try:
            records.append(probe_file(source, settings=settings))
        except Exception:   # noqa: BLE001 - files the probe refuses have their own tests
            continue
    return records


def test_records_round_trip_through_beams_coder_and_pickle():
    coder = FastPrimitivesCoder()
    records = _probed_slices()
    assert len(records) > 40
    for record in records:
        planned = for_planning(record, seed=3)
        for value in (record, planned):
            assert coder.decode(coder.encode(value)) == value
            assert pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL)) == value
    odd = SourceFile("/in/x.dcm", "elsewhere/x.dcm", 3, 2.5)     # uri not ending with rel_path
    assert coder.decode(coder.encode(odd)) == odd


def test_a_planned_ct_slice_is_small_on_the_wire():
    """What crosses each planning shuffle per CT slice: no class or field names, no raw ids."""
    coder = FastPrimitivesCoder()
    ct = [r for r in _probed_slices() if r.source.rel_path == "CT_small.dcm"][0]
    planned = for_planning(ct, seed=0)
    assert planned.ids is None and planned.native is not None
    size = len(coder.encode(planned))
    native = len(pickle.dumps(planned.native, pickle.HIGHEST_PROTOCOL))
    assert size - native < 300, (size, native)    # everything but the writer's native layout
    assert len(coder.encode(ct)) < 1200   # with the raw identifiers, as the duplicate check moves it


def test_pixel_bytes_without_numpy_lookups_match_numpy():
    import numpy as np
    for dtype in ("uint8", "int8", "uint16", "int16", "int32", "uint32", "float32", "float64"):
        spec = ImageSpec(2, 3, 5, 3, dtype)
        assert spec.num_pixel_bytes == 2 * 3 * 5 * 3 * np.dtype(dtype).itemsize


# ---------------------------------------------------------------- Enhanced rescale


def _enhanced_ct(path, slope=None, intercept=None, per_frame=False):
    """A small 2-frame Enhanced-CT-like file: rescale only in the functional groups."""
    import numpy as np
    from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2.1"    # Enhanced CT Image Storage
    meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=[str(path)])
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Modality, ds.PatientID = "CT", "P1"
    ds.Rows = ds.Columns = 4
    ds.NumberOfFrames = 2
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    if slope is not None:
        transform = Dataset()
        transform.RescaleSlope, transform.RescaleIntercept, transform.RescaleType = slope, intercept, "HU"
        group = Dataset()
        group.PixelValueTransformationSequence = Sequence([transform])
        if per_frame:
            ds.PerFrameFunctionalGroupsSequence = Sequence([group, group])
        else:
            ds.SharedFunctionalGroupsSequence = Sequence([group])
    ds.PixelData = (np.arange(32, dtype=np.uint16) + 1000).tobytes()
    ds.save_as(str(path), enforce_file_format=True)
    return str(path)


@pytest.mark.parametrize("per_frame", [False, True])
def test_enhanced_rescale_in_functional_groups_is_applied(tmp_path, per_frame):
    """Once refused as functional_group_rescale: the rescale is now applied frame by frame."""
    from dcm2tfrecord.transforms.records.build import decode_record
    path = _enhanced_ct(tmp_path / "enh.dcm", slope="1", intercept="-1024", per_frame=per_frame)
    source = SourceFile(path, "enh.dcm", os.path.getsize(path), 1.0)
    settings = DecodeSettings(id_salt=TEST_SALT)
    record = probe_file(source, settings=settings)
    assert record.spec.dtype == "int16" and record.native is None
    with open(path, "rb") as handle:
        pixels, metadata = decode_record(record, handle, settings)
    assert pixels.reshape(-1).tolist() == [v - 24 for v in range(32)]
    assert metadata["dicom/rescale_intercept"].tolist() == [-1024.0]


def test_identity_rescale_in_functional_groups_converts(tmp_path):
    for name, kwargs in (("identity.dcm", dict(slope="1", intercept="0")), ("none.dcm", {})):
        path = _enhanced_ct(tmp_path / name, **kwargs)
        record = probe_file(SourceFile(path, name, os.path.getsize(path), 1.0),
                            settings=DecodeSettings(id_salt=TEST_SALT))
        assert record.spec.shape == (2, 4, 4, 1)


def test_enhanced_rescale_in_a_run(tmp_path):
    (tmp_path / "in").mkdir()
    _enhanced_ct(tmp_path / "in" / "enh.dcm", slope="2", intercept="-1024")
    write_png_archive(tmp_path / "in", 1, 8, 8)
    summary = run_convert(tmp_path / "in", tmp_path / "out")
    assert summary["failed"] == {} and summary["written"] == 2


# ---------------------------------------------------------------- per-record Beam cost


def test_flat_record_encoding_round_trips_every_field():
    """ProbedRecord pickles as one flat tuple (transforms.record_model): every field comes back,
    nested parts included, whether or not the uri ends with rel_path, with or without ids."""
    from dcm2tfrecord.transforms.record_model import Identifiers, ProbedRecord, SliceInfo, from_bytes, to_bytes
    ct = [r for r in _probed_slices() if r.source.rel_path == "CT_small.dcm"][0]
    assert ct.ids is not None and ct.slice_info is not None
    odd = SourceFile("/in/x.dcm", "elsewhere/x.dcm", 3, 2.5)
    volume = ProbedRecord(odd, "rid", "dicom", ImageSpec(2, 4, 4, 1, "int16"), split="test",
                          label=(0, 1), ids=Identifiers("p", "st", "se", ""), frame=None,
                          slice_info=SliceInfo((1.0,) * 6, (0.0, 0.0, 1.5), 7),
                          members=(odd, SourceFile("/in/y.dcm", "y.dcm", 4, 3.0)),
                          slice_spacing=1.5, order=12345, source_frames=2)
    bare = ProbedRecord(SourceFile("", "", 0, 0.0), "r", "image", ImageSpec(1, 1, 1, 3, "uint8"))
    for record in (ct, for_planning(ct), volume, bare):
        back = from_bytes(to_bytes(record))
        assert back == record and type(back) is ProbedRecord
        for name in ("source", "spec", "ids", "slice_info"):
            assert getattr(back, name) == getattr(record, name)
            assert type(getattr(back, name)) is type(getattr(record, name))
        assert back.members == record.members and hash(back) == hash(record)
    # no class reference for the nested parts: smaller than the fields pickled as they are
    nested = pickle.dumps(tuple(getattr(ct, f) for f in ct.__dataclass_fields__), 5)
    assert len(to_bytes(ct)) < len(nested) - 40, (len(to_bytes(ct)), len(nested))


def test_replaced_is_dataclasses_replace_for_records():
    import dataclasses
    from dcm2tfrecord.transforms.record_model import replaced
    ct = [r for r in _probed_slices() if r.source.rel_path == "CT_small.dcm"][0]
    fast, slow = replaced(ct, split="x", ids=None), dataclasses.replace(ct, split="x", ids=None)
    assert fast == slow and fast.__dict__ == slow.__dict__ and hash(fast) == hash(slow)
    assert ct.split != "x" and ct.ids is not None           # the original is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.split = "y"
    with pytest.raises(TypeError, match="no field 'splitt'"):
        replaced(ct, splitt="x")


def test_drop_duplicates_groups_records_without_a_uid_by_their_own_file():
    """DropDuplicates on the real runner: a duplicate instance is skipped once, a file without
    a SOP Instance UID keeps all its frames, images pass; no record lost or added."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to
    from dcm2tfrecord.transforms.records.steps import DropDuplicates
    from dcm2tfrecord.transforms.record_model import Identifiers, ProbedRecord

    def rec(uri, sop, frame=None, kind="dicom"):
        return ProbedRecord(SourceFile(uri, uri.lstrip("/"), 1, 1.0), f"{uri}#{frame}", kind,
                            ImageSpec(1, 2, 2, 1, "uint8"),
                            ids=Identifiers(sop_uid=sop) if kind == "dicom" else None, frame=frame)

    records = [rec("/a.dcm", "1.2"), rec("/b.dcm", "1.2"),              # b: a's duplicate
               rec("/c.dcm", "", 0), rec("/c.dcm", "", 1),              # no UID, two frames
               rec("/d.dcm", ""), rec("/e.png", "", kind="image")]
    with beam.Pipeline() as pipeline:
        kept, skipped = pipeline | beam.Create(records) | DropDuplicates()
        assert_that(kept | "Ids" >> beam.Map(lambda r: r.record_id),
                    equal_to(["/a.dcm#None", "/c.dcm#0", "/c.dcm#1", "/d.dcm#None", "/e.png#None"]),
                    label="Kept")
        assert_that(skipped | "Uris" >> beam.Map(lambda o: (o.uri, o.reason)),
                    equal_to([("/b.dcm", "duplicate")]), label="Skipped")


def test_pipeline_options_build_each_view_once_and_views_stay_shared():
    """the run's options (pipeline.launch.runner) hand out one view per options class (Beam builds a parser on each
    view_as); a value set through one view shows in every view and in the options."""
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
    options = runner.make_pipeline_options(["--direct_num_workers=3"])
    assert options.view_as(DirectOptions) is options.view_as(DirectOptions)
    options.view_as(StandardOptions).runner = "FnApiRunner"
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.get_all_options()["runner"] == "FnApiRunner"
    assert options.view_as(DirectOptions).direct_num_workers == 3
    # the same options as Beam's own class parses from the same flags
    plain = PipelineOptions(["--direct_num_workers=3"]).get_all_options()
    assert set(runner.make_pipeline_options(["--direct_num_workers=3"]).get_all_options()) == set(plain)
