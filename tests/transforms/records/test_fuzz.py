"""Fuzzing probe and decode with mutated real DICOM, PNG and JPEG bytes (issue 6, item 5).

Every mutated input must end as a clean record or a ``ConversionError`` whose
reason is documented (``dataset.reasons.DOCUMENTED``) and is not
``unexpected_error``: no other exception, no hang. Seeds are pydicom's own
test files and PNG/JPEG images generated here; mutations are byte-level
(flip, overwrite, truncate, insert, delete, repeat, splice another seed's
head) and structure-aware (DICOM element values and lengths, PNG header
fields with the chunk CRCs repaired so Pillow reads past them).

The bounded run here is derandomized, so a failure reproduces; the printed
``case`` replays with ``replay(case)``. ``tools/fuzz_long.py`` runs the same
mutations for as long as asked and collects every distinct failure.
"""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
import warnings

import pytest
from hypothesis import HealthCheck, given, settings

from dcm2tfrecord.transforms.output.write import size_mismatch
from tests.support.fuzz import FOUND_BY_FUZZING, FUZZ_MAX_PIXELS, HANGS_FOUND_BY_FUZZING, Case, cases, seeds
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.records.build import build_record
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

DEADLINE_S = 15.0            # one input, probe + decode; generous on a shared 2-core machine
DECODE_TIMEOUT_S = 5.0       # the pipeline's own --decode_timeout_s, set below DEADLINE_S


# ---------------------------------------------------------------- running one input


class Hang(BaseException):
    """Probe + decode of one input ran past DEADLINE_S.

    A BaseException, like KeyboardInterrupt, so that no ``except Exception``
    on the way (ours or a library's) turns a hang into a classified error.
    """


class Unclassified(AssertionError):
    """An outcome outside the contract: an exception that is not a documented ConversionError."""


class ShapeMismatch(AssertionError):
    """A decoded record whose shape is not the one its header was probed as."""


def _raise_hang(signum, frame):
    raise Hang(f"probe + decode ran past {DEADLINE_S:g} s")


# The pipeline's --decode_timeout_s, shorter than our own deadline: a decoder stuck forever
# must come back as decode_timeout (its thread keeps running; see tools/fuzz_long.py).
SETTINGS = DecodeSettings(decode_timeout_s=DECODE_TIMEOUT_S)


def convert_bytes(data: bytes, name: str, deadline_s: float = DEADLINE_S) -> str:
    """Probe then decode ``data`` as a file named ``name``; returns "written" or the reason.

    Raises Hang past the deadline (main thread only: SIGALRM) and lets any
    exception that is not a ConversionError propagate.
    """
    source = SourceFile(uri=f"mem://fuzz/{name}", rel_path=name, size=len(data), mtime=0.0)

    def opener(_uri):
        return io.BytesIO(data)

    previous = signal.signal(signal.SIGALRM, _raise_hang)
    signal.setitimer(signal.ITIMER_REAL, deadline_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record = probe_file(source, max_pixels=FUZZ_MAX_PIXELS, opener=opener, settings=SETTINGS)
            _, dtype, shape = build_record(record, opener=opener, settings=SETTINGS)
    except ConversionError as exc:
        return exc.reason
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if size_mismatch(record, dtype, shape):
        # a wider dtype than probed (a CT slice whose values leave int16), or a header whose
        # Rows/Columns disagree with the codestream: the writer refuses it, classified
        return reasons.DECODED_SIZE_MISMATCH
    if shape != record.spec.shape:
        # the same bytes in another shape: shard sizes hold, but the manifest's shapes would lie
        raise ShapeMismatch(f"decoded {shape} {dtype}, probed {record.spec.shape} {record.spec.dtype}")
    return "written"


def check_case(case: Case) -> str:
    """The contract for one input; raises Unclassified (chained to the cause) when broken."""
    data = case.build()
    try:
        outcome = convert_bytes(data, case.name)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # e.g. pyo3's PanicException from a Rust codec is a BaseException
        raise Unclassified(f"{type(exc).__name__}: {str(exc)[:300]} for {case}") from exc
    if outcome != "written" and (outcome not in reasons.DOCUMENTED or outcome == reasons.UNEXPECTED):
        raise Unclassified(f"reason {outcome!r} is not a documented reason for {case}")
    return outcome


def replay(case: Case) -> str:
    """Re-runs a printed failing case (e.g. from a test log) outside hypothesis."""
    return check_case(case)


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("case", FOUND_BY_FUZZING, ids=lambda c: c.seed.rsplit("/", 1)[-1])
def test_inputs_found_by_fuzzing_end_clean_or_classified(case):
    check_case(case)


@pytest.mark.parametrize("case", HANGS_FOUND_BY_FUZZING, ids=lambda c: c.seed.rsplit("/", 1)[-1])
def test_decoders_that_never_returned_are_rejected_up_front(case):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    script = ("import sys; from tests.support.fuzz import Case; "
              "from tests.transforms.records.test_fuzz import check_case; "
              f"print('outcome', check_case({case!r}))")
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True,
                          timeout=DEADLINE_S + 120, env=dict(os.environ, RUST_BACKTRACE="0"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == reasons.DECODE_ERROR, done.stdout


BOUNDED_EXAMPLES = {"dicom": 2000, "png": 500, "jpeg": 500}   # 3,000 mutated inputs in all


def test_unmutated_seeds_convert_or_are_classified():
    """Images all convert; pydicom's files are real DICOM, many of them deliberately odd."""
    outcomes = {}
    for name, data in sorted(seeds("all").items()):
        outcomes[name] = check_case(Case(seed=name, name="x.dcm" if name.startswith("dicom/")
                                         else "x." + ("png" if name.startswith("png/") else "jpg"),
                                         mutations=()))
    assert {n: o for n, o in outcomes.items() if not n.startswith("dicom/") and o != "written"} == {}
    assert sum(o == "written" for n, o in outcomes.items() if n.startswith("dicom/")) >= 60


def test_seeds_cover_png_jpeg_and_many_dicom_syntaxes():
    assert len(seeds("png")) >= 6 and len(seeds("jpeg")) >= 5
    assert len(seeds("dicom")) >= 100


@pytest.mark.parametrize("family", sorted(BOUNDED_EXAMPLES))
def test_mutated_inputs_end_clean_or_classified(family):
    examples = BOUNDED_EXAMPLES[family]
    ran = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(case=cases(family))
    def run(case):
        ran.append(check_case(case))

    started = time.monotonic()
    run()
    assert len(ran) >= examples
    assert time.monotonic() - started < 120, "bounded fuzz run is meant to take well under a minute"
