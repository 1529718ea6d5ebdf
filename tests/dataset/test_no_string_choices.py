"""No product module compares a record kind or a shard container as a string literal.

The record kinds are ``RecordKind`` (dataset/features.py) and the containers ``Compression``
(dataset/file_adapters.py, one member per adapter); code branches on their members, so a new
kind or container is found by its enum's references, not by grepping strings. The check reads
every module of ``dataset/``, ``reader/``, ``pipeline/`` and ``transforms/`` with ``ast`` and
refuses a comparison (``==``, ``!=``, ``in``, ``not in``) of anything with such a literal, or
with a tuple, list or set holding one. ``"image"`` is also a feature name and ``"none"`` other
options' value (a label kind, ``--progress``), so ``"image"`` is refused only where the other
side speaks of a kind or a format, ``"none"`` only where it speaks of a compression or a
container.
"""
from __future__ import annotations

import ast
import glob
import os

import pytest

from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.dataset.file_adapters import ADAPTERS, Compression

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("dataset", "reader", "pipeline", "transforms")

CHOICES = {member.value for member in RecordKind} | {member.value for member in Compression}
# values that mean something else too, refused only where the other side names what they choose:
# "image" is also the decoded pixels' feature name, "none" a label kind and --progress's value
AMBIGUOUS = {"image": ("kind", "format", "sniff"), "none": ("compression", "container", "adapter")}
OPERATORS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _literals(node: ast.expr) -> list[str]:
    """The string literals ``node`` is, or holds as a tuple, list or set of constants."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def string_choice_comparisons(source: str, name: str = "<module>") -> list[str]:
    """``line: code`` of each comparison in ``source`` with a kind's or a container's string."""
    tree = ast.parse(source, name)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, (left, right) in zip(node.ops, zip(operands, operands[1:])):
            if not isinstance(op, OPERATORS):
                continue
            for literal_side, other in ((left, right), (right, left)):
                for value in _literals(literal_side):
                    if value not in CHOICES:
                        continue
                    other_text = ast.unparse(other).lower()
                    if value in AMBIGUOUS and not any(word in other_text for word in AMBIGUOUS[value]):
                        continue
                    hit = f"{node.lineno}: {ast.unparse(node)}"
                    if hit not in found:
                        found.append(hit)
    return found


def product_comparisons(root: str) -> list[str]:
    """Every such comparison in the product modules under ``root``, as ``path:line: code``."""
    stray = []
    for package in PACKAGES:
        for path in sorted(glob.glob(os.path.join(root, package, "**", "*.py"), recursive=True)):
            with open(path) as handle:
                source = handle.read()
            rel = os.path.relpath(path, root)
            stray += [f"{rel}:{hit}" for hit in string_choice_comparisons(source, rel)]
    return stray


def test_no_product_module_compares_a_kind_or_a_container_as_a_string():
    stray = product_comparisons(ROOT)
    assert not stray, ("compare with RecordKind (dataset/features.py) or Compression / the adapter "
                       f"(dataset/file_adapters.py) members, not strings: {stray}")


def test_the_choices_checked_are_the_enums():
    """What the check refuses follows the enums: a kind or container added is checked too."""
    assert {"dicom", "image", "nifti"} <= CHOICES and set(ADAPTERS) <= CHOICES


@pytest.mark.parametrize("code", [
    'if record.kind == "dicom": pass',
    'x = "nifti" != record.kind',
    'if kind in ("dicom", "nifti"): pass',
    'if record.kind not in {"image"}: pass',
    'ok = settings.compression == "gzip"',
    'ok = options["compression"] != "none"',
    'ok = "dicom" in result.kinds',
    'ok = text(record.get(FORMAT, b"")) == "image"',
])
def test_the_check_finds_a_string_comparison(code):
    assert len(string_choice_comparisons(code)) == 1, code


@pytest.mark.parametrize("code", [
    'if record.kind == RecordKind.DICOM: pass',
    'if kind in (RecordKind.DICOM, RecordKind.NIFTI): pass',
    'ok = settings.compression == Compression.GZIP',
    'if name == "image": pass',                # a feature's name
    'if args.progress == "none": pass',        # another option's value
    'if label_kind == "none": pass',           # a manifest's label kind
    'if settings.compression == "zstd": pass',  # not a registered container
    'path = os.path.join(dest, "dicom", rel)',  # not a comparison
    'if kind == "annotation": pass',
])
def test_the_check_leaves_what_is_not_a_kind_or_container_comparison(code):
    assert string_choice_comparisons(code) == [], code
