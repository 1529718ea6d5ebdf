"""The one exception type the transforms raise for bad input."""
from __future__ import annotations

from dcm2tfrecord.dataset.errors import InputError, StorageError


class ConversionError(InputError):
    """An input that cannot be converted, with a stable reason code.

    ``reason`` is one of ``dataset.reasons``; the message says what in the
    file is wrong, so a user can act on it without opening the file.
    """

    def __init__(self, reason: str, message: str, skipped: bool = False, outage: bool = False):
        super().__init__(message)
        self.reason = reason
        self.skipped = skipped
        self.outage = outage       # the storage did not answer (not the file's fault)


class StorageOutage(StorageError):
    """Storage stopped answering: several inputs in a row could not be read for that reason.

    Raised out of a step on purpose: the run stops (exit 1, nothing committed)
    instead of failing every remaining input one retry budget at a time.
    """
