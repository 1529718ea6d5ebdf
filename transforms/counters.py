"""Beam counters with stable names, and the tag every step sends its Outcomes on.

The Dataflow UI and the local runner show the same numbers; one helper
increments them so names never drift.
"""
from __future__ import annotations

from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from dataset.results import Outcome

NAMESPACE = "dcm2tfrecord"
OUTCOMES = "outcomes"     # the output tag of Outcomes (inputs not written, and why)


def count(name: str, n: int = 1) -> None:
    Metrics.counter(NAMESPACE, name).inc(n)


def distribution(name: str, value: int) -> None:
    Metrics.distribution(NAMESPACE, name).update(value)


def count_outcome(outcome: Outcome) -> None:
    count(f"{outcome.status}_{outcome.reason}")


def emit(result):
    """A record on the main output, or an Outcome (counted) on ``OUTCOMES``; a tuple of
    Outcomes (one per input file of a record) goes out one by one."""
    outcomes = result if isinstance(result, tuple) else (result,)
    if all(isinstance(o, Outcome) for o in outcomes):
        for outcome in outcomes:
            count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)
    else:
        yield result
