"""The documentation holds together: every link between docs resolves, every ``docs/...`` path
and section a file cites exists, nothing cites a file outside the repository, and no example
uses the old top-level import names."""
from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Not the project's own text: the virtual environment, build output, caches, pydicom's files.
SKIP_DIRS = {".git", ".venv", ".pkgroot", "build", "dist", "out", "__pycache__", ".pytest_cache",
             ".cache", "data"}
TEXT_SUFFIXES = (".md", ".py", ".sh", ".toml", ".json", ".cfg", ".txt")
OLD_TOP_LEVEL = ("dataset", "reader", "pipeline", "transforms")


def _files(suffixes) -> list[str]:
    """Repository-relative paths of the project's own files with these suffixes."""
    found = []
    for top, dirs, names in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(names):
            if name.endswith(suffixes) or name in ("Dockerfile", "run") and suffixes == TEXT_SUFFIXES:
                found.append(os.path.relpath(os.path.join(top, name), ROOT))
    return found


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as handle:
        return handle.read()


def _without_code_blocks(markdown: str) -> str:
    return re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)


def _code_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.S | re.M)


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(rel: str) -> list[str]:
    text = _without_code_blocks(_read(rel))
    return [h.strip().replace("`", "") for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)]


MARKDOWN = _files((".md",))


def test_the_documents_this_checks_exist():
    for rel in ("README.md", "CHANGELOG.md", "reader_dist/README.md", "docs/ARCHITECTURE.md",
                "docs/CONVERTING.md", "docs/READING.md", "docs/OPERATIONS.md", "docs/BENCHMARKS.md"):
        assert rel in MARKDOWN, rel


@pytest.mark.parametrize("rel", MARKDOWN)
def test_every_relative_link_resolves(rel):
    """[text](path) and [text](path#anchor): the file exists, and the anchor is a heading of it."""
    broken = []
    text = _without_code_blocks(_read(rel))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):          # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(rel), path)) if path else rel
        if not os.path.exists(os.path.join(ROOT, resolved)):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.endswith(".md") and anchor not in {_slug(h) for h in _headings(resolved)}:
            broken.append(f"{target}: no such heading in {resolved}")
    assert broken == [], broken


_MENTIONED = re.compile(r"(?<![\w/.-])(docs/[\w./-]*\w|CHANGELOG\.md|reader_dist/README\.md)")


def test_every_docs_path_a_file_mentions_exists():
    """docs/..., CHANGELOG.md and reader_dist/README.md, named in any doc, source or script."""
    missing = []
    for rel in _files(TEXT_SUFFIXES):
        for path in set(_MENTIONED.findall(_read(rel))):
            if not os.path.exists(os.path.join(ROOT, path)):
                missing.append(f"{rel}: {path}")
    assert missing == [], missing


# (README, "Migrating"), (docs/CONVERTING.md, "Patient safety"); in docs/, a link to a sibling
# file followed by a quoted section.
_CITED_SECTION = re.compile(r"\b(README(?:\.md)?|(?:[\w./-]*/)?[A-Z][A-Z_]*\.md)\)?, [\"']([^\"'\n]{3,80})[\"']")


def test_every_cited_section_is_a_heading_of_the_file_it_names():
    wrong = []
    for rel in _files(TEXT_SUFFIXES):
        for name, section in _CITED_SECTION.findall(_read(rel)):
            name = "README.md" if name == "README" else name
            here = os.path.normpath(os.path.join(os.path.dirname(rel), name))
            target = here if os.path.exists(os.path.join(ROOT, here)) else name
            if not os.path.exists(os.path.join(ROOT, target)):
                wrong.append(f"{rel}: {name} does not exist")
            elif section.lower() not in {h.lower() for h in _headings(target)}:
                wrong.append(f"{rel}: {target} has no section {section!r}")
    assert wrong == [], wrong


def test_nothing_cites_a_file_outside_the_repository():
    """The design and style notes once cited are not in the repository, and the shared folder
    and work paths exist on one machine only (the needles are spelled apart: not to match here)."""
    needles = ("DESIGN" + ".md", "STYLE" + ".md", "../" + "shared", "/work" + "/")
    found = [f"{rel}: {needle}" for rel in _files(TEXT_SUFFIXES) for needle in needles
             if needle in _read(rel)]
    assert found == [], found


_OLD_IMPORT = re.compile(r"^\s*(?:from|import) (?:%s)\b|python -m (?:%s)\b"
                         % ("|".join(OLD_TOP_LEVEL), "|".join(OLD_TOP_LEVEL)), re.M)


@pytest.mark.parametrize("rel", [m for m in MARKDOWN if m != "CHANGELOG.md"])
def test_examples_use_the_one_import_name(rel):
    """Code blocks import dcm2tfrecord.reader, never the old bare names (CHANGELOG.md keeps history)."""
    stray = [m.group(0).strip() for block in _code_blocks(_read(rel)) for m in _OLD_IMPORT.finditer(block)]
    assert stray == [], stray
