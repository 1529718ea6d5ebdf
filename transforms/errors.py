"""The one exception type the transforms raise for bad input."""
from __future__ import annotations


class ConversionError(Exception):
    """An input that cannot be converted, with a stable reason code.

    ``reason`` is one of ``transforms.reasons``; the message says what in the
    file is wrong, so a user can act on it without opening the file.
    """

    def __init__(self, reason: str, message: str, skipped: bool = False):
        super().__init__(message)
        self.reason = reason
        self.skipped = skipped
