"""Shared by the --spacing and --crop conversions end to end (tests/transforms/masks/
test_spacing_e2e.py, test_crop_e2e.py): their options, class map, the features that keep the
source's grid, and the records of a conversion read back by source path."""
from __future__ import annotations

import json
import os

import numpy as np

from dcm2tfrecord import reader
from tests.support import run_convert

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, unit="series",
               keep_source_path=True)
CLASS_MAP_YAML = 'Liver: ["liver"]\nTumour: [".*tumou?r"]\n'
ORIGINALS = ("dicom/original_shape", "dicom/original_spacing", "dicom/original_affine")


def records(inputs, out, **options) -> dict:
    """Source path -> record of a conversion that fails and skips nothing."""
    summary = run_convert(inputs, out, **{**OPTIONS, **options})
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    access = reader.RandomAccess(str(out), "train")
    found = [access[i] for i in range(len(access))]
    return {bytes(r["source_path"]).decode(): r for r in found}


def manifest(out) -> dict:
    with open(os.path.join(str(out), "dataset.json")) as handle:
        return json.load(handle)


def affine(record) -> np.ndarray:
    return np.asarray(record["dicom/affine"], np.float64).reshape(4, 4)
