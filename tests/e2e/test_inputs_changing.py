"""Inputs replaced while a conversion runs, between its probe and its write (issue 35, items 5 and 6).

A real conversion, run as a user runs it, stops once every input is probed and the
shards are planned, before any shard writer has read a record (the ``opened`` pause
point of tests/support/hooks). Then, as ``rsync -a``, ``cp -p`` or an export tool that
renumbers slices would, files are rewritten with other files' bytes of the same size
and their modification times put back; one input becomes a FIFO, another a link to
``/dev/zero``. The run goes on: each replaced file is one ``changed_during_run`` line
saying to convert again, each FIFO or device one ``not_a_regular_file`` line, and no
record carries bytes other than its own file's (every record equals the one a
conversion of the untouched archive writes under that id); the other records are
written as ever.
"""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import reasons
from tests.support import TEST_SALT, ct_file_bytes, rid, run_convert
from tests.support.hooks import PAUSE_ENV
from tests.support.processes import run_until

ROTATED_CT = [f"ct/ct_{i:02d}.dcm" for i in range(4)]       # each gets the next one's bytes
SWAPPED_PNG = ["png/p_00.png", "png/p_01.png"]
FIFO, DEVICE = "ct/ct_04.dcm", "ct/ct_05.dcm"
UNTOUCHED = ["ct/ct_06.dcm", "ct/ct_07.dcm", "png/p_02.png", "png/p_03.png"]


def _archive(root: str) -> None:
    os.makedirs(os.path.join(root, "ct"))
    os.makedirs(os.path.join(root, "png"))
    for i in range(8):        # slices of one series: one size each
        with open(os.path.join(root, f"ct/ct_{i:02d}.dcm"), "wb") as handle:
            handle.write(ct_file_bytes(0, 1, 1, i, 8, i))
    rng = np.random.default_rng(4)
    for i in range(4):        # stored, not compressed: one size for one shape
        Image.fromarray(rng.integers(0, 255, (40, 40), dtype=np.uint8)).save(
            os.path.join(root, f"png/p_{i:02d}.png"), compress_level=0)


def _put_back_mtime(path: str, data: bytes) -> None:
    before = os.stat(path)
    assert len(data) == before.st_size
    with open(path, "wb") as handle:
        handle.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _replace_inputs(root: str) -> None:
    def read(rel):
        with open(os.path.join(root, rel), "rb") as handle:
            return handle.read()
    for group in (ROTATED_CT, SWAPPED_PNG):
        contents = [read(rel) for rel in group]
        for rel, data in zip(group, contents[1:] + contents[:1]):
            _put_back_mtime(os.path.join(root, rel), data)
    os.remove(os.path.join(root, FIFO))
    os.mkfifo(os.path.join(root, FIFO))
    os.remove(os.path.join(root, DEVICE))
    os.symlink("/dev/zero", os.path.join(root, DEVICE))


def _images(out: str) -> dict:
    """record id -> its pixels, every split (in the dataset's common dtype and layout: compared by value)."""
    found = {}
    for split in reader.info(out).split_names:
        records = reader.RandomAccess(out, split)
        for i in range(len(records)):
            found[records[i]["id"].decode()] = np.asarray(records[i]["image"])
    return found


def _errors(out: str, archive: str) -> dict:
    """rel path -> its errors.jsonl line (one line per file)."""
    with open(os.path.join(out, "errors.jsonl")) as handle:
        errors = [json.loads(line) for line in handle]
    got = {os.path.relpath(e["uri"], archive): e for e in errors}
    assert len(got) == len(errors), errors
    return got


def _convert_replacing_inputs_once_planned(tmp_path, unit: str) -> tuple[str, str, str]:
    """(archive, output, reference): the archive converted while its inputs are replaced after
    planning; the reference, a conversion of the archive as it was."""
    archive, pauses, out = str(tmp_path / "in"), tmp_path / "pauses", str(tmp_path / "out")
    _archive(archive)
    shutil.copytree(archive, tmp_path / "untouched")
    reference = str(tmp_path / "reference")
    run_convert(str(tmp_path / "untouched"), reference, unit=unit)
    pauses.mkdir()
    swapped: list = []

    def swap_once_planned() -> None:
        if not swapped and any(n.startswith("opened-") for n in os.listdir(pauses)):
            _replace_inputs(archive)
            swapped.append(True)
            (pauses / "go").touch()

    command = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive, "--output", out,
               "--id_salt", TEST_SALT, "--max_failure_ratio", "1.0", "--decode_timeout_s", "60",
               "--unit", unit, "--direct_num_workers=1", "--direct_running_mode=in_memory"]
    assert run_until(command, str(tmp_path / "run.log"), swap_once_planned,
                     env={PAUSE_ENV: f"opened:{pauses}"}) is None
    assert swapped, "no shard writer stopped before reading its records"
    return archive, out, reference


def _assert_replaced_pngs_failed_and_the_others_are_their_own(got: dict, out: str, reference: str,
                                                             written_ids: list) -> None:
    for rel in SWAPPED_PNG:
        assert got[rel]["reason"] == reasons.CHANGED_DURING_RUN, got[rel]
        assert "replaced during the run" in got[rel]["message"] and "convert again" in got[rel]["message"]
    written, expected = _images(out), _images(reference)
    assert sorted(written) == sorted(written_ids)
    for record_id, pixels in written.items():
        assert np.array_equal(pixels.ravel(), expected[record_id].ravel())   # its own pixels, as ever


def test_inputs_replaced_between_probe_and_write_are_named_and_never_written_as_another_file(tmp_path):
    archive, out, reference = _convert_replacing_inputs_once_planned(tmp_path, "file")
    got = _errors(out, archive)
    assert len(got) == len(ROTATED_CT) + len(SWAPPED_PNG) + 2
    for rel in ROTATED_CT:
        assert got[rel]["reason"] == reasons.CHANGED_DURING_RUN, got[rel]
        assert "replaced during the run" in got[rel]["message"] and "convert again" in got[rel]["message"]
    assert (got[FIFO]["reason"], got[FIFO]["message"]) == \
        (reasons.NOT_A_REGULAR_FILE, "a FIFO (named pipe), not a regular file: not read")
    assert (got[DEVICE]["reason"], got[DEVICE]["message"]) == \
        (reasons.NOT_A_REGULAR_FILE, "a character device, not a regular file: not read")
    _assert_replaced_pngs_failed_and_the_others_are_their_own(got, out, reference,
                                                             [rid(rel) for rel in UNTOUCHED])
    counts = reader.info(out)["counts"]
    assert counts["failed"] == {reasons.CHANGED_DURING_RUN: 6, reasons.NOT_A_REGULAR_FILE: 2}
    assert (counts["matched"], counts["written"], counts["unaccounted"]) == (12, len(UNTOUCHED), 0)


def test_a_volume_with_a_slice_replaced_after_planning_is_not_written(tmp_path):
    # --unit series: the eight slices are one volume; a replaced slice fails it whole, once per
    # slice, and no volume holds another file's slice
    archive, out, reference = _convert_replacing_inputs_once_planned(tmp_path, "series")
    got = _errors(out, archive)
    slices = [f"ct/ct_{i:02d}.dcm" for i in range(8)]
    assert sorted(got) == sorted(slices + SWAPPED_PNG)
    for rel in slices:
        assert got[rel]["reason"] in (reasons.CHANGED_DURING_RUN, reasons.NOT_A_REGULAR_FILE), got[rel]
        assert got[rel]["message"].startswith("series of 8 slices: ")
    _assert_replaced_pngs_failed_and_the_others_are_their_own(got, out, reference,
                                                             [rid(rel) for rel in UNTOUCHED if rel.endswith(".png")])
    counts = reader.info(out)["counts"]
    assert (counts["matched"], counts["written"], counts["unaccounted"]) == (12, 2, 0)
