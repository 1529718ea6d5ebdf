"""First hour with the tool (issue 15): what a new user trips over first."""
from __future__ import annotations

import os
import shutil

import pytest

import reader
from pipeline.convert import ConversionFailed
from pipeline.sample_archive import pydicom_test_files
from tests.conftest import run_convert


def test_an_archive_with_nothing_convertible_fails_with_the_reasons(tmp_path):
    os.makedirs(tmp_path / "in")
    (tmp_path / "in" / "notes.txt").write_text("not an image")
    (tmp_path / "in" / "empty.dcm").write_bytes(b"")
    with pytest.raises(ConversionFailed, match=r"none of the 2 matched inputs was converted.*"
                                               r"(unsupported_format|empty_file)"):
        run_convert(tmp_path / "in", tmp_path / "out")
    assert not (tmp_path / "out" / "dataset.json").exists()
    run_convert(tmp_path / "in", tmp_path / "quiet", allow_empty=True)   # a scheduler's quiet day
    assert reader.info(str(tmp_path / "quiet"))["counts"]["records"] == 0


@pytest.mark.parametrize("frames", ["stack", "split"])
def test_duplicate_instances_are_skipped_whether_frames_are_split_or_not(tmp_path, frames):
    """rtdose_1frame.dcm holds the same SOP instance as rtdose.dcm (its first frame)."""
    os.makedirs(tmp_path / "in")
    for name in ("rtdose.dcm", "rtdose_1frame.dcm"):
        shutil.copyfile(os.path.join(pydicom_test_files(), name), tmp_path / "in" / name)
    run_convert(tmp_path / "in", tmp_path / "out", frames=frames, max_failure_ratio=0.0)
    counts = reader.info(str(tmp_path / "out"))["counts"]
    assert counts["skipped"] == {"duplicate": 1} and counts["written"] == 1
    assert counts["records"] == (15 if frames == "split" else 1)


@pytest.mark.parametrize("args,message", [
    (["--inptu", "x"], "unknown option --inptu (did you mean --input?)"),
    (["--max_shard_mb", "-5"], "--max_shard_mb -5 must be > 0"),
    (["--target_shard_mb", "600"], "--target_shard_mb 600 must lie between --min_shard_mb 100 and "
                                   "--max_shard_mb 500"),
    (["--resize", "0x10"], "height and width must be at least 1"),
])
def test_misleading_messages_now_name_the_real_problem(tmp_path, capsys, args, message):
    from pipeline.cli import main
    from tests.conftest import write_png_archive
    write_png_archive(tmp_path / "in", 1, 8, 8)
    base = ["convert", "--output", str(tmp_path / "out"), "--id_salt", "a-test-salt"]
    if "--inptu" not in args:
        base += ["--input", str(tmp_path / "in")]
    code = main(base + args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err, err


def test_verify_on_a_directory_that_is_not_a_dataset_is_a_usage_error(tmp_path, capsys):
    from pipeline.cli import main
    os.makedirs(tmp_path / "nothing")
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    captured = capsys.readouterr()
    assert "is not a dataset" in captured.err and "CORRUPT" not in captured.out + captured.err
