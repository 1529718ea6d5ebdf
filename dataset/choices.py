"""The base of every fixed choice of an option: ``StrEnum`` (Python 3.10 too) and ``values``.

Each choice enum is defined beside the code that implements it (``PixelEncoding`` in
dataset/features.py, ``ResizeMode`` in transforms/images/geometry.py, ...): a member
equals, prints, formats and serialises as its value, so dataset.json, the Flex Template
and code comparing with a plain string see the same strings as before. It lives in
dataset/, the leaf every side stands on, and imports nothing but the standard library.
"""
from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:   # the converter supports 3.10 (setup.py): enum.StrEnum as 3.11 defines it
    class StrEnum(str, enum.Enum):
        """Members are strings, and print and format as their value."""

        def __str__(self) -> str:
            return str.__str__(self)

        def __format__(self, spec: str) -> str:
            return str.__format__(str(self), spec)

__all__ = ["StrEnum", "values"]


def values(choices: type[enum.Enum]) -> tuple:
    """The plain values of an enum's members, in declaration order."""
    return tuple(member.value for member in choices)
