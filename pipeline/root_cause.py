"""Why a run failed, in one line, out of Beam's wrapped multi-line errors (:func:`root_cause`)."""
from __future__ import annotations

import re
from typing import Optional

from dcm2tfrecord.dataset.errors import StorageError


def root_cause(exc: BaseException) -> str:
    """One line naming why a run failed, out of Beam's wrapped multi-line errors:
    the innermost ``SomeError: message`` and the step it happened in."""
    chain = list(_chain(exc))
    text = "\n".join(str(e) for e in chain)
    prefix = "storage did not answer within the retry budget (--gcs_retry_s): " if storage_outage(exc) else ""
    errors = re.findall(r"^\s*((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Conflict|Busy|Exit)\b"
                        r"(?::[^\n]*)?)$", text, flags=re.M)
    step = re.findall(r"\[while running '([^']+)'\]", text)
    inner = chain[-1]
    cause = re.sub(r"\s*\[while running '[^']+'\]", "", errors[-1]) if errors else (
        f"{type(inner).__name__}: {(str(inner).strip().splitlines() or [''])[0]}")
    return prefix + cause.strip()[:400] + (f" (in step {step[-1]})" if step else "")


def storage_outage(exc: BaseException) -> bool:
    """Whether the run failed because storage did not answer. By type where the exception is
    this process's (StorageOutage is a StorageError); by text where a worker process raised it:
    Beam relays a failed step to the launcher as an exception holding the worker's traceback as
    text, and no type survives that."""
    chain = list(_chain(exc))
    return any(isinstance(e, StorageError) for e in chain) or bool(
        re.search(r"RetryError|Connection refused|ServiceUnavailable|StorageOutage",
                  "\n".join(str(e) for e in chain)))


def _chain(exc: Optional[BaseException]):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        # "raise ... from None" says the context is not the cause: it is not followed
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)
