"""transforms.masks.classes: ROI names to classes by a mapping file, and the mask layouts."""
from __future__ import annotations

import numpy as np
import pytest

from dcm2tfrecord.transforms.masks import classes

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

