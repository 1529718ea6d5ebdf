"""Atomic writes and tree removal, local or gs://, through Beam's FileSystems."""
from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Iterator

from dataset.storage import FileSystems

from dataset.names import INCOMPLETE_DIR, incomplete_name


@contextlib.contextmanager
def incomplete_file(final_path: str, output_dir: str) -> Iterator[str]:
    """Yields a temp path under ``output_dir/.incomplete``; renames it to ``final_path``
    only if the block succeeds, so a file under its final name is always whole."""
    name = final_path.rsplit("/", 1)[-1]
    tmp = FileSystems.join(output_dir, incomplete_name(name, uuid.uuid4().hex))
    try:
        yield tmp
        FileSystems.rename([tmp], [final_path])
    except BaseException:
        with contextlib.suppress(Exception):
            FileSystems.delete([tmp])
        raise


def write_atomically(output_dir: str, name: str, data: bytes, mime_type: str) -> str:
    """``output_dir/name`` holding ``data``, through a temp file; returns its path."""
    path = FileSystems.join(output_dir, name)
    with incomplete_file(path, output_dir) as tmp:
        with FileSystems.create(tmp, mime_type=mime_type) as handle:
            handle.write(data)
    return path


def remove_empty_incomplete_dir(output_dir: str) -> None:
    """The local temp folder once nothing is left in it (gs:// has no folders)."""
    if "://" not in output_dir:
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(output_dir, INCOMPLETE_DIR))


def read_json(path: str):
    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))


def delete_tree(path: str) -> None:
    """Removes a directory (local) or every object under a prefix (gs://)."""
    if "://" not in path:
        if os.path.exists(path):
            FileSystems.delete([path])
        return
    found = FileSystems.match(FileSystems.join(path, "**"))
    if found:
        FileSystems.delete(found)
