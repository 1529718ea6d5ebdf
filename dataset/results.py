"""What a run reports to the format: an Outcome per input not written, a ShardResult per shard.

Both sides need these: the converter's steps produce them, dataset.json and
errors.jsonl (dataset/manifest.py) and the records files of a versioned
dataset (dataset/versions.py) are made of them.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A source file that was not written: skipped or failed, and why."""
    uri: str
    status: str          # reasons.SKIPPED, FAILED or REJECTED (a labels-CSV row, not an input)
    stage: str           # where it stopped: match, probe, labels, group or decode
    reason: str          # stable code, see dataset.reasons
    message: str

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ShardResult:
    """A shard as written: what the manifest says about it."""
    split: str
    index: int
    num_shards: int
    file: str
    num_records: int
    num_bytes: int
    sha256: str
    planned_bytes: int
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, int, int, int], ...]   # distinct, capped
    sources_written: int
    label_counts: tuple[tuple[str, int], ...] = ()
    kinds: tuple[str, ...] = ()
    max_depth: int = 1
