"""Expanding --input patterns into source files through Beam's FileSystems.

Works the same for local paths and gs:// because only FileSystems is used.
Each match keeps its path relative to the pattern's root, which names the
record (ids, label joins) independently of where the archive is mounted.
"""
from __future__ import annotations

import posixpath
import re
from typing import Iterator

from apache_beam.io.filesystems import FileSystems

from transforms.records.values import SourceFile

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


def expand_pattern(pattern: str) -> Iterator[SourceFile]:
    """Yields every file under a directory, matching a glob, or the file itself.

    Directories are walked recursively; results are sorted by path so that
    everything downstream sees a stable order.
    """
    pattern = pattern.rstrip("/") if not pattern.endswith("://") else pattern
    if _GLOB_CHARS.search(pattern):
        root, found = pattern_root(pattern), _metadata(pattern)
    else:
        root = pattern + "/"
        found = _metadata(FileSystems.join(pattern, "**"))
        if not found:
            root = posixpath.dirname(pattern) + "/"
            found = [m for m in _metadata(pattern) if m.path == pattern]
    for meta in sorted(found, key=lambda m: m.path):
        yield SourceFile(uri=meta.path, rel_path=_relative(meta.path, root),
                         size=int(meta.size_in_bytes),
                         mtime=float(meta.last_updated_in_seconds or 0.0))


def broken_links(pattern: str) -> Iterator[str]:
    """Local symlinks under ``pattern`` whose target is missing.

    Beam's local match silently drops them; a user expects to hear about a
    file that is named in the archive but cannot be read, so we look for
    them here (local paths only: object stores have no symlinks).
    """
    import glob
    import os
    if "://" in pattern:
        return
    pattern = pattern.rstrip("/") or "/"
    if _GLOB_CHARS.search(pattern):
        candidates = glob.glob(pattern, recursive=True)
    elif os.path.isdir(pattern):
        candidates = (os.path.join(folder, name) for folder, dirs, files in os.walk(pattern)
                      for name in files + dirs)
    else:
        candidates = [pattern]
    for path in sorted(candidates):
        if os.path.islink(path) and not os.path.exists(path):
            yield path
