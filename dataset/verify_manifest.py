"""verify, the manifest itself: dataset.json's own arithmetic and shard names, a split's
records against its entry, errors.jsonl's counts, and files dataset.json does not list."""
from __future__ import annotations

import json
from collections import Counter

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.names import (ERRORS_NAME, INCOMPLETE_DIR, MANIFEST_NAME, SHARD_GLOB, files_of_shard,
                           parse_shard_name)
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.dataset.verify_records import Problem, RecordStats


def check_manifest(manifest: dict) -> list[Problem]:
    """dataset.json's own arithmetic: shard names, split totals, the counts block."""
    problems = []

    def bad(message: str) -> None:
        problems.append(Problem(MANIFEST_NAME, message))

    for key in ("features", "splits", "counts"):
        if not isinstance(manifest.get(key), dict):
            bad(f"has no {key!r} object")
    if problems:
        return problems
    total = 0
    for split, entry in sorted(manifest["splits"].items()):
        shards = entry.get("shards", [])
        if entry.get("num_shards") != len(shards):
            bad(f"split {split!r}: num_shards {entry.get('num_shards')} but {len(shards)} shards listed")
        records = sum(int(s.get("num_records", 0)) for s in shards)
        if entry.get("num_records") != records:
            bad(f"split {split!r}: num_records {entry.get('num_records')} but its shards hold {records}")
        size = sum(int(s.get("num_bytes", 0)) for s in shards)
        if entry.get("num_bytes") != size:
            bad(f"split {split!r}: num_bytes {entry.get('num_bytes')} but its shards total {size}")
        total += records
        if "incremental" in manifest:
            problems.extend(_check_version_names(split, shards))
            continue
        for position, shard in enumerate(shards):
            name = parse_shard_name(str(shard.get("file", "")))
            if (name is None or name.version or name.parent or name.split != split
                    or name.index != position or name.num_shards != len(shards)):
                bad(f"split {split!r}: shard {position} is named {shard.get('file')!r}, expected "
                    f"{split}-{position:05d}-of-{len(shards):05d}.tfrecord[.gz]")
    counts = manifest["counts"]
    if counts.get("records") != total:
        bad(f"counts.records {counts.get('records')} but the splits hold {total}")
    skipped = sum(counts.get("skipped", {}).values())
    failed = sum(counts.get("failed", {}).values())
    written = counts.get("written", 0)
    if counts.get("unaccounted") != counts.get("matched", 0) - written - skipped - failed:
        bad(f"counts do not add up: matched {counts.get('matched')} - written {written} - skipped "
            f"{skipped} - failed {failed} != unaccounted {counts.get('unaccounted')}")
    return problems


def _check_version_names(split: str, shards: list) -> list[Problem]:
    """Shards of a versioned dataset: ``[../MMMM/]<split>-vMMMM-<i>-of-<n>``, each once."""
    problems, seen = [], set()
    for shard in shards:
        name = str(shard.get("file", ""))
        parsed = parse_shard_name(name)
        if (parsed is None or not parsed.version or parsed.split != split
                or parsed.index >= parsed.num_shards or (parsed.parent and parsed.parent != parsed.version)):
            problems.append(Problem(MANIFEST_NAME, f"split {split!r}: shard {name!r} is not named "
                                                   f"[../NNNN/]{split}-vNNNN-<i>-of-<n>.tfrecord[.gz]"))
        elif name in seen:
            problems.append(Problem(MANIFEST_NAME, f"split {split!r}: shard {name!r} listed twice"))
        seen.add(name)
    return problems


def check_split_stats(split: str, entry: dict, stats: RecordStats, complete: bool) -> list[Problem]:
    """The records' dtypes, shapes and labels against the split's entry in dataset.json.

    ``complete`` is False when some record could not be read: then only what
    the records read contradict (dtypes, shapes, depth) is checked, not totals.
    """
    problems = []

    def bad(message: str) -> None:
        problems.append(Problem(MANIFEST_NAME, f"split {split!r}: {message}"))

    if not stats.count:
        return problems
    if not stats.dtypes <= set(entry.get("dtypes", [])):
        bad(f"records are {sorted(stats.dtypes)}, dataset.json lists dtypes {entry.get('dtypes')}")
    listed = {tuple(x) for x in entry.get("shapes", [])}
    if entry.get("fixed_shape") and stats.shapes != listed:
        bad(f"fixed_shape {entry.get('shapes')} but records have {sorted(stats.shapes)}")
    if stats.max_depth > entry.get("max_depth", 1):
        bad(f"a record has depth {stats.max_depth}, max_depth says {entry.get('max_depth', 1)}")
    declared = {k: v for k, v in entry.get("label_counts", {}).items() if v}
    if complete and "label_counts" in entry and dict(stats.labels) != declared:
        bad(f"label_counts {declared} but the records hold {dict(sorted(stats.labels.items()))}")
    return problems


def check_errors_file(dataset_dir: str, manifest: dict) -> list[Problem]:
    """errors.jsonl exists, parses, and counts per reason what dataset.json counts."""
    name = manifest.get("errors_file", ERRORS_NAME)
    path = FileSystems.join(dataset_dir, name)
    if not FileSystems.exists(path):
        return [Problem(name, "missing (dataset.json names it)")]
    found: dict = {reasons.SKIPPED: Counter(), reasons.FAILED: Counter(), reasons.REJECTED: Counter()}
    try:
        with FileSystems.open(path) as handle:
            lines = handle.read().decode("utf-8").splitlines()
    except Exception as exc:
        return [Problem(name, f"cannot be read: {exc}")]
    for number, line in enumerate(lines, start=1):
        try:
            item = json.loads(line)
            found.setdefault(item.get("status"), Counter())[item.get("reason")] += 1
        except (ValueError, AttributeError) as exc:
            return [Problem(name, f"line {number} is not a JSON object: {exc}")]
    problems = []
    counts = manifest.get("counts", {})
    for status, key in ((reasons.SKIPPED, "skipped"), (reasons.FAILED, "failed"),
                        (reasons.REJECTED, "label_rows_rejected")):
        declared = {k: v for k, v in counts.get(key, {}).items() if v}
        if dict(found[status]) != declared:
            problems.append(Problem(name, f"{status} per reason {dict(sorted(found[status].items()))}, "
                                          f"dataset.json counts {declared}"))
    return problems


def stray_files(dataset_dir: str, manifest: dict) -> list[str]:
    """Shard-like files dataset.json does not list, and a leftover .incomplete/: notes, not errors."""
    listed = {name for entry in manifest.get("splits", {}).values() for s in entry.get("shards", [])
              for name in (s.get("index_file"),) + files_of_shard(str(s.get("file")))}
    try:
        found = FileSystems.match(FileSystems.join(dataset_dir, SHARD_GLOB))
    except Exception:
        found = []
    notes = [f"{path.rsplit('/', 1)[-1]} is not listed in dataset.json (readers ignore it)"
             for path in sorted(found) if path.rsplit("/", 1)[-1] not in listed]
    if FileSystems.exists(FileSystems.join(dataset_dir, INCOMPLETE_DIR)):
        notes.append(f"{INCOMPLETE_DIR}/ holds temp files of an unfinished run")
    return notes
