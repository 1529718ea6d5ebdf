"""The tests mirror the packages, and share code only through tests/support (issue 31, item 7).

- A unit test lives in the folder of the package it tests: tests/dataset/, tests/reader/,
  tests/pipeline/, tests/transforms/ and tests/transforms/<subpackage>/, each a package
  (an ``__init__.py``, so that two folders may hold files of the same name);
  end-to-end tests (whole conversions through the runners, subprocesses, the GCS
  emulator, fresh virtual environments) live in tests/e2e/. This file is the only test
  at the top.
- No test file imports another test file, nor any tests module but tests.support.
- The product's sample archive (pipeline/commands/sample_archive.py) and the benchmarks' archives
  are imported by tests/support/__init__.py alone.
- tests/conftest.py only registers: imports from tests.support and pytest_* hooks.
"""
from __future__ import annotations

import ast
import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
PRODUCT = ("dataset", "reader", "pipeline", "transforms")
END_TO_END = "e2e"
FIXTURE_MODULES = ("dcm2tfrecord.pipeline.commands.sample_archive", "benchmarks")


def _python_files(folder: str) -> list[str]:
    out = []
    for base, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "data"))
        out += [os.path.join(base, f) for f in sorted(files) if f.endswith(".py")]
    return out


def _test_files() -> list[str]:
    return [p for p in _python_files(TESTS) if os.path.basename(p).startswith("test_")]


def _imports(path: str) -> list[str]:
    """Every module ``path`` imports (``from a import b`` as a.b and a), at any depth."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append("." * node.level + (node.module or ""))
    return found


def _is_product_folder(rel: str) -> bool:
    parts = rel.split(os.sep)
    return parts[0] in PRODUCT and os.path.isfile(os.path.join(ROOT, rel, "__init__.py"))


def test_every_test_file_is_in_the_folder_of_a_package_or_in_e2e():
    misplaced = []
    for path in _test_files():
        rel = os.path.relpath(os.path.dirname(path), TESTS)
        if rel == "." and os.path.basename(path) == os.path.basename(__file__):
            continue
        if rel != END_TO_END and not _is_product_folder(rel):
            misplaced.append(os.path.relpath(path, ROOT))
    assert not misplaced, f"tests outside tests/<package folder>/ or tests/{END_TO_END}/: {misplaced}"
    assert len(_test_files()) > 50


def test_every_test_folder_is_a_package():
    folders = {os.path.dirname(p) for p in _test_files()} | {os.path.join(TESTS, "support")}
    for folder in list(folders):
        while folder != TESTS:
            folder = os.path.dirname(folder)
            folders.add(folder)
    missing = [os.path.relpath(f, ROOT) for f in sorted(folders)
               if not os.path.isfile(os.path.join(f, "__init__.py"))]
    assert not missing, f"no __init__.py in {missing}"


def test_no_test_file_imports_another_test_module():
    bad = {}
    for path in _python_files(TESTS):
        if os.path.basename(path) == "__init__.py":
            continue
        own = os.path.relpath(path, ROOT)
        for name in _imports(path):
            if name.startswith("."):
                bad.setdefault(own, []).append(f"relative import {name!r}")
            elif name == "tests" or not name.startswith("tests."):
                continue
            elif name == "tests.support" or name.startswith("tests.support."):
                continue
            else:
                bad.setdefault(own, []).append(name)
    assert not bad, f"tests modules import tests modules other than tests.support: {bad}"


def test_the_tests_reach_the_sample_and_benchmark_archives_through_support_only():
    allowed = os.path.join(TESTS, "support", "__init__.py")
    bad = {}
    for path in _python_files(TESTS):
        if path == allowed:
            continue
        hits = [n for n in _imports(path) if any(n == m or n.startswith(m + ".") for m in FIXTURE_MODULES)]
        if hits:
            bad[os.path.relpath(path, ROOT)] = hits
    assert not bad, f"import these from tests.support instead: {bad}"
    assert any(n.startswith(FIXTURE_MODULES[0]) for n in _imports(allowed))


def test_conftest_only_registers_fixtures_and_hooks():
    path = os.path.join(TESTS, "conftest.py")
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue                                     # the docstring
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests.support"):
            continue
        if isinstance(node, ast.FunctionDef) and node.name.startswith("pytest_"):
            continue
        raise AssertionError(f"tests/conftest.py line {node.lineno}: define helpers and fixtures in "
                             "tests/support, register them in conftest.py")
