"""The tiny archive every runner converts (e2e/test_runners.py, e2e/test_worker_fork.py),
its in-process reference run, and the strings of a job description
(e2e/test_dataflow_dry_run.py, e2e/test_runners.py)."""
import base64
import hashlib
import json
import os
import shutil

import pytest

from dcm2tfrecord.dataset import names
from dcm2tfrecord.pipeline import convert
from dcm2tfrecord.pipeline.options.table import ConvertOptions
from tests.support import TEST_SALT, pydicom_test_files, write_png_archive


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """(input folder, labels csv, salt file, work folder)."""
    work = tmp_path_factory.mktemp("runners")
    root = work / "in"
    pngs = write_png_archive(root / "png", 4, 12, 12)
    data = open(pngs[0], "rb").read()
    (root / "png" / "truncated.png").write_bytes(data[: len(data) // 2])
    os.makedirs(root / "dicom")
    shutil.copyfile(os.path.join(pydicom_test_files(), "CT_small.dcm"), root / "dicom" / "CT_small.dcm")
    rows = [f"png/{os.path.basename(p)},{'ab'[i % 2]}" for i, p in enumerate(pngs)]
    (work / "labels.csv").write_text("path,label\n" + "\n".join(rows + ["png/truncated.png,a",
                                                                        "dicom/CT_small.dcm,b"]) + "\n")
    (work / "salt").write_text(TEST_SALT + "\n")
    return str(root), str(work / "labels.csv"), str(work / "salt"), work


def _opts(archive, output, **extra) -> ConvertOptions:
    root, labels, salt, _ = archive
    values = {"labels": labels, "id_salt_file": salt, "splits": "train=0.5,validation=0.5",
              "max_failure_ratio": 1.0, **extra}
    return ConvertOptions(inputs=(root,), output=str(output), **values)


def _shards(output) -> dict:
    """{file: sha256} of every shard and index a run committed."""
    out = {}
    for name in sorted(os.listdir(output)):
        if ".tfrecord" in name:
            with open(os.path.join(output, name), "rb") as handle:
                out[name] = hashlib.sha256(handle.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def reference(archive):
    """The in-process run's shards, and its counts."""
    output = archive[3] / "reference"
    convert.run(_opts(archive, output), ["--direct_num_workers=1", "--direct_running_mode=in_memory"],
                quiet=True)
    with open(output / names.MANIFEST_NAME) as handle:
        counts = json.load(handle)["counts"]
    with open(output / names.ERRORS_NAME) as handle:
        stages = {json.loads(line)["stage"] for line in handle if line.strip()}
    # decoding fails while shards are written: WriteShards emits shard results and failures
    assert counts["failed"] and "decode" in stages, (counts, stages)
    assert len(_shards(output)) == 4, _shards(output)    # two splits, a shard and an index each
    return _shards(output), counts


def _expanded(blob: bytes, depth: int = 0):
    """``blob`` and what is packed inside it: base64 runs decoded, zlib and bzip2 streams
    inflated, recursively (a ParDo payload holds a base64 string of a compressed pickle)."""
    import bz2
    import re
    import zlib
    yield blob
    if depth >= 4:
        return
    for run in re.findall(rb"[A-Za-z0-9+/]{40,}={0,2}", blob):
        try:
            decoded = base64.b64decode(run + b"=" * (-len(run) % 4))
        except ValueError:
            continue
        yield from _expanded(decoded, depth + 1)
    for match in re.finditer(rb"\x78[\x01\x5e\x9c\xda]", blob):
        try:
            inflated = zlib.decompressobj().decompress(blob[match.start():])
        except zlib.error:
            continue
        if inflated:
            yield from _expanded(inflated, depth + 1)
    for match in re.finditer(rb"BZh[1-9]1AY&SY", blob):
        try:
            inflated = bz2.BZ2Decompressor().decompress(blob[match.start():])
        except (OSError, ValueError):
            continue
        yield from _expanded(inflated, depth + 1)


def _byte_strings(value):
    """Every string of the job description, and everything packed inside it (pickled DoFns,
    coders, side inputs)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from _byte_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _byte_strings(item)
    elif isinstance(value, str):
        yield from _expanded(value.encode("utf-8", "surrogateescape"))
