"""One owner of the on-disk names: dataset/names.py, and the reader's pinned copy of it.

The reader never imports dataset/ (a training job installs it without Beam),
so it keeps its own copy of the names it reads; this test pins that copy.
Every name literal of an output directory appears in exactly one module of
the product (dataset/names.py) plus the reader's copy; shard names built
by names.shard_file_name parse back to the same fields.
"""
from __future__ import annotations

import ast
import glob
import os

import pytest

from dataset import names
from reader import names as reader_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("pipeline", "transforms", "dataset", "reader", "benchmarks", "tools")
LITERALS = {names.MANIFEST_NAME, names.ERRORS_NAME, names.FAILED_RUN_NAME, names.INCOMPLETE_DIR,
            names.PROGRESS_DIR, names.LOCK_NAME, names.PLAN_NAME, names.DONE_SUFFIX, names.VERSIONS_DIR,
            names.LATEST_NAME, names.PARENT, names.SHARD_SUFFIX, names.INDEX_SUFFIX,
            names.RECORDS_SUFFIX}


def test_reader_copy_equals_the_owner():
    for constant in ("MANIFEST_NAME", "LATEST_NAME", "VERSIONS_DIR", "PARENT", "INDEX_SUFFIX"):
        assert getattr(reader_names, constant) == getattr(names, constant), constant


def _string_constants(path: str):
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.value


def test_every_output_name_literal_lives_in_one_module():
    owners: dict = {literal: set() for literal in LITERALS}
    for package in PACKAGES:
        for path in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True):
            rel = os.path.relpath(path, ROOT)
            for value in _string_constants(path):
                if value in owners:
                    owners[value].add(rel)
    allowed = {os.path.join("dataset", "names.py"), os.path.join("reader", "names.py")}
    # "versions" is also a CLI subcommand's name (pipeline/cli.py), not a path
    owners[names.VERSIONS_DIR].discard(os.path.join("pipeline", "cli.py"))
    stray = {literal: sorted(where - allowed) for literal, where in owners.items() if where - allowed}
    assert not stray, f"output names spelled outside dataset/names.py: {stray}"
    assert all(os.path.join("dataset", "names.py") in where for where in owners.values())


@pytest.mark.parametrize("split,index,count,tag,gzip", [
    ("train", 0, 1, "", False), ("validation", 12, 40, "", True),
    ("train", 3, 7, "v0002", False), ("my-split", 0, 2, "v0010", True), ("a_v0001", 1, 2, "", False),
    ("a-v001", 1, 2, "v0003", False), ("x-00001-of-00002", 0, 1, "v0001", True)])
def test_shard_names_parse_back(split, index, count, tag, gzip):
    file = names.shard_file_name(split, index, count, tag, gzip)
    parsed = names.parse_shard_name(file)
    assert (parsed.split, parsed.index, parsed.num_shards, parsed.gzip) == (split, index, count, gzip)
    assert parsed.version == tag[1:] and parsed.file == file
    reused = names.reused_file(tag[1:] or "0001", file)
    assert names.parse_shard_name(reused).parent == (tag[1:] or "0001")


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a\\b", "/abs", ".hidden", "x\n",
                                 "tr ain", "é", "a\x00", "a-v0001", "fold-v12345"])
def test_names_from_outside_are_refused_before_they_reach_a_path(bad):
    with pytest.raises(names.BadName):
        names.check_component(bad, "--splits")


@pytest.mark.parametrize("good", ["train", "validation", "test_2", "fold-3", "v1.2", "a=b"])
def test_ordinary_names_pass(good):
    assert names.check_component(good, "--splits") == good
