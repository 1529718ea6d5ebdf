"""First hour with the tool (issue 15): what a new user trips over first."""
from __future__ import annotations

import os
import shutil

import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline.convert import ConversionFailed
from tests.support import pydicom_test_files
from tests.support import run_convert


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
    from dcm2tfrecord.pipeline.cli import main
    from tests.support import write_png_archive
    write_png_archive(tmp_path / "in", 1, 8, 8)
    base = ["convert", "--output", str(tmp_path / "out"), "--id_salt", "a-test-salt"]
    if "--inptu" not in args:
        base += ["--input", str(tmp_path / "in")]
    code = main(base + args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err, err


def test_verify_on_a_directory_that_is_not_a_dataset_is_a_usage_error(tmp_path, capsys):
    from dcm2tfrecord.pipeline.cli import main
    os.makedirs(tmp_path / "nothing")
    assert main(["verify", str(tmp_path / "nothing")]) == 2
    captured = capsys.readouterr()
    assert "is not a dataset" in captured.err and "CORRUPT" not in captured.out + captured.err


def _python_blocks(section: str, doc: str = "README.md") -> list[str]:
    """The ```python blocks of one ``## section`` of ``doc`` (a path from the repository root)."""
    import re
    text = open(os.path.join(os.path.dirname(__file__), "..", "..", doc)).read()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end if end >= 0 else None], flags=re.S)


def test_the_readme_reading_example_runs_as_written_on_the_demo_dataset(tmp_path, monkeypatch):
    """./run_local.sh writes out/sample-uniform; the README's snippet and docs/READING.md's
    first example train on it as written, and READING.md's slices example runs on it."""
    import tensorflow as tf
    from dcm2tfrecord.pipeline.commands.demo import UNIFORM_OPTIONS
    from tests.support import build_sample_archive
    archive = build_sample_archive(str(tmp_path / "archive"))
    run_convert(archive, tmp_path / "out" / "sample-uniform", **UNIFORM_OPTIONS)
    monkeypatch.chdir(tmp_path)
    classes = len(reader.info("out/sample-uniform").class_names)
    ran = {}
    for doc, section in (("README.md", "Reading"), ("docs/READING.md", "Reading with tf.data")):
        model = tf.keras.Sequential([tf.keras.layers.Flatten(), tf.keras.layers.Dense(classes)])
        model.compile("adam", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        namespace = ran[doc] = {"model": model}
        exec(compile(_python_blocks(section, doc)[0], f"{doc}#reading", "exec"), namespace)
        assert namespace["ds"].element_spec[0].dtype == namespace["val"].element_spec[0].dtype == tf.float32
        assert namespace["ds"].element_spec[0].shape.as_list() == [None, 64, 64, 3]
        history = model.history.history
        assert len(history["loss"]) == 10 and len(history["val_loss"]) == 10, doc
    # the README's random-access lines ran on the same dataset
    assert ran["README.md"]["image"].shape == (64, 64, 3)
    assert 0 <= int(ran["README.md"]["label"]) < classes
    slices = {}
    exec(compile(_python_blocks("Slices, class names and NumPy", "docs/READING.md")[0],
                 "docs/READING.md#slices", "exec"), slices)
    assert slices["names"] and set(slices["names"]) <= set(slices["info"].class_names)
    assert len(slices["folds"]) == 5


def test_the_demo_prints_no_tensorflow_start_up_lines(tmp_path):
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(PYTHONPATH=root, DCM2TFRECORD_ID_SALT="first-hour-test")
    proc = subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "demo", "--output", str(tmp_path / "s"),
                           "--archive", str(tmp_path / "a"), "--direct_num_workers=1",
                           "--direct_running_mode=in_memory"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-2000:]
    for marker in ("I0000", "E0000", "W0000", "absl::InitializeLog", "oneDNN", "cuInit"):
        assert marker not in proc.stderr + proc.stdout, (marker, proc.stderr)
    assert reader.info(str(tmp_path / "s-uniform")).split_names == ["train", "validation"]
