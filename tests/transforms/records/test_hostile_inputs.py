"""Hostile inputs next to good files: the run completes, every bad file is named with its reason."""
import io
import json
import os
import resource
import struct
import subprocess
import sys
import time
import zlib

import numpy as np
import pydicom
import pytest
from PIL import Image

from dcm2tfrecord import reader
from dcm2tfrecord.pipeline.convert import ConversionFailed
from tests.support import pydicom_test_files
from tests.support import ct_file_bytes, run_convert, write_png_archive
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.records.build import build_record
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.sources.match import expand_pattern

SRC = pydicom_test_files()
SMALL = dict(target_shard_mb=1, min_shard_mb=0.1, max_shard_mb=8, max_failure_ratio=1.0)


def _copy(name, dest):
    data = open(os.path.join(SRC, name), "rb").read()
    dest.write_bytes(data)
    return data


def _png_bomb(path, width=20000, height=20000):
    """A valid PNG whose IHDR claims 4e8 pixels, with a few bytes of image data."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(bytes(1000))) + chunk(b"IEND", b""))


def _hostile_archive(root):
    good = write_png_archive(root, count=3, height=16, width=16)
    ct = _copy("CT_small.dcm", root / "ct.dcm")
    expected = {}

    def ct_variant(i):
        """CT_small with its own SOP Instance UID (else it is a duplicate of ct.dcm)."""
        ds = pydicom.dcmread(root / "ct.dcm")
        ds.SOPInstanceUID = f"1.2.826.0.1.3680043.9.9.{i}"
        return ds

    def bad(name, reason, data=None):
        if data is not None:
            (root / name).write_bytes(data)
        expected[name] = reason
    bad("empty.dcm", "empty_file", b"")
    bad("random.dcm", "invalid_dicom", np.random.default_rng(1).bytes(4096))
    bad("truncated_header.dcm", "truncated_file", ct[:300])
    ct_variant(1).save_as(root / "whole.dcm")
    bad("truncated_pixels.dcm", "truncated_file", (root / "whole.dcm").read_bytes()[:-2000])
    os.remove(root / "whole.dcm")
    ds = ct_variant(2)
    ds.PixelData = ds.PixelData + bytes(3 * len(ds.PixelData))
    ds.save_as(root / "longer_pixels.dcm")
    bad("longer_pixels.dcm", "pixel_data_length_mismatch")
    _copy("badVR.dcm", root / "bad_vr.dcm")
    bad("bad_vr.dcm", "invalid_value")
    ds = ct_variant(3)
    ds.file_meta.TransferSyntaxUID = "1.2.3.4.5.6.7"
    ds.save_as(root / "unknown_syntax.dcm", enforce_file_format=True)
    bad("unknown_syntax.dcm", "unsupported_transfer_syntax")
    jpeg = bytearray(open(os.path.join(SRC, "SC_rgb_jpeg.dcm"), "rb").read())
    start = jpeg.rfind(b"\xff\xd8\xff")
    jpeg[start:start + 400] = bytes(400)
    bad("corrupt_frame.dcm", "decode_error", bytes(jpeg))
    png = open(good[0], "rb").read()
    bad("truncated.png", "invalid_image", png[: len(png) // 2])
    jpg_path = write_png_archive(root / "j", count=1, height=64, width=64, channels=3, ext="jpg")[0]
    jpg = open(jpg_path, "rb").read()
    os.remove(jpg_path)
    os.rmdir(root / "j")
    bad("truncated.jpg", "invalid_image", jpg[: len(jpg) // 3])
    _png_bomb(root / "bomb.png")
    expected["bomb.png"] = "too_many_pixels"
    os.symlink(root / "does-not-exist.dcm", root / "broken_link.dcm")
    expected["broken_link.dcm"] = "broken_symlink"
    (root / "folder.dcm").mkdir()
    (root / "zz_duplicate_of_ct.dcm").write_bytes(ct)
    expected["zz_duplicate_of_ct.dcm"] = "duplicate"
    (root / "notes.txt").write_text("not an image")
    expected["notes.txt"] = "unsupported_format"
    _copy("rtplan.dcm", root / "rtplan.dcm")
    expected["rtplan.dcm"] = "no_pixel_data"
    return [os.path.basename(p) for p in good] + ["ct.dcm"], expected


def test_every_hostile_input_is_named_with_its_reason_and_good_files_are_written(tmp_path):
    good, expected = _hostile_archive(tmp_path / "a")
    run_convert(tmp_path / "a", tmp_path / "out", **SMALL)
    manifest = reader.info(str(tmp_path / "out"))
    counts = manifest["counts"]
    errors = [json.loads(line) for line in open(tmp_path / "out" / "errors.jsonl")]
    got = {os.path.basename(e["uri"]): e["reason"] for e in errors}
    assert got == expected
    for e in errors:
        assert e["reason"] in reasons.DOCUMENTED and e["message"] and e["stage"]
    assert counts["written"] == len(good)
    assert counts["matched"] == len(good) + len(expected)
    assert counts["matched"] == counts["written"] + sum(counts["skipped"].values()) + \
        sum(counts["failed"].values())


def test_too_many_failures_refuse_to_commit(tmp_path):
    write_png_archive(tmp_path / "a", count=3, height=16, width=16)
    (tmp_path / "a" / "bad1.dcm").write_bytes(b"garbage" * 50)
    (tmp_path / "a" / "bad2.dcm").write_bytes(b"")
    with pytest.raises(ConversionFailed, match="2 of 5 inputs failed"):
        run_convert(tmp_path / "a", tmp_path / "out", **{**SMALL, "max_failure_ratio": 0.1})
    assert not (tmp_path / "out" / "dataset.json").exists()
    assert len(open(tmp_path / "out" / "errors.jsonl").readlines()) == 2
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", DCM2TFRECORD_ID_SALT="s")
    done = subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", str(tmp_path / "a"),
                           "--output", str(tmp_path / "out2"), "--max_failures", "1",
                           "--direct_num_workers=1", "--direct_running_mode=in_memory"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1
    assert "2 of 5 inputs failed" in done.stderr and "errors.jsonl" in done.stderr
    assert not (tmp_path / "out2" / "dataset.json").exists()
    run_convert(tmp_path / "a", tmp_path / "out", **{**SMALL, "max_failure_ratio": 0.5})
    assert reader.info(str(tmp_path / "out"))["counts"]["written"] == 3
    assert not (tmp_path / "out" / "run_failed.json").exists()


def test_unreadable_file_is_reported_not_fatal(tmp_path):
    # Tests run as root, for whom chmod 000 does not stop a read: the opener raises the
    # PermissionError an ordinary user would get.
    path = tmp_path / "locked.dcm"
    _copy("CT_small.dcm", path)

    def locked(uri):
        raise PermissionError(13, "Permission denied", uri)
    source = next(expand_pattern(str(path)))
    with pytest.raises(ConversionError) as info:
        probe_file(source, opener=locked)
    assert info.value.reason == "unreadable" and "Permission denied" in str(info.value)


def test_file_changed_between_probe_and_write(tmp_path):
    path = tmp_path / "ct.dcm"
    _copy("CT_small.dcm", path)
    source = next(expand_pattern(str(path)))
    record = probe_file(source)
    time.sleep(0.01)
    with open(path, "ab") as handle:
        handle.write(b"\0\0")
    with pytest.raises(ConversionError) as info:
        build_record(record)
    assert info.value.reason == "changed_during_run"
    path.write_bytes(open(os.path.join(SRC, "CT_small.dcm"), "rb").read())
    os.utime(path, (source.mtime + 5, source.mtime + 5))
    with pytest.raises(ConversionError) as info:
        build_record(record)
    assert info.value.reason == "changed_during_run" and "mtime" in str(info.value)


def test_slow_decode_is_failed_not_waited_on(tmp_path):
    path = tmp_path / "big.dcm"
    _copy("examples_ybr_color.dcm", path)
    source = next(expand_pattern(str(path)))
    settings = DecodeSettings(decode_timeout_s=0.0005)
    record = probe_file(source, settings=settings)
    with pytest.raises(ConversionError) as info:
        build_record(record, settings=settings)
    assert info.value.reason == "decode_timeout"
    payload, dtype, shape = build_record(record, settings=DecodeSettings(decode_timeout_s=60))
    assert shape == (30, 240, 320, 3)


# ---------------------------------------------------------------- inputs replaced under the run (issue 35)


def _same_size_pair(kind: str) -> tuple[bytes, bytes]:
    """Two different files of one kind and one size (slices an export tool renumbers)."""
    if kind == "dicom":
        return ct_file_bytes(0, 1, 1, 2, 8, 2), ct_file_bytes(0, 1, 1, 3, 8, 3)
    if kind == "uid_past_the_head":
        # a header longer than the fingerprint's 64 KiB before its SOP Instance UID: two
        # files that differ in that UID alone (pixels, the file meta and all else equal)
        ds = pydicom.dcmread(os.path.join(SRC, "CT_small.dcm"))
        ds.ImageType = ["DERIVED"] * 9000           # (0008,0008), 72 KB, before (0008,0018)
        ds.file_meta.TransferSyntaxUID = pydicom.uid.ImplicitVRLittleEndian   # 4-byte lengths
        ds.file_meta.MediaStorageSOPInstanceUID = "1.2.826.0.1.3680043.9.7.0"
        out = []
        for uid in ("1.2.826.0.1.3680043.9.7.1", "1.2.826.0.1.3680043.9.7.2"):
            ds.SOPInstanceUID = uid
            buffer = io.BytesIO()
            ds.save_as(buffer)
            out.append(buffer.getvalue())
        assert out[0].index(b"9.7.1") > 64 << 10 and out[0].replace(b"9.7.1", b"9.7.2") == out[1]
        return out[0], out[1]
    rng = np.random.default_rng(3)
    out = []
    for _ in range(2):      # stored, not compressed: one size for one shape
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (40, 40), dtype=np.uint8)).save(buffer, "png", compress_level=0)
        out.append(buffer.getvalue())
    return out[0], out[1]


def _replace_keeping_size_and_mtime(path, data: bytes) -> None:
    """``path`` rewritten with ``data`` (of its size), its modification time put back: what
    ``rsync -a`` or ``cp -p`` leaves."""
    before = os.stat(path)
    assert len(data) == before.st_size
    path.write_bytes(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.mark.parametrize("kind", ["dicom", "png", "uid_past_the_head"])
def test_a_file_replaced_by_one_of_the_same_size_and_mtime_is_changed_during_run(tmp_path, kind):
    first, second = _same_size_pair(kind)
    assert first != second and len(first) == len(second)
    path = tmp_path / ("a.png" if kind == "png" else "a.dcm")
    path.write_bytes(first)
    record = probe_file(next(expand_pattern(str(path))))
    build_record(record)                                        # unchanged: it converts
    _replace_keeping_size_and_mtime(path, second)
    with pytest.raises(ConversionError) as info:
        build_record(record)
    assert info.value.reason == reasons.CHANGED_DURING_RUN
    assert "replaced during the run" in str(info.value) and "convert again" in str(info.value)
    _replace_keeping_size_and_mtime(path, first)                # put back: it converts again
    build_record(record)


_BUILD_AFTER_SWAP = """
import os, resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))   # the old code read /dev/zero until this
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.build import build_record
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.sources.match import expand_pattern
path, what = sys.argv[1], sys.argv[2]
def peak_mb():     # this program's own peak (VmHWM starts again at exec; ru_maxrss keeps the parent's)
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM")) // 1024
record = probe_file(next(expand_pattern(path)))
os.remove(path)
if what == "fifo":
    os.mkfifo(path)                 # opened for reading, it waits for a writer that never comes
else:
    os.symlink(what, path)          # matched inputs' links are followed
started = time.monotonic()
try:
    build_record(record, settings=DecodeSettings(decode_timeout_s=20))
    print("written")
except ConversionError as exc:
    print(exc.reason, "|", exc, "|", round(time.monotonic() - started, 2), "|",
          peak_mb())
"""


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "/dev/null"])
def test_an_input_that_becomes_a_fifo_or_a_device_before_its_write_is_not_read(tmp_path, what):
    path = tmp_path / "ct.dcm"
    path.write_bytes(ct_file_bytes(0, 1, 1, 2, 8, 2))
    proc = subprocess.run([sys.executable, "-c", _BUILD_AFTER_SWAP, str(path), what],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reason, message, seconds, peak_mb = proc.stdout.strip().splitlines()[-1].split(" | ")
    assert reason == reasons.NOT_A_REGULAR_FILE, proc.stdout
    assert message == ("a FIFO (named pipe)" if what == "fifo" else "a character device") + \
        ", not a regular file: not read"
    assert float(seconds) < 5                       # not the decode timeout
    assert int(peak_mb) < 1024, f"peak RSS {peak_mb} MB"


def test_a_file_grown_after_its_probe_is_read_no_further_than_its_probed_size(tmp_path):
    path = tmp_path / "ct.dcm"
    path.write_bytes(ct_file_bytes(0, 1, 1, 2, 8, 2))
    source = next(expand_pattern(str(path)))
    record = probe_file(source)
    os.truncate(path, 8 << 30)                      # 8 GiB, sparse: reading it whole would take 8 GiB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConversionError) as info:
        build_record(record)
    assert info.value.reason == reasons.CHANGED_DURING_RUN
    assert f"now more than {source.size}" in str(info.value)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 256 << 10    # KiB: under 256 MB more
