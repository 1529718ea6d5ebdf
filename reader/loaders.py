"""``torch_loader`` and ``grain_loader``: ``RandomAccess`` in PyTorch and Grain at its own speed.

Neither torch nor grain is imported with this module: each function imports its
library when called, so ``from dcm2tfrecord import reader`` stays free of both.

What the defaults cost and what these do instead (docs/READING.md, "Loaders at the
speed of RandomAccess"; figures in docs/BENCHMARKS.md, "15. RandomAccess in PyTorch and Grain"):

- torch's ``default_collate`` stacks each batch with ``torch.stack``, which runs on
  torch's intra-op threads: on a 2-core machine they spin waiting for work, and a
  224x224x3 record costs 5x the CPU of the read itself. ``numpy_collate`` stacks
  with NumPy in the calling thread and wraps the result with ``torch.from_numpy``
  (no copy, no torch threads).
- With worker processes, a batch travels to the main process through shared memory.
  ``numpy_collate`` run in a worker stacks straight into a shared-memory tensor (as
  ``default_collate`` does), so the batch is written once and never copied again;
  only the small features are pickled.
- Grain's ``IndexSampler`` builds a NumPy ``Philox`` generator for every record (the
  ``rng`` of random map transforms), and Grain's default ``ReadOptions`` (16 threads,
  a prefetch buffer of 500 polled on every element) cost more than the read.
  ``grain_loader`` uses ``RecordSampler`` (the same record order as ``IndexSampler``
  with the same arguments, so checkpoints carry over, without the generator; the
  plain ``IndexSampler`` when an operation is a random map) and reads in the
  calling thread (``num_threads=0``) or, with workers, 2 threads and a buffer of 16.
"""
from __future__ import annotations

import functools
import numbers
from typing import Any, Optional, Sequence

import numpy as np

__all__ = ["numpy_collate", "torch_loader", "grain_loader", "RecordSampler", "Selected"]

GRAIN_PREFETCH = 16          # records a Grain read thread pool keeps in flight
GRAIN_WORKER_BUFFER = 2      # batches each Grain worker process keeps ready


def _stacked(values: list, torch):
    """One batched value: arrays and numbers stacked into a tensor (in shared memory inside a
    loader worker process), anything else (bytes, ragged arrays, ...) left as a list."""
    first = values[0]
    if isinstance(first, np.ndarray) and first.dtype != object:
        shape = first.shape
        if all(isinstance(v, np.ndarray) and v.shape == shape and v.dtype == first.dtype for v in values):
            if torch.utils.data.get_worker_info() is None:
                return torch.from_numpy(np.stack(values))
            # in a worker: stacked straight into shared memory (as default_collate allocates
            # it), which the main process maps when it receives the batch: no copy on the way
            elem = torch.from_numpy(first)
            storage = elem._typed_storage()._new_shared(len(values) * first.size, device=elem.device)
            out = elem.new(storage).resize_(len(values), *shape)
            np.stack(values, out=out.numpy())
            return out
        return values
    if isinstance(first, (np.number, np.bool_, numbers.Number)) and not isinstance(first, (bytes, str)):
        return torch.from_numpy(np.asarray(values))
    return values


def numpy_collate(records: Sequence[dict], keys: Optional[Sequence[str]] = None) -> dict:
    """``torch.utils.data.DataLoader``'s ``collate_fn`` for ``RandomAccess`` records: a dict of
    the batch's tensors (``image``, ``label``, the numeric features), lists for the others (``id``
    and other bytes features, variable-length ones), stacked by NumPy without torch's threads.
    ``keys``: only these features (default: all the records have)."""
    import torch
    return {key: _stacked([r[key] for r in records], torch) for key in (keys or records[0])}


TORCH_KEYS = ("image", "label")


def torch_loader(records, batch_size: int, *, shuffle: Optional[bool] = None, seed: Optional[int] = None,
                 num_workers: int = 0, drop_last: bool = False,
                 keys: Optional[Sequence[str]] = TORCH_KEYS, **kwargs: Any):
    """A ``torch.utils.data.DataLoader`` over ``records`` (a ``RandomAccess``) with
    ``numpy_collate``: batches built by NumPy (in the worker processes when ``num_workers``),
    holding the values ``DataLoader(records, batch_size, ...)`` gives for ``keys``.

    - ``keys``: the features of each batch, ``image`` and ``label`` by default; ``None``: every
      feature (``id``, the shape features, ...). With workers each tensor of a batch travels
      as a shared-memory segment of its own, so fewer keys cost less.
    - ``seed``: the shuffle's ``torch.Generator`` seed (one order run after run).
    - ``shuffle``: default True, False when a ``sampler`` orders the records (e.g. a
      ``reader.ElasticSampler``: this rank's share of a global order, resumable by its
      ``start_step`` after the world size or ``num_workers`` changed; ``batch_size`` then
      its ``global_batch // world_size``).
    - other keywords go to ``DataLoader`` (``persistent_workers``, ``prefetch_factor``,
      ``sampler``...).
    """
    import torch
    from torch.utils.data import DataLoader
    if shuffle is None:
        shuffle = kwargs.get("sampler") is None and kwargs.get("batch_sampler") is None
    generator = kwargs.pop("generator", None)
    if generator is None and seed is not None:
        generator = torch.Generator()
        generator.manual_seed(seed)
    kwargs.setdefault("collate_fn", functools.partial(numpy_collate, keys=keys) if keys else numpy_collate)
    return DataLoader(records, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                      drop_last=drop_last, generator=generator, **kwargs)


_SAMPLER_CLASS: list = []


def _record_sampler_class():
    if not _SAMPLER_CLASS:
        import grain.python as grain

        class _RecordSampler(grain.IndexSampler):
            """``grain.IndexSampler`` without the per-record random generator."""

            def __getitem__(self, index: int):
                if index < 0 or (self._max_index is not None and index >= self._max_index):
                    raise IndexError(f"record index {index} out of range [0, {self._max_index})")
                key = self._record_keys[index // self._shard_options.shard_count]
                return grain.RecordMetadata(index=index, record_key=key, rng=None)

        _SAMPLER_CLASS.append(_RecordSampler)
    return _SAMPLER_CLASS[0]


def RecordSampler(num_records: int, *, shard_options=None, shuffle: bool = False,
                  num_epochs: Optional[int] = None, seed: Optional[int] = None):
    """A Grain sampler yielding the records ``grain.IndexSampler`` yields for the same
    arguments, in the same order (a checkpoint of one resumes with the other), without
    building a NumPy random generator per record: records carry ``rng=None``, so it is not
    for ``grain.RandomMapTransform`` operations (``grain_loader`` then uses IndexSampler)."""
    import grain.python as grain
    shard_options = grain.NoSharding() if shard_options is None else shard_options
    return _record_sampler_class()(num_records, shard_options=shard_options, shuffle=shuffle,
                                   num_epochs=num_epochs, seed=seed)


class Selected:
    """``records`` (a ``RandomAccess``) whose items keep ``keys`` only: a Grain data source
    (``len``, ``[i]``), picklable for worker processes. Grain maps and batches every feature
    of every record one by one; the fewer, the cheaper."""

    def __init__(self, records, keys: Sequence[str]):
        self.records, self.keys = records, tuple(keys)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index) -> dict:
        record = self.records[index]
        return {key: record[key] for key in self.keys}

    def __repr__(self) -> str:
        return f"Selected({self.records!r}, keys={self.keys})"


class _ElasticGrainSampler:
    """A Grain sampler over an ``ElasticSampler``: index ``i`` is the rank's ``i``-th record of
    the global order."""

    def __init__(self, elastic):
        import grain.python as grain
        self.elastic = elastic
        self._shard_options = grain.NoSharding()       # the rank's share is the sampler's own

    def __getitem__(self, index: int):
        import grain.python as grain
        return grain.RecordMetadata(index=int(index), record_key=self.elastic[index], rng=None)


def grain_loader(records, batch_size: int, *, seed: Optional[int] = 0, shuffle: bool = True,
                 num_epochs: Optional[int] = 1, worker_count: int = 0, shard_options=None,
                 operations: Sequence = (), drop_remainder: bool = False, read_options=None,
                 worker_buffer_size: Optional[int] = None,
                 keys: Optional[Sequence[str]] = TORCH_KEYS, sampler=None, **kwargs: Any):
    """A ``grain.python.DataLoader`` over ``records`` (a ``RandomAccess``): ``operations``
    then ``Batch(batch_size)``, a global shuffle by ``seed`` (``num_epochs`` None: endless),
    checkpointable as every Grain loader (``iterator.get_state()`` / ``set_state``).
    ``keys``: the features each record keeps (``image`` and ``label`` by default; None: all).

    Reads in the calling thread without workers, else ``worker_count`` processes each with 2
    read threads; ``read_options``, ``worker_buffer_size`` and other keywords (``DataLoader``'s)
    override that.

    ``sampler``: an ``ElasticSampler`` (reader.schedule) in place of Grain's: this rank's share
    of a global order, resumed by its ``start_step`` after the number of ranks or workers
    changed (``seed``, ``shuffle``, ``num_epochs`` and ``shard_options`` are then its own).
    Its records carry no random generator (not for ``grain.RandomMapTransform``).
    """
    import grain.python as grain
    from dcm2tfrecord.reader.schedule import ElasticSampler
    if isinstance(sampler, ElasticSampler):
        sampler = _ElasticGrainSampler(sampler)
    elif sampler is not None:
        raise TypeError(f"grain_loader: sampler must be a reader.ElasticSampler, not {type(sampler).__name__} "
                        f"(a Grain sampler goes to grain.DataLoader itself)")
    else:
        shard_options = grain.NoSharding() if shard_options is None else shard_options
        random = any(isinstance(op, grain.RandomMapTransform) for op in operations)
        make = grain.IndexSampler if random else RecordSampler
        sampler = make(len(records), shard_options=shard_options, shuffle=shuffle, num_epochs=num_epochs,
                       seed=seed)
    if read_options is None:
        read_options = grain.ReadOptions(num_threads=2 if worker_count else 0,
                                         prefetch_buffer_size=GRAIN_PREFETCH)
    if worker_count and worker_buffer_size is None:
        worker_buffer_size = GRAIN_WORKER_BUFFER
    if worker_buffer_size is not None:
        kwargs["worker_buffer_size"] = worker_buffer_size
    source = Selected(records, keys) if keys else records
    return grain.DataLoader(data_source=source, sampler=sampler, worker_count=worker_count,
                            operations=[*operations, grain.Batch(batch_size, drop_remainder=drop_remainder)],
                            read_options=read_options, **kwargs)
