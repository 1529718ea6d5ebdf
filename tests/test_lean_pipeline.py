"""Lean pipeline: how local runs execute, and what crosses a shuffle per record."""
from __future__ import annotations

import os
import pickle

import pytest
from apache_beam.coders.coders import FastPrimitivesCoder
from apache_beam.options.pipeline_options import DirectOptions

from pipeline import convert
from pipeline.sample_archive import pydicom_test_files
from tests.conftest import TEST_SALT, run_convert, write_png_archive
from transforms.planning.shards import for_planning
from transforms.records.probe import probe_file
from transforms.records.values import ImageSpec, SourceFile
from transforms.settings import DecodeSettings
from transforms.sources.match import expand_pattern, survey_local


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
    assert _direct(convert.make_pipeline_options([], patterns)) == (1, "in_memory")
    cores = os.cpu_count() or 1
    monkeypatch.setattr(convert, "IN_PROCESS_MAX_FILES", 2)
    many = convert.make_pipeline_options([], patterns)
    assert _direct(many) == (cores, "multi_processing" if cores != 1 else "in_memory")
    # the user's choice always wins
    assert _direct(convert.make_pipeline_options(["--direct_num_workers=3"], patterns)) == \
        (3, "multi_processing")
    monkeypatch.setattr(convert, "IN_PROCESS_MAX_FILES", 256)
    assert _direct(convert.make_pipeline_options(["--direct_running_mode=multi_processing"],
                                                 patterns)) == (cores, "multi_processing")
    assert convert.local_execution(convert.make_pipeline_options([], patterns)) == "one process"
    assert convert.local_execution(convert.make_pipeline_options(
        ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])) == \
        "2 worker processes (multi_processing)"


def test_summary_says_how_the_run_executed(tmp_path, capsys):
    from pipeline.summary import format_summary
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
