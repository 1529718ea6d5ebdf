"""One owner of the on-disk names: dataset/names.py, which the converter and the reader import.

Every name literal of an output directory appears in exactly one module of
the product (dataset/names.py); the reader keeps no copy (it imports the
format package, tests/reader/test_standalone.py); shard names built by
names.shard_file_name parse back to the same fields.
"""
from __future__ import annotations

import ast
import glob
import os

import pytest

from dcm2tfrecord.dataset import names
from tests.support.source import string_literals

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("pipeline", "transforms", "dataset", "reader", "benchmarks", "tools")
LITERALS = {names.MANIFEST_NAME, names.ERRORS_NAME, names.FAILED_RUN_NAME, names.INCOMPLETE_DIR,
            names.PROGRESS_DIR, names.LOCK_NAME, names.PLAN_NAME, names.DONE_SUFFIX, names.VERSIONS_DIR,
            names.LATEST_NAME, names.PARENT, names.SHARD_SUFFIX, names.INDEX_SUFFIX,
            names.RECORDS_SUFFIX}


def test_every_output_name_literal_lives_in_one_module():
    owners: dict = {literal: set() for literal in LITERALS}
    for package in PACKAGES:
        for path in glob.glob(os.path.join(ROOT, package, "**", "*.py"), recursive=True):
            rel = os.path.relpath(path, ROOT)
            for _, value in string_literals(path):
                if value in owners:
                    owners[value].add(rel)
    allowed = {os.path.join("dataset", "names.py")}
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
    compression = "gzip" if gzip else "none"
    file = names.shard_file_name(split, index, count, tag, compression)
    parsed = names.parse_shard_name(file)
    assert (parsed.split, parsed.index, parsed.num_shards, parsed.compression) == (split, index, count, compression)
    assert parsed.version == tag[1:] and parsed.file == file
    reused = names.reused_file(tag[1:] or "0001", file)
    assert names.parse_shard_name(reused).parent == (tag[1:] or "0001")


def test_shard_paths_spell_out_reused_shards():
    assert names.shard_path("gs://b/out/versions/0002", "../0001/train-v0001-00000-of-00001.tfrecord") == \
        "gs://b/out/versions/0001/train-v0001-00000-of-00001.tfrecord"
    assert names.shard_path("/out/", "train-00000-of-00001.tfrecord") == "/out/train-00000-of-00001.tfrecord"


@pytest.mark.parametrize("bad", ["", ".", "..", "../x", "a/b", "a\\b", "/abs", ".hidden", "x\n",
                                 "tr ain", "é", "a\x00", "a-v0001", "fold-v12345"])
def test_names_from_outside_are_refused_before_they_reach_a_path(bad):
    with pytest.raises(names.BadName):
        names.check_component(bad, "--splits")


@pytest.mark.parametrize("good", ["train", "validation", "test_2", "fold-3", "v1.2", "a=b"])
def test_ordinary_names_pass(good):
    assert names.check_component(good, "--splits") == good


def _transforms_imports() -> dict:
    """{module: transforms modules it imports at module level} for every module of transforms/."""
    modules: dict = {}
    for path in glob.glob(os.path.join(ROOT, "transforms", "**", "*.py"), recursive=True):
        name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        deps = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or "").startswith("dcm2tfrecord.transforms"):
                module = node.module.removeprefix("dcm2tfrecord.")
                deps |= {module} | {f"{module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name.removeprefix("dcm2tfrecord.") for a in node.names
                         if a.name.startswith("dcm2tfrecord.transforms")}
        modules[name] = deps
    return {name: {d for d in deps if d in modules} for name, deps in modules.items()}


def _package(module: str) -> str:
    """transforms.records.probe -> transforms.records; top-level modules stand for themselves."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_transforms_packages_import_each_other_without_cycles():
    graph: dict = {}
    for module, deps in _transforms_imports().items():
        for dep in deps:
            if _package(dep) != _package(module):
                graph.setdefault(_package(module), set()).add(_package(dep))
    cycles = []
    for start in graph:
        stack, seen = list(graph[start]), set()
        while stack:
            node = stack.pop()
            if node == start:
                cycles.append(start)
                break
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
    assert not cycles, f"packages of transforms/ on an import cycle: {sorted(cycles)} ({graph})"


def test_shared_transforms_modules_reach_into_no_subpackage():
    """settings, counters, values, errors, hashing, dtypes: what every concern stands on."""
    modules = _transforms_imports()
    subpackages = {_package(m) for m in modules if m.count(".") >= 2}
    stray = {m: sorted(d for d in deps if _package(d) in subpackages)
             for m, deps in modules.items() if m.count(".") == 1 and m != "transforms.beam_files"}
    assert not {m: d for m, d in stray.items() if d}, stray


OLD_TOP_LEVEL = ("dataset", "reader", "pipeline", "transforms")


def test_nothing_imports_the_old_top_level_names():
    """Every import of this project goes through dcm2tfrecord.*: the bare names belong to PyPI
    packages (dataset, reader, pipeline, transforms) a training image may hold."""
    stray = []
    for path in glob.glob(os.path.join(ROOT, "**", "*.py"), recursive=True):
        rel = os.path.relpath(path, ROOT)
        if rel.startswith((".venv", "build", os.path.join("tests", "data"))):
            continue
        with open(path) as handle:
            tree = ast.parse(handle.read(), path)
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            stray += [f"{rel}:{node.lineno} {name}" for name in names if name.split(".")[0] in OLD_TOP_LEVEL]
    assert not stray, stray
