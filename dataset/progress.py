"""Progress files a running job leaves in its output: ``.progress/plan.json`` and one
``.progress/{shard}.done`` per finished shard (see pipeline.progress, which reads them).

Best effort: progress is for watching a run, never a reason to fail it.
"""
from __future__ import annotations

import json
import logging
from typing import Mapping

from dcm2tfrecord.dataset.storage import FileSystems

from dcm2tfrecord.dataset.files import create_output, remove_own_files
from dcm2tfrecord.dataset.names import (DONE_SUFFIX, INCOMPLETE_DIR, PLAN_NAME, PROGRESS_DIR, WORKER_SUFFIX,
                                        done_file_name, worker_mark_name)


def progress_dir(output_dir: str) -> str:
    return FileSystems.join(output_dir, PROGRESS_DIR)


def plan_path(output_dir: str) -> str:
    return FileSystems.join(output_dir, PROGRESS_DIR, PLAN_NAME)


def done_pattern(output_dir: str) -> str:
    return FileSystems.join(output_dir, PROGRESS_DIR, "*" + DONE_SUFFIX)


def incomplete_pattern(output_dir: str) -> str:
    return FileSystems.join(output_dir, INCOMPLETE_DIR, "*")


_WARNED: set[str] = set()


def _write(output_dir: str, name: str, content: dict) -> str:
    """Writes one progress file; "" when written, else why not (never raises)."""
    try:
        path = FileSystems.join(output_dir, PROGRESS_DIR, name)
        with create_output(output_dir, path, "application/json") as handle:
            handle.write(json.dumps(content, sort_keys=True).encode("utf-8"))
    except Exception as exc:  # noqa: BLE001
        # once per output and process: a run of 10,000 shards does not print 10,000 lines
        level = logging.DEBUG if output_dir in _WARNED else logging.WARNING
        _WARNED.add(output_dir)
        logging.getLogger(__name__).log(level, "progress file %s not written: %s (later ones not "
                                        "written are not reported)", name, exc)
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


_MARKED: set[str] = set()


def write_worker_started(output_dir: str) -> str:
    """``{host}-{pid}.worker``, once per output and process: this SDK worker process runs the
    job (pipeline.launch.worker_start waits for the first such mark); "" when written, else why not."""
    import os
    import socket
    if output_dir in _MARKED:
        return ""
    _MARKED.add(output_dir)
    return _write(output_dir, worker_mark_name(socket.gethostname(), os.getpid()), {})


def any_worker_started(output_dir: str) -> bool:
    """Whether some SDK worker left its mark (never raises: False when it cannot tell)."""
    try:
        return bool(FileSystems.match(FileSystems.join(output_dir, PROGRESS_DIR, "*" + WORKER_SUFFIX)))
    except Exception:  # noqa: BLE001 - no progress folder yet, storage hiccup: not yet
        return False


def _is_progress_file(name: str) -> bool:
    return name == PLAN_NAME or name.endswith(DONE_SUFFIX) or name.endswith(WORKER_SUFFIX)


def remove_progress(output_dir: str) -> None:
    """Deletes ``{output}/.progress``: the plan and ``.done`` files in it, then the folder.
    Never through a link: ``.progress`` made a link (even mid-run) is OutputLinkError and
    nothing behind it is touched (dataset.files.remove_own_files)."""
    remove_own_files(output_dir, progress_dir(output_dir), _is_progress_file)
