"""``--intensity ct``: the dataset's foreground intensity fingerprint, computed in the job, and
nnU-Net's ``CTNormalization`` with it.

nnU-Net v2 (``nnunetv2.experiment_planning.dataset_fingerprint.fingerprint_extractor``) draws,
from each training case, 10,000 foreground voxels with replacement
(``np.random.RandomState(seed).choice``, foreground: the segmentation's voxels > 0), pools them,
and keeps per channel the 0.5 and 99.5 percentiles, mean and standard deviation of the pool;
``CTNormalization`` clips an image to the percentiles and z-scores it with that mean and
deviation, in float32. Here:

- **Which records.** The records of the split named ``train`` (:data:`TRAINING_SPLIT`): never
  validation or test ones, whose intensities would leak into the training data. Foreground is
  where the record's mask is non-zero (any class) when the run has masks, every voxel otherwise;
  a record with no foreground adds nothing, as in nnU-Net. The pixels are the record's after
  ``--crop`` and before ``--spacing`` (nnU-Net's fingerprint is of the cropped, unresampled cases).
- **Which voxels.** Per record, :data:`SAMPLES_PER_RECORD` voxels per channel drawn exactly as
  nnU-Net draws them, from ``RandomState(record_seed(key))``, ``key`` the record's stable id: the
  same record gives the same voxels on every runner and in every bundle, and
  ``collect_foreground_intensities(seg, images, seed=record_seed(key))`` of nnU-Net gives them too.
- **Bounded and order-free.** Each drawn voxel gets a priority from a second generator seeded by
  the same key; the pool keeps the :data:`MAX_SAMPLES` voxels of lowest (priority, value) per
  channel: a uniform sample of the whole pool when it is larger (an archive of 200,000 records
  draws 2 billion), the whole pool otherwise (up to 200 records, nnU-Net's pool itself). Merging
  pools is a sort and a cut, so the result does not depend on how a runner splits or orders them;
  the statistics are computed from the values sorted, in float64.
"""
from __future__ import annotations

import hashlib
from typing import Any, Optional

import numpy as np

from dcm2tfrecord.dataset.features import INTENSITY_CLIP_HIGH, INTENSITY_CLIP_LOW
from dcm2tfrecord.transforms.images.intensity import MEAN, STD

TRAINING_SPLIT = "train"
SAMPLES_PER_RECORD = 10_000     # nnU-Net's num_samples per case
MAX_SAMPLES = 2_000_000         # per channel: nnU-Net's pool for 200 cases; 24 MB held
EPSILON = 1e-8                  # nnU-Net's: max(std, 1e-8)
RULE = ("nnU-Net v2 CTNormalization: per channel, clip to the 0.5 and 99.5 percentiles of the foreground "
        f"voxels of split {TRAINING_SPLIT!r} ({SAMPLES_PER_RECORD} drawn per record with replacement, "
        f"RandomState seeded by the record's id; at most {MAX_SAMPLES} kept, those of lowest keyed "
        "priority), then (x - mean) / max(std, 1e-8) with their mean and standard deviation")

Pool = list   # per channel: (priorities uint64, values float32), sorted by (priority, value)


def record_seed(key: str) -> int:
    """The seed of a record's draw: the first 4 bytes of SHA-256 of its stable id."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "little")


def foreground(pixels: np.ndarray, mask: Optional[np.ndarray]) -> np.ndarray:
    """The ``(D, H, W)`` voxels the fingerprint draws from: the mask's non-zero ones (any channel)
    with a mask, all of them without one."""
    if mask is None:
        return np.ones(pixels.shape[:3], dtype=bool)
    return np.asarray(np.asarray(mask).reshape(pixels.shape[:3] + (-1,)).any(axis=-1), dtype=bool)


def sample(pixels: np.ndarray, region: np.ndarray, key: str) -> Pool:
    """One record's pool (module docstring): per channel of its ``(D, H, W, C)`` pixels,
    :data:`SAMPLES_PER_RECORD` values of ``region`` drawn as nnU-Net draws them, with priorities."""
    draw = np.random.RandomState(record_seed(key))
    ranks = np.random.default_rng(record_seed(key) ^ 0x5EED)
    pool: Pool = []
    for c in range(pixels.shape[-1]):
        inside = np.asarray(pixels[..., c])[region]
        if inside.size == 0:
            pool.append((np.zeros(0, np.uint64), np.zeros(0, np.float32)))
            continue
        values = draw.choice(inside.astype(np.float32, copy=False), SAMPLES_PER_RECORD, replace=True)
        priorities = ranks.integers(0, np.iinfo(np.int64).max, size=values.size, dtype=np.int64).astype(np.uint64)
        pool.append(_keep(priorities, values.astype(np.float32)))
    return pool


def _keep(priorities: np.ndarray, values: np.ndarray, cap: int = MAX_SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((values, priorities))[:cap]
    return priorities[order], values[order]


def merge(pools, cap: int = MAX_SAMPLES) -> Pool:
    """The pool of several pools: per channel, the ``cap`` of lowest (priority, value)."""
    pools = [p for p in pools if p]
    if not pools:
        return []
    channels = max(len(p) for p in pools)
    if any(len(p) != channels for p in pools):
        raise ValueError(f"records with {sorted({len(p) for p in pools})} channels: one fingerprint "
                         "needs one number of channels")
    return [_keep(np.concatenate([p[c][0] for p in pools]), np.concatenate([p[c][1] for p in pools]), cap)
            for c in range(channels)]


def statistics(pool: Pool) -> Optional[dict[str, Any]]:
    """dataset.json's ``fingerprint`` from the pool: per channel (lists, one value each) the mean,
    std, 0.5/50/99.5 percentiles, min, max and the number of voxels kept; None when no training
    record had foreground."""
    if not pool or any(values.size == 0 for _, values in pool):
        return None
    stats: dict[str, list] = {k: [] for k in ("mean", "std", "percentile_00_5", "median", "percentile_99_5",
                                              "min", "max", "voxels")}
    for _, values in pool:
        ordered = np.sort(values).astype(np.float64)
        low, median, high = np.percentile(ordered, (0.5, 50.0, 99.5))
        for name, value in (("mean", ordered.mean()), ("std", ordered.std()), ("percentile_00_5", low),
                            ("median", median), ("percentile_99_5", high), ("min", ordered[0]),
                            ("max", ordered[-1])):
            stats[name].append(float(value))
        stats["voxels"].append(int(ordered.size))
    return {"scheme": "ct", "split": TRAINING_SPLIT, "rule": RULE, **stats}


def merge_by_channels(pools) -> dict[int, Pool]:
    """Pools of records with different numbers of channels kept apart: channels -> pool."""
    by: dict[int, list] = {}
    for pool in pools:
        for channels, part in (pool.items() if isinstance(pool, dict) else ((len(pool), pool),)):
            if part:
                by.setdefault(channels, []).append(part)
    return {channels: merge(parts) for channels, parts in sorted(by.items())}


def dataset_statistics(by_channels: dict[int, Pool]) -> Optional[dict[str, Any]]:
    """:func:`statistics` of the records' most common number of channels (by voxels kept; fewer
    channels first on a tie): a record with another number fails at write, naming it."""
    if not by_channels:
        return None
    channels = max(sorted(by_channels), key=lambda c: by_channels[c][0][1].size if by_channels[c] else 0)
    return statistics(by_channels[channels])


Bounds = tuple   # per channel: (clip low, clip high, mean, std), floats


def bounds(stats: dict[str, Any]) -> Bounds:
    """What a record's normalisation needs of dataset.json's ``fingerprint``, hashable."""
    return tuple((float(lo), float(hi), float(mean), float(std)) for lo, hi, mean, std in
                 zip(stats["percentile_00_5"], stats["percentile_99_5"], stats["mean"], stats["std"]))


def normalize(pixels: np.ndarray, per_channel: Bounds) -> np.ndarray:
    """nnU-Net's ``CTNormalization.run``: each channel clipped to the fingerprint's 0.5/99.5
    percentiles, minus its mean, over max(std, 1e-8), in float32."""
    out = np.array(pixels, dtype=np.float32)
    if out.shape[-1] != len(per_channel):
        raise ValueError(f"the record has {out.shape[-1]} channels, the fingerprint {len(per_channel)}")
    for c, (low, high, mean, std) in enumerate(per_channel):
        channel = out[..., c]
        np.clip(channel, low, high, out=channel)
        channel -= mean
        channel /= max(std, EPSILON)
    return out


CLIP_LOW = INTENSITY_CLIP_LOW
CLIP_HIGH = INTENSITY_CLIP_HIGH
FEATURES = {
    CLIP_LOW: {"dtype": "float", "shape": [-1],
               "description": "--intensity ct: per channel, the dataset fingerprint's 0.5 percentile the "
                              "image was clipped to (dataset.json fingerprint)"},
    CLIP_HIGH: {"dtype": "float", "shape": [-1],
                "description": "--intensity ct: per channel, its 99.5 percentile; the clipped image was then "
                               "(x - intensity/mean) / max(intensity/std, 1e-8) everywhere"},
    MEAN: {"dtype": "float", "shape": [-1],
           "description": "--intensity ct: per channel, the mean of the dataset fingerprint's foreground "
                          "voxels (the same for every record)"},
    STD: {"dtype": "float", "shape": [-1],
          "description": "--intensity ct: per channel, their standard deviation"},
}


def features(per_channel: Bounds) -> dict:
    """A ``ct`` record's ``intensity/*`` features: the dataset's clip bounds, mean and std."""
    low, high, mean, std = (np.asarray(v, dtype=np.float32) for v in zip(*per_channel))
    return {CLIP_LOW: low, CLIP_HIGH: high, MEAN: mean, STD: std}
