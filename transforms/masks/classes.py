"""Mask classes: ROI and segment names mapped to classes by a mapping file, and masks laid out.

An RTSTRUCT's ROI names and a SEG's segment labels are free text typed at a planning
workstation ("GTV_p", "Lung L", "Pat Smith lung"): they can hold patient names, so they are
never written; the mapping file turns each into one of a fixed list of classes, in the manner
of med-imagetools' ROI dictionary. Two forms:

- YAML: ``{class: [pattern, ...]}`` (or one pattern as a string), classes in file order;
- CSV with a header ``name,class[,match]``: ``match`` is ``exact`` (the default) or ``regex``;
  classes in the order they first appear.

A YAML pattern and a ``regex`` row are Python regular expressions matched against the whole
name, ignoring case; an ``exact`` row matches the name itself, ignoring case and surrounding
spaces. A name takes the class of the first rule (in file order) it matches; one that matches
none is no class (the caller decides what that means). Class indices are 1..N in the order of
the classes; 0 is background.

Layouts (``--mask_layout``, ``MaskLayout``; dataset/masks.py owns the dtype and channel rule):
``label_map``, one class per voxel (uint8, uint16 past 255
classes) where overlapping classes resolve to the one listed FIRST (list the specific
structure, a tumour, before the organ around it); ``binary``, one binary uint8 channel per
class, overlaps kept.
"""
from __future__ import annotations

import csv
import dataclasses
import functools
import io
import re
from typing import Optional

import numpy as np

from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.dataset.errors import OptionError
from dcm2tfrecord.transforms.masks import patterns
from dcm2tfrecord.transforms.masks.settings import MaskLayout
from dcm2tfrecord.transforms.settings import read_side_file

LABEL_MAP = MaskLayout.LABEL_MAP
BINARY = MaskLayout.BINARY
LAYOUTS = tuple(MaskLayout)


class MappingError(OptionError, ValueError):
    """A class mapping file that cannot be used: one line naming the file, the line and the fix."""


@dataclasses.dataclass(frozen=True)
class Rule:
    pattern: str
    class_name: str
    regex: bool

    def matches(self, name: str) -> bool:
        """Whether the raw ``name`` matches; a regex rule in time in proportion to the name
        (transforms.masks.patterns), PatternTimeout for one only a backtracking engine runs and
        that ran past its bound."""
        if self.regex:
            return _compiled(self.pattern).fullmatch(name.strip()) is not None
        return name.strip().casefold() == self.pattern.strip().casefold()


@functools.lru_cache(maxsize=4096)
def _compiled(pattern: str) -> patterns.BoundedPattern:
    return patterns.BoundedPattern(pattern, re.IGNORECASE, captures=False)     # a rule's groups go unused


@dataclasses.dataclass(frozen=True)
class ClassMap:
    """The classes, in order, and the rules naming them."""
    classes: tuple[str, ...]
    rules: tuple[Rule, ...]

    def class_of(self, name: str) -> Optional[str]:
        """The class of a raw ROI/segment name, or None."""
        return next((rule.class_name for rule in self.rules if rule.matches(name)), None)

    def index_of(self, name: str) -> int:
        """1-based class index of a raw name; 0 when it maps to no class."""
        found = self.class_of(name)
        return self.classes.index(found) + 1 if found is not None else 0


def _checked(pattern: str, where: str) -> str:
    try:
        _compiled(pattern)
    except re.error as exc:
        raise MappingError(f"{where}: {pattern!r} is not a regular expression ({exc}); escape it "
                           f"(e.g. GTV\\+) or give it as an exact name") from None
    return pattern


def parse_mapping(text: str, source: str) -> ClassMap:
    """A ClassMap from a mapping file's text; YAML unless ``source`` ends with .csv."""
    if source.lower().endswith(".csv"):
        return _parse_csv(text, source)
    return _parse_yaml(text, source)


# Bounds of a class map, each refused in one line: the rules (patterns and rows) it may hold, as
# aliases expand them (a 100 KB YAML of aliases can name millions), and how deep its YAML nests
MAX_RULES = 10_000
MAX_DEPTH = 16


def _strict_loader(source: str) -> type:
    """A YAML loader for a class map (safe_load's, stricter): keys are the text written (``1`` and
    ``yes`` are the classes "1" and "yes", never the number and True collapsed), a key given twice,
    nesting past MAX_DEPTH and aliases naming more than MAX_RULES values are refused, each in one
    line, before anything is built."""
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0
        aliased = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                anchored = self.anchors.get(event.anchor)
                self.aliased += _size(anchored) if anchored is not None else 1
                if self.aliased > MAX_RULES:
                    raise MappingError(f"class mapping {source}:{event.start_mark.line + 1}: its aliases name "
                                       f"more than {MAX_RULES} values; write the patterns out")
                return super().compose_node(parent, index)
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise MappingError(f"class mapping {source}:{mark.line + 1}: nested deeper than {MAX_DEPTH} "
                                       f"levels; a class map is class: [pattern, ...]")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            seen: dict = {}
            out = {}
            for key_node, value_node in node.value:
                key = key_node.value if isinstance(key_node, yaml.ScalarNode) else self.construct_object(key_node)
                if not isinstance(key, str):
                    raise MappingError(f"class mapping {source}:{key_node.start_mark.line + 1}: a class name must "
                                       f"be text")
                if key in seen:
                    raise MappingError(f"class mapping {source}:{key_node.start_mark.line + 1}: class {key!r} is "
                                       f"given twice (first on line {seen[key]}); give each class once, its "
                                       f"patterns in one list")
                seen[key] = key_node.start_mark.line + 1
                out[key] = self.construct_object(value_node, deep=deep)
            return out

    Loader.add_constructor("tag:yaml.org,2002:map", lambda loader, node: loader.construct_mapping(node))
    return Loader


def _size(node) -> int:
    """The nodes a composed YAML node holds, itself included (an alias to it names as many);
    counted up to just past MAX_RULES, so a node shared many times over costs no more."""
    import yaml
    count, stack = 0, [node]
    while stack:
        item = stack.pop()
        count += 1
        if isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)
        elif isinstance(item, yaml.MappingNode):
            stack.extend(v for pair in item.value for v in pair)
        if count > MAX_RULES:
            break
    return count


def _parse_yaml(text: str, source: str) -> ClassMap:
    import yaml
    try:
        data = yaml.load(text, Loader=_strict_loader(source))  # noqa: S506 - SafeLoader's subclass
    except yaml.YAMLError as exc:
        raise MappingError(f"class mapping {source} is not YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:          # a structure the depth bound does not reach (a flow collection)
        raise MappingError(f"class mapping {source}: nested too deeply; a class map is class: [pattern, ...]") \
            from None
    if not isinstance(data, dict) or not data:
        raise MappingError(f"class mapping {source}: expected a mapping of class -> [pattern, ...], "
                           f"e.g. 'Lung: [\"lung.*\", \"poumon\"]'")
    total = sum(len(p) if isinstance(p, list) else 1 for p in data.values())
    if total > MAX_RULES:
        raise MappingError(f"class mapping {source}: {total} patterns, more than {MAX_RULES}; is it the right file?")
    classes: list[str] = []
    rules: list[Rule] = []
    for class_name, listed in data.items():
        class_name = str(class_name).strip()
        if not class_name:
            raise MappingError(f"class mapping {source}: an empty class name")
        if class_name in classes:
            raise MappingError(f"class mapping {source}: class {class_name!r} is given twice; give each class "
                               f"once, its patterns in one list")
        if isinstance(listed, str):
            listed = [listed]
        if not isinstance(listed, list) or not listed or not all(isinstance(p, str) for p in listed):
            raise MappingError(f"class mapping {source}: class {class_name!r} needs a pattern or a list of them")
        classes.append(class_name)
        rules += [Rule(_checked(p, f"class mapping {source}, class {class_name!r}"), class_name, True)
                  for p in listed]
    return ClassMap(tuple(classes), tuple(rules))


def _parse_csv(text: str, source: str) -> ClassMap:
    reader = csv.DictReader(io.StringIO(text))
    fields = [f.strip() for f in reader.fieldnames or ()]
    if "name" not in fields or "class" not in fields:
        raise MappingError(f"class mapping {source}: the header must name the columns name,class[,match] "
                           f"(it has {','.join(fields) or 'none'})")
    classes: list[str] = []
    rules: list[Rule] = []
    seen: dict = {}
    for line, row in enumerate(reader, start=2):
        if len(rules) >= MAX_RULES:
            raise MappingError(f"class mapping {source}:{line}: more than {MAX_RULES} rows; is it the right file?")
        row = {k.strip(): (v or "").strip() for k, v in row.items() if k is not None}
        name, class_name, match = row.get("name", ""), row.get("class", ""), row.get("match", "") or "exact"
        if not name or not class_name:
            raise MappingError(f"class mapping {source}:{line}: a row needs a name and a class")
        if match not in ("exact", "regex"):
            raise MappingError(f"class mapping {source}:{line}: match is {match!r}; give exact or regex")
        if match == "regex":
            _checked(name, f"class mapping {source}:{line}")
        key = (match, name if match == "regex" else name.casefold())
        if key in seen:
            raise MappingError(f"class mapping {source}:{line}: the {match} name {name!r} is given twice (first "
                               f"on line {seen[key]}); the first would win, so give it once")
        seen[key] = line
        if class_name not in classes:
            classes.append(class_name)
        rules.append(Rule(name, class_name, match == "regex"))
    if not rules:
        raise MappingError(f"class mapping {source}: no rows")
    return ClassMap(tuple(classes), tuple(rules))


MAX_MAPPING_BYTES = 1 << 20


def load(uri: str) -> ClassMap:
    """The mapping file at ``uri`` (local or gs://), parsed; MappingError naming it otherwise.
    Read like every side file (transforms.settings.read_side_file: a regular file or a storage
    object, never a FIFO or a device, at most MAX_MAPPING_BYTES), through the format package's
    storage facade (Beam's FileSystems once installed: transforms/beam_files.py), as the dataset is."""
    try:
        data = read_side_file(uri, "--class_map", MAX_MAPPING_BYTES, MappingError, "or a storage object")
    except MappingError:
        raise
    except Exception as exc:
        raise MappingError(f"--class_map {uri}: cannot be read ({type(exc).__name__}: {exc})") from None
    if len(data) > MAX_MAPPING_BYTES:
        raise MappingError(f"--class_map {uri} is larger than {MAX_MAPPING_BYTES} bytes: is it the right file?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise MappingError(f"--class_map {uri} is not UTF-8 text") from None
    return parse_mapping(text, uri)


class Canvas:
    """A record's mask ``[k, j, i, channels]`` in layout ``how``, drawn one region at a time:
    ``add`` a class's region (a slice or the whole volume) as it is rasterised or decoded, in
    any order, so memory holds the mask and one region, never a volume per ROI or per class.
    ``label_map``: a voxel takes the lowest class index of the regions covering it, the class
    listed FIRST; ``binary``: channel c - 1 is the union of class c's regions."""

    def __init__(self, shape: tuple[int, int, int], class_count: int, how: str):
        if how not in LAYOUTS:
            raise ValueError(f"mask layout {how!r}: give one of {', '.join(LAYOUTS)}")
        self.how = how
        self.array = np.zeros(tuple(shape) + (mask_format.mask_channels(how, class_count),),
                              mask_format.mask_dtype(how, class_count))

    def add(self, index: int, region: np.ndarray, k: Optional[int] = None,
            window: tuple[slice, slice] = (slice(None), slice(None))) -> None:
        """Class ``index`` (1-based) covers ``region``: bool [j, i] of slice ``k`` (of its rows
        and columns ``window``), or [k, j, i] of the whole volume when ``k`` is None."""
        target = self.array[(slice(None),) + window] if k is None else self.array[(k,) + window]
        region = np.asarray(region, dtype=bool)
        if self.how == BINARY:
            target[..., index - 1] |= region
            return
        labels = target[..., 0]
        labels[region & ((labels == 0) | (labels > index))] = index
