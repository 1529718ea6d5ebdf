"""What a run reports to the format: an Outcome per input not written, a ShardResult per shard.

Both sides need these: the converter's steps produce them, dataset.json and
errors.jsonl (dataset/manifest.py) and the records files of a versioned
dataset (dataset/versions.py) are made of them.
"""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Outcome:
    """A source file that was not written: skipped or failed, and why."""
    uri: str
    status: str          # reasons.SKIPPED, FAILED or REJECTED (a labels-CSV row, not an input)
    stage: str           # where it stopped: match, probe, labels, group or decode
    reason: str          # stable code, see dataset.reasons
    message: str
    # --frames split (or a stack of an Enhanced file), at write: which frame (stack) of how
    # many did not convert; the outcomes of one file's frames become one
    # (transforms.output.commit.one_outcome_per_input). Not in errors.jsonl.
    frame: Optional[int] = None
    frames: int = 0
    part: str = "frame"   # what frame counts: a frame (--frames split) or a stack (Enhanced)

    def as_json(self) -> dict:
        return {"uri": self.uri, "status": self.status, "stage": self.stage, "reason": self.reason,
                "message": self.message}


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
    wrapped_key: Optional[str] = None    # --encrypt: its data key, wrapped (dataset/encryption.py)
