"""Progress files a running job leaves in its output: ``.progress/plan.json`` and one
``.progress/{shard}.done`` per finished shard (see pipeline.progress, which reads them).

Best effort: progress is for watching a run, never a reason to fail it.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Mapping

from dcm2tfrecord.dataset.storage import FileSystems

from dcm2tfrecord.dataset.files import create_output
from dcm2tfrecord.dataset.names import DONE_SUFFIX, INCOMPLETE_DIR, PLAN_NAME, PROGRESS_DIR, done_file_name


def progress_dir(output_dir: str) -> str:
    return FileSystems.join(output_dir, PROGRESS_DIR)


def plan_path(output_dir: str) -> str:
    return FileSystems.join(output_dir, PROGRESS_DIR, PLAN_NAME)


def done_pattern(output_dir: str) -> str:
    return FileSystems.join(output_dir, PROGRESS_DIR, "*" + DONE_SUFFIX)


def incomplete_pattern(output_dir: str) -> str:
    return FileSystems.join(output_dir, INCOMPLETE_DIR, "*")


def _write(output_dir: str, name: str, content: dict) -> str:
    """Writes one progress file; "" when written, else why not (never raises)."""
    try:
        path = FileSystems.join(output_dir, PROGRESS_DIR, name)
        with create_output(output_dir, path, "application/json") as handle:
            handle.write(json.dumps(content, sort_keys=True).encode("utf-8"))
    except Exception as exc:  # noqa: BLE001
        logging.getLogger(__name__).warning("progress file %s not written: %s", name, exc)
        return f"{type(exc).__name__}: {exc}"
    return ""


def write_plan(output_dir: str, layouts: Mapping) -> str:
    """plan.json: planned records, bytes and shards per split (SplitLayout values)."""
    _write(output_dir, PLAN_NAME, {"splits": {
        split: {"records": lay.num_records, "bytes": lay.total_bytes, "shards": lay.num_shards}
        for split, lay in sorted(layouts.items())}})
    return PLAN_NAME


def write_done(output_dir: str, result, planned_records: int) -> str:
    """{shard}.done: what one finished shard holds (a ShardResult) against its plan;
    "" when written, else why not."""
    return _write(output_dir, done_file_name(result.file), {
        "split": result.split, "records": result.num_records, "bytes": result.num_bytes,
        "planned_records": planned_records, "planned_bytes": result.planned_bytes})


def remove_progress(output_dir: str) -> None:
    """Deletes ``{output}/.progress`` (files first: gs:// has no directories)."""
    folder = progress_dir(output_dir)
    try:
        files = FileSystems.match(FileSystems.join(folder, "*"))
    except Exception:  # noqa: BLE001 - nothing there
        files = []
    if files:
        FileSystems.delete(files)
    if "://" not in output_dir and os.path.isdir(folder):
        FileSystems.delete([folder])
