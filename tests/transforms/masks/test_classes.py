"""transforms.masks.classes: ROI names to classes by a mapping file, and the mask layouts."""
from __future__ import annotations

import os

import numpy as np
import pytest

from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import classes, patterns, sources
from tests.support.bounded import finishes_within

YAML = """
GTV: ["gtv.*", "tumou?r"]
Lung: ["lungs?[ _]?(l|r|left|right)?", "poumon.*"]
Heart: heart
"""
CSV = "name,class,match\nGTV_p,GTV,exact\nlung.*,Lung,regex\n Heart ,Heart,\n"


@pytest.mark.parametrize("text, source", [(YAML, "map.yaml"), (CSV, "map.csv")])
def test_names_take_the_class_of_the_first_rule_they_match(text, source):
    mapping = classes.parse_mapping(text, source)
    assert mapping.classes == ("GTV", "Lung", "Heart")
    assert mapping.class_of("GTV_p") == "GTV" and mapping.index_of("GTV_p") == 1
    assert mapping.class_of("Lung_L") == "Lung" and mapping.index_of("lung_l") == 2
    assert mapping.class_of("heart") == "Heart" and mapping.index_of("  HEART ") == 3
    assert mapping.class_of("Smith Jane lung contour") is None and mapping.index_of("spinal cord") == 0


def test_yaml_patterns_match_whole_names_only():
    mapping = classes.parse_mapping(YAML, "map.yaml")
    assert mapping.class_of("tumor") == "GTV" and mapping.class_of("not a tumor") is None
    assert mapping.class_of("heartbeat") is None


@pytest.mark.parametrize("text, source, says", [
    ("GTV: ['gtv(']", "m.yaml", "is not a regular expression"),
    ("- a\n- b", "m.yaml", "expected a mapping"),
    ("GTV: 3", "m.yaml", "needs a pattern"),
    ("roi,label\nGTV,GTV\n", "m.csv", "name,class"),
    ("name,class,match\nGTV,GTV,fuzzy\n", "m.csv", "m.csv:2: match is 'fuzzy'"),
    ("name,class\n,GTV\n", "m.csv", "m.csv:2: a row needs a name and a class"),
    ("name,class\n", "m.csv", "no rows"),
])
def test_a_mapping_that_cannot_be_used_says_where_and_why(text, source, says):
    with pytest.raises(classes.MappingError, match=None) as info:
        classes.parse_mapping(text, source)
    assert says in str(info.value)


# ---------------------------------------------------------------- hostile rules and files (issue 43, item 1)

LONG_NAME = "gtv" + "_ab" * 3000 + "!"


def _classes_of(text: str, source: str, names: list) -> list:
    mapping = classes.parse_mapping(text, source)
    return [mapping.class_of(name) for name in names]


@pytest.mark.parametrize("rule, name, expected", [
    ("(a+)+$", "a" * 5000 + "!", None),
    ("gtv(\\w+[_ ]?)*", LONG_NAME, None),
    ("gtv(\\w+[_ ]?)*", "GTV_élan vital", "X"),        # Python's \w: Unicode letters too
    ("(x+x+)+y", "x" * 20000, None),
    ("(.*)_(.*)_(.*)\\.roi", "a_" * 5000, None),
])
def test_a_backtracking_rule_against_a_long_name_gives_its_answer_at_once(rule, name, expected):
    """Python's re runs these for hours holding the GIL (so no run timeout fires): now RE2 answers
    them with Python's meaning, in time in proportion to the name."""
    text = f"X: ['{rule}']\nY: ['other']\n"
    assert finishes_within(5, _classes_of, text, "map.yaml", [name, "other"]) == [expected, "Y"]
    csv = f"name,class,match\n{rule},X,regex\nother,Y,exact\n"
    assert finishes_within(5, _classes_of, csv, "map.csv", [name, "other"]) == [expected, "Y"]


def test_a_rule_only_a_backtracking_engine_runs_fails_its_record_as_mask_invalid_past_its_bound(monkeypatch):
    """A backreference RE2 lacks runs in the regex module, bounded per match: past the bound the
    annotation's record fails as mask_invalid naming the rule, not the name (a patient's, maybe)."""
    monkeypatch.setattr(patterns, "MATCH_BOUND_S", 0.1)
    mapping = classes.parse_mapping("X: ['(.*)_(.*)_\\1_(.*)x']\nY: [heart]\n", "m.yaml")
    assert sources.mapped([(1, "heart"), (2, "p_q_p_rx")], mapping) == [(1, 2), (2, 1)]
    name = "a_" * 3000 + "bx"
    reason, message = finishes_within(5, _refusal, [(1, "heart"), (2, name)], mapping)
    assert reason == "mask_invalid" and "took longer than 0.1 s" in message
    assert "(.*)_(.*)_" in message and name not in message and "\n" not in message


def _refusal(numbered: list, mapping: classes.ClassMap) -> tuple:
    """(reason, message) of the ConversionError sources.mapped raises (it does not pickle)."""
    try:
        sources.mapped(numbered, mapping)
    except ConversionError as exc:
        return exc.reason, str(exc)
    raise AssertionError("sources.mapped gave an answer")


@pytest.mark.parametrize("text, source, says", [
    ("A: [a]\nB: [b]\nA: [c]\n", "m.yaml", "m.yaml:3: class 'A' is given twice (first on line 1)"),
    ("A: [a]\n'A ': [c]\n", "m.yaml", "class 'A' is given twice"),
    ("name,class,match\nGTV,GTV,exact\ngtv ,Lung,\n", "m.csv", "m.csv:3: the exact name 'gtv' is given twice "
                                                              "(first on line 2)"),
    ("name,class,match\ng.*,GTV,regex\ng.*,Lung,regex\n", "m.csv", "m.csv:3: the regex name 'g.*' is given twice"),
    ("a: " + "[" * 50000 + "]" * 50000 + "\n", "m.yaml", "m.yaml:1: nested deeper than 16 levels"),
    ("a:\n" + "".join(" " * i + "- \n" for i in range(1, 200)), "m.yaml", "nested deeper than 16 levels"),
    ("{? [a, b] : [c]}", "m.yaml", "a class name must be text"),
])
def test_a_class_given_twice_or_a_structure_no_class_map_has_is_refused_in_one_line(text, source, says):
    with pytest.raises(classes.MappingError) as info:
        finishes_within(5, classes.parse_mapping, text, source)
    message = str(info.value)
    assert says in message and "\n" not in message, message


def test_yaml_keys_that_look_like_numbers_or_booleans_stay_the_classes_written():
    """YAML 1.1 reads ``1`` as a number and ``yes``, ``on`` as True: safe_load made ``yes`` and
    ``on`` one class (the last kept). Each is the class written, as text."""
    mapping = classes.parse_mapping("1: [one]\nyes: [agree]\non: [lit]\n0x10: [hex]\nnull: [nothing]\n", "m.yaml")
    assert mapping.classes == ("1", "yes", "on", "0x10", "null")
    assert [mapping.class_of(n) for n in ("one", "agree", "lit", "hex", "nothing")] == list(mapping.classes)


def test_aliases_that_expand_to_millions_of_rules_are_refused_at_once():
    """A 25 KB class map whose aliases name 2 M patterns (the issue's 112 KB one gave no outcome in
    90 s), and nested aliases (billion laughs): refused in one line, in well under a second each."""
    listed = "a: &x [" + ",".join(f'"p{i}"' for i in range(1000)) + "]\n" + "".join(f"c{i}: *x\n" for i in range(2000))
    laughs = 'a: &a ["x","x","x","x","x","x","x","x","x"]\n' + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9))
    for text in (listed, laughs):
        with pytest.raises(classes.MappingError) as info:
            finishes_within(5, classes.parse_mapping, text, "aliases.yaml")
        message = str(info.value)
        assert "aliases.yaml:" in message and f"more than {classes.MAX_RULES}" in message and "\n" not in message
    small = classes.parse_mapping("a: &x [lung, poumon]\nb: [heart]\nc: *x\n", "m.yaml")   # an alias in bounds
    assert small.classes == ("a", "b", "c") and small.class_of("poumon") == "a"


def test_more_rules_than_the_bound_are_refused():
    rows = "".join(f"n{i},C\n" for i in range(classes.MAX_RULES + 1))
    with pytest.raises(classes.MappingError, match=f"more than {classes.MAX_RULES} rows"):
        classes.parse_mapping("name,class\n" + rows, "m.csv")
    listed = "C: [" + ",".join(f"n{i}" for i in range(classes.MAX_RULES + 1)) + "]\n"
    with pytest.raises(classes.MappingError, match=f"more than {classes.MAX_RULES}"):
        classes.parse_mapping(listed, "m.yaml")


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_a_class_map_that_is_no_regular_file_is_refused_without_opening_it(tmp_path, kind):
    """A FIFO blocked the run forever (holding the output's lock): never opened now."""
    path = tmp_path / "classes.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = "/dev/zero"
    with pytest.raises(classes.MappingError) as info:
        finishes_within(5, classes.load, str(path))
    message = str(info.value)
    assert message.startswith(f"--class_map {path} is a") and "give a regular file" in message, message


def test_a_class_map_is_read_up_to_its_bound(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("A: [a]\n" + "#" * classes.MAX_MAPPING_BYTES)
    with pytest.raises(classes.MappingError, match="larger than"):
        classes.load(str(path))
    missing = tmp_path / "missing.yaml"
    with pytest.raises(classes.MappingError, match="cannot be read \\(no such file\\)"):
        classes.load(str(missing))


def _drawn(how: str, regions, class_count: int = 2, shape=(1, 2, 3)) -> np.ndarray:
    canvas = classes.Canvas(shape, class_count, how)
    for index, region, k in regions:
        canvas.add(index, region, k)
    return canvas.array


@pytest.mark.parametrize("order", [1, -1])
def test_label_map_lets_the_first_class_win_an_overlap_in_any_order_and_channels_keep_both(order):
    first = np.zeros((1, 2, 3), dtype=bool)
    first[0, 0, :2] = True                     # class 1 (first listed)
    second = np.zeros((2, 3), dtype=bool)
    second[0, 1:] = True                       # class 2, slice 0 only: overlaps class 1 at [0, 0, 1]
    regions = [(1, first, None), (2, second, 0)][::order]
    label = _drawn(classes.LABEL_MAP, regions)
    assert label.shape == (1, 2, 3, 1) and label.dtype == np.uint8
    assert label[0, 0, :, 0].tolist() == [1, 1, 2] and label[0, 1, :, 0].tolist() == [0, 0, 0]
    channels = _drawn(classes.BINARY, regions)
    assert channels.shape == (1, 2, 3, 2) and channels.dtype == np.uint8
    assert channels[0, 0, 1].tolist() == [1, 1] and channels[0, 0, 0].tolist() == [1, 0]
    many = _drawn(classes.LABEL_MAP, [(300, np.ones((1, 1, 1), bool), None)], 300, (1, 1, 1))
    assert many.dtype == np.uint16 and int(many[0, 0, 0, 0]) == 300


def test_a_class_regions_unite():
    a, b = np.zeros((2, 2), bool), np.zeros((2, 2), bool)
    a[0, 0] = b[1, 1] = True
    for how in classes.LAYOUTS:
        out = _drawn(how, [(1, a, 0), (1, b, 0)], 2, (1, 2, 2))
        assert out[0, :, :, 0].astype(bool).tolist() == [[True, False], [False, True]]
    with pytest.raises(ValueError, match="mask layout"):
        classes.Canvas((1, 1, 1), 1, "channels")

