"""Small NIfTI tasks with label maps converted for real (``run_convert``) with --class_map and,
where asked, --class_locations: shared by the class-location tests end to end
(tests/transforms/masks/test_class_locations_e2e.py) and the patch sampler's
(tests/reader/test_patches.py)."""
from __future__ import annotations

import os

import numpy as np

from tests.support import run_convert
from tests.support.nifti_tasks import PATTERN, class_map, save

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, keep_source_path=True)
# nibabel's [i, j, k]; the record's [k, j, i]. Sparse foreground: a patch sampler's ratio shows.
SHAPES = {"case_1": (20, 16, 12), "case_2": (14, 18, 10), "case_3": (9, 7, 5), "case_4": (16, 12, 8)}


def task(root, shapes=SHAPES, seed: int = 0) -> dict:
    """imagesTr/labelsTr of int16 images and uint8 label maps (values 0-4, mapped by
    nifti_tasks.CLASS_MAP: 1 kidney, 2 and 3 tumour, 4 no class), the labels in a small blob so
    most voxels are background; name -> (image, labels) as nibabel holds them."""
    written = {}
    for n, (case, shape) in enumerate(sorted(shapes.items())):
        rng = np.random.default_rng(seed + n)
        image = rng.integers(-1024, 3000, size=shape, dtype=np.int16)
        labels = np.zeros(shape, np.uint8)
        corner = tuple(int(rng.integers(0, max(1, s - 3))) for s in shape)
        blob = tuple(slice(c, min(s, c + 4)) for c, s in zip(corner, shape))
        labels[blob] = rng.integers(0, 5, size=labels[blob].shape, dtype=np.uint8)
        labels[corner] = 1                               # every case has a kidney voxel
        save(os.path.join(str(root), "imagesTr", f"{case}_0000.nii.gz"), image)
        save(os.path.join(str(root), "labelsTr", f"{case}.nii.gz"), labels)
        written[case] = (image, labels)
    return written


def convert(root, out, **options) -> dict:
    """``root``'s task (written by :func:`task`) converted with its masks; the summary, after
    checking nothing failed or was skipped."""
    summary = run_convert(root, out, **{**OPTIONS, "class_map": class_map(os.path.dirname(str(out))),
                                        "mask_pattern": PATTERN, **options})
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    return summary
