"""``dcm2tfrecord versions OUT``, ``rollback OUT N``, ``tag OUT NAME [N]`` and ``prune OUT --keep K``.

A root written with ``--incremental`` holds ``versions/NNNN/`` (each a whole
dataset), ``LATEST`` and ``tags/``. ``versions`` lists them with their counts and
tags; ``rollback`` points LATEST at an earlier (or later) committed version,
atomically, and deletes nothing: rolling forward again is another ``rollback``.
``tag`` names a version (``reader.load(..., version="paper-2026")``, ``copy
--version``, ``rollback``, ``inspect --version`` take the name where they take a
number); ``prune`` removes all but the newest versions, never LATEST's nor a
tagged one, nor a file a kept version reuses.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.dataset.manifest import ManifestError, read_manifest
from dcm2tfrecord.dataset.names import MANIFEST_NAME, check_tag
from dcm2tfrecord.dataset import versions

MB = 1 << 20


def _root(path: str) -> str:
    root = path.rstrip("/") or "/"
    if not versions.is_versioned(root):
        raise UsageError(f"{root} has no LATEST: it is not a versioned dataset root "
                         "(convert with --incremental to make one)")
    return root


def current_version(root: str) -> tuple[Optional[str], str]:
    """(the version LATEST names, "") or (None, why LATEST cannot be read)."""
    try:
        return versions.read_latest(root), ""
    except versions.DamagedLatest as exc:
        return None, str(exc)


def describe(root: str) -> list[dict]:
    """Per committed version: records and shards per split, what it reused, bytes, its tags."""
    latest, _ = current_version(root)
    tagged = versions.tags(root)
    rows = []
    for name in versions.committed_versions(root):
        try:
            manifest = read_manifest(versions.version_dir(root, name))
        except ManifestError as exc:    # damaged, or of a newer format: one line, as verify says it
            raise UsageError(f"version {name}: {exc}") from None
        incremental = manifest.incremental or {}
        counts = manifest.counts or {}
        rows.append({
            "version": name, "latest": name == latest,
            "records": {k: v.num_records for k, v in sorted(manifest.splits.items())},
            "shards": sum(v.num_shards or 0 for v in manifest.splits.values()),
            "bytes": sum(v.num_bytes or 0 for v in manifest.splits.values()),
            "written_shards": incremental.get("written_shards"),
            "reused_shards": incremental.get("reused_shards"),
            "base_version": incremental.get("base_version"),
            "failed": sum(counts["failed"].values()),
            "skipped": sum(counts["skipped"].values()),
            "tags": [tag for tag, version in tagged.items() if version == name],
        })
    return rows


def format_versions(root: str, rows: list[dict]) -> str:
    lines = [f"{root}: {len(rows)} version(s)",
             f"  {'version':<9}{'records':>10}{'shards':>8}{'new':>6}{'reused':>8}{'MB':>10}"
             f"{'skipped':>9}{'failed':>8}  splits"]
    for row in rows:
        mark = "*" if row["latest"] else " "
        splits = ", ".join(f"{k} {v}" for k, v in row["records"].items())
        lines.append(f"{mark} {row['version']:<9}{sum(row['records'].values()):>10}{row['shards']:>8}"
                     f"{row['written_shards'] or 0:>6}{row['reused_shards'] or 0:>8}"
                     f"{row['bytes'] / MB:>10.2f}{row['skipped']:>9}{row['failed']:>8}  {splits}"
                     + (f"  tags: {', '.join(row['tags'])}" if row["tags"] else ""))
    lines.append("* = LATEST (what reader.load reads by default)")
    return "\n".join(lines)


def versions_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="dcm2tfrecord versions",
                                     description="List the committed versions of a dataset root "
                                                 "written with convert --incremental.")
    parser.add_argument("root", metavar="OUT", help="the --output of convert --incremental")
    parser.add_argument("--json", action="store_true", help="print the list as JSON")
    args = parser.parse_args(list(argv))
    root = _root(args.root)
    rows = describe(root)
    print(json.dumps(rows, indent=1, sort_keys=True) if args.json else format_versions(root, rows))
    _, damaged = current_version(root)
    if damaged:
        print(f"dcm2tfrecord versions: warning: no version is current: {damaged}", file=sys.stderr)
        return 1
    return 0


def _version(root: str, version: str) -> str:
    """``version`` (a number or a tag of ``root``) as a version name; UsageError otherwise."""
    try:
        return versions.resolve_version(root, version)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def rollback(root: str, version: str) -> str:
    """Points LATEST at ``version`` (which must be committed); returns its name."""
    root = _root(root)
    name = _version(root, version)
    if not FileSystems.exists(FileSystems.join(versions.version_dir(root, name),
                                               MANIFEST_NAME)):
        known = ", ".join(versions.committed_versions(root)) or "none"
        raise UsageError(f"version {name} of {root} is not committed (committed: {known})")
    versions.set_latest(root, name)
    return name


def rollback_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="dcm2tfrecord rollback",
                                     description="Point OUT/LATEST at another committed version.")
    parser.add_argument("root", metavar="OUT", help="the --output of convert --incremental")
    parser.add_argument("version", metavar="N", help="version number, e.g. 3 or 0003, or a tag's name")
    args = parser.parse_args(list(argv))
    before, damaged = current_version(_root(args.root))
    name = rollback(args.root, args.version)
    before = before or ("(damaged)" if damaged else None)
    print(f"{args.root.rstrip('/')}: LATEST {before} -> {name}")
    return 0


def tag_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord tag",
        description="Name a committed version of a root written with convert --incremental (the set a "
                    "paper used, say): reader.load(..., version=NAME), RandomAccess, copy --version, "
                    "rollback and inspect --version take the name; prune never removes a tagged "
                    "version. Without NAME: list the tags.")
    parser.add_argument("root", metavar="OUT", help="the --output of convert --incremental")
    parser.add_argument("name", metavar="NAME", nargs="?", help="the tag, e.g. paper-2026")
    parser.add_argument("version", metavar="N", nargs="?", default=None,
                        help="the version it names (default: the one LATEST names)")
    parser.add_argument("--move", action="store_true", help="point an existing tag at another version")
    parser.add_argument("--delete", action="store_true", help="remove the tag (the version stays)")
    args = parser.parse_args(list(argv))
    root = _root(args.root)
    tagged = versions.tags(root)
    if args.name is None:
        print("\n".join(f"{tag}\t{version}" for tag, version in tagged.items()) or f"{root}: no tags")
        return 0
    try:
        name = check_tag(args.name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.delete:
        if name not in tagged:
            raise UsageError(f"{root} has no tag {name!r}")
        versions.delete_tag(root, name)
        print(f"{root}: tag {name} removed (version {tagged[name]} stays)")
        return 0
    if args.version is None:
        latest, damaged = current_version(root)
        if latest is None:
            raise UsageError(f"no version to tag: {damaged}")
        version = latest
    else:
        version = _version(root, args.version)
    if not FileSystems.exists(FileSystems.join(versions.version_dir(root, version), MANIFEST_NAME)):
        known = ", ".join(versions.committed_versions(root)) or "none"
        raise UsageError(f"version {version} of {root} is not committed (committed: {known})")
    if name in tagged and tagged[name] != version and not args.move:
        raise UsageError(f"tag {name} already names version {tagged[name]}: add --move to point it at "
                         f"{version}")
    versions.set_tag(root, name, version)
    print(f"{root}: tag {name} -> version {version}")
    return 0


def prune_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord prune",
        description="Remove the versions of a root written with convert --incremental but the KEEP "
                    "newest, the one LATEST names and every tagged one; files a kept version reuses "
                    "stay. Prints what it would remove unless --yes.")
    parser.add_argument("root", metavar="OUT", help="the --output of convert --incremental")
    parser.add_argument("--keep", type=int, required=True, metavar="K", help="the newest versions kept (>= 1)")
    parser.add_argument("--yes", action="store_true", help="remove them (default: only say what would go)")
    args = parser.parse_args(list(argv))
    root = _root(args.root)
    latest, damaged = current_version(root)
    if latest is None:
        raise UsageError(f"refusing to prune: {damaged}")
    try:
        plan = versions.prune_plan(root, args.keep)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    held = f"; {len(plan.held)} of their files stay, reused by kept versions" if plan.held else ""
    what = (f"versions {', '.join(plan.removed)} ({len(plan.files)} files{held})" if plan.removed
            else f"no version ({len(plan.files)} files of uncommitted versions)" if plan.files else "nothing")
    if not args.yes:
        print(f"{root}: would remove {what}; kept: {', '.join(plan.kept)}. Run again with --yes to remove.")
        return 0
    versions.prune(root, plan)
    print(f"{root}: removed {what}; kept: {', '.join(plan.kept)}")
    return 0
