"""docs/ARCHITECTURE.md held to the code: its module layout, subpackages, Beam imports and import rules.

Fast and without Beam: the product packages are read as text and their imports parsed with
ast. A module added, moved or removed, a Beam import added, or an import edge between the
packages that the doc does not state makes a check here fail and names what to write.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGES = ("dataset", "reader", "pipeline", "transforms")
# A module path as the doc writes it: backticked, from a package folder, e.g. `reader/tfdata.py`.
MODULE_PATH = re.compile(r"`((?:%s)/[\w/]*?\w+\.py)`" % "|".join(PACKAGES))
# A module's entry in the Layout section: a bullet that starts with its path.
MODULE_ENTRY = re.compile(r"^- `((?:%s)/[\w/]*?\w+\.py)`:" % "|".join(PACKAGES), re.MULTILINE)
FOLDER_PATH = re.compile(r"`((?:%s)/(?:[\w]+/)*)`" % "|".join(PACKAGES))


def product_modules(root: Path = ROOT) -> list[str]:
    """Every .py file of the four product packages, as a path relative to the repository."""
    return sorted(
        p.relative_to(root).as_posix()
        for package in PACKAGES
        for p in (root / package).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def documented_modules(root: Path = ROOT) -> list[str]:
    """The modules the Layout section must name: all but the packages' __init__.py and __main__.py."""
    return [m for m in product_modules(root) if Path(m).name not in ("__init__.py", "__main__.py")]


def section(text: str, heading: str) -> str:
    """The body of the markdown section whose heading line is `heading`, up to the next heading
    of the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    try:
        start = lines.index(heading)
    except ValueError:
        pytest.fail(f"{DOC.name} has no section {heading!r}")
    body = []
    for line in lines[start + 1:]:
        match = re.match(r"(#+) ", line)
        if match and len(match.group(1)) <= level:
            break
        body.append(line)
    return "\n".join(body)


def bullet_list(text: str) -> str:
    """The first bullet list of `text` (its items and their indented continuation lines), not the
    prose around it."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("- ")), len(lines))
    items = []
    for line in lines[start:]:
        if not (line.startswith("- ") or line.startswith("  ")):
            break
        items.append(line)
    return "\n".join(items)


def imported_modules(source: str) -> set[str]:
    """Every module an import statement of `source` names, at any depth (a lazy import inside a
    function counts); ``from dcm2tfrecord import reader`` names ``dcm2tfrecord.reader``."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            if node.module == "dcm2tfrecord":
                names.update(f"dcm2tfrecord.{alias.name}" for alias in node.names)
    return names


def beam_importers(root: Path = ROOT) -> set[str]:
    return {
        m for m in product_modules(root)
        if any(n.split(".")[0] == "apache_beam" for n in imported_modules((root / m).read_text()))
    }


def package_edges(root: Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """(importing package, imported package) -> the modules of the first that import the second."""
    edges: dict[tuple[str, str], set[str]] = {}
    for m in product_modules(root):
        source_package = m.split("/")[0]
        for name in imported_modules((root / m).read_text()):
            parts = name.split(".")
            if parts[0] == "dcm2tfrecord" and len(parts) > 1 and parts[1] != source_package:
                edges.setdefault((source_package, parts[1]), set()).add(m)
    return edges


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text()


def test_the_layout_has_one_entry_per_module_and_names_nothing_that_is_not_there(doc):
    layout = section(doc, "## Layout")
    heads = MODULE_ENTRY.findall(layout)
    missing = sorted(set(documented_modules()) - set(heads))
    assert not missing, (
        f"modules without their entry ('- `path`: its job') in the Layout section of {DOC.name}: {missing}")
    repeated = sorted({p for p in heads if heads.count(p) > 1})
    assert not repeated, f"modules with more than one entry in the Layout section: {repeated}"
    named = set(MODULE_PATH.findall(layout)) | set(FOLDER_PATH.findall(layout))
    gone = sorted(p for p in named if not (ROOT / p).exists())
    assert not gone, f"paths the Layout section of {DOC.name} names that do not exist: {gone}"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_subpackages_the_doc_states_are_the_real_ones(doc, package):
    match = re.search(rf"^The subpackages of `{package}/` \((\d+)\): (.*)$", doc, re.MULTILINE)
    assert match, f"{DOC.name} has no line 'The subpackages of `{package}/` (N): ...'"
    stated = FOLDER_PATH.findall(match.group(2))
    real = sorted(
        p.relative_to(ROOT).as_posix() + "/"
        for p in (ROOT / package).iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    )
    assert sorted(stated) == real, f"subpackages of {package}/: the doc says {stated}, the code has {real}"
    assert int(match.group(1)) == len(real), f"{package}/ has {len(real)} subpackages, the doc counts {match.group(1)}"


def test_where_beam_is_imported_is_the_list_of_modules_importing_it(doc):
    stated = set(MODULE_PATH.findall(bullet_list(section(doc, "### Where Beam is imported"))))
    real = beam_importers()
    assert real, "no product module imports apache_beam: the parse of imports is broken"
    assert not real - stated, f"modules that import apache_beam, not listed in the doc: {sorted(real - stated)}"
    assert not stated - real, f"modules the doc says import apache_beam that do not: {sorted(stated - real)}"


def test_the_import_rules_are_the_imports_of_the_code(doc):
    rules = section(doc, "### Import rules")
    stated: dict[str, set[str]] = {}
    for package, targets in re.findall(r"^- `(\w+)/` imports: (.*)$", rules, re.MULTILINE):
        stated[package] = {t.rstrip("/") for t in re.findall(r"`(\w+/)`", targets)}
    assert sorted(stated) == sorted(PACKAGES), f"the import rules state {sorted(stated)}, not every package"
    edges = package_edges()
    real = {package: {b for (a, b) in edges if a == package} for package in PACKAGES}
    for package in PACKAGES:
        assert real[package] == stated[package], (
            f"{package}/ imports {sorted(real[package])} of this project; the doc says {sorted(stated[package])}: "
            f"modules behind each edge: { {b: sorted(v) for (a, b), v in edges.items() if a == package} }"
        )
    match = re.search(r"^`pipeline/` imports `reader/` only in [^:]*: (.*)$", rules, re.MULTILINE)
    assert match, "the import rules do not list the modules by which pipeline/ imports reader/"
    listed = set(MODULE_PATH.findall(match.group(1)))
    assert listed == edges.get(("pipeline", "reader"), set()), (
        f"pipeline/ imports reader/ in {sorted(edges.get(('pipeline', 'reader'), set()))}; "
        f"the doc lists {sorted(listed)}"
    )


@pytest.mark.parametrize("module", product_modules())
def test_each_module_says_its_job_on_its_first_line(module):
    first = (ROOT / module).read_text().split("\n", 1)[0]
    assert re.match(r'^"""\s*\S', first), f"{module}: its first line is not a docstring saying its job: {first!r}"
    tree = ast.parse((ROOT / module).read_text())
    assert ast.get_docstring(tree), f"{module}: no module docstring"


def test_the_checks_see_what_they_hold(tmp_path):
    """The parsing the checks stand on finds a lazy Beam import, a `from dcm2tfrecord import x`
    edge and the modules the Layout must name in a made-up tree, so a pass above is not a parse that saw nothing."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text('"""The package."""\n')
    (tmp_path / "pipeline" / "lazy.py").write_text(
        '"""Lazy."""\n\ndef f():\n'
        '    import apache_beam.io as io\n    from dcm2tfrecord import reader\n    return io, reader\n'
    )
    (tmp_path / "dataset" / "up.py").write_text('"""Up."""\nfrom dcm2tfrecord.transforms.settings import X\n')
    assert beam_importers(tmp_path) == {"pipeline/lazy.py"}
    assert package_edges(tmp_path) == {
        ("pipeline", "reader"): {"pipeline/lazy.py"},
        ("dataset", "transforms"): {"dataset/up.py"},
    }
    assert documented_modules(tmp_path) == ["dataset/up.py", "pipeline/lazy.py"]
