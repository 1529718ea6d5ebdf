"""Reliability V (issue 43), item 6: ``--summary_json`` is written whatever the end of a run
whose options parsed: a failed or refused run's file holds its status, the exit code the
process returned, the one line the terminal showed and the kind of failure (with the counts of
a run that refused to commit); never a failure over a committed run's summary."""
from __future__ import annotations

import json
import os

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.lock import OutputLock
from dcm2tfrecord.pipeline.launch.worker_start import WorkersNeverStarted
from dcm2tfrecord.pipeline.launch.worker_watch import WorkersDied
from dcm2tfrecord.pipeline.run_end import ConversionFailed, SummaryReport, failure_of, reporting
from dcm2tfrecord.transforms.errors import StorageOutage
from tests.support import IN_MEMORY, TEST_SALT, write_png_archive
from tests.support.processes import cli, our_lines

FAILED_KEYS = {"status", "exit_code", "reason", "message", "warnings", "output", "wall_seconds"}


def _convert(tmp_path, *extra: str, out=None):
    """(exit code, stderr, the --summary_json it left or None)."""
    summary = tmp_path / "reports" / "summary.json"
    code, _, stderr = cli("convert", "--input", str(tmp_path / "in"), "--output", str(out or tmp_path / "out"),
                          "--id_salt", TEST_SALT, "--progress", "none", "--summary_json", str(summary),
                          *IN_MEMORY, *extra)
    return code, stderr, json.loads(summary.read_text()) if summary.exists() else None


def says_the_end(code: int, stderr: str, summary: dict, status: str, reason: str) -> None:
    """The summary agrees with the process: status, exit code, the last line it printed."""
    assert summary is not None, stderr
    assert summary["status"] == status and summary["reason"] == reason, summary
    assert summary["exit_code"] == code, (summary, stderr)
    assert our_lines(stderr) and summary["message"] == our_lines(stderr)[-1], (summary["message"], stderr)
    assert FAILED_KEYS <= set(summary), summary
    assert "\n" not in summary["message"]


def test_a_run_that_refuses_to_commit_writes_its_failure_with_the_counts(tmp_path):
    write_png_archive(tmp_path / "in", 4, 16, 16)
    for i in range(2):
        (tmp_path / "in" / f"bad_{i}.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    code, stderr, summary = _convert(tmp_path)
    assert code == 1, stderr
    says_the_end(code, stderr, summary, "failed", "conversion_failed")
    assert "dataset.json NOT committed" in summary["message"]
    assert summary["matched"] == 6 and summary["written"] == 4 and sum(summary["failed"].values()) == 2
    assert summary["unaccounted"] == 0
    assert summary["output"] == str(tmp_path / "out")
    assert summary["run_failed_file"] == str(tmp_path / "out" / names.FAILED_RUN_NAME)
    assert os.path.exists(summary["run_failed_file"]) and os.path.exists(summary["errors_file"])
    assert not (tmp_path / "out" / names.MANIFEST_NAME).exists()


def test_a_failed_step_writes_its_root_cause(tmp_path):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    os.makedirs(tmp_path / "out" / "train-00000-of-00001.tfrecord")   # the shard's name taken by a folder
    code, stderr, summary = _convert(tmp_path)
    assert code == 1, stderr
    says_the_end(code, stderr, summary, "failed", "step_failed")
    assert "the run failed and committed nothing new" in summary["message"]
    assert "matched" not in summary           # no count is known of a run that stopped under way


def test_an_output_another_run_holds_is_not_run_with_exit_2(tmp_path):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    with OutputLock(str(tmp_path / "out")):
        code, stderr, summary = _convert(tmp_path)
    assert code == 2, stderr
    says_the_end(code, stderr, summary, "not_run", "output_busy")
    assert "is being written by process" in summary["message"]


def test_a_lock_that_cannot_be_taken_is_not_run_with_exit_2(tmp_path):
    write_png_archive(tmp_path / "in", 2, 8, 8)
    (tmp_path / "out" / names.LOCK_NAME).mkdir(parents=True)
    code, stderr, summary = _convert(tmp_path)
    assert code == 2, stderr
    says_the_end(code, stderr, summary, "not_run", "lock_unavailable")


def test_a_usage_error_found_after_parsing_is_not_run_and_one_before_writes_nothing(tmp_path):
    (tmp_path / "in").mkdir()      # matches nothing
    code, stderr, summary = _convert(tmp_path)
    assert code == 2, stderr
    says_the_end(code, stderr, summary, "not_run", "usage_error")
    assert not (tmp_path / "out").exists()
    os.unlink(tmp_path / "reports" / "summary.json")
    code, stderr, summary = _convert(tmp_path, "--no_such_flag")     # not parsed: no summary
    assert code == 2 and summary is None, stderr


@pytest.mark.parametrize("exc, status, code, reason", [
    (WorkersNeverStarted("no Python SDK worker started within 45 s"), "failed", 1, "workers_never_started"),
    (WorkersDied("a worker process was killed by SIGKILL"), "failed", 1, "workers_died"),
    (ConversionFailed("too many failed", {"matched": 3, "written": 1, "failed": {"x": 2}}), "failed", 1,
     "conversion_failed"),
    (StorageOutage("gs://b/x: storage did not answer"), "failed", 1, "storage_outage"),
    (RuntimeError("a worker's traceback\nRetryError: Deadline of 4.0s exceeded"), "failed", 1, "storage_outage"),
    (KeyboardInterrupt(), "failed", 130, "interrupted"),
])
def test_each_failure_kind_is_written_with_its_status_code_and_line(tmp_path, exc, status, code, reason):
    """The kinds a tiny local run cannot provoke here (a cluster's workers that never start, an
    interrupt) through the same writer the runs above go through."""
    path = tmp_path / "s.json"
    with pytest.raises(type(exc)):
        with reporting(SummaryReport(str(path), "/data/out")):
            raise exc
    summary = json.loads(path.read_text())
    failure = failure_of(exc)
    assert (summary["status"], summary["exit_code"], summary["reason"]) == (status, code, reason)
    assert summary["message"] == failure.message and failure.message.startswith("dcm2tfrecord convert: ")
    assert ("matched" in summary) == isinstance(exc, ConversionFailed)


def test_a_failure_after_the_commit_never_replaces_the_committed_summary(tmp_path, monkeypatch):
    """Printing the table fails after dataset.json and the summary were written: the summary
    stays the committed one, and the run exits 0 with a warning saying what was committed."""
    import io
    import sys
    from dcm2tfrecord.pipeline import convert
    write_png_archive(tmp_path / "in", 3, 8, 8)

    def broken_pipe(summary):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(convert, "print_summary", broken_pipe)
    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    path = tmp_path / "summary.json"
    code = convert.main(["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--id_salt", TEST_SALT,
                         "--progress", "none", "--summary_json", str(path), *IN_MEMORY])
    monkeypatch.undo()
    assert code == 0, stderr.getvalue()
    summary = json.loads(path.read_text())
    assert summary["status"] == "committed" and summary["exit_code"] == 0 and summary["written"] == 3
    line = our_lines(stderr.getvalue())[-1]
    assert "warning: the dataset was committed" in line and "BrokenPipeError" in line, line
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".summary.json")] == []
