"""Atomic writes and tree removal, local or gs://, through dataset/storage.py.

:func:`create_output` is the one place a run opens a file of its output for
writing, and this module the one place it renames or deletes one. Locally every
step below the output directory goes through directory handles opened without
following a link (``openat`` with ``O_NOFOLLOW | O_DIRECTORY`` at each folder,
``O_NOFOLLOW | O_EXCL`` at the file; renames and deletes relative to those
handles). A link planted in the output at any time, before or during the run
(``.incomplete`` or ``.progress`` pointing elsewhere, a file name linked
outside, a folder swapped for a link between two steps) can therefore never make
the run write, rename or delete outside ``--output``: the step that meets it
fails with :class:`OutputLinkError`, one line naming it. A file is never written
in place: an existing name (a hard link to a file outside included) is unlinked
and created anew, so no other name of the same file changes. Deletes remove only
regular files under the names this tool writes (the caller says which); anything
else is left where it is, named in a warning. The output directory itself is the
user's path and is resolved as given.
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import logging
import os
import shutil
import stat
import uuid
from typing import BinaryIO, Callable, Iterator, Optional

from dcm2tfrecord.dataset.errors import OutputError
from dcm2tfrecord.dataset.storage import FileSystems

from dcm2tfrecord.dataset.names import INCOMPLETE_DIR, incomplete_name, version_parts


class OutputLinkError(OutputError, OSError):
    """A symbolic link (or a non-folder) where the run would write inside its output."""


def _link_error(path: str) -> OutputLinkError:
    return OutputLinkError(f"{path} is a symbolic link; dcm2tfrecord never writes through links in "
                           "its output: remove it and rerun")


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_step(parent: int, part: str, shown: str, create: bool) -> int:
    """The folder ``part`` of the folder open as ``parent``, never through a link."""
    for attempt in (0, 1):
        try:
            return os.open(part, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create or attempt:
                raise
            with contextlib.suppress(FileExistsError):   # another worker made it meanwhile
                os.mkdir(part, 0o755, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            mode = os.stat(part, dir_fd=parent, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise _link_error(shown) from None
            raise OutputLinkError(f"{shown} is not a folder; remove it and rerun") from None
    raise AssertionError("unreachable")


def _relative_parts(output_dir: str, path: str) -> list[str]:
    rel = os.path.relpath(path, output_dir)
    if rel == ".":
        return []
    if rel == ".." or rel.startswith(".." + os.sep) or os.path.isabs(rel):
        raise OutputError(f"{path} is not inside the output {output_dir}")
    return rel.split(os.sep)


@contextlib.contextmanager
def local_folder(output_dir: str, folder: str, create: bool = True) -> Iterator[int]:
    """A handle on ``folder`` (``output_dir`` or a folder inside it), each folder below
    ``output_dir`` opened without following a link and made if missing (``create``).
    For an --incremental version (``ROOT/versions/NNNN``) that holds from ROOT down.
    OutputLinkError at a link or a non-folder; FileNotFoundError if missing and not ``create``."""
    root, own = version_parts(output_dir)       # an --incremental version: its root is the user's
    if create:
        os.makedirs(root, exist_ok=True)    # the output itself is the user's (checked before)
    parts = list(own) + _relative_parts(output_dir, folder)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        shown = root
        for part in parts:
            shown = os.path.join(shown, part)
            child = _open_step(fd, part, shown, create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _create_in(folder: int, name: str, shown: str) -> int:
    """``name`` created anew in ``folder`` for writing: an existing file of that name (a
    hard link to another file included) is unlinked first, so no other name of it changes."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in (0, 1):
        try:
            return os.open(name, flags, 0o644, dir_fd=folder)
        except FileExistsError:
            mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                raise _link_error(shown) from None
            if not stat.S_ISREG(mode) or attempt:
                raise OutputLinkError(f"{shown} is not a file this run can replace (another process "
                                      "is writing in the output?); remove it and rerun") from None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=folder)
    raise AssertionError("unreachable")


def create_output(output_dir: str, path: str, mime_type: str = "application/octet-stream") -> BinaryIO:
    """``path`` (inside ``output_dir``) opened for writing, uncompressed; never through a link."""
    if "://" in path:
        return FileSystems.create(path, mime_type)
    with local_folder(output_dir, os.path.dirname(path)) as folder:
        fd = _create_in(folder, os.path.basename(path), path)
    return os.fdopen(fd, "wb")


def rename_output(output_dir: str, source: str, destination: str) -> None:
    """Renames ``source`` to ``destination`` (both inside ``output_dir``); locally relative to
    folder handles opened without following links, so neither end is ever reached through one
    (a link under the destination's name is replaced, as rename does)."""
    if "://" in source:
        FileSystems.rename([source], [destination])
        return
    with local_folder(output_dir, os.path.dirname(source), create=False) as src, \
            local_folder(output_dir, os.path.dirname(destination)) as dst:
        os.rename(os.path.basename(source), os.path.basename(destination), src_dir_fd=src, dst_dir_fd=dst)


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
        rename_output(output_dir, tmp, final_path)
    except BaseException:
        if "://" not in tmp:
            with contextlib.suppress(OSError):
                remove_output_file(output_dir, tmp)
        raise


def write_atomically(output_dir: str, name: str, data: bytes, mime_type: str) -> str:
    """``output_dir/name`` holding ``data``, through a temp file; returns its path."""
    path = FileSystems.join(output_dir, name)
    with incomplete_file(path, output_dir) as tmp:
        with create_output(output_dir, tmp, mime_type) as handle:
            handle.write(data)
    return path


@contextlib.contextmanager
def _entry(output_dir: str, path: str) -> Iterator[tuple[int, str, Optional[int]]]:
    """(its folder's handle, its name, its lstat mode or None if missing) of local ``path``;
    a missing folder on the way is a missing entry."""
    name = os.path.basename(path)
    with contextlib.ExitStack() as stack:
        try:
            folder = stack.enter_context(local_folder(output_dir, os.path.dirname(path), create=False))
        except FileNotFoundError:
            yield -1, name, None
            return
        try:
            mode: Optional[int] = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
        except FileNotFoundError:
            mode = None
        yield folder, name, mode


def remove_output_file(output_dir: str, path: str) -> None:
    """Deletes the file ``path`` inside ``output_dir`` if it is there. Locally the name is
    unlinked relative to its folder's handle (a link is removed, never followed); a folder
    under that name is left, with OutputLinkError."""
    if "://" in path:
        if FileSystems.exists(path):
            FileSystems.delete([path])
        return
    with _entry(output_dir, path) as (folder, name, mode):
        if mode is None:
            return
        if stat.S_ISDIR(mode):
            raise OutputLinkError(f"{path} is a folder where dcm2tfrecord writes a file; remove it "
                                  "and rerun")
        os.unlink(name, dir_fd=folder)


def remove_own_files(output_dir: str, folder: str, ours: Callable[[str], bool],
                     remove_folder: bool = True) -> list[str]:
    """Deletes the regular files of ``folder`` (inside ``output_dir``, or gs:// prefix) whose
    names ``ours`` accepts, then the folder if that left it empty (``remove_folder``).

    Locally the folder is opened without following links (a link in its place is
    OutputLinkError: nothing behind it is touched) and names are unlinked relative to
    it. A link or folder under a name of ours stays, and so does (when the folder is to
    go) anything under another name; each is named in a warning. Returns the names left."""
    if "://" in folder:
        found = FileSystems.match(FileSystems.join(folder, "*"))
        own = [p for p in found if ours(p.rsplit("/", 1)[-1])]
        if own:
            FileSystems.delete(own)
        return []
    left: list[str] = []
    try:
        with local_folder(output_dir, folder, create=False) as fd:
            for name in sorted(os.listdir(fd)):
                try:
                    mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                except FileNotFoundError:
                    continue
                if not ours(name):
                    if remove_folder:      # a folder of ours holding something else stays
                        left.append(name)
                elif stat.S_ISREG(mode):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(name, dir_fd=fd)
                else:
                    left.append(name)
    except FileNotFoundError:
        return []
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        logging.getLogger(__name__).warning("%s: left %s in place: not files dcm2tfrecord writes there",
                                            folder, shown)
    elif remove_folder and os.path.normpath(folder) != os.path.normpath(output_dir):
        with local_folder(output_dir, os.path.dirname(folder), create=False) as parent, \
                contextlib.suppress(OSError):
            os.rmdir(os.path.basename(folder), dir_fd=parent)
    return left


def matching(pattern: str) -> Callable[[str], bool]:
    """``ours`` for remove_own_files: names matching a glob pattern."""
    return lambda name: fnmatch.fnmatchcase(name, pattern)


def remove_incomplete(output_dir: str) -> None:
    """Deletes ``output_dir/.incomplete`` and the temp files in it (any run's: their names
    say they are temp files of this tool), never through a link."""
    remove_own_files(output_dir, FileSystems.join(output_dir, INCOMPLETE_DIR),
                     matching(incomplete_name("*", "*").rsplit("/", 1)[-1]))


def remove_empty_incomplete_dir(output_dir: str) -> None:
    """The local temp folder once nothing is left in it (gs:// has no folders)."""
    if "://" not in output_dir:
        with contextlib.suppress(OSError), local_folder(output_dir, output_dir, create=False) as fd:
            os.rmdir(INCOMPLETE_DIR, dir_fd=fd)


def read_json(path: str):
    with FileSystems.open(path) as handle:
        return json.loads(handle.read().decode("utf-8"))


def delete_tree(output_dir: str, path: str) -> None:
    """Removes the folder ``path`` inside ``output_dir`` with everything in it (local) or
    every object under a prefix (gs://). Locally the folders down to ``path`` are opened
    without following links and the tree is removed relative to its parent's handle
    (shutil.rmtree with dir_fd never follows a link inside it); ``path`` itself a link
    is OutputLinkError."""
    if "://" in path:
        found = FileSystems.match(FileSystems.join(path, "**"))
        if found:
            FileSystems.delete(found)
        return
    with _entry(output_dir, path) as (parent, name, mode):
        if mode is None:
            return
        if stat.S_ISLNK(mode):
            raise _link_error(path)
        if not stat.S_ISDIR(mode):
            raise OutputLinkError(f"{path} is not a folder; remove it and rerun")
        shutil.rmtree(name, dir_fd=parent)


def replace_file(path: str, data: bytes, mime_type: str) -> None:
    """``path``, a file outside any output (``--summary_json``), replaced whole by ``data``:
    locally a temp file created beside it (``O_EXCL | O_NOFOLLOW``) and renamed over it, so a
    reader finds the old file or the new one, never a part; a gs:// object appears whole when
    its upload ends. A link at ``path`` is replaced, never written through."""
    if "://" in path:
        with FileSystems.create(path, mime_type) as handle:
            handle.write(data)
        return
    folder, name = os.path.split(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
