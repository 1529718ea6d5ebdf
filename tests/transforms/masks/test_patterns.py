"""transforms.masks.patterns: users' regular expressions matched in bounded time with Python's
meaning: RE2 for what it runs (its answer and groups are re's), the regex module with a bound
per match for the rest."""
from __future__ import annotations

import pickle
import re

import pytest
from hypothesis import given, settings, strategies as st

from dcm2tfrecord.transforms.masks import patterns
from dcm2tfrecord.transforms.masks.patterns import BoundedPattern

ATOMS = ["a", "b", "_", ".", r"\w", r"\W", r"\d", r"\s", r"\S", "[ab_]", "[^a]", r"[\d_]", "é", "١", "K"]


@st.composite
def _patterns(draw, depth=0):
    """Small patterns of the constructs RE2 runs: atoms, groups, alternation, repeats, anchors."""
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        if depth < 2 and draw(st.booleans()):
            inner = draw(_patterns(depth + 1))
            if draw(st.booleans()):
                inner += "|" + draw(_patterns(depth + 1))
            atom = draw(st.sampled_from(["({})", "(?:{})", "(?i:{})", "(?s:{})"])).format(inner)
        else:
            atom = draw(st.sampled_from(ATOMS))
        parts.append(atom + draw(st.sampled_from(["", "*", "+", "?", "*?", "+?", "{1,2}", "{2}"])))
    return "".join(parts) + draw(st.sampled_from(["", "$", r"\Z"]))


TEXTS = st.text(alphabet="ab_ é١K\u212a\n1A", max_size=8)


@settings(max_examples=600, deadline=None)
@given(pattern=_patterns(), text=TEXTS, flags=st.sampled_from([0, re.IGNORECASE, re.DOTALL, re.IGNORECASE | re.DOTALL]))
def test_re2_gives_pythons_answer_and_groups(pattern, text, flags):
    """Without captures (a class rule) RE2 runs every such pattern and answers as re; with
    captures, the groups are re's too (a group in a loop that may match empty, where the two
    differ, goes to the bounded engine)."""
    python = re.fullmatch(pattern, text, flags)
    answer = BoundedPattern(pattern, flags, captures=False)
    assert answer.linear, pattern
    assert (answer.fullmatch(text) is None) == (python is None), (pattern, text, flags)
    found = BoundedPattern(pattern, flags).fullmatch(text)
    assert (found is None) == (python is None), (pattern, text, flags)
    if found is not None:
        assert found.groups == python.groups(), (pattern, text, flags)


@pytest.mark.parametrize("pattern, linear", [("(a|a*)*", False), ("(a*)+b", False), (r"gtv(\w+[_ ]?)*", True),
                                             ("(?:a*)*", True)])
def test_a_group_in_a_loop_that_may_match_empty_keeps_pythons_groups(pattern, linear):
    bounded = BoundedPattern(pattern)
    assert bounded.linear == linear and BoundedPattern(pattern, captures=False).linear
    for text in ("a", "aa", "ab", "gtv_x", ""):
        python = re.fullmatch(pattern, text)
        found = bounded.fullmatch(text)
        assert (found is None) == (python is None) and (found is None or found.groups == python.groups())


@pytest.mark.parametrize("pattern, text, flags", [
    (r"gtv(\w+[_ ]?)*", "GTV_élan vital", re.IGNORECASE),       # \w: Unicode letters (RE2's: ASCII)
    (r"\d+", "١٢", 0),                                          # \d: Unicode digits
    (r"a\sb", "a\x1cb", 0),                                     # \s: Python's whitespace
    (r"x$", "x\n", 0),                                          # $: also before a final line break
    (r"(?i:k)", "\u212a", 0),                                   # the Kelvin sign folds to k
    (r"(?P<case>[^/]+)/(\d+)", "p7/12", 0),
])
def test_where_re2_and_python_differ_pythons_meaning_is_kept(pattern, text, flags):
    python = re.fullmatch(pattern, text, flags)
    found = BoundedPattern(pattern, flags).fullmatch(text)
    assert (found is None) == (python is None)
    assert found is None or found.groups == python.groups()
    assert BoundedPattern(pattern, flags).groupindex == re.compile(pattern, flags).groupindex


@pytest.mark.parametrize("pattern", [r"(?=a)(.*)", r"(a)\1", r"(?<!b)a", r"\bword\b", r"(?>a+)", r"a++",
                                     r"(a)?(?(1)b|c)", "a{2000}"])
def test_what_re2_cannot_run_goes_to_the_bounded_engine_with_pythons_answer(pattern):
    bounded = BoundedPattern(pattern)
    assert not bounded.linear
    for text in ("a", "aa", "ab", "word", "ba", "a" * 2000, "c"):
        python = re.fullmatch(pattern, text)
        found = bounded.fullmatch(text)
        assert (found is None) == (python is None) and (found is None or found.groups == python.groups())


def test_the_bounded_engine_stops_at_its_bound(monkeypatch):
    monkeypatch.setattr(patterns, "MATCH_BOUND_S", 0.1)
    bounded = BoundedPattern(r"(.*)_(.*)_\1_(.*)\.x")
    with pytest.raises(patterns.PatternTimeout, match="took longer than 0.1 s"):
        bounded.fullmatch("a_" * 3000 + "b.x")


def test_an_undecodable_name_matches_as_python_matches_it():
    name = "scan_\udcff_1"              # a file name's byte that is no UTF-8, as os.listdir gives it
    bounded = BoundedPattern(r"scan_(.)_(\d)")
    assert bounded.linear and bounded.fullmatch(name).groups == re.fullmatch(r"scan_(.)_(\d)", name).groups()


def test_a_pattern_travels_pickled_and_a_mistake_is_res_error():
    bounded = BoundedPattern(r"(a+)+$", re.IGNORECASE)
    again = pickle.loads(pickle.dumps(bounded))
    assert again == bounded and again.linear and again.fullmatch("AAA") is not None
    with pytest.raises(re.error):
        BoundedPattern("gtv(")
    with pytest.raises(re.error):
        BoundedPattern(r"\pL")          # RE2 would take it; Python does not, so neither do we
