"""The record order of a seeded (or unshuffled) epoch, as a pure function.

``reader.load(seed=S)`` reads epoch ``e`` in an order computed from the
manifest's shard list and counts, the split, the seed and ``e`` alone, never
from what was read before, so that a run restarted at step ``k`` can compute
where every shard stands at ``k`` and read from there (``start_step``):

1. shards in an order permuted per epoch (manifest order without shuffle);
2. read ``cycle`` at a time and interleaved round robin, one record per open
   shard in turn, a finished shard's place taken by the next shard of the
   order: exactly what ``tf.data``'s ``interleave(cycle_length=cycle,
   block_length=1)`` yields (deterministic, also when parallel), so the
   reader runs that op over the shard list. ``Order.inputs_from`` replays
   the round robin on the counts alone (no reading) up to a position and
   returns the list of ``(shard, records to skip)`` whose interleave yields
   the rest of the epoch: the shards open there, rotated to the one whose
   turn it is and started by ``skip``, then the shards not yet opened; the
   finished ones are left out;
3. records shuffled in consecutive windows of ``window`` records (the
   shards were already shuffled as a whole at write time). Resuming inside
   a window reads that window from its start: at most ``window - 1``
   records read and dropped, however large ``k`` is.

Shard permutations come from NumPy's PCG64 seeded by a hash of (seed,
split, number of shards, epoch): the same order for the same manifest, seed
and versions of this reader and NumPy.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np


def _rng(*key) -> np.random.Generator:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=16).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))


class _RoundRobin:
    """tf.data's (sequential) interleave, block_length 1, on record counts.

    Mirrors InterleaveDatasetOp's loop step by step: a slot holding a shard
    yields its next record and passes the turn; a finished shard is noticed
    on its next turn, which then passes without a record; an empty slot
    opens the next input shard and reads from it in the same turn.
    """

    def __init__(self, inputs, counts, cycle: int):
        self.inputs, self.counts, self.cycle = list(inputs), counts, cycle
        self.next_input, self.turn, self.end = 0, 0, False
        self.slots: list = [None] * cycle             # [shard, records read] or None

    def step(self):
        """One pass of the loop: ``(shard, record)`` when it yields one, else None."""
        slot = self.slots[self.turn]
        if slot is not None:
            shard, read = slot
            if read < self.counts[shard]:
                slot[1] += 1
                self.turn = (self.turn + 1) % self.cycle
                return shard, read
            self.slots[self.turn] = None
            self.turn = (self.turn + 1) % self.cycle
        elif not self.end:
            if self.next_input < len(self.inputs):
                shard, skip = self.inputs[self.next_input]
                self.slots[self.turn] = [shard, skip]
                self.next_input += 1
            else:
                self.end = True
        else:
            self.turn = (self.turn + 1) % self.cycle
        return None

    @property
    def done(self) -> bool:
        return self.end and all(slot is None for slot in self.slots)

    def _rounds(self, limit: int) -> int:
        """Records yielded by skipping whole rounds in which every slot yields (or is idle for good)."""
        if self.turn or limit <= 0:
            return 0
        exhausted = self.next_input >= len(self.inputs)
        left = []
        for slot in self.slots:
            if slot is None:
                if not exhausted:
                    return 0
                continue
            left.append(self.counts[slot[0]] - slot[1])
        if not left or min(left) < 1:
            return 0
        rounds = min(min(left), limit // len(left))
        for slot in self.slots:
            if slot is not None:
                slot[1] += rounds
        return rounds * len(left)

    def advance(self, records: int) -> None:
        """Runs the loop until ``records`` records have been yielded."""
        while records > 0 and not self.done:
            jumped = self._rounds(records)
            if jumped:
                records -= jumped
            elif self.step() is not None:
                records -= 1

    def remaining_inputs(self) -> list:
        """``(shard, skip)`` whose fresh interleave yields what this one still yields."""
        out, following = [], self.next_input
        for j in range(self.cycle):
            slot = self.slots[(self.turn + j) % self.cycle]
            if slot is not None:
                out.append((slot[0], slot[1]))
            elif following < len(self.inputs):          # opened on this slot's next turn
                out.append(self.inputs[following])
                following += 1
        return out + self.inputs[following:]


@dataclasses.dataclass(frozen=True)
class Order:
    """How one pipeline orders its shards: ``counts[i]`` records in its view of shard ``i``."""
    counts: tuple[int, ...]
    seed: int | None              # None: no shuffle (manifest order, round robin)
    split: str
    cycle: int

    @property
    def num_records(self) -> int:
        return int(sum(self.counts))

    def shard_order(self, epoch: int) -> np.ndarray:
        n = len(self.counts)
        if self.seed is None:
            return np.arange(n)
        return _rng("shards", self.seed, self.split, n, int(epoch)).permutation(n)

    def inputs_from(self, epoch: int, position: int) -> tuple[np.ndarray, np.ndarray]:
        """``(shards, skips)``: interleaved with ``cycle``, they yield epoch ``epoch`` from ``position`` on."""
        inputs = [(int(s), 0) for s in self.shard_order(epoch)]
        if position > 0:
            robin = _RoundRobin(inputs, self.counts, self.cycle)
            robin.advance(int(position))
            inputs = robin.remaining_inputs()
        shards = np.array([s for s, _ in inputs], np.int64)
        skips = np.array([k for _, k in inputs], np.int64)
        return shards, skips

    def sequence(self, epoch: int) -> list[tuple[int, int]]:
        """``(shard, record)`` in reading order before the window shuffle (for tests)."""
        robin = _RoundRobin([(int(s), 0) for s in self.shard_order(epoch)], self.counts, self.cycle)
        out = []
        while not robin.done:
            record = robin.step()
            if record is not None:
                out.append(record)
        return out


class ElasticSampler:
    """Record indices of one rank's share of a global order, for ``RandomAccess`` in PyTorch
    (``DataLoader(..., sampler=...)``) or Grain (``grain_loader(..., sampler=...)``): the
    ``elastic=True`` of ``reader.load`` for loaders that read by index.

    The global order is a function of ``num_records``, ``seed`` and the epoch only: epoch
    ``e`` is a permutation drawn from (seed, records, e) (``shuffle=False``: 0, 1, ...),
    epochs follow each other in one stream, and the stream is cut into global batches of
    ``global_batch`` records. Rank ``r`` of ``world_size`` yields stream positions ``r, r +
    world_size, ...``, so a loader batching ``global_batch // world_size`` of them in order (a
    ``DataLoader``'s sampler is read in the main process, in order, whatever its
    ``num_workers``) gives at step ``k`` its share of global batch ``k``, and the ranks' batches
    ``k`` together are global batch ``k``. ``start_step`` (a global step) resumes there, with
    any ``world_size`` and any number of loader workers, the global batch kept.

    ``epochs``: the epochs of the stream (None: endless). ``drop_last``: the stream ends at
    its last whole global batch (every rank then has as many steps)."""

    def __init__(self, num_records: int, global_batch: int, *, rank: int = 0, world_size: int = 1,
                 seed: int = 0, shuffle: bool = True, epochs: int | None = 1, start_step: int = 0,
                 drop_last: bool = False):
        for name, value, least in (("num_records", num_records, 0), ("global_batch", global_batch, 1),
                                   ("world_size", world_size, 1), ("rank", rank, 0),
                                   ("start_step", start_step, 0)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise ValueError(f"ElasticSampler: {name} must be a whole number >= {least}, not {value!r}")
        if rank >= world_size:
            raise ValueError(f"ElasticSampler: rank {rank} is not below world_size {world_size}")
        if global_batch % world_size:
            raise ValueError(f"ElasticSampler: global_batch {global_batch} must be a multiple of world_size "
                             f"{world_size} (each rank's batch is global_batch // world_size)")
        if epochs is not None and (isinstance(epochs, bool) or int(epochs) < 1):
            raise ValueError(f"ElasticSampler: epochs must be >= 1 or None (endless), not {epochs!r}")
        self.num_records, self.global_batch = int(num_records), int(global_batch)
        self.rank, self.world_size = int(rank), int(world_size)
        self.seed, self.shuffle, self.start_step = int(seed), bool(shuffle), int(start_step)
        self.epochs, self.drop_last = (None if epochs is None else int(epochs)), bool(drop_last)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The record indices of epoch ``epoch``, in order (the last epoch asked is kept: a
        loader asks position after position)."""
        memo = getattr(self, "_memo", None)
        if memo is not None and memo[0] == epoch:
            return memo[1]
        if not self.shuffle:
            order = np.arange(self.num_records)
        else:
            order = _rng("records", self.seed, self.num_records, int(epoch)).permutation(self.num_records)
        self._memo = (epoch, order)
        return order

    def _span(self) -> tuple[int, int | None]:
        """Stream positions ``[first, end)`` this sampler covers (end None: endless)."""
        first = self.start_step * self.global_batch
        if self.epochs is None:
            return first, None
        end = self.epochs * self.num_records
        if self.drop_last:
            end = end // self.global_batch * self.global_batch
        return min(first, end), end

    def __len__(self) -> int:
        first, end = self._span()
        if end is None:
            raise TypeError("an endless ElasticSampler (epochs=None) has no length")
        return len(range(first + self.rank, end, self.world_size))

    def __iter__(self):
        first, end = self._span()
        n = self.num_records
        if n == 0:
            return
        position = first + self.rank                   # the next stream position of this rank
        while end is None or position < end:
            epoch, offset = divmod(position, n)
            stop = n if end is None else min(n, end - epoch * n)
            taken = self.epoch_order(epoch)[offset:stop:self.world_size]
            yield from (int(i) for i in taken)
            position += len(taken) * self.world_size

    def __getitem__(self, index: int) -> int:
        """The record of this rank's ``index``-th position (what a Grain sampler is asked)."""
        first, end = self._span()
        position = first + self.rank + int(index) * self.world_size
        if index < 0 or self.num_records == 0 or (end is not None and position >= end):
            raise IndexError(f"position {index} is past this rank's share of the stream")
        epoch, offset = divmod(position, self.num_records)
        return int(self.epoch_order(epoch)[offset])
