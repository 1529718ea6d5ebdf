"""Test-only: every shard writer of the process stops at one point, so that kill tests stop a
run at an exact moment instead of polling for it.

``install("POINT:DIR")`` wraps dataset.shard_writer (its ``ShardSink.append`` and the
``incomplete_file`` its ``open_shard`` renames through); the product code is unchanged.
Each writer that stops creates DIR/POINT-<shard file>, holding its process's environment as
JSON (what a worker was handed), and waits until DIR/go exists.
POINT is

- ``opened``: the shard's temp file about to be created, before the writer has read any
  of its records (every input is probed and planned by then);
- ``half_written``: the shard's first record framed and flushed to its temp file (the
  shard is still under .incomplete/, unfinished);
- ``partly_final``: the first writer done with its temp files renames them into place,
  then stops; every other writer stops before its renames.

Installed in the launcher before Beam starts, the wrappers are inherited by forked
workers; spawned workers install them again (sitecustomize).
"""
from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from typing import Any, Iterator

POLL_S = 0.05
HALF_WRITTEN_RECORDS = 1
_installed: list[str] = []


def _stop_here(point: str, folder: str, file_name: str, announce: bool = True) -> None:
    if announce:
        partial = os.path.join(folder, f".{point}-{file_name}.partial")   # whole when it appears
        with open(partial, "w") as handle:
            json.dump(dict(os.environ), handle)
        os.replace(partial, os.path.join(folder, f"{point}-{file_name}"))
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(POLL_S)


def _first_to_rename(folder: str) -> bool:
    try:
        os.close(os.open(os.path.join(folder, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        return False


def install(setting: str) -> None:
    """Wraps the shard writer for ``setting`` ("POINT:DIR"); once per process."""
    point, _, folder = setting.partition(":")
    if point not in ("opened", "half_written", "partly_final") or not folder:
        raise ValueError(f"DCM2TFRECORD_HOOK_PAUSE is POINT:DIR (opened, half_written or partly_final), "
                         f"not {setting!r}")
    if _installed:
        return
    _installed.append(setting)
    from dcm2tfrecord.dataset import shard_writer
    from dcm2tfrecord.dataset.names import INDEX_SUFFIX

    local = threading.local()      # the shard this thread writes (writers may share a process)
    incomplete_file = shard_writer.incomplete_file
    append = shard_writer.ShardSink.append

    @contextlib.contextmanager
    def paused_incomplete_file(final_path: str, output_dir: str) -> Iterator[str]:
        name = final_path.rsplit("/", 1)[-1]
        if not name.endswith(INDEX_SUFFIX):          # the shard (open_shard's outer block)
            local.shard, local.first = name, False
            if point == "opened":
                _stop_here(point, folder, name)
            with incomplete_file(final_path, output_dir) as tmp:
                yield tmp
            if local.first:                           # renamed into place: now stop
                _stop_here(point, folder, name)
            return
        if point == "partly_final":                   # the shard's temp file is complete
            local.first = _first_to_rename(folder)
            if not local.first:
                _stop_here(point, folder, local.shard, announce=False)
        with incomplete_file(final_path, output_dir) as tmp:
            yield tmp

    def paused_append(self: Any, record: Any) -> None:
        append(self, record)
        if point == "half_written" and self.num_records == HALF_WRITTEN_RECORDS:
            self._file.raw.flush()   # (gzip keeps its pending bytes: flushing them would change the shard)
            _stop_here(point, folder, local.shard)

    shard_writer.incomplete_file = paused_incomplete_file
    shard_writer.ShardSink.append = paused_append
