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


def test_label_map_lets_the_first_class_win_an_overlap_and_channels_keep_both():
    masks = np.zeros((2, 1, 2, 3), dtype=bool)
    masks[0, 0, 0, :2] = True                  # class 1 (first listed)
    masks[1, 0, 0, 1:] = True                  # class 2 overlaps it at [0, 0, 1]
    label = classes.layout(masks, classes.LABEL_MAP)
    assert label.shape == (1, 2, 3, 1) and label.dtype == np.uint8
    assert label[0, 0, :, 0].tolist() == [1, 1, 2] and label[0, 1, :, 0].tolist() == [0, 0, 0]
    channels = classes.layout(masks, classes.BINARY)
    assert channels.shape == (1, 2, 3, 2) and channels[0, 0, 1].tolist() == [1, 1]
    many = np.zeros((300, 1, 1, 1), dtype=bool)
    many[299] = True
    assert classes.layout(many, classes.LABEL_MAP).dtype == np.uint16
    assert int(classes.layout(many, classes.LABEL_MAP)[0, 0, 0, 0]) == 300


def test_merged_unites_a_class_rois_and_returns_the_unmapped_names():
    mapping = classes.parse_mapping(YAML, "map.yaml")
    a, b, c = (np.zeros((1, 2, 2), bool) for _ in range(3))
    a[0, 0, 0] = b[0, 1, 1] = c[0, 0, 1] = True
    out, unmapped = classes.merged([a, b, c], ["Lung_L", "lung_r", "Pat Smith"], mapping, (1, 2, 2))
    assert out.shape == (3, 1, 2, 2) and out[1].sum() == 2 and out[0].sum() == 0
    assert unmapped == ["Pat Smith"]
