"""A call run in a forked child with a time limit, so that a test of something that must not hang
(a hostile regular expression, a FIFO opened for reading) fails instead of stalling the suite:
Python's regex engine holds the GIL and a blocked open never returns, so neither a thread nor
pytest-timeout's thread method can stop it; the child is killed."""
from __future__ import annotations

import multiprocessing
import time
from typing import Any, Callable

import pytest


def finishes_within(seconds: float, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``'s value (or its exception, raised here) when it ends within ``seconds``;
    the test fails, the child killed, otherwise."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("value", call(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test as raised
            send.send(("raised", exc))

    started = time.monotonic()
    process = context.Process(target=child, daemon=True)
    process.start()
    send.close()
    ready = receive.poll(seconds)
    if not ready:
        process.kill()
        process.join()
        pytest.fail(f"{getattr(call, '__name__', call)} still ran after {seconds} s")
    kind, value = receive.recv()
    process.join()
    assert time.monotonic() - started <= seconds + 1
    if kind == "raised":
        raise value
    return value
