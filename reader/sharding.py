"""Which records each input pipeline reads under ``tf.distribute``.

With at least as many shards as input pipelines, pipeline ``i`` of ``n``
reads shards ``i, i + n, ...`` (by file: no pipeline reads a byte it does
not use). With fewer shards every pipeline reads every shard and keeps
records ``i, i + n, ...`` of each (by record). Both are a partition of the
split that needs no coordination between pipelines: it depends on the
manifest's shard order and record counts only, not on shuffling or on the
order in which parallel reads finish. The manifest's record counts give each
pipeline's exact number of records, hence its steps per epoch.

A sliced split (``"train[:10%]"``, see ``reader.splits``) is read as pieces:
the shards it covers, the first and last maybe in part (``starts``,
``lengths``). Pieces take the place of shards above: by file when there are
at least as many pieces as pipelines, else by record within each piece.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

logger = logging.getLogger("dcm2tfrecord.reader")

ALL, BY_FILE, BY_RECORD = "all", "file", "record"


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    files: tuple[str, ...]
    num_records: int
    mode: str = ALL
    pipeline: int = 0
    pipelines: int = 1
    counts: tuple[int, ...] = ()   # records this pipeline reads of each of ``files``
    starts: tuple[int, ...] = ()   # records of each file before its piece (0: from its start)
    lengths: tuple[int, ...] = ()  # records of each file's piece; -1: through the end of the file

    @property
    def partial(self) -> bool:
        """Some file is read in part only (a slice's first or last shard)."""
        return any(length >= 0 for length in self.lengths)

    def describe(self, split: str, total_files: int) -> str:
        pieces = " (or parts of shards, in a slice)" if self.partial else ""
        if self.mode == BY_FILE:
            how = (f"sharded by file: {len(self.files)} of {total_files} shards{pieces} "
                   f"(>= {self.pipelines} shards for {self.pipelines} pipelines)")
        else:
            how = (f"sharded by record: every {self.pipelines}th record of each of the "
                   f"{total_files} shards{pieces} (fewer shards than the {self.pipelines} pipelines)")
        return (f"reader: split {split!r}, input pipeline {self.pipeline} of {self.pipelines} "
                f"{how}; {self.num_records} records")


def plan_reads(paths: list[str], records: list[int], input_context=None,
               starts: Optional[list[int]] = None, whole: Optional[list[bool]] = None) -> ReadPlan:
    """The read plan of one pipeline; ``input_context`` is a ``tf.distribute.InputContext``.

    ``records[i]`` records of ``paths[i]`` are read, from its ``starts[i]``-th
    (default 0), to its end where ``whole[i]`` (default True).
    """
    starts = list(starts) if starts is not None else [0] * len(paths)
    lengths = [-1 if w else r for r, w in zip(records, whole if whole is not None else [True] * len(paths))]
    pipelines = getattr(input_context, "num_input_pipelines", 1) if input_context else 1
    if pipelines <= 1:
        return ReadPlan(tuple(paths), sum(records), counts=tuple(records), starts=tuple(starts),
                        lengths=tuple(lengths))
    index = input_context.input_pipeline_id
    if len(paths) >= pipelines:
        mine = slice(index, None, pipelines)
        return ReadPlan(tuple(paths[mine]), sum(records[mine]), BY_FILE, index, pipelines,
                        tuple(records[mine]), tuple(starts[mine]), tuple(lengths[mine]))
    kept = [len(range(index, r, pipelines)) for r in records]
    return ReadPlan(tuple(paths), sum(kept), BY_RECORD, index, pipelines, tuple(kept), tuple(starts),
                    tuple(lengths))
