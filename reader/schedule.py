"""The record order of a seeded (or unshuffled) epoch, as a pure function.

``reader.load(seed=S)`` reads epoch ``e`` in an order computed from the
manifest's shard list and counts, the split, the seed and ``e`` alone, never
from what was read before, so that a run restarted at step ``k`` can compute
where every shard stands at ``k`` and read from there (``start_step``):

1. shards in an order permuted per epoch (manifest order without shuffle);
2. taken ``cycle`` at a time: a group of shards is read in parallel and
   interleaved in a random order that keeps each shard's own record order
   (a uniformly drawn interleaving of the group's records; round robin
   without shuffle). Position ``t`` in a group fixes how many records of
   each shard come before it, so resuming there skips whole shards by the
   manifest's counts and, inside the open shards, exactly that many records;
3. records shuffled in consecutive windows of ``window`` records (the
   shards were already shuffled as a whole at write time). Resuming inside
   a window reads that window from its start: at most ``window - 1``
   records read and dropped, however large ``k`` is.

Random draws come from NumPy's PCG64 seeded by a hash of (seed, split,
epoch, group): the same order for the same manifest, seed and versions of
this reader and NumPy.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np


def _rng(*key) -> np.random.Generator:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=16).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest, "little")))


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

    def groups(self, epoch: int) -> list[np.ndarray]:
        order = self.shard_order(epoch)
        return [order[i:i + self.cycle] for i in range(0, len(order), self.cycle)]

    def interleaving(self, epoch: int, group: int, shards: np.ndarray) -> np.ndarray:
        """Slot (position in ``shards``) of each record of the group, in reading order."""
        counts = np.array([self.counts[s] for s in shards], np.int64)
        slots = np.repeat(np.arange(len(shards), dtype=np.int32), counts)
        if self.seed is None:       # round robin over the shards not yet exhausted
            rounds = np.concatenate([np.arange(c) for c in counts]) if len(counts) else slots
            return slots[np.lexsort((slots, rounds))]
        return _rng("interleave", self.seed, self.split, int(epoch), int(group)).permutation(slots)

    def plan_from(self, epoch: int, position: int):
        """``(shards, skips, slots)`` per group from ``position`` of ``epoch`` on.

        ``shards[g]``: shard numbers in slot order (-1 pads short groups),
        ``skips[g]``: records each slot skips, ``slots``: the concatenated
        slot sequences, ``bounds``: group g's slots are ``slots[bounds[g]:bounds[g+1]]``.
        """
        groups = self.groups(epoch)
        shards = np.full((max(len(groups), 1), self.cycle), -1, np.int64)
        skips = np.zeros_like(shards)
        sequences, bounds, before = [], [0], 0
        for g, members in enumerate(groups):
            size = int(sum(self.counts[s] for s in members))
            start = min(max(position - before, 0), size)
            before += size
            slots = self.interleaving(epoch, g, members) if start < size else np.zeros(0, np.int32)
            shards[g, :len(members)] = members
            if start:
                skips[g, :len(members)] = np.bincount(slots[:start], minlength=len(members)) \
                    if start < size else [self.counts[s] for s in members]
            sequences.append(slots[start:])
            bounds.append(bounds[-1] + len(sequences[-1]))
        slots = np.concatenate(sequences).astype(np.int64) if sequences else np.zeros(0, np.int64)
        return shards, skips, slots, np.array(bounds, np.int64)

    def sequence(self, epoch: int) -> list[tuple[int, int]]:
        """``(shard, record)`` in reading order before the window shuffle (for tests)."""
        out = []
        for g, members in enumerate(self.groups(epoch)):
            taken = [0] * len(members)
            for slot in self.interleaving(epoch, g, members):
                out.append((int(members[slot]), taken[slot]))
                taken[slot] += 1
        return out
