"""Shared by the --spacing and --crop conversions end to end (tests/transforms/masks/
test_spacing_e2e.py, test_crop_e2e.py): their options, class map, the features that keep the
source's grid, and the records of a conversion read back by source path."""
from __future__ import annotations

import json
import os

import numpy as np

from dcm2tfrecord import reader
from tests.support import run_convert
from tests.support.nifti_tasks import save

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


CROP_BOX = "dicom/crop_box"


def box(selected: np.ndarray) -> tuple:
    """The half-open [k0, k1, j0, j1, i0, i1] of the true voxels of a [d, h, w] array."""
    out = []
    for axis in range(3):
        hits = np.flatnonzero(selected.any(axis=tuple(a for a in range(3) if a != axis)))
        out += [int(hits[0]), int(hits[-1]) + 1]
    return tuple(out)


def cut(array: np.ndarray, box) -> np.ndarray:
    return array[box[0]:box[1], box[2]:box[3], box[4]:box[5]]


def msd_with_background(root) -> None:
    """Two cases whose int16 images are zero around a body (nibabel's [i, j, k]), their label
    maps inside it, and a third all zero (kept whole)."""
    rng = np.random.default_rng(7)
    for case, shape, body in (("case_1", (12, 10, 8), (slice(2, 9), slice(3, 8), slice(1, 6))),
                              ("case_2", (9, 11, 6), (slice(0, 5), slice(4, 11), slice(2, 4))),
                              ("case_3", (5, 6, 4), None)):
        image = np.zeros(shape, np.int16)
        labels = np.zeros(shape, np.uint8)
        if body is not None:
            image[body] = rng.integers(1, 3000, size=image[body].shape, dtype=np.int16)
            labels[body] = rng.integers(0, 5, size=labels[body].shape, dtype=np.uint8)
        save(os.path.join(str(root), "imagesTr", f"{case}_0000.nii.gz"), image)
        save(os.path.join(str(root), "labelsTr", f"{case}.nii.gz"), labels)
