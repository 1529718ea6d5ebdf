"""Beam counters with stable names, and the tag every step sends its Outcomes on.

The Dataflow UI and the local runner show the same numbers; one helper
increments them so names never drift.
"""
from __future__ import annotations

from apache_beam.metrics import Metrics
from apache_beam.pvalue import TaggedOutput

from dcm2tfrecord.dataset.results import Outcome

NAMESPACE = "dcm2tfrecord"
OUTCOMES = "outcomes"     # the output tag of Outcomes (inputs not written, and why)


# One metric object per name: Beam's delegating metrics find the running step's container
# on every update, so one object serves every step and bundle; building it costs ~3 us,
# paid once per record by the probe's count before (docs/BENCHMARKS.md §8.3).
_COUNTERS: dict = {}
_DISTRIBUTIONS: dict = {}


def count(name: str, n: int = 1) -> None:
    counter = _COUNTERS.get(name)
    if counter is None:
        counter = _COUNTERS[name] = Metrics.counter(NAMESPACE, name)
    counter.inc(n)


def distribution(name: str, value: int) -> None:
    metric = _DISTRIBUTIONS.get(name)
    if metric is None:
        metric = _DISTRIBUTIONS[name] = Metrics.distribution(NAMESPACE, name)
    metric.update(value)


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
