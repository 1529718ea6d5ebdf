"""The gs:// output lock (dataset/lock.py) on the GCS emulator: heartbeat, takeover, races.

An object store has no file locks: OUT/.lock is an object holding the holder's
token and a heartbeat. The timings are shortened here (monkeypatched module
constants, read at each use) so that heartbeats and staleness happen in
fractions of a second; the objects are real ones in the emulator.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.dataset import lock
from dcm2tfrecord.dataset.lock import OutputBusy, OutputLock
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)


@pytest.fixture
def fast(monkeypatch):
    monkeypatch.setattr(lock, "HEARTBEAT_S", 0.2)
    monkeypatch.setattr(lock, "STALE_S", 1.5)
    monkeypatch.setattr(lock, "SETTLE_S", 0.3)


def _read(path: str):
    try:
        with FileSystems.open(path) as handle:
            return json.loads(handle.read().decode("utf-8"))
    except Exception:  # noqa: BLE001 - absent
        return None


def _write(path: str, holder: dict) -> None:
    with FileSystems.create(path, mime_type="application/json") as handle:
        handle.write(json.dumps(holder).encode("utf-8"))


def test_the_holder_renews_its_heartbeat_and_removes_its_lock(gcs_emulator, fast):  # noqa: F811
    output = gcs_emulator.url("lock/heartbeat")
    with OutputLock(output) as held:
        first = _read(held.path)
        assert first["token"] == held.token
        time.sleep(0.8)
        later = _read(held.path)
        assert later["token"] == held.token and later["heartbeat"] > first["heartbeat"]
        with pytest.raises(OutputBusy, match=f"--output {output} is being written by process"):
            OutputLock(output).__enter__()
    assert _read(held.path) is None


def test_a_stale_lock_is_taken_over_and_a_fresh_one_is_not(gcs_emulator, fast):  # noqa: F811
    output = gcs_emulator.url("lock/stale")
    path = FileSystems.join(output, ".lock")
    dead = {"token": "dead-run", "host": "gone", "pid": 1, "started": "then", "command": "convert",
            "heartbeat": time.time() - lock.STALE_S - 1}
    _write(path, dead)
    with OutputLock(output) as held:
        assert _read(path)["token"] == held.token
    alive = dict(dead, token="live-run", heartbeat=time.time())
    _write(path, alive)
    with pytest.raises(OutputBusy, match="process 1 on gone"):
        OutputLock(output).__enter__()
    assert _read(path)["token"] == "live-run"          # refused without touching it


def test_of_two_runs_at_once_exactly_one_holds_the_lock(gcs_emulator, fast):  # noqa: F811
    output = gcs_emulator.url("lock/race")
    results: dict = {}
    start = threading.Barrier(2)

    def run(name):
        candidate = OutputLock(output)
        start.wait()
        try:
            candidate.__enter__()
            results[name] = candidate
        except OutputBusy:
            results[name] = None

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [c for c in results.values() if c is not None]
    assert len(winners) == 1, results
    assert _read(winners[0].path)["token"] == winners[0].token
    winners[0].release()
    assert _read(winners[0].path) is None


def test_a_holder_whose_lock_was_taken_over_stops_renewing_it(gcs_emulator, fast):  # noqa: F811
    """A run paused past STALE_S (a suspended laptop) whose lock another run took over must not
    write its own token back over the new holder's lock, nor delete it when it ends."""
    output = gcs_emulator.url("lock/takeover")
    old = OutputLock(output).__enter__()
    newer = dict(_read(old.path), token="newer-run", heartbeat=time.time())
    _write(old.path, newer)                       # what a takeover by another run leaves
    time.sleep(0.8)                               # several of old's heartbeats
    assert _read(old.path)["token"] == "newer-run"
    old.release()
    assert _read(old.path)["token"] == "newer-run"
