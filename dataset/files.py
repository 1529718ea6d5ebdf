"""Atomic writes and tree removal, local or gs://, through dataset/storage.py.

:func:`create_output` is the one place a run opens a file of its output for
writing. Locally it never follows a symbolic link: every folder between the
output directory and the file must be a real folder (``lstat``), and the file
is opened with ``O_NOFOLLOW``, so a link planted in the output (``.incomplete``
pointing elsewhere, a ``.progress`` link, a file name linked outside) cannot
make the run write outside ``--output``. Renames replace a link, never write
through it.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import uuid
from typing import BinaryIO, Iterator

from dcm2tfrecord.dataset.errors import OutputError
from dcm2tfrecord.dataset.storage import FileSystems

from dcm2tfrecord.dataset.names import INCOMPLETE_DIR, incomplete_name


class OutputLinkError(OutputError, OSError):
    """A symbolic link (or a non-folder) where the run would write inside its output."""


def _real_folders(output_dir: str, folder: str) -> None:
    """Creates ``folder`` under ``output_dir`` as real folders; OutputLinkError at a link."""
    os.makedirs(output_dir, exist_ok=True)    # the output itself is the user's (checked before)
    rel = os.path.relpath(folder, output_dir)
    if rel == "." or rel.startswith(".."):
        return
    current = output_dir
    for part in rel.split(os.sep):
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):   # another worker made it meanwhile
                os.mkdir(current)
            mode = os.lstat(current).st_mode
        if stat.S_ISLNK(mode):
            raise OutputLinkError(f"{current} is a symbolic link; dcm2tfrecord never writes through "
                                  "links in its output: remove it and rerun")
        if not stat.S_ISDIR(mode):
            raise OutputLinkError(f"{current} is not a folder; remove it and rerun")


def create_output(output_dir: str, path: str, mime_type: str = "application/octet-stream") -> BinaryIO:
    """``path`` (inside ``output_dir``) opened for writing, uncompressed; never through a link."""
    if "://" in path:
        return FileSystems.create(path, mime_type)
    _real_folders(output_dir, os.path.dirname(path))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        if os.path.islink(path):
            raise OutputLinkError(f"{path} is a symbolic link; dcm2tfrecord never writes through "
                                  "links in its output: remove it and rerun") from None
        raise
    return os.fdopen(fd, "wb")


@contextlib.contextmanager
def incomplete_file(final_path: str, output_dir: str) -> Iterator[str]:
    """Yields a temp path under ``output_dir/.incomplete``; renames it to ``final_path``
    only if the block succeeds, so a file under its final name is always whole.

    A local temp file is removed when the block fails. A gs:// one is left for the commit's
    sweep of ``.incomplete/`` (pipeline.output_dir.remove_stale_files): the block fails
    mostly because storage stopped answering, and a delete would wait out one more retry
    budget before the run could end."""
    name = final_path.rsplit("/", 1)[-1]
    tmp = FileSystems.join(output_dir, incomplete_name(name, uuid.uuid4().hex))
    try:
        yield tmp
        FileSystems.rename([tmp], [final_path])
    except BaseException:
        if "://" not in tmp:
            with contextlib.suppress(OSError):
                os.remove(tmp)
        raise


def write_atomically(output_dir: str, name: str, data: bytes, mime_type: str) -> str:
    """``output_dir/name`` holding ``data``, through a temp file; returns its path."""
    path = FileSystems.join(output_dir, name)
    with incomplete_file(path, output_dir) as tmp:
        with create_output(output_dir, tmp, mime_type) as handle:
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
