"""Expanding --input patterns into source files through Beam's FileSystems.

Works the same for local paths and gs:// because only FileSystems is used.
Each match keeps its path relative to the pattern's root, which names the
record (ids, label joins) independently of where the archive is mounted.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Iterable, Optional, Iterator

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.transforms.record_model import SourceFile

_GLOB_CHARS = re.compile(r"[*?\[]")


def pattern_root(pattern: str) -> str:
    """Directory part of ``pattern`` before its first wildcard."""
    match = _GLOB_CHARS.search(pattern)
    head = pattern if match is None else pattern[:match.start()]
    return head if head.endswith("/") else posixpath.dirname(head) + "/"


def _relative(path: str, root: str) -> str:
    root = root if root.endswith("/") else root + "/"
    if path.startswith(root):
        return path[len(root):]
    return posixpath.basename(path)


def _metadata(pattern: str):
    return FileSystems.match([pattern])[0].metadata_list


def escape_glob(path: str) -> str:
    """``path`` as a pattern that matches itself only (``in[1]`` -> ``in[[]1]``)."""
    return re.sub(r"([*?\[])", r"[\1]", path)


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` is meant as a glob: it has wildcards and is not itself a path.

    A directory named ``in[1]`` is a path, not the pattern "in1".
    """
    if not _GLOB_CHARS.search(pattern):
        return False
    if "://" not in pattern:
        return not os.path.lexists(pattern)
    literal = escape_glob(pattern.rstrip("/"))
    return not (FileSystems.match([literal], limits=[1])[0].metadata_list
                or FileSystems.match([literal + "/**"], limits=[1])[0].metadata_list)


def uri_key(uri: str) -> bytes:
    """A uri as a shuffle key. File names need not be UTF-8 (Python keeps their bytes as
    surrogates, which Beam's str coder refuses); the bytes round-trip exactly."""
    return uri.encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------- local trees


def _walk(root: str) -> Iterator[str]:
    """Every path under ``root`` that is not a directory, following
    symlinked directories (each real directory once: a link loop ends, a folder linked
    twice is listed under its first path by sorted order). Broken links are included."""
    seen = {os.path.realpath(root)}
    for folder, dirs, files in os.walk(root, followlinks=True):
        kept = []
        for name in sorted(dirs):
            real = os.path.realpath(os.path.join(folder, name))
            if real not in seen:
                seen.add(real)
                kept.append(name)
        dirs[:] = kept
        for name in sorted(files):
            yield os.path.join(folder, name)


def survey_local(patterns, max_files: int, max_bytes: int) -> Optional[tuple[int, int]]:
    """(files, bytes) the local ``patterns`` hold, or None once either passes its limit
    or a pattern is remote.

    For choosing how to run before anything runs: stops walking at the first
    file past a limit, so a large archive costs a short partial walk. Counts
    what ``expand_pattern`` would match (a file matched by two patterns
    twice: an upper bound).
    """
    files = size = 0
    for pattern in patterns:
        if "://" in pattern:
            return None
        pattern = pattern.rstrip("/") or "/"
        paths: Iterable[str]
        if os.path.isdir(pattern):
            paths = _walk(pattern)
        else:
            paths = _local_paths(pattern)[1]
        for path in paths:
            try:
                size += os.stat(path).st_size
            except OSError:
                pass
            files += 1
            if files > max_files or size > max_bytes:
                return None
    return files, size


def _source(path: str, root: str) -> SourceFile:
    try:
        info = os.stat(path)
        size, mtime = int(info.st_size), float(info.st_mtime)
    except OSError:   # vanished or unreadable since listed: the probe names the reason
        size, mtime = 0, 0.0
    return SourceFile(uri=path, rel_path=_relative(path, root), size=size, mtime=mtime)


def _local_paths(pattern: str) -> tuple[str, list[str]]:
    """(root, paths) of a local --input: a directory walked, a file, or a glob."""
    if os.path.isdir(pattern):
        return pattern + "/", sorted(_walk(pattern))
    if not is_glob(pattern):
        return posixpath.dirname(pattern) + "/", [pattern] if os.path.lexists(pattern) else []
    root = pattern_root(pattern)
    matches = re.compile(FileSystem.translate_pattern(pattern)).match
    walked = _walk(root.rstrip("/") or "/") if os.path.isdir(root) else ()
    return root, sorted(p for p in walked if matches(p))


def expand_pattern(pattern: str) -> Iterator[SourceFile]:
    """Yields every file under a directory, matching a glob, or the file itself.

    Directories are walked recursively; results are sorted by path so that
    everything downstream sees a stable order. Local trees are walked here
    (symlinked directories followed, non-UTF-8 names kept); gs:// through
    Beam's FileSystems.
    """
    pattern = pattern.rstrip("/") if not pattern.endswith("://") else pattern
    if "://" not in pattern:
        root, paths = _local_paths(pattern)
        for path in paths:
            if os.path.exists(path):    # broken links: see broken_links
                yield _source(path, root)
        return
    if is_glob(pattern):
        root, found = pattern_root(pattern), _metadata(pattern)
    else:
        root = pattern + "/"
        found = _metadata(escape_glob(pattern) + "/**")
        if not found:
            root = posixpath.dirname(pattern) + "/"
            found = [m for m in _metadata(escape_glob(pattern)) if m.path == pattern]
    for meta in sorted(found, key=lambda m: m.path):
        yield SourceFile(uri=meta.path, rel_path=_relative(meta.path, root),
                         size=int(meta.size_in_bytes),
                         mtime=float(meta.last_updated_in_seconds or 0.0))


def broken_links(pattern: str) -> Iterator[str]:
    """Local symlinks under ``pattern`` whose target is missing.

    Named in the archive but impossible to read: a user expects to hear about
    them (local paths only: object stores have no symlinks).
    """
    if "://" in pattern:
        return
    _, paths = _local_paths(pattern.rstrip("/") or "/")
    for path in paths:
        if os.path.islink(path) and not os.path.exists(path):
            yield path
