"""Free memory handed back to the system between the stages of a local run.

Beam's FnApiRunner keeps what crosses each GroupByKey and each materialised PCollection of a
local run in the launcher's memory: decoded values, the byte streams its coders grow, the data
channel's messages. A stage frees the previous stage's buffers, but glibc's malloc keeps most
freed memory in its heaps (only blocks at the top of a heap, or served by mmap, go back), and a
heap full of small live objects rarely has a free top. So the process's resident memory keeps
buffers freed stages ago, and the peak of the next stage comes on top of them.
``release_free_memory`` (glibc's ``malloc_trim(0)``: free pages anywhere in the heaps go back)
runs before each stage the local runner executes (pipeline.launch.fork_server.local_runner):
one heap walk each, 0.08 s of CPU in all on a million-record run. Planning a million records
(benchmarks/bench_planning.py) peaked at 1,235 MB without it and 1,104 MB with it; over 1-4 M
records the local runner holds 907 B a record, Beam's own 1,100 (docs/SCALE.md,
"Planning in a compact encoding: 0.91 kB a record, 20 M records in 17 GB").

Not done: fixing glibc's mmap threshold (``mallopt(M_MMAP_THRESHOLD)``), which returns every
large block at once (1,052 MB on the same run) but maps and faults in afresh every pixel
buffer a worker allocates: 2.5x the CPU of a 512 x 512 slice's allocate, fill and cast.

Elsewhere (macOS, musl) there is no ``malloc_trim`` and this does nothing.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Optional

_TRIM: Optional[Any] = None
_LOOKED = False


def _malloc_trim() -> Optional[Any]:
    global _TRIM, _LOOKED
    if not _LOOKED:
        _LOOKED = True
        if sys.platform.startswith("linux"):
            try:
                _TRIM = ctypes.CDLL(None).malloc_trim   # this process's own C library
                _TRIM.argtypes, _TRIM.restype = [ctypes.c_size_t], ctypes.c_int
            except (OSError, AttributeError):           # not glibc
                _TRIM = None
    return _TRIM


def release_free_memory() -> bool:
    """Hands the C heap's free pages back to the system; whether this process can (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
