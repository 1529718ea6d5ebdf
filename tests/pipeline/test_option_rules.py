"""Bad options fail before any work: one line naming the option and the fix, exit code 2."""
import os

import pytest

from dcm2tfrecord.pipeline.cli import main
from tests.support import write_png_archive


@pytest.fixture()
def archive(tmp_path, monkeypatch):
    monkeypatch.setenv("DCM2TFRECORD_ID_SALT", "validation-tests")
    write_png_archive(tmp_path / "in", count=1, height=8, width=8)
    return tmp_path


CASES = [
    (["--max_shard_mbb", "3"], "--max_shard_mbb"),
    (["--splits", "train=0.8,test=0.1"], "--splits"),
    (["--splits", "train=0.8,test"], "--splits"),
    (["--min_shard_mb", "10", "--max_shard_mb", "5"], "--min_shard_mb"),
    (["--resize", "512by512"], "--resize"),
    (["--spacing", "1,1"], "--spacing"),
    (["--spacing", "1,0,1"], "--spacing"),
    (["--spacing", "1,nan,1"], "--spacing"),
    (["--spacing", "1,1,-2"], "--spacing"),
    (["--spacing", "1mm,1,1"], "--spacing"),
    (["--spacing", "automatic"], "--spacing"),
    (["--spacing", "auto", "--incremental"], "--spacing auto and --incremental"),
    (["--spacing", "1,1,1", "--resize", "64x64"], "--resize"),
    (["--spacing", "1,1,1", "--unit", "series", "--series_4d", "stack"], "--series_4d split"),
    (["--crop", "foreground"], "--class_map"),
    (["--class_locations", "16"], "--class_map"),
    (["--class_locations", "-1"], "--class_locations"),
    (["--crop", "nonzero", "--resize", "64x64"], "--resize"),
    (["--crop", "nonzero", "--unit", "series", "--series_4d", "stack"], "--series_4d split"),
    (["--intensity", "zscore", "--dicom_values", "window"], "--dicom_values modality or stored"),
    (["--intensity", "zscore", "--pixel_encoding", "png"], "--pixel_encoding raw"),
    (["--intensity", "ct", "--splits", "fit=0.8,holdout=0.2"], "split named 'train'"),
    (["--intensity", "ct", "--dicom_values", "window"], "--dicom_values modality or stored"),
    (["--dicom_values", "window", "--window", "lung,wide"], "--window"),
    (["--dicom_values", "window", "--window", "10"], "--window"),
    (["--window", "lung"], "--dicom_values window"),
    (["--max_failure_ratio", "2"], "--max_failure_ratio"),
    (["--split_column", "fold"], "--labels"),
    (["--gzip_level", "5"], "--compression gzip"),           # a level for a plain shard
    (["--compression", "gzip", "--gzip_level", "0"], "--gzip_level"),
    (["--compression", "gzip", "--gzip_level", "10"], "--gzip_level"),
    (["--volume_chunks", "1"], "--volume_chunks 1 must be a brick edge"),
    (["--volume_chunks", "-64"], "--volume_chunks -64 must be a brick edge"),
    (["--volume_chunks", "99999"], "--volume_chunks 99999 must be a brick edge"),
    (["--volume_codec", "zstd"], "needs --volume_chunks N"),
    (["--volume_chunks", "64", "--pixel_encoding", "png"], "--pixel_encoding raw"),
    (["--volume_chunks", "64", "--compression", "gzip"], "--compression none"),
    (["--volume_chunks", "64", "--frames", "split"], "--frames split"),
]


@pytest.mark.parametrize("extra,named", CASES)
def test_bad_option_is_one_line_exit_2_nothing_written(archive, capsys, extra, named):
    out = archive / "out"
    code = main(["convert", "--input", str(archive / "in"), "--output", str(out)] + extra)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert named in err and "\n" not in err, err
    assert not out.exists()


def test_intensity_ct_without_a_train_split_is_refused_before_any_work(archive, capsys):
    """--intensity ct draws its fingerprint from the split named train: none, no run."""
    code = main(["convert", "--input", str(archive / "in"), "--output", str(archive / "out"), "--intensity", "ct",
                 "--splits", "fit=1.0", "--allow_random_salt"])
    err = capsys.readouterr().err
    assert code == 2 and "--intensity ct" in err and "split named 'train'" in err, err
    assert not (archive / "out").exists()


def test_input_that_matches_nothing(archive, capsys):
    code = main(["convert", "--input", str(archive / "nope"), "--output", str(archive / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--input" in err and "matches no file" in err
    assert not (archive / "out").exists()
    code = main(["convert", "--input", str(archive / "in" / "*.dcm"), "--output", str(archive / "out")])
    assert code == 2 and not (archive / "out").exists()


def test_output_that_is_a_file(archive, capsys):
    target = archive / "taken"
    target.write_text("x")
    code = main(["convert", "--input", str(archive / "in"), "--output", str(target)])
    err = capsys.readouterr().err
    assert code == 2 and "--output" in err and "is a file" in err
    assert target.read_text() == "x"
    assert not os.path.exists(str(target) + ".incomplete")


def test_library_options_without_output_are_a_usage_error(archive):
    # convert.run(ConvertOptions(...)) with no output (the command line requires --output)
    # raised TypeError from absolute(None); found by mypy (scripts/static_checks.sh)
    from dcm2tfrecord.pipeline import convert
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    from dcm2tfrecord.pipeline.options.usage import UsageError
    with pytest.raises(UsageError, match="--output is required"):
        convert.run(ConvertOptions(inputs=(str(archive / "in"),)), [])
