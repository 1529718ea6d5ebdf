"""A bad option or argument: the error every check before any work raises."""
from __future__ import annotations

from dcm2tfrecord.dataset.errors import OptionError


class UsageError(OptionError):
    """A bad option: reported in one line, exit code 2, nothing written."""
