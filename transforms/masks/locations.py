"""``--class_locations N`` (issue 45, item 2): where each class of a record's mask lies, for a patch
sampler that picks a foreground centre without reading the pixels (reader/patch_sampler.py).

For each class c = 1..K of the mask as written (after --crop, --spacing and --resize), its voxel
count, its box ``[k0, k1, j0, j1, i0, i1]`` (half-open; zeros for an absent class) and up to ``N``
of its voxels ``(k, j, i)`` (MONAI's ``max_indices_per_class``): the class's voxels as flat
indices in C order, ``min(N, count)`` of them chosen without replacement by a generator seeded
from ``sha256(record id, class)``, then sorted. A pure function of the mask, the record id and
``N``: the same on every runner, every run, every worker.
"""
from __future__ import annotations

import hashlib

import numpy as np

from dcm2tfrecord.dataset.features import CLASS_BOX, CLASS_LOCATION_COUNTS, CLASS_LOCATIONS, CLASS_VOXELS
from dcm2tfrecord.dataset.masks import box, class_voxels


def class_seed(record_id: str, klass: int) -> int:
    """The seed of class ``klass``'s draw in record ``record_id``."""
    digest = hashlib.sha256(f"{record_id}\x00class_locations\x00{int(klass)}".encode()).digest()
    return int.from_bytes(digest[:16], "little")



def class_locations(mask: np.ndarray, record_id: str, limit: int, class_count: int) -> dict:
    """The --class_locations features of a mask ``[d, h, w, channels]`` of ``class_count`` classes,
    at most ``limit`` locations a class."""
    if limit < 1:
        raise ValueError(f"class_locations: limit {limit} must be >= 1")
    if mask.ndim != 4:
        raise ValueError(f"class_locations: mask of shape {mask.shape} is not [d, h, w, channels]")
    spatial = mask.shape[:3]
    voxels, boxes, counts, locations = [], [], [], []
    for klass in range(1, int(class_count) + 1):
        selected = class_voxels(mask, klass)
        flat = np.flatnonzero(selected)
        count = int(flat.size)
        voxels.append(count)
        boxes.extend(box(selected) if count else [0] * 6)
        n = min(int(limit), count)
        if n < count:
            chosen = np.random.default_rng(class_seed(record_id, klass)).choice(count, n, replace=False)
            flat = flat[np.sort(chosen)]
        counts.append(n)
        if n:
            locations.append(np.stack(np.unravel_index(flat, spatial), axis=1).astype(np.int64).reshape(-1))
    return {CLASS_VOXELS: np.asarray(voxels, np.int64),
            CLASS_BOX: np.asarray(boxes, np.int64),
            CLASS_LOCATIONS: np.concatenate(locations) if locations else np.zeros(0, np.int64),
            CLASS_LOCATION_COUNTS: np.asarray(counts, np.int64)}
