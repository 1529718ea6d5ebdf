"""pydicom's logging and warnings, and nibabel's import-time warning, kept out of the run log.

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


# nibabel warns on the first import of nibabel.nicom that "The DICOM readers are highly
# experimental, unstable, and only work for Siemens time-series at the moment": it says
# nothing to a user of ours (we read the CSA header through csareader alone, and check what
# it gives), so that one warning is ignored around that one import.
_NICOM_WARNING = r"The DICOM readers are highly experimental"


def csareader():
    """nibabel's ``nibabel.nicom.csareader`` (the Siemens CSA header parser), imported
    without nibabel's import-time warning about its DICOM readers; every other warning of
    the import still shows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NICOM_WARNING, category=UserWarning)
        from nibabel.nicom import csareader as module
    return module
