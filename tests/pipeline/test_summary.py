"""The end-of-run summary: the printed table and --summary_json."""
import io
import json
import os
import statistics
import sys

import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline import cli
from tests.support import write_png_archive

MB = 1 << 20


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """A two-split run through the command line, with one skipped and one failed input."""
    root = tmp_path_factory.mktemp("summary")
    archive = root / "archive"
    write_png_archive(archive, count=24, height=64, width=64, channels=3, seed=3)
    (archive / "notes.txt").write_text("not an image")
    (archive / "truncated.png").write_bytes((archive / "img_0000.png").read_bytes()[:60])
    out, summary_json = root / "out", root / "reports" / "summary.json"
    capture = pytest.MonkeyPatch()
    stdout, stderr = io.StringIO(), io.StringIO()
    capture.setattr(sys, "stdout", stdout)
    capture.setattr(sys, "stderr", stderr)
    try:
        code = cli.main(["convert", "--input", str(archive), "--output", str(out),
                         "--splits", "train=0.5,validation=0.5", "--id_salt", "summary-salt",
                         "--target_shard_mb", "0.05", "--min_shard_mb", "0.02", "--max_shard_mb", "0.1",
                         "--summary_json", str(summary_json), "--progress", "none",
                         "--direct_num_workers=1", "--direct_running_mode=in_memory"])
    finally:
        capture.undo()
    assert code == 0, stderr.getvalue()
    return {"out": str(out), "json": json.loads(summary_json.read_text()),
            "table": stdout.getvalue(), "manifest": reader.info(str(out))}


def test_summary_json_has_per_split_shard_sizes(converted):
    summary, manifest = converted["json"], converted["manifest"]
    assert set(summary["splits"]) == set(manifest["splits"]) == {"train", "validation"}
    for name, entry in manifest["splits"].items():
        sizes = [s["num_bytes"] for s in entry["shards"]]
        assert len(sizes) >= 2
        got = summary["splits"][name]
        assert got["records"] == entry["num_records"]
        assert got["shards"] == len(sizes)
        assert got["bytes"] == sum(sizes) == entry["num_bytes"]
        assert got["min_shard_bytes"] == min(sizes)
        assert got["median_shard_bytes"] == int(statistics.median(sizes))
        assert got["max_shard_bytes"] == max(sizes)
        assert [(s["file"], s["bytes"]) for s in got["shard_files"]] == \
            [(s["file"], s["num_bytes"]) for s in entry["shards"]]
    assert summary["records"] == 24 == sum(s["records"] for s in summary["splits"].values())


def test_summary_json_has_reasons_errors_path_wall_time_and_throughput(converted):
    summary, manifest = converted["json"], converted["manifest"]
    assert summary["matched"] == 26 and summary["written"] == 24
    assert summary["skipped"] == manifest["counts"]["skipped"] == {"unsupported_format": 1}
    assert summary["failed"] == manifest["counts"]["failed"] == {"invalid_image": 1}
    assert summary["unaccounted"] == 0
    assert summary["errors_file"] == os.path.join(converted["out"], "errors.jsonl")
    assert len(open(summary["errors_file"]).read().splitlines()) == 2
    wall = summary["wall_seconds"]
    assert wall > 0
    assert summary["bytes_written"] == sum(s["bytes"] for s in summary["splits"].values())
    # the rates come from the unrounded wall time, wall_seconds is rounded to 1 ms: on a
    # sub-second run that alone moves a rate by up to 0.0005 / wall of itself
    slack = 0.0005 / wall + 1e-3
    assert summary["mb_per_second"] == pytest.approx(summary["bytes_written"] / MB / wall, rel=slack, abs=0.01)
    assert summary["records_per_second"] == pytest.approx(24 / wall, rel=slack, abs=0.01)


def test_printed_table_says_the_same(converted):
    table, summary = converted["table"], converted["json"]
    lines = table.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["split", "records"])
    assert "min MB" in lines[header] and "median MB" in lines[header] and "max MB" in lines[header]
    for name, split in summary["splits"].items():
        row = next(line for line in lines if line.split()[:1] == [name]).split()
        assert row[1:3] == [str(split["records"]), str(split["shards"])]
        assert float(row[3]) == pytest.approx(split["bytes"] / MB, abs=0.01)
        assert float(row[4]) == pytest.approx(split["min_shard_bytes"] / MB, abs=0.01)
        assert float(row[6]) == pytest.approx(split["max_shard_bytes"] / MB, abs=0.01)
    assert any(line.split() == ["skipped", "unsupported_format", "1"] for line in lines)
    assert any(line.split() == ["failed", "invalid_image", "1"] for line in lines)
    assert f"which files and why: {summary['errors_file']}" in table
    assert "files: 26 matched, 24 written, 1 skipped, 1 failed" in table
    assert "wall time" in table and "MB/s" in table and "records/s" in table


def test_a_committed_summary_says_so_and_keeps_every_key(converted):
    """Issue 43, item 6: the status keys a failed run's summary has too, on a committed one,
    beside every key a committed summary had before."""
    summary = converted["json"]
    assert (summary["status"], summary["exit_code"], summary["reason"]) == ("committed", 0, None)
    assert summary["message"] is None and summary["warnings"] == []
    assert {"notes", "output", "splits", "matched", "written", "records", "skipped", "failed", "unaccounted",
            "label_rows_rejected", "unmatched_label_rows", "errors_file", "wall_seconds", "bytes_written",
            "mb_per_second", "records_per_second", "execution"} <= set(summary)
    reports = os.path.dirname(converted["out"])
    assert sorted(os.listdir(os.path.join(reports, "reports"))) == ["summary.json"]     # no temp file left
