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
