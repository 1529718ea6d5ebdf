"""The training view (``--spacing``, ``--crop foreground`` and ``--intensity zscore`` together, issue
44) writes the same bytes whichever way the job runs: an MSD-like NIfTI task whose label maps
cover part of each body (tests/support/preprocessed.py, ``--unit series``) converted in-process
(the reference), on BundleBasedDirectRunner, and from gs:// to gs:// on gcp-storage-emulator;
every shard and index file equals the reference's, byte for byte, and ``verify`` passes on the
reference."""
from __future__ import annotations

import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset.manifest import read_manifest
from dcm2tfrecord.dataset.verify import verify_dataset
from tests.support import IN_MEMORY, run_convert
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.nifti_tasks import PATTERN, class_map
from tests.support.preprocessed import CROP_BOX, msd_with_background

VIEW = dict(spacing="1.2,1.1,2.0", crop="foreground", intensity="zscore")
OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, unit="series", mask_pattern=PATTERN,
               splits="train=0.6,validation=0.4", **VIEW)


def _files(output) -> dict:
    """{name: bytes} of every shard and index dataset.json lists."""
    manifest = read_manifest(str(output))
    names = [name for split in manifest.splits.values() for shard in split.shards
             for name in (shard.file, shard.index)]
    out = {}
    for name in names:
        with open(os.path.join(str(output), name), "rb") as handle:
            out[name] = handle.read()
    return out


def _convert(inputs, output, classes, beam_args=IN_MEMORY) -> dict:
    summary = run_convert(inputs, output, beam_args=beam_args, class_map=classes, **OPTIONS)
    assert summary["failed"] == {} and summary["skipped"] == {} and summary["records"] == 3, summary
    return summary


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(work folder, task folder, class map, the in-process run's shards and indexes)."""
    work = tmp_path_factory.mktemp("training_view")
    msd_with_background(work / "msd")
    classes = class_map(work)
    _convert(work / "msd", work / "reference", classes)
    assert verify_dataset(str(work / "reference")).ok
    records = [access[i] for split in ("train", "validation")
               for access in [reader.RandomAccess(str(work / "reference"), split)] for i in range(len(access))]
    assert len(records) == 3 and all(r["image"].dtype == np.float32 for r in records)
    boxes = [tuple(int(n) for n in r[CROP_BOX]) for r in records]
    assert sum(box[0] > 0 or box[2] > 0 or box[4] > 0 for box in boxes) == 2, boxes     # two cut, one whole
    files = _files(work / "reference")
    assert len(files) >= 4, sorted(files)          # two splits, a shard and an index each
    return work, work / "msd", classes, files


def test_another_runner_writes_the_reference_bytes(reference, tmp_path):
    _, task, classes, files = reference
    _convert(task, tmp_path / "out", classes, beam_args=["--runner=BundleBasedDirectRunner"])
    got = _files(tmp_path / "out")
    assert sorted(got) == sorted(files)
    for name, data in files.items():
        assert got[name] == data, name


def test_gs_to_gs_writes_the_reference_bytes(reference, gcs_emulator):  # noqa: F811  (fixture)
    work, task, classes, files = reference
    gcs_emulator.upload_tree(str(task), "view/msd")
    gs_classes = gcs_emulator.upload_file(classes, "view/meta/classes.yaml")
    _convert(gcs_emulator.url("view/msd"), gcs_emulator.url("view/out"), gs_classes,
             beam_args=IN_MEMORY + [f"--temp_location={gcs_emulator.url('view/tmp')}"])
    copy = work / "gs_copy"
    gcs_emulator.download_tree("view/out", str(copy))
    got = _files(copy)
    assert sorted(got) == sorted(files)
    for name, data in files.items():
        assert got[name] == data, name
