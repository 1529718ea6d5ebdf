"""Which records each input pipeline reads under ``tf.distribute``.

With at least as many shards as input pipelines, pipeline ``i`` of ``n``
reads shards ``i, i + n, ...`` (by file: no pipeline reads a byte it does
not use). With fewer shards every pipeline reads every shard and keeps
records ``i, i + n, ...`` of each (by record). Both are a partition of the
split that needs no coordination between pipelines: it depends on the
manifest's shard order and record counts only, not on shuffling or on the
order in which parallel reads finish. The manifest's record counts give each
pipeline's exact number of records, hence its steps per epoch.
"""
from __future__ import annotations

import dataclasses
import logging

logger = logging.getLogger("reader")

ALL, BY_FILE, BY_RECORD = "all", "file", "record"


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    files: tuple[str, ...]
    num_records: int
    mode: str = ALL
    pipeline: int = 0
    pipelines: int = 1
    counts: tuple[int, ...] = ()   # records this pipeline reads of each of ``files``

    def describe(self, split: str, total_files: int) -> str:
        if self.mode == BY_FILE:
            how = (f"sharded by file: {len(self.files)} of {total_files} shards "
                   f"(>= {self.pipelines} shards for {self.pipelines} pipelines)")
        else:
            how = (f"sharded by record: every {self.pipelines}th record of each of the "
                   f"{total_files} shards (fewer shards than the {self.pipelines} pipelines)")
        return (f"reader: split {split!r}, input pipeline {self.pipeline} of {self.pipelines} "
                f"{how}; {self.num_records} records")


def plan_reads(paths: list[str], records: list[int], input_context=None) -> ReadPlan:
    """The read plan of one pipeline; ``input_context`` is a ``tf.distribute.InputContext``."""
    total = sum(records)
    pipelines = getattr(input_context, "num_input_pipelines", 1) if input_context else 1
    if pipelines <= 1:
        return ReadPlan(tuple(paths), total, counts=tuple(records))
    index = input_context.input_pipeline_id
    if len(paths) >= pipelines:
        return ReadPlan(tuple(paths[index::pipelines]), sum(records[index::pipelines]),
                        BY_FILE, index, pipelines, tuple(records[index::pipelines]))
    kept = [len(range(index, r, pipelines)) for r in records]
    return ReadPlan(tuple(paths), sum(kept), BY_RECORD, index, pipelines, tuple(kept))
