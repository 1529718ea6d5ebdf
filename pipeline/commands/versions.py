"""``dcm2tfrecord versions OUT`` and ``dcm2tfrecord rollback OUT N``.

A root written with ``--incremental`` holds ``versions/NNNN/`` (each a whole
dataset) and ``LATEST``. ``versions`` lists them with their counts; ``rollback``
points LATEST at an earlier (or later) committed version, atomically. Nothing
is deleted: rolling forward again is another ``rollback``.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.dataset.manifest import ManifestError, read_manifest
from dcm2tfrecord.dataset.names import MANIFEST_NAME, parse_version
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
    """Per committed version: records and shards per split, what it reused, bytes."""
    latest, _ = current_version(root)
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
                     f"{row['bytes'] / MB:>10.2f}{row['skipped']:>9}{row['failed']:>8}  {splits}")
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


def rollback(root: str, version: str) -> str:
    """Points LATEST at ``version`` (which must be committed); returns its name."""
    root = _root(root)
    try:
        name = parse_version(version)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
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
    parser.add_argument("version", metavar="N", help="version number, e.g. 3 or 0003")
    args = parser.parse_args(list(argv))
    before, damaged = current_version(_root(args.root))
    name = rollback(args.root, args.version)
    before = before or ("(damaged)" if damaged else None)
    print(f"{args.root.rstrip('/')}: LATEST {before} -> {name}")
    return 0
