"""``StrEnum``, the base of the format's fixed choices: enum.StrEnum, or on Python 3.10 the same class.

A member equals, hashes, prints and serialises (JSON, a record's bytes) as its value, so a
choice held as a member is written exactly as the plain string was. The format's choices
are defined beside the code that implements them: ``Compression`` beside the container
adapters (dataset/file_adapters.py), ``RecordKind`` beside the record layout
(dataset/features.py).
"""
from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:   # both distributions support 3.10 (setup.py): enum.StrEnum as 3.11 defines it
    class StrEnum(str, enum.Enum):
        """Members are strings, and print and format as their value."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(str(self), spec)

__all__ = ["StrEnum"]
