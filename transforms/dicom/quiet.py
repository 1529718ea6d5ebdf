"""pydicom's logging and warnings kept out of the run log.

What matters to a user ends up in errors.jsonl with a reason, so the steps that
read DICOM call :func:`silence_pydicom` in their ``setup``.
"""
from __future__ import annotations

import logging
import warnings


def silence_pydicom() -> None:
    """Keeps pydicom's logging and warnings out of the run log (idempotent).

    pydicom logs and warns about every oddity it tolerates; what matters to a
    user ends up in errors.jsonl with a reason. Called by the steps that read
    DICOM (their ``setup``), never at import: importing this module changes
    nothing in the caller's process.
    """
    logging.getLogger("pydicom").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"pydicom(\..*)?$")
