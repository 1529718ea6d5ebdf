"""Live progress of a conversion, read back from the output directory.

Beam's local runner reports no live counters to the launcher, and on Dataflow
the launcher is not where the work happens, so the job leaves its progress
where every runner can write and every launcher can read (local or gs://,
through Beam's FileSystems):

- ``{output}/.progress/plan.json``: planned records, bytes and shards per split,
  written once planning is done (dataset.progress.write_plan);
- ``{output}/.progress/{shard}.done``: records and bytes of each shard, written
  after the shard's atomic rename;
- ``{output}/.incomplete/*``: shards being written; their sizes are the bytes
  in flight.

A launcher thread polls these and shows records done / planned, MB written,
MB/s and ETA: a tqdm bar on a terminal, plain lines every ``log_s`` otherwise.
``.progress/`` is removed when a run commits and before the next one starts;
it never touches dataset.json or the shards.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import os
import sys
import threading
import time
from typing import Optional, TextIO

from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.dataset.choices import StrEnum, values
from dcm2tfrecord.dataset.progress import done_pattern, incomplete_pattern, plan_path, progress_dir


class Progress(StrEnum):
    """``--progress``: how :class:`ProgressMonitor` shows a run."""
    AUTO = "auto"       # a bar on a terminal, a line every log_s otherwise
    BAR = "bar"
    LOG = "log"
    NONE = "none"


POLL_ENV = "DCM2TFRECORD_PROGRESS_POLL_S"
LOG_ENV = "DCM2TFRECORD_PROGRESS_LOG_S"
DEFAULT_POLL_S = 1.0
DEFAULT_REMOTE_POLL_S = 5.0      # gs:// listings cost a request each
DEFAULT_LOG_S = 10.0
RATE_WINDOW_S = 30.0
JOIN_TIMEOUT_S = 2.0
MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What the output directory says about a run at one moment."""
    planned_records: Optional[int] = None    # None until plan.json is there
    planned_bytes: Optional[int] = None
    planned_shards: Optional[int] = None
    shards_done: int = 0
    records_done: int = 0                    # planned records of finished shards
    records_written: int = 0                 # of those, records that converted
    bytes_done: int = 0                      # bytes of finished shards
    planned_bytes_done: int = 0
    bytes_in_flight: int = 0                 # temp files of shards being written

    @property
    def bytes_written(self) -> int:
        return self.bytes_done + self.bytes_in_flight

    @property
    def fraction(self) -> Optional[float]:
        """Share of the planned bytes written (finished shards count as planned)."""
        if not self.planned_bytes:
            return None
        return min(1.0, (self.planned_bytes_done + self.bytes_in_flight) / self.planned_bytes)


def _read_json(path: str) -> Optional[dict]:
    try:
        with FileSystems.open(path) as handle:
            return json.loads(handle.read().decode("utf-8"))
    except Exception:  # noqa: BLE001 - absent, or caught half-written: next poll
        return None


def _matched(pattern: str) -> list:
    try:
        return FileSystems.match([pattern])[0].metadata_list
    except Exception:  # noqa: BLE001 - a file renamed between list and stat
        return []


class ProgressReader:
    """Reads Snapshots of one output directory; each .done file is read once."""

    def __init__(self, output_dir: str):
        self.output_dir = output_dir
        self.progress_dir = progress_dir(output_dir)
        self._plan: Optional[dict] = None
        self._done: dict = {}

    def read(self) -> Snapshot:
        if self._plan is None:
            self._plan = _read_json(plan_path(self.output_dir))
        for meta in _matched(done_pattern(self.output_dir)):
            if meta.path not in self._done:
                content = _read_json(meta.path)
                if content is not None:
                    self._done[meta.path] = content
        in_flight = sum(m.size_in_bytes for m in
                        _matched(incomplete_pattern(self.output_dir)))
        done = list(self._done.values())
        planned = (self._plan or {}).get("splits", {}).values()
        return Snapshot(
            planned_records=sum(s["records"] for s in planned) if self._plan else None,
            planned_bytes=sum(s["bytes"] for s in planned) if self._plan else None,
            planned_shards=sum(s["shards"] for s in planned) if self._plan else None,
            shards_done=len(done),
            records_done=sum(d["planned_records"] for d in done),
            records_written=sum(d["records"] for d in done),
            bytes_done=sum(d["bytes"] for d in done),
            planned_bytes_done=sum(d["planned_bytes"] for d in done),
            bytes_in_flight=in_flight)



class RateMeter:
    """MB/s over the last RATE_WINDOW_S seconds, and the ETA it implies."""

    def __init__(self, window_s: float = RATE_WINDOW_S):
        self.window_s = window_s
        self.samples: collections.deque = collections.deque()

    def add(self, now: float, written: int) -> None:
        self.samples.append((now, written))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window_s:
            self.samples.popleft()

    def bytes_per_second(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return max(0.0, (b1 - b0) / (t1 - t0)) if t1 > t0 else 0.0

    def eta_seconds(self, snapshot: Snapshot) -> Optional[float]:
        rate = self.bytes_per_second()
        fraction, planned = snapshot.fraction, snapshot.planned_bytes
        if fraction is None or planned is None or rate <= 0:
            return None
        return (1.0 - fraction) * planned / rate


def _clock(seconds: Optional[float]) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def describe(snapshot: Snapshot, rate: float, eta: Optional[float]) -> str:
    """One line: records done / planned, MB written, MB/s, ETA."""
    if snapshot.planned_records is None:
        return "planning: matching files and reading headers"
    percent = 100.0 * (snapshot.fraction or 0.0)
    return (f"{snapshot.records_done}/{snapshot.planned_records} records, "
            f"{snapshot.shards_done}/{snapshot.planned_shards} shards, "
            f"{percent:.0f}% of {(snapshot.planned_bytes or 0) / MB:.1f} MB planned, "
            f"{snapshot.bytes_written / MB:.1f} MB on disk, {rate / MB:.1f} MB/s, ETA {_clock(eta)}")


class LineRenderer:
    """Plain lines every ``log_s`` seconds: for logs, CI and schedulers (no terminal)."""

    def __init__(self, stream: TextIO, log_s: float):
        self.stream, self.log_s = stream, log_s
        self.last: Optional[float] = None

    def _write(self, elapsed: float, text: str) -> None:
        self.stream.write(f"progress [{_clock(elapsed)}] {text}\n")
        self.stream.flush()

    def update(self, snapshot: Snapshot, rate: float, eta: Optional[float], elapsed: float) -> None:
        if self.last is None or elapsed - self.last >= self.log_s:
            self.last = elapsed
            self._write(elapsed, describe(snapshot, rate, eta))

    def close(self, snapshot: Snapshot, elapsed: float, finished: bool) -> None:
        if finished:
            average = snapshot.bytes_done / MB / elapsed if elapsed > 0 else 0.0
            missing = snapshot.records_done - snapshot.records_written
            self._write(elapsed, f"done: {snapshot.records_written} records written of "
                                 f"{snapshot.records_done} planned, {snapshot.shards_done} shards, "
                                 f"{snapshot.bytes_done / MB:.1f} MB, {average:.1f} MB/s on average"
                                 + (f"; {missing} planned record(s) did not convert (the summary and "
                                    "errors.jsonl say why)" if missing > 0 else ""))


class BarRenderer:
    """A tqdm bar on a terminal: records done / planned, MB written, MB/s, ETA."""

    PLANNING = "{desc}"
    WRITING = "{desc}: {percentage:3.0f}%|{bar:24}| {n_fmt}/{total_fmt} records{postfix}"

    def __init__(self, stream: TextIO):
        from tqdm import tqdm
        # nrows: one bar only; a terminal reporting 0 rows (some ptys) would hide it
        self.bar = tqdm(total=None, file=stream, desc="planning", bar_format=self.PLANNING,
                        nrows=2, leave=True)

    def update(self, snapshot: Snapshot, rate: float, eta: Optional[float], elapsed: float) -> None:
        if snapshot.planned_records is None:
            self.bar.set_description_str(f"planning: matching files and reading headers "
                                         f"({_clock(elapsed)})", refresh=True)
            return
        if self.bar.total != snapshot.planned_records:
            self.bar.reset(total=max(snapshot.planned_records, 1))
            self.bar.bar_format = self.WRITING
            self.bar.set_description_str("writing", refresh=False)
        self.bar.n = snapshot.records_done
        self.bar.set_postfix_str(f"{100.0 * (snapshot.fraction or 0.0):.0f}% of "
                                 f"{(snapshot.planned_bytes or 0) / MB:.1f} MB planned, {rate / MB:.1f} MB/s, "
                                 f"ETA {_clock(eta)}", refresh=False)
        self.bar.refresh()

    def close(self, snapshot: Snapshot, elapsed: float, finished: bool) -> None:
        self.bar.close()


def _env_seconds(name: str, default: float) -> float:
    try:
        return max(0.01, float(os.environ[name]))
    except (KeyError, ValueError):
        return default


class ProgressMonitor:
    """``with ProgressMonitor(output_dir, mode):`` around a running job.

    ``mode``: ``bar`` (tqdm), ``log`` (plain lines), ``none``, or ``auto``: a
    bar when ``stream`` is a terminal, lines otherwise. Poll and line intervals
    default to 1 s (5 s on gs://) and 10 s; $DCM2TFRECORD_PROGRESS_POLL_S and
    $DCM2TFRECORD_PROGRESS_LOG_S change them. Nothing here can fail the run.
    """

    def __init__(self, output_dir: str, mode: str = Progress.AUTO, stream: Optional[TextIO] = None,
                 poll_s: Optional[float] = None, log_s: Optional[float] = None):
        if mode not in values(Progress):
            raise ValueError(f"progress mode must be one of {values(Progress)}, not {mode!r}")
        self.stream = stream or sys.stderr
        if mode == Progress.AUTO:
            mode = Progress.BAR if _isatty(self.stream) else Progress.LOG
        self.mode = Progress(mode)
        remote = "://" in output_dir
        default_poll = DEFAULT_REMOTE_POLL_S if remote else DEFAULT_POLL_S
        self.poll_s = poll_s or _env_seconds(POLL_ENV, default_poll)
        self.log_s = log_s or _env_seconds(LOG_ENV, DEFAULT_LOG_S)
        self.reader = ProgressReader(output_dir)
        self.rate = RateMeter()
        self.renderer: Optional[BarRenderer | LineRenderer] = None     # set by __enter__
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0
        self._last = Snapshot()

    def __enter__(self) -> "ProgressMonitor":
        if self.mode == Progress.NONE:
            return self
        self._started = time.monotonic()
        try:
            self.renderer = (BarRenderer(self.stream) if self.mode == Progress.BAR
                             else LineRenderer(self.stream, self.log_s))
        except Exception:  # noqa: BLE001 - no bar is better than no run
            self.renderer = LineRenderer(self.stream, self.log_s)
        self._thread = threading.Thread(target=self._loop, name="dcm2tfrecord-progress", daemon=True)
        self._thread.start()
        return self

    def _tick(self) -> Snapshot:
        snapshot = self.reader.read()
        now = time.monotonic()
        self.rate.add(now, snapshot.bytes_written)
        assert self.renderer is not None       # __enter__ sets it before the thread starts
        self.renderer.update(snapshot, self.rate.bytes_per_second(), self.rate.eta_seconds(snapshot),
                             now - self._started)
        self._last = snapshot
        return snapshot

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._tick()
            except Exception:  # noqa: BLE001 - progress must never fail the run
                pass
            self._stop.wait(self.poll_s)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._thread is None:
            return
        self._stop.set()
        # Never wait long for the thread: a poll stuck in a storage retry (an outage) must not
        # hold the run's exit; it is a daemon thread and dies with the process.
        self._thread.join(timeout=JOIN_TIMEOUT_S)
        try:
            finished = exc_type is None and not self._thread.is_alive()
            snapshot = self._tick() if finished else self._last
            assert self.renderer is not None
            self.renderer.close(snapshot, time.monotonic() - self._started, finished=exc_type is None)
        except Exception:  # noqa: BLE001
            pass


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except Exception:  # noqa: BLE001
        return False
