"""Which code a benchmark runs: the working tree, or a frozen commit.

``--code worktree`` (default) runs ``python -m dcm2tfrecord.pipeline`` from the repository
as it is. ``--code HEAD`` (or any commit) extracts that commit with
``git archive`` (read-only on the repository) into
``benchmarks/.cache/code_<hash>/`` and runs the pipeline from there, with
``PYTHONPATH`` pointing at it (ahead of the venv's editable install), so the
numbers belong to one commit even while someone edits the tree. The folders of
the commit are reached under the import name as setup.py installs them
(``dcm2tfrecord.pipeline`` is ``pipeline/``) through links in ``.ns/``; a
commit from before the one import name (its modules import ``pipeline``,
``dataset``, ... bare) finds those on ``PYTHONPATH`` too, so the same
``python -m dcm2tfrecord.pipeline`` runs either.
"""
from __future__ import annotations

import os
import subprocess
from typing import Optional

from benchmarks.archives import CACHE_DIR

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("pipeline", "transforms", "dataset", "reader")    # setup.py's and reader_dist's folders
NAMESPACE_DIR = ".ns"


def resolve(code: str) -> tuple[str, str]:
    """(directory to run the pipeline from, label such as 'worktree' or a commit hash)."""
    if code == "worktree":
        return REPO, "worktree"
    rev = subprocess.run(["git", "rev-parse", code], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.strip()
    target = os.path.join(CACHE_DIR, f"code_{rev[:12]}")
    if not os.path.exists(os.path.join(target, ".extracted")):
        os.makedirs(target, exist_ok=True)
        archive = subprocess.run(["git", "archive", rev], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
        namespace = os.path.join(target, NAMESPACE_DIR, "dcm2tfrecord")
        os.makedirs(namespace, exist_ok=True)
        for package in PACKAGES:
            if os.path.isdir(os.path.join(target, package)):
                os.symlink(os.path.join(target, package), os.path.join(namespace, package))
        with open(os.path.join(target, ".extracted"), "w") as f:
            f.write(rev + "\n")
    return target, rev[:12]


def pipeline_env(base: dict, code_dir: str) -> dict:
    env = dict(base)
    if code_dir != REPO:
        paths = [os.path.join(code_dir, NAMESPACE_DIR), code_dir] + \
            ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def worktree_state() -> Optional[str]:
    """'<commit>' or '<commit> + uncommitted changes in: ...' for the record."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *PACKAGES],
                               cwd=REPO, check=True, capture_output=True, text=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return None
    dirty = [line[3:] for line in dirty if line.strip()]
    return rev + (f" + uncommitted changes in {len(dirty)} files" if dirty else "")
