"""Input matching, hostile files in a small archive, and the command line."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support import pydicom_test_files
from tests.support import run_convert, write_png_archive
from dcm2tfrecord.transforms.sources.match import expand_pattern


@pytest.fixture()
def tree(tmp_path):
    write_png_archive(tmp_path / "a", count=2, height=8, width=8)
    write_png_archive(tmp_path / "a" / "b", count=1, height=8, width=8)
    (tmp_path / "a" / "dir.dcm").mkdir()
    return tmp_path


def test_directory_is_walked_recursively_without_directories(tree):
    rels = [s.rel_path for s in expand_pattern(str(tree / "a"))]
    assert rels == ["b/img_0000.png", "img_0000.png", "img_0001.png"]


def test_glob_and_single_file(tree):
    assert [s.rel_path for s in expand_pattern(str(tree / "a" / "*.png"))] == ["img_0000.png", "img_0001.png"]
    single = list(expand_pattern(str(tree / "a" / "img_0001.png")))
    assert [(s.rel_path, s.size > 0) for s in single] == [("img_0001.png", True)]
    assert list(expand_pattern(str(tree / "missing"))) == []


def test_hostile_files_are_counted_and_the_rest_converted(tmp_path):
    archive = tmp_path / "archive"
    write_png_archive(archive, count=3, height=16, width=16)
    (archive / "empty.dcm").write_bytes(b"")
    (archive / "random.dcm").write_bytes(np.random.default_rng(0).bytes(5000))
    (archive / "notes.txt").write_text("not an image")
    (archive / "truncated.png").write_bytes((archive / "img_0000.png").read_bytes()[:60])
    src = pydicom_test_files()
    for name in ("rtplan.dcm", "CT_small.dcm", "MR_truncated.dcm"):
        (archive / name).write_bytes(open(os.path.join(src, name), "rb").read())
    summary = run_convert(archive, tmp_path / "out", target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=2)
    manifest = reader.info(str(tmp_path / "out"))
    counts = manifest["counts"]
    assert counts["matched"] == 10
    assert counts["written"] == 4          # 3 PNG + CT_small
    assert counts["skipped"] == {"no_pixel_data": 1, "unsupported_format": 1}
    # MR_truncated.dcm is cut inside its pixel data: failed at probe, before planning.
    assert counts["failed"] == {"empty_file": 1, "invalid_dicom": 1, "invalid_image": 1,
                                "truncated_file": 1}
    errors = [json.loads(line) for line in open(tmp_path / "out" / "errors.jsonl")]
    by_name = {os.path.basename(e["uri"]): e for e in errors}
    assert by_name["random.dcm"]["stage"] == "probe"
    assert by_name["truncated.png"]["reason"] == "invalid_image"
    assert (by_name["MR_truncated.dcm"]["reason"], by_name["MR_truncated.dcm"]["stage"]) == \
        ("truncated_file", "probe")
    assert summary["written"] == 4


def test_cli_convert_and_python_m_pipeline(tmp_path):
    write_png_archive(tmp_path / "in", count=4, height=16, width=16, channels=3)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2",
               DCM2TFRECORD_ID_SALT="cli-test-salt")
    args = ["convert", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
            "--target_shard_mb", "1", "--min_shard_mb", "0.5", "--max_shard_mb", "2",
            "--direct_num_workers=1", "--direct_running_mode=in_memory"]
    exe = os.path.join(os.path.dirname(sys.executable), "dcm2tfrecord")
    done = subprocess.run([exe] + args, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "4 written" in done.stdout and "MB/s" in done.stdout
    again = subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline"] + args, capture_output=True,
                           text=True, env=env, timeout=300)
    assert again.returncode == 2 and "--overwrite" in again.stderr
    bad = subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", "x", "--output",
                          str(tmp_path / "o2"), "--min_shard_mb", "5", "--max_shard_mb", "1"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 2 and "--min_shard_mb" in bad.stderr
    assert not (tmp_path / "o2").exists()
    no_salt = {k: v for k, v in env.items() if k != "DCM2TFRECORD_ID_SALT"}
    refused = subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline"] + args[:4]
                             + ["--output", str(tmp_path / "o3")],
                             capture_output=True, text=True, env=no_salt, timeout=300)
    assert refused.returncode == 2 and "--id_salt" in refused.stderr and "--allow_random_salt" in refused.stderr
    assert not (tmp_path / "o3").exists()


def test_two_inputs_holding_one_relative_path_are_refused_in_one_line_before_any_work(tmp_path):
    """Two --input roots each holding img_0000.png: both records would get one id (a record
    is named by its path under its --input) and verify would refuse the committed dataset.
    The run is refused before any work, naming both files; a file reached through two
    overlapping --input patterns is one file, and roots whose paths differ convert
    (issue 35, item 10)."""
    from dcm2tfrecord.dataset import names
    from dcm2tfrecord.dataset.verify import verify_dataset
    from dcm2tfrecord.pipeline.options.usage import UsageError    # the command line: exit 2, this line
    write_png_archive(tmp_path / "x" / "a", count=2, height=8, width=8, seed=1)
    write_png_archive(tmp_path / "x" / "b", count=1, height=8, width=8, seed=2)
    out = tmp_path / "out"
    with pytest.raises(UsageError) as error:
        run_convert([tmp_path / "x" / "a", tmp_path / "x" / "b"], out)
    message = str(error.value)
    assert "\n" not in message and "'img_0000.png'" in message
    assert str(tmp_path / "x" / "a" / "img_0000.png") in message
    assert str(tmp_path / "x" / "b" / "img_0000.png") in message
    assert not os.path.exists(out)               # before any work: not even the output made
    # one folder and a folder inside it: the same files, each under its smaller relative path
    run_convert([tmp_path / "x", tmp_path / "x" / "a"], out)
    assert reader.info(str(out))["counts"]["written"] == 3 and verify_dataset(str(out)).ok
    # the common parent as the one --input: the same files, told apart
    run_convert(tmp_path / "x", tmp_path / "out2")
    assert os.path.exists(tmp_path / "out2" / names.MANIFEST_NAME)


def _convert_quietly(argv: list) -> tuple:
    """(exit code, what it wrote on stderr) of the command line ``argv``."""
    import contextlib
    import io
    from dcm2tfrecord.pipeline.cli import main
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(argv)
    return code, err.getvalue()


@pytest.mark.parametrize("name,text,message", [
    ("fifo.yaml", None, "is a FIFO"),
    ("twice.yaml", "Liver: [liver]\nKidney: [kidney]\nLiver: [foie]\n", "class 'Liver' is given twice"),
    ("aliases.yaml", "a: &x [" + ",".join(f"p{i}" for i in range(1000)) + "]\n"
     + "".join(f"c{i}: *x\n" for i in range(2000)), "its aliases name more than"),
    ("deep.yaml", "a: " + "[" * 20000 + "]" * 20000, "nested deeper than"),
])
def test_a_hostile_class_map_is_refused_at_once_before_any_work(tmp_path, name, text, message):
    """A FIFO (which blocked the run holding the output's lock), a class given twice (the last was
    kept), aliases naming 2 M rules, deep nesting (a bare RecursionError): exit code 2 in one line
    naming the file, within seconds, the output never created."""
    from tests.support.bounded import finishes_within
    write_png_archive(tmp_path / "in", 1, 8, 8)
    class_map = tmp_path / name
    if text is None:
        os.mkfifo(class_map)
    else:
        class_map.write_text(text)
    out = tmp_path / "out"
    code, err = finishes_within(60, _convert_quietly, [
        "convert", "--input", str(tmp_path / "in"), "--output", str(out), "--id_salt", "a-test-salt",
        "--class_map", str(class_map), "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    err = err.strip()
    assert code == 2 and message in err and str(class_map) in err and "\n" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("pattern", [r"(?<=(a+)+)x=\1.nii", r"(.*)\pL=\1.nii"])
def test_a_mask_pattern_python_refuses_is_refused_in_one_line(tmp_path, pattern):
    """Matched by RE2 where it can, the pattern is still Python's: what re refuses (a lookbehind
    of no fixed width; RE2's \\pL) is exit code 2 naming the option, before any work."""
    write_png_archive(tmp_path / "in", 1, 8, 8)
    (tmp_path / "classes.yaml").write_text("Liver: ['1']\n")
    out = tmp_path / "out"
    code, err = _convert_quietly([
        "convert", "--input", str(tmp_path / "in"), "--output", str(out), "--id_salt", "a-test-salt",
        "--class_map", str(tmp_path / "classes.yaml"), "--mask_pattern", pattern,
        "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    err = err.strip()
    assert code == 2 and "--mask_pattern" in err and "is not a regular expression" in err and "\n" not in err, err
    assert not out.exists()


@pytest.mark.parametrize("name,text,message", [
    ("classes.yaml", 'Liver: ["liver"\n', "is not YAML"),
    ("classes.csv", "roi,label\nliver,Liver\n", "the header must name the columns name,class[,match]"),
    ("missing.yaml", None, "cannot be read"),
])
def test_a_class_map_that_cannot_be_used_is_refused_before_any_work(tmp_path, capsys, name, text, message):
    """Read and checked with the other options (pipeline.convert.read_masks): exit code 2 in one line,
    before the output is created or locked, or a worker forked."""
    from dcm2tfrecord.pipeline.cli import main
    write_png_archive(tmp_path / "in", 1, 8, 8)
    class_map = tmp_path / name
    if text is not None:
        class_map.write_text(text)
    for out in (tmp_path / "new", tmp_path / "empty"):
        if out.name == "empty":
            os.makedirs(out)
        code = main(["convert", "--input", str(tmp_path / "in"), "--output", str(out), "--id_salt", "a-test-salt",
                     "--class_map", str(class_map), "--direct_num_workers=1", "--direct_running_mode=in_memory"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and str(class_map) in err and "\n" not in err, err
        assert not out.exists() if out.name == "new" else os.listdir(out) == []    # nothing written, no lock
