"""verify, ``--class_locations N`` (issue 45, item 2): each record's ``classes/*`` against its own mask.

For each class c = 1..K (dataset.json's ``mask_classes``):

- ``classes/voxels[c]`` is the number of the mask's voxels of class c;
- ``classes/box[c]`` ``[k0, k1, j0, j1, i0, i1]`` is their half-open box (zeros when there are none);
- ``classes/location_counts[c]`` is ``min(N, voxels)``, and its ``(k, j, i)`` of
  ``classes/locations`` lie inside the image, inside the box, on voxels of class c, none twice.

Each problem is one line ending in the fix. The mask format's class rule (dataset/masks.py) says
which voxels are of class c; nothing of transforms/ is imported (this layer imports none of it).
"""
from __future__ import annotations

import math

import numpy as np

from dcm2tfrecord.dataset.features import (CLASS_BOX, CLASS_LOCATION_COUNTS, CLASS_LOCATIONS, CLASS_VOXELS,
                                           MASK_CHANNELS, MASK_DTYPE, MASK_RAW)
from dcm2tfrecord.dataset.masks import box, class_voxels


def _fix(limit: int) -> str:
    return f"convert the inputs again with --class_locations {limit}, as dataset.json records"


def _ints(features: dict, name: str):
    kind, values = features.get(name, (None, []))
    return np.asarray(list(values), dtype=np.int64) if kind == "int64" else None



def check_locations(features: dict, dims: list, classes: int, limit: int) -> list[str]:
    """One decoded record's ``classes/*`` problems (its mask already checked whole), one line each."""
    fix = _fix(limit)
    found = {name: _ints(features, name) for name in (CLASS_VOXELS, CLASS_BOX, CLASS_LOCATIONS,
                                                      CLASS_LOCATION_COUNTS)}
    missing = [name for name, values in found.items() if values is None]
    if missing:
        return [f"feature {name!r} is missing or not int64: --class_locations keeps it; {fix}" for name in missing]
    voxels, boxes, locations, counts = (found[n] for n in (CLASS_VOXELS, CLASS_BOX, CLASS_LOCATIONS,
                                                           CLASS_LOCATION_COUNTS))
    if voxels.size != classes or boxes.size != 6 * classes or counts.size != classes \
            or locations.size != 3 * int(counts.sum()) or (counts < 0).any():
        return [f"classes/* hold {voxels.size} voxel counts, {boxes.size} box values, {counts.size} location "
                f"counts and {locations.size} location values: {classes} classes need {classes}, {6 * classes}, "
                f"{classes} and 3 per counted location; {fix}"]
    dtype = np.dtype(bytes(features[MASK_DTYPE][1][0]).decode())
    channels = int(features[MASK_CHANNELS][1][0])
    shape = (*dims[:3], channels)
    mask = np.frombuffer(bytes(features[MASK_RAW][1][0]), dtype=dtype.newbyteorder("<"))
    if mask.size != math.prod(shape):
        return []               # the mask check says so
    mask = mask.reshape(shape)
    points = locations.reshape(-1, 3)
    starts = np.concatenate([[0], np.cumsum(counts)])
    for c in range(classes):
        klass = c + 1
        selected = class_voxels(mask, klass)
        count = int(selected.sum())
        if int(voxels[c]) != count:
            return [f"classes/voxels says class {klass} has {int(voxels[c])} voxels, the mask has {count}; {fix}"]
        expected = box(selected)
        if boxes[6 * c:6 * c + 6].tolist() != expected:
            return [f"classes/box of class {klass} is {boxes[6 * c:6 * c + 6].tolist()}, the mask's is {expected}; "
                    f"{fix}"]
        if int(counts[c]) != min(limit, count):
            return [f"classes/location_counts says class {klass} has {int(counts[c])} locations: --class_locations "
                    f"{limit} keeps min({limit}, {count} voxels) = {min(limit, count)}; {fix}"]
        own = points[starts[c]:starts[c + 1]]
        if not own.size:
            continue
        inside = ((own >= 0) & (own < np.asarray(dims[:3]))).all(axis=1)
        if not inside.all():
            bad = own[np.flatnonzero(~inside)[0]].tolist()
            return [f"classes/locations of class {klass}: {bad} lies outside the image {list(dims[:3])}; {fix}"]
        lo, hi = np.asarray(expected[0::2]), np.asarray(expected[1::2])
        in_box = ((own >= lo) & (own < hi)).all(axis=1)
        on_class = selected[own[:, 0], own[:, 1], own[:, 2]]
        if not (in_box & on_class).all():
            bad = own[np.flatnonzero(~(in_box & on_class))[0]].tolist()
            return [f"classes/locations of class {klass}: {bad} is not a voxel of class {klass}; {fix}"]
        if len(np.unique(np.ravel_multi_index(own.T, dims[:3]))) != len(own):
            return [f"classes/locations of class {klass} repeats a voxel; {fix}"]
    return []
