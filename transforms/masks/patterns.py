"""User patterns (class-map rules, --mask_pattern) matched in bounded time, with Python's regex meaning.

Class-map rules and ``--mask_pattern`` are regular expressions users write, matched against text
nobody controls (ROI and segment names, input paths). Python's ``re`` backtracks: ``(a+)+$`` on a
30-character name, or ``(.*)_(.*)_(.*)\\.nii`` on a long path, runs for hours while holding the
GIL, so no timeout of the run can fire. Here a pattern is first checked by ``re`` (what it accepts
and how it reports a mistake stay the same), then parsed by ``re``'s own parser and written out
for RE2 (google-re2), a linear-time engine, keeping Python's meaning where the two differ:
``\\w``, ``\\d`` and ``\\s`` as Python's Unicode classes (RE2's are ASCII), ``$`` and ``\\Z``,
case and dot flags scoped as written. A pattern RE2 cannot run (a lookaround, a backreference,
a Unicode ``\\b``, a possessive or atomic group, a repeat over 1000) is matched by the ``regex``
module, Python-compatible, with a time bound per match (MATCH_BOUND_S): :class:`PatternTimeout`
past it, which its caller turns into one failed input naming the pattern, never a hang.
The designs measured against each other (this one, ``regex`` with a time bound for every
pattern, and plain ``re``) and why this one: docs/CONVERTING.md, "Masks".
"""
from __future__ import annotations

import dataclasses
import functools
import importlib
import re
import sys
from typing import Any, Optional, Sequence

from dcm2tfrecord.dataset.errors import Dcm2TfrecordError, InputError

# re's own parser: re._parser and re._constants since Python 3.11, sre_parse before
_sre_p: Any = importlib.import_module("re._parser" if sys.version_info >= (3, 11) else "sre_parse")
_sre_c: Any = importlib.import_module("re._constants" if sys.version_info >= (3, 11) else "sre_constants")

MATCH_BOUND_S = 1.0      # the most one match of a pattern RE2 cannot run may take
RE2_MAX_REPEAT = 1000    # RE2's largest counted repeat ({n,m})


class PatternTimeout(InputError, TimeoutError):
    """A user pattern RE2 cannot run took longer than MATCH_BOUND_S on one text."""


class _Unsupported(Dcm2TfrecordError):
    """A construct RE2 cannot run with Python's meaning: the pattern goes to the bounded engine
    (caught in this module, never raised to a caller)."""


@dataclasses.dataclass(frozen=True)
class Found:
    """A match: the text of each group (None where a group took no part)."""
    groups: tuple[Optional[str], ...]

    def group(self, number: int) -> Optional[str]:
        return self.groups[number - 1]


class BoundedPattern:
    """A Python regular expression compiled for ``fullmatch`` in bounded time (module docstring).
    ``groups`` and ``groupindex`` are Python's; ``linear`` says whether RE2 runs it. ``captures``:
    whether the groups' text is used; RE2 gives a group repeated by a loop that may match empty
    its last non-empty text where Python takes one more, empty, turn (``(a|a*)*`` on ``a``), so
    such a pattern goes to the bounded engine when its groups count (a class rule's do not)."""

    def __init__(self, pattern: str, flags: int = 0, captures: bool = True):
        self.pattern = pattern
        self.flags = flags
        self.captures = captures
        python = re.compile(pattern, flags)      # re.error for a mistake, as before
        self.groups = python.groups
        self.groupindex = dict(python.groupindex)
        self._re2: Any = None
        self._dollar = False
        try:
            text, self._dollar = _to_re2(pattern, flags, captures)
            self._re2 = _re2_compile(text)
        except _Unsupported:
            pass
        self._backtracking: Any = None

    def _fallback(self) -> Any:
        if self._backtracking is None:
            import regex
            self._backtracking = regex.compile(self.pattern, _regex_flags(self.flags) | regex.VERSION0)
        return self._backtracking

    def __reduce__(self):             # settings travel to workers pickled: compiled again there
        return BoundedPattern, (self.pattern, self.flags, self.captures)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BoundedPattern) and (self.pattern, self.flags) == (other.pattern, other.flags)

    def __hash__(self) -> int:
        return hash((self.pattern, self.flags))

    def __repr__(self) -> str:
        return f"BoundedPattern({self.pattern!r}, {self.flags})"

    @property
    def linear(self) -> bool:
        return self._re2 is not None

    def fullmatch(self, text: str) -> Optional[Found]:
        """The match of the whole ``text``, or None; PatternTimeout past MATCH_BOUND_S (only a
        pattern RE2 cannot run: RE2 takes time in proportion to the text)."""
        if self._re2 is not None and not (self._dollar and text.endswith("\n")):
            try:
                found = self._re2.fullmatch(text)
            except UnicodeEncodeError:          # a lone surrogate (an undecodable file name)
                found = self._re2.fullmatch(_without_surrogates(text))
                if found is None:
                    return None
                return Found(tuple(None if s[0] < 0 else text[s[0]:s[1]]
                                   for s in (found.span(g) for g in range(1, self.groups + 1))))
            return None if found is None else Found(tuple(found.groups()))
        try:
            found = self._fallback().fullmatch(text, timeout=MATCH_BOUND_S)
        except TimeoutError:
            raise PatternTimeout(f"the pattern {self.pattern!r} took longer than {MATCH_BOUND_S:g} s on one "
                                 f"text of {len(text)} characters (it uses a construct only a backtracking "
                                 f"engine runs: a lookaround, a backreference, a Unicode \\b); simplify it") \
                from None
        return None if found is None else Found(tuple(found.groups()))


def _without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD: one character for one, so spans keep."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def _regex_flags(flags: int) -> int:
    import regex
    out = 0
    for ours, theirs in ((re.IGNORECASE, regex.IGNORECASE), (re.DOTALL, regex.DOTALL),
                         (re.MULTILINE, regex.MULTILINE), (re.VERBOSE, regex.VERBOSE), (re.ASCII, regex.ASCII)):
        if flags & ours:
            out |= theirs
    return out


@functools.lru_cache(maxsize=1024)
def _re2_compile(text: str) -> Any:
    import re2
    options = re2.Options()
    options.log_errors = False        # RE2 would print its refusals on stderr
    options.max_mem = 64 << 20
    try:
        return re2.compile(text, options)
    except re2.error:
        raise _Unsupported(text) from None


# ---------------------------------------------------------------- Python's pattern written for RE2


@functools.lru_cache(maxsize=1)
def _python_spaces() -> str:
    """Python's Unicode whitespace (str.isspace), every one below U+3001."""
    return "".join(_char(c) for c in range(0x3001) if chr(c).isspace())


def _char(code: int) -> str:
    return f"\\x{{{code:x}}}"


# Python's classes as RE2 class bodies: Unicode (str patterns) and ASCII (re.ASCII)
_WORD_U, _WORD_A = r"\p{L}\p{N}_", r"0-9A-Za-z_"
_DIGIT_U, _DIGIT_A = r"\p{Nd}", r"0-9"
_SPACE_A = r"\t\n\x0b\x0c\r "


def _category(name: Any, ascii_only: bool) -> tuple[str, bool]:
    """(class body, negated) of a category escape."""
    c = _sre_c
    table = {
        c.CATEGORY_DIGIT: (_DIGIT_A if ascii_only else _DIGIT_U, False),
        c.CATEGORY_NOT_DIGIT: (_DIGIT_A if ascii_only else _DIGIT_U, True),
        c.CATEGORY_WORD: (_WORD_A if ascii_only else _WORD_U, False),
        c.CATEGORY_NOT_WORD: (_WORD_A if ascii_only else _WORD_U, True),
        c.CATEGORY_SPACE: (_SPACE_A if ascii_only else _python_spaces(), False),
        c.CATEGORY_NOT_SPACE: (_SPACE_A if ascii_only else _python_spaces(), True),
    }
    if name not in table:
        raise _Unsupported(str(name))
    return table[name]


def _klass(items: Sequence[tuple[Any, Any]], ascii_only: bool) -> str:
    """A ``[...]`` of re's parsed set items."""
    c = _sre_c
    negate = False
    body: list[str] = []
    negated_categories: list[str] = []
    for op, av in items:
        if op is c.NEGATE:
            negate = True
        elif op is c.LITERAL:
            body.append(_char(av))
        elif op is c.RANGE:
            body.append(f"{_char(av[0])}-{_char(av[1])}")
        elif op is c.CATEGORY:
            text, negated = _category(av, ascii_only)
            (negated_categories if negated else body).append(text)
        else:
            raise _Unsupported(str(op))
    if negated_categories:
        if body or len(negated_categories) > 1:
            raise _Unsupported("a negated class escape beside other members")   # no intersection in RE2
        return f"[{'' if negate else '^'}{negated_categories[0]}]"
    if not body:
        return "[^\\x{0}-\\x{10ffff}]" if not negate else "(?s:.)"
    return f"[{'^' if negate else ''}{''.join(body)}]"


def _to_re2(pattern: str, flags: int, captures: bool = True) -> tuple[str, bool]:
    """(``pattern`` written for RE2 with Python's meaning, whether it says ``$``), for a str
    pattern Python accepts; _Unsupported for a construct RE2 cannot run. RE2's ``$`` is the end
    of the text only, Python's also the place before a final line break: the same on a text that
    does not end in one (fullmatch sends one that does to the other engine). Every literal is
    written as ``\\x{..}``, so a bare ``$`` outside ``(?m:$)`` is one the pattern says."""
    parsed = _sre_p.parse(pattern, flags)
    state = getattr(parsed, "state", None) or getattr(parsed, "pattern", None)
    global_flags = state.flags if state is not None else flags
    if global_flags & re.ASCII and global_flags & re.IGNORECASE:
        raise _Unsupported("ASCII-only case folding")       # RE2 folds case by Unicode
    text = _seq(list(parsed), global_flags, captures)
    return text, "$" in text.replace("(?m:$)", "")


def _seq(items: Sequence[tuple[Any, Any]], flags: int, captures: bool) -> str:
    return "".join(_item(op, av, flags, captures) for op, av in items)


def _has_group(items: Any) -> bool:
    """Whether re's parsed ``items`` hold a capturing group, at any depth."""
    for op, av in items:
        if op is _sre_c.SUBPATTERN and av[0] is not None:
            return True
        nested = av[-1] if op in (_sre_c.SUBPATTERN, _sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT) else \
            [item for branch in av[1] for item in branch] if op is _sre_c.BRANCH else ()
        if nested and _has_group(nested):
            return True
    return False


def _scoped(text: str, flags: int) -> str:
    """``text`` under Python's case and dot flags (RE2's defaults are off, as Python's)."""
    return f"(?i:{text})" if flags & re.IGNORECASE else text


def _item(op: Any, av: Any, flags: int, captures: bool) -> str:
    c = _sre_c
    ascii_only = bool(flags & re.ASCII)
    if op is c.LITERAL:
        return _scoped(_char(av), flags)
    if op is c.NOT_LITERAL:
        return _scoped(f"[^{_char(av)}]", flags)
    if op is c.ANY:
        return "(?s:.)" if flags & re.DOTALL else "[^\\n]"
    if op is c.IN:
        return _scoped(_klass(av, ascii_only), flags)
    if op is c.BRANCH:
        return "(?:" + "|".join(_seq(list(branch), flags, captures) for branch in av[1]) + ")"
    if op is c.SUBPATTERN:
        group, add, remove, sub = av
        inner = _seq(list(sub), (flags | add) & ~remove, captures)
        return "(?:" + inner + ")" if group is None else "(" + inner + ")"
    if op in (c.MAX_REPEAT, c.MIN_REPEAT):
        low, high, sub = av
        if low > RE2_MAX_REPEAT or (high is not c.MAXREPEAT and high > RE2_MAX_REPEAT):
            raise _Unsupported("a repeat over 1000")
        if captures and sub.getwidth()[0] == 0 and _has_group(sub):
            raise _Unsupported("a group in a loop that may match empty")
        count = f"{{{low},}}" if high is c.MAXREPEAT else f"{{{low},{high}}}"
        return "(?:" + _seq(list(sub), flags, captures) + ")" + count + ("?" if op is c.MIN_REPEAT else "")
    if op is c.AT:
        multiline = bool(flags & re.MULTILINE)
        table = {c.AT_BEGINNING: "(?m:^)" if multiline else "\\A", c.AT_BEGINNING_STRING: "\\A",
                 c.AT_END_STRING: "\\z"}
        if av in table:
            return table[av]
        if av is c.AT_END:
            # Python's $ also holds before a final line break; a text that ends in one goes to the
            # engine that keeps that meaning (only where the pattern says $)
            if multiline:
                return "(?m:$)"
            return "$"        # RE2's: the end of the text only (_to_re2)
        if av in (c.AT_BOUNDARY, c.AT_NON_BOUNDARY) and ascii_only:
            return "\\b" if av is c.AT_BOUNDARY else "\\B"
        raise _Unsupported(str(av))
    raise _Unsupported(str(op))        # lookarounds, backreferences, conditionals, atomic, possessive
