"""A bad option or argument: the error every check before any work raises."""
from __future__ import annotations

from dcm2tfrecord.dataset.errors import OptionError


class UsageError(OptionError):
    """A bad option: reported in one line, exit code 2, nothing written."""


def usage_line(command: str, exc: UsageError) -> str:
    """The one line a usage error prints (exit code 2)."""
    return f"dcm2tfrecord {command}: error: {exc}"
