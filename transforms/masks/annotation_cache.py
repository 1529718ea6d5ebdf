"""Annotations parsed once per worker thread and reused by every record of their series: a small LRU cache.

One SEG or RTSTRUCT serves every record of its series.

With ``--unit file`` each slice (or frame) of an annotated series is its own record, and each is
given its part of the series' masks at write time (transforms.records.build). Parsing the
annotation for every one of them would read and parse a multi-MB structure set, or build
highdicom's frame index of a SEG, 200 times for a 200-slice series; ``CACHE`` keeps the last
few parsed (``CAPACITY`` entries, least recently used dropped first), keyed by the file as it was
probed (uri, size, mtime: a file that changed is another key, and reading it says so) and, for
a source whose parsed form is bound to its thread (transforms.masks.sources, ``thread_bound``: a
SEG), by thread: highdicom's frame index is an SQLite connection usable only in the thread that
built it, and the writer decodes in its own threads (transforms.sources.read.with_timeout), reused
from record to record. A series' records are written one shard at a time, in plan order, so a
few entries hold the annotations of the series being written. ``CACHE.parses`` counts the
parses of each uri: what the tests observe.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, BinaryIO, Callable

from dcm2tfrecord.transforms.masks import sources
from dcm2tfrecord.transforms.record_model import SourceFile

CAPACITY = 4


def parse(fileobj: BinaryIO, kind: str) -> Any:
    """An annotation file parsed as its source draws from it (transforms.masks.sources): a SEG as
    highdicom's Segmentation (seg.load), an RTSTRUCT as a pydicom Dataset."""
    return sources.source(kind).parse(fileobj)


class ParsedAnnotations:
    """A small least-recently-used cache of parsed annotations (module docstring)."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._entries: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self.parses: collections.Counter = collections.Counter()    # uri -> times parsed
        self.hits: collections.Counter = collections.Counter()      # uri -> times reused

    def get(self, source: SourceFile, kind: str, read: Callable[[], BinaryIO]) -> Any:
        """The annotation ``source`` (of ``kind``) parsed, from the cache or by ``read()``."""
        key = (source.uri, source.size, source.mtime, kind,
               threading.get_ident() if sources.source(kind).thread_bound else 0)    # a Dataset is any thread's
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits[source.uri] += 1
                return self._entries[key]
        parsed = parse(read(), kind)             # outside the lock: other threads go on
        with self._lock:
            self.parses[source.uri] += 1
            self._entries[key] = parsed
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        return parsed

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.parses.clear()
            self.hits.clear()


CACHE = ParsedAnnotations()
