"""``PatchSampler``: balanced, seeded, exactly resumable patches of a split's volumes and masks.

One implementation (NumPy only: no TensorFlow, no torch, no Beam) with three front ends: the
sampler itself is a PyTorch map-style dataset and a Grain ``RandomAccessDataSource`` (``len``,
``[i]``, picklable), :func:`torch_patches` puts it in a ``DataLoader``, and :func:`patches`
(imports TensorFlow when called) in ``tf.data``.

Patch ``i`` of the stream is a pure function of ``(seed, i)`` and the dataset: epoch ``e = i //
P`` (``P = records * per_volume`` patches an epoch), its position ``q = i % P``; the record is
``order_e[q // per_volume]``, ``order_e`` the seeded permutation of the split's records that
``ElasticSampler`` uses (reader/schedule.py), so each record is visited ``per_volume`` times in
a row each epoch; every other draw comes from a counter-based generator
``np.random.default_rng([seed, e, q])``. So a run restarted at step ``k`` computes the same
patches in the same order from ``k * batch`` on, any number of loader workers give the same
patches, and pipelines or ranks that take the stream's positions ``r, r + n, ...`` share none.

What a patch is centred on (the nnU-Net and TorchIO rules):

- ``foreground=f`` (nnU-Net's ``oversample_foreground_percent``): with probability ``f`` a
  foreground patch: one of the classes present in the record, uniformly, then one of its
  voxels; otherwise the patch is placed uniformly;
- ``class_probabilities={label: p}`` (TorchIO's ``LabelSampler``; labels are class indices or
  names, 0 or ``"background"`` for the background): a label drawn by ``p``, then one of its
  voxels (a label absent from the record: the patch is placed uniformly).

A class's voxels are the record's ``classes/locations`` (``convert --class_locations N``), read
without scanning the mask; without them the mask is scanned (warned once: slower). The patch
lies inside the volume where it fits, the chosen voxel inside it (nnU-Net's bounds); where the
volume is smaller than the patch it is padded (nnU-Net pads to the patch size): the image with
``pad_value``, the mask with 0. Each patch is ``{"image": [d, h, w, c], "mask": [d, h, w, mc],
"origin": [3] (the patch's first voxel in the record, negative where padded), "centre": [3],
"label": the label it was centred on (-1: placed uniformly), "record": index, "id": record id,
"index": i}``, contiguous arrays.

Records are read whole, by ``RandomAccess`` (the plain layout: every visit reads and decodes the
whole volume; warned once; ``per_volume`` amortises it, the last records read are kept). On a
dataset converted with ``--volume_chunks N`` a patch is a region read
(``RandomAccess.region``): only the bricks it overlaps, plus each record's small features once;
the whole mask only where a draw needs it (no stored class locations, a background centre).
"""
from __future__ import annotations

import collections
import threading
import warnings
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.dataset.features import CLASS_LOCATION_COUNTS, CLASS_LOCATIONS, SHAPE_FEATURES
from dcm2tfrecord.reader.random_access import RandomAccess, cut
from dcm2tfrecord.reader.schedule import _rng

__all__ = ["PatchSampler", "torch_patches", "grain_patches", "patches", "cut"]

UNIFORM = -1                 # "label" of a patch placed uniformly
BACKGROUND_TRIES = 64        # uniform draws looking for a background voxel before the mask is scanned
_warned: set = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, stacklevel=3)


def _bounds(shape: Sequence[int], size: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """nnU-Net's bounds of a patch's origin on each axis: inside the volume where the patch fits,
    else the one origin that centres the volume in the padded patch."""
    shape_, size_ = np.asarray(shape, np.int64), np.asarray(size, np.int64)
    need = np.maximum(size_ - shape_, 0)
    low = -(need // 2)
    high = shape_ + need // 2 + need % 2 - size_
    return low, high


class _Record:
    """A record as the sampler uses it: image, mask, and each label's voxels (flat, C order)
    where known."""

    def __init__(self, record: dict, classes: int, mask_dtype: np.dtype,
                 load_mask: Optional[Callable[[], np.ndarray]] = None):
        image = record.get("image")
        self.image = image           # None on a chunked dataset: patches are read as regions
        self.shape = tuple(int(n) for n in image.shape[:3]) if image is not None else \
            tuple(int(record[name]) for name in SHAPE_FEATURES[:3])
        self._mask = None if load_mask is not None else record["mask"].astype(mask_dtype, copy=False)
        self._load_mask, self._mask_dtype = load_mask, mask_dtype
        self.id = bytes(record["id"])
        self._classes = classes
        self._voxels: dict[int, np.ndarray] = {}
        counts = record.get(CLASS_LOCATION_COUNTS)
        self.stored = counts is not None and len(counts) == classes
        if self.stored:
            points = np.asarray(record[CLASS_LOCATIONS], np.int64).reshape(-1, 3)
            ends = np.cumsum(np.asarray(counts, np.int64))
            for c, own in enumerate(np.split(points, ends[:-1])):
                self._voxels[c + 1] = np.asarray(np.ravel_multi_index(own.T, self.shape)) if len(own) \
                    else np.zeros(0, np.int64)

    @property
    def mask(self) -> np.ndarray:
        """The whole mask (on a chunked dataset read when first needed: a scan, a background draw)."""
        if self._mask is None:
            assert self._load_mask is not None
            self._mask = self._load_mask().astype(self._mask_dtype, copy=False)
        return self._mask

    def voxels(self, label: int) -> np.ndarray:
        """Flat indices of voxels of foreground ``label`` (the stored sample, or the mask's all)."""
        found = self._voxels.get(label)
        if found is None:
            found = np.flatnonzero(mask_format.class_voxels(self.mask, label))
            self._voxels[label] = found
        return found

    def present(self) -> list[int]:
        return [c for c in range(1, self._classes + 1) if self.voxels(c).size]


class PatchSampler:
    """Patches of ``size`` ``(d, h, w)`` voxels of the volumes and masks of ``split``
    (a dataset converted with ``--class_map``; its class locations from ``--class_locations``).

    - ``foreground``: the share of patches centred on a foreground voxel (nnU-Net's 1/3), the
      rest placed uniformly; or ``class_probabilities`` ``{label: weight}`` (label a class index
      1..K or name, 0 or ``"background"``), normalised.
    - ``per_volume``: patches of a record per visit, in a row.
    - ``seed``: the stream's seed (>= 0); ``shuffle=False`` visits records in split order.
    - ``epochs``: epochs the stream holds (``len``); ``pad_value``: the image's padding.
    - ``version``: for a root written with ``convert --incremental``; ``verify``: check CRCs.

    ``len(sampler)`` is the stream's patches, ``sampler[i]`` patch ``i`` (pure: any process,
    any order). Picklable; keeps the last few records read (``cache`` of them) per process.
    """

    def __init__(self, dataset_dir: Union[str, RandomAccess], split: str = "train",
                 size: Sequence[int] = (128, 128, 128), *, foreground: float = 1 / 3,
                 class_probabilities: Optional[Mapping[Any, float]] = None, per_volume: int = 1,
                 seed: int = 0, shuffle: bool = True, epochs: int = 1, pad_value: Any = 0,
                 version=None, verify: bool = True, cache: int = 2):
        records = dataset_dir if isinstance(dataset_dir, RandomAccess) else \
            RandomAccess(dataset_dir, split, version=version, verify=verify)
        classes = records.manifest.mask_classes
        if classes is None:
            raise ValueError(f"{records.dataset_dir} has no masks (convert it with --class_map): a patch "
                             f"sampler cuts image and mask patches")
        if not records.layout.volume:
            raise ValueError(f"{records.dataset_dir} split {split!r} holds 2-D records: PatchSampler cuts "
                             f"patches of volumes")
        size = tuple(int(n) for n in size)
        if len(size) != 3 or min(size) < 1:
            raise ValueError(f"PatchSampler: size {size} must be three positive sizes (d, h, w)")
        for name, value, least in (("per_volume", per_volume, 1), ("seed", seed, 0), ("epochs", epochs, 1),
                                   ("cache", cache, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"PatchSampler: {name} must be a whole number >= {least}, not {value!r}")
        self.records = records
        self.split = split
        self.size = size
        self.class_names = list(classes)
        self.per_volume, self.seed, self.shuffle, self.epochs = int(per_volume), int(seed), bool(shuffle), int(epochs)
        self.pad_value = pad_value
        self.cache = int(cache)
        self.labels, self.weights = self._weights(foreground, class_probabilities)
        self.foreground = None if class_probabilities is not None else float(foreground)
        self.mask_dtype = np.dtype(mask_format.read_dtype(len(self.class_names)))
        self.image_dtype = np.dtype(records.layout.dtype)
        self.channels = records.layout.known_dims[3]
        self.mask_channels = mask_format.known_channels(records.manifest.mask_layout, len(self.class_names))
        options = records.manifest.options if isinstance(records.manifest.options, dict) else {}
        self.stored_locations = bool(options.get("class_locations"))
        self.chunked = records.chunks is not None
        if not self.chunked:
            _warn_once("plain", "PatchSampler reads each visited record whole (the plain layout): a patch costs a "
                                "whole volume's read and decode; per_volume > 1 spreads that cost over its patches "
                                "(convert --volume_chunks N: a patch reads only its bricks)")
        if not self.stored_locations:
            _warn_once("scan", f"{records.dataset_dir} has no class locations (convert --class_locations N): "
                               f"foreground patches scan each visited record's mask")
        self._state()

    def _state(self) -> None:
        self._lock = threading.Lock()
        self._cached: collections.OrderedDict = collections.OrderedDict()
        self._order: Optional[tuple[int, np.ndarray]] = None

    def __getstate__(self):
        state = dict(self.__dict__)
        for name in ("_lock", "_cached", "_order"):
            state.pop(name)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._state()

    def _weights(self, foreground: float, given: Optional[Mapping[Any, float]]) -> tuple[list[int], np.ndarray]:
        if given is None:
            if not 0 <= float(foreground) <= 1:
                raise ValueError(f"PatchSampler: foreground {foreground} must lie in [0, 1]")
            return [], np.zeros(0)
        names = {name: n + 1 for n, name in enumerate(self.class_names)}
        names["background"] = 0
        labels, weights = [], []
        for key, weight in given.items():
            label = names.get(key, key)
            if isinstance(label, bool) or not isinstance(label, (int, np.integer)) \
                    or not 0 <= label <= len(self.class_names):
                raise ValueError(f"PatchSampler: class_probabilities key {key!r} is no class of "
                                 f"{['background', *self.class_names]} nor an index 0..{len(self.class_names)}")
            if not weight >= 0:
                raise ValueError(f"PatchSampler: class_probabilities[{key!r}] {weight} must be >= 0")
            labels.append(int(label))
            weights.append(float(weight))
        total = sum(weights)
        if not total > 0 or len(set(labels)) != len(labels):
            raise ValueError(f"PatchSampler: class_probabilities {dict(given)} must name each label once, "
                             f"with a positive total")
        return labels, np.asarray(weights) / total

    # ---------------------------------------------------------------- the stream

    @property
    def patches_per_epoch(self) -> int:
        return len(self.records) * self.per_volume

    def __len__(self) -> int:
        return self.epochs * self.patches_per_epoch

    def indices(self, start: int = 0, num_shards: int = 1, shard: int = 0) -> range:
        """The stream positions one of ``num_shards`` pipelines or ranks reads from ``start`` on:
        ``start + shard, start + shard + num_shards, ...`` (the shards share none)."""
        if not 0 <= shard < num_shards:
            raise ValueError(f"shard {shard} is not in 0..{num_shards - 1}")
        return range(int(start) + int(shard), len(self), int(num_shards))

    def _record_order(self, epoch: int) -> np.ndarray:
        memo = self._order
        if memo is not None and memo[0] == epoch:
            return memo[1]
        n = len(self.records)
        order = _rng("records", self.seed, n, int(epoch)).permutation(n) if self.shuffle else np.arange(n)
        self._order = (epoch, order)
        return order

    def choice(self, index: int) -> tuple[int, int, np.random.Generator]:
        """``(epoch, record index, generator)`` of stream position ``index``."""
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"patch {index} is outside the stream's {len(self)}")
        epoch, position = divmod(index, self.patches_per_epoch)
        record = int(self._record_order(epoch)[position // self.per_volume])
        return epoch, record, np.random.default_rng([self.seed, epoch, position])

    def _record(self, index: int) -> _Record:
        with self._lock:
            found = self._cached.get(index)
            if found is not None:
                self._cached.move_to_end(index)
                return found
        if self.chunked:
            info = self.records.info(index)
            shape = [int(info[name]) for name in SHAPE_FEATURES[:3]]
            found = _Record(info, len(self.class_names), self.mask_dtype,
                            lambda: self.records.region(index, (0, 0, 0), shape, image=False)["mask"])
        else:
            found = _Record(self.records[index], len(self.class_names), self.mask_dtype)
        with self._lock:
            self._cached[index] = found
            while len(self._cached) > self.cache:
                self._cached.popitem(last=False)
        return found

    def _centre(self, record: _Record, rng: np.random.Generator) -> tuple[int, Optional[np.ndarray]]:
        """(the label the patch is centred on, its voxel), or (UNIFORM, None)."""
        if self.foreground is not None:
            if rng.random() >= self.foreground:
                return UNIFORM, None
            present = record.present()
            if not present:
                return UNIFORM, None
            label = present[int(rng.integers(len(present)))]
        else:
            label = self.labels[int(rng.choice(len(self.labels), p=self.weights))]
        if label == 0:
            return self._background(record, rng)
        voxels = record.voxels(label)
        if not voxels.size:
            return UNIFORM, None
        flat = int(voxels[int(rng.integers(voxels.size))])
        return label, np.asarray(np.unravel_index(flat, record.shape), np.int64)

    def _background(self, record: _Record, rng: np.random.Generator) -> tuple[int, Optional[np.ndarray]]:
        shape = np.asarray(record.shape)
        for _ in range(BACKGROUND_TRIES):
            voxel = (rng.random(3) * shape).astype(np.int64)
            if not (record.mask[tuple(voxel)] != 0).any():
                return 0, voxel
        background = np.flatnonzero(~(record.mask != 0).any(axis=-1))
        if not background.size:
            return UNIFORM, None
        flat = int(background[int(rng.integers(background.size))])
        return 0, np.asarray(np.unravel_index(flat, record.shape), np.int64)

    def __getitem__(self, index: int) -> dict:
        index = int(index)
        if index < 0:
            index += len(self)
        _, record_index, rng = self.choice(index)
        record = self._record(record_index)
        label, centre = self._centre(record, rng)
        low, high = _bounds(record.shape, self.size)
        if centre is None:
            origin = np.asarray([int(rng.integers(lo, hi + 1)) for lo, hi in zip(low, high)], np.int64)
            centre = origin + np.asarray(self.size, np.int64) // 2
        else:
            origin = np.clip(centre - np.asarray(self.size, np.int64) // 2, low, high)
        if record.image is None:      # a chunked dataset: the bricks the patch overlaps
            box = self.records.region(record_index, origin, self.size, pad_value=self.pad_value)
            image = box["image"].astype(self.image_dtype, copy=False)
            mask = box["mask"].astype(self.mask_dtype, copy=False)
        else:
            image = cut(record.image, origin, self.size, self.pad_value)
            mask = cut(record.mask, origin, self.size, 0)
        return {"image": image, "mask": mask,
                "origin": origin, "centre": centre, "label": np.int64(label),
                "record": np.int64(record_index), "id": record.id, "index": np.int64(index)}

    def __repr__(self) -> str:
        return (f"PatchSampler({self.records.dataset_dir!r}, split={self.split!r}, size={self.size}: "
                f"{self.patches_per_epoch} patches an epoch, {self.epochs} epochs)")


TORCH_KEYS = ("image", "mask", "origin", "label", "record", "index")


def torch_patches(sampler: PatchSampler, batch_size: int, *, start: int = 0, num_shards: int = 1, shard: int = 0,
                  num_workers: int = 0, drop_last: bool = False, keys: Optional[Sequence[str]] = TORCH_KEYS,
                  **kwargs: Any):
    """A ``torch.utils.data.DataLoader`` of ``sampler``'s patches from stream position ``start``
    (resume at step ``k``: ``start = k * batch_size * num_shards``), this rank's share of them
    (``shard`` of ``num_shards``: ``torch.distributed``'s rank and world size), batched by
    ``numpy_collate`` (reader/loaders.py); any ``num_workers`` gives the same batches."""
    import torch

    from dcm2tfrecord.reader.loaders import numpy_collate
    positions = sampler.indices(start, num_shards, shard)

    def collate(items):
        return numpy_collate(items, keys)
    dataset: Any = sampler      # map-style: __len__ and __getitem__ (not a torch Dataset subclass)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=positions, num_workers=num_workers,
                                       drop_last=drop_last, collate_fn=collate, **kwargs)


def grain_patches(sampler: PatchSampler, batch_size: int, *, shard_options=None, worker_count: int = 0,
                  drop_remainder: bool = False, **kwargs: Any):
    """A ``grain.DataLoader`` of ``sampler``'s patches (the sampler is its
    ``RandomAccessDataSource``) in stream order, batched; ``shard_options`` (Grain's) gives each
    process a share without duplicates; Grain checkpoints the position (resume exactly)."""
    import grain.python as grain

    from dcm2tfrecord.reader.loaders import GRAIN_PREFETCH, RecordSampler
    order = RecordSampler(len(sampler), shard_options=shard_options or grain.NoSharding(), shuffle=False,
                          num_epochs=1)
    kwargs.setdefault("read_options", grain.ReadOptions(num_threads=2 if worker_count else 0,
                                                        prefetch_buffer_size=GRAIN_PREFETCH))
    return grain.DataLoader(data_source=sampler, sampler=order, worker_count=worker_count,
                            operations=[grain.Batch(batch_size, drop_remainder=drop_remainder)], **kwargs)


def patches(dataset: Union[str, PatchSampler], split: str = "train", size: Sequence[int] = (128, 128, 128), *,
            batch_size: int = 2, start_step: int = 0, input_context=None, drop_remainder: bool = False,
            prefetch: Optional[int] = None, parallel: Optional[int] = None, **options: Any):
    """A ``tf.data.Dataset`` of batches of patches (``image``, ``mask``, ``origin``, ``centre``,
    ``label``, ``record``, ``index``, ``id``) of ``dataset`` (a ``PatchSampler``, or a dataset
    directory whose ``split`` a ``PatchSampler(dataset, split, size, **options)`` samples),
    this input pipeline's share under
    ``input_context`` (a ``tf.distribute.InputContext``: pipeline ``p`` of ``n`` takes stream
    positions ``p, p + n, ...``; ``batch_size`` is the pipeline's), from global step
    ``start_step`` on (each step a global batch of ``batch_size * n`` patches). The patches are
    the NumPy sampler's, made by ``tf.py_function`` (in order: ``deterministic`` maps)."""
    import tensorflow as tf
    sampler = dataset if isinstance(dataset, PatchSampler) else PatchSampler(dataset, split, size, **options)
    pipelines = getattr(input_context, "num_input_pipelines", 1) if input_context else 1
    pipeline = getattr(input_context, "input_pipeline_id", 0) if input_context else 0
    positions = sampler.indices(int(start_step) * int(batch_size) * pipelines, pipelines, pipeline)
    mask_dtype = tf.as_dtype(sampler.mask_dtype)
    image_dtype = tf.as_dtype(sampler.image_dtype)

    def make(index):
        patch = sampler[int(index.numpy())]
        return (patch["image"], patch["mask"], patch["origin"], patch["centre"], patch["label"],
                patch["record"], patch["index"], patch["id"])

    def one(index):
        values = tf.py_function(make, [index], [image_dtype, mask_dtype, tf.int64, tf.int64, tf.int64, tf.int64,
                                                tf.int64, tf.string])
        image, mask, origin, centre, label, record, at, record_id = values
        image.set_shape(sampler.size + (sampler.channels,))
        mask.set_shape(sampler.size + (sampler.mask_channels,))
        for vector in (origin, centre):
            vector.set_shape((3,))
        for scalar in (label, record, at, record_id):
            scalar.set_shape(())
        return {"image": image, "mask": mask, "origin": origin, "centre": centre, "label": label,
                "record": record, "index": at, "id": record_id}

    data = tf.data.Dataset.range(positions.start, positions.stop, positions.step)
    data = data.map(one, num_parallel_calls=parallel or tf.data.AUTOTUNE, deterministic=True)
    return data.batch(batch_size, drop_remainder=drop_remainder).prefetch(prefetch or tf.data.AUTOTUNE)
