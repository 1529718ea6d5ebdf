"""verify, the manifest itself: dataset.json's own arithmetic and shard names, a split's
records against its entry, errors.jsonl's counts, and files dataset.json does not list."""
from __future__ import annotations

import json
from collections import Counter
from typing import Mapping, Sequence

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.features import MASK_CHANNELS, MASK_CLASSES, MASK_DTYPE, MASK_RAW
from dcm2tfrecord.dataset.file_adapters import suffixes
from dcm2tfrecord.dataset.manifest import Manifest, ShardEntry, SplitEntry
from dcm2tfrecord.dataset.names import (ERRORS_NAME, INCOMPLETE_DIR, MANIFEST_NAME, SHARD_GLOB, SHARD_SUFFIX,
                                        UNMATCHED_ROWS_NAME, files_of_shard, parse_shard_name)
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.dataset.verify_records import Problem, RecordStats


def missing_blocks(data: Mapping) -> list[Problem]:
    """The objects every dataset.json holds, checked on the parsed JSON before it is typed."""
    return [Problem(MANIFEST_NAME, f"has no {key!r} object") for key in ("features", "splits", "counts")
            if not isinstance(data.get(key), dict)]


def check_manifest(manifest: Manifest) -> list[Problem]:
    """dataset.json's own arithmetic: shard names, split totals, the counts block."""
    problems = []

    def bad(message: str) -> None:
        problems.append(Problem(MANIFEST_NAME, message))

    total = 0
    for split, entry in sorted(manifest.splits.items()):
        shards = entry.shards
        if entry.num_shards != len(shards):
            bad(f"split {split!r}: num_shards {entry.num_shards} but {len(shards)} shards listed")
        records = sum(s.num_records for s in shards)
        if entry.num_records != records:
            bad(f"split {split!r}: num_records {entry.num_records} but its shards hold {records}")
        size = sum(s.num_bytes or 0 for s in shards)
        if entry.num_bytes != size:
            bad(f"split {split!r}: num_bytes {entry.num_bytes} but its shards total {size}")
        total += records
        if manifest.incremental is not None:
            problems.extend(_check_version_names(split, shards))
            continue
        for position, shard in enumerate(shards):
            name = parse_shard_name(shard.file)
            if (name is None or name.version or name.parent or name.split != split
                    or name.index != position or name.num_shards != len(shards)):
                bad(f"split {split!r}: shard {position} is named {shard.file!r}, expected "
                    f"{split}-{position:05d}-of-{len(shards):05d}{SHARD_SUFFIX}[{'|'.join(suffixes())}]")
    if any(name in manifest.features for name in (MASK_RAW, MASK_DTYPE, MASK_CHANNELS)):
        if manifest.mask_classes is None:     # absent, or not class names: kept as written in extra
            classes = manifest.extra.get(MASK_CLASSES)
            found = "missing" if classes is None else f"{classes!r:.60}"
            bad(f"declares mask features ({MASK_RAW}), but its {MASK_CLASSES!r} is {found}, not a list of "
                "class names (strings)")
    counts = manifest.counts or {}
    if counts.get("records") != total:
        bad(f"counts.records {counts.get('records')} but the splits hold {total}")
    skipped = sum(counts.get("skipped", {}).values())
    failed = sum(counts.get("failed", {}).values())
    written = counts.get("written", 0)
    if counts.get("unaccounted") != counts.get("matched", 0) - written - skipped - failed:
        bad(f"counts do not add up: matched {counts.get('matched')} - written {written} - skipped "
            f"{skipped} - failed {failed} != unaccounted {counts.get('unaccounted')}")
    return problems


def _check_version_names(split: str, shards: Sequence[ShardEntry]) -> list[Problem]:
    """Shards of a versioned dataset: ``[../MMMM/]<split>-vMMMM-<i>-of-<n>``, each once."""
    problems, seen = [], set()
    for shard in shards:
        name = shard.file
        parsed = parse_shard_name(name)
        if (parsed is None or not parsed.version or parsed.split != split
                or parsed.index >= parsed.num_shards or (parsed.parent and parsed.parent != parsed.version)):
            problems.append(Problem(MANIFEST_NAME, f"split {split!r}: shard {name!r} is not named "
                                                   f"[../NNNN/]{split}-vNNNN-<i>-of-<n>{SHARD_SUFFIX}"
                                                   f"[{'|'.join(suffixes())}]"))
        elif name in seen:
            problems.append(Problem(MANIFEST_NAME, f"split {split!r}: shard {name!r} listed twice"))
        seen.add(name)
    return problems


def check_split_stats(split: str, entry: SplitEntry, stats: RecordStats, complete: bool) -> list[Problem]:
    """The records' dtypes, shapes and labels against the split's entry in dataset.json.

    ``complete`` is False when some record could not be read: then only what
    the records read contradict (dtypes, shapes, depth) is checked, not totals.
    """
    problems = []

    def bad(message: str) -> None:
        problems.append(Problem(MANIFEST_NAME, f"split {split!r}: {message}"))

    if not stats.count:
        return problems
    if not stats.dtypes <= set(entry.dtypes):
        bad(f"records are {sorted(stats.dtypes)}, dataset.json lists dtypes {list(entry.dtypes)}")
    listed = set(entry.shapes)
    if entry.fixed_shape and stats.shapes != listed:
        bad(f"fixed_shape {[list(s) for s in entry.shapes]} but records have {sorted(stats.shapes)}")
    if stats.max_depth > entry.max_depth:
        bad(f"a record has depth {stats.max_depth}, max_depth says {entry.max_depth}")
    declared = {k: v for k, v in (entry.label_counts or {}).items() if v}
    if complete and entry.label_counts is not None and dict(stats.labels) != declared:
        bad(f"label_counts {declared} but the records hold {dict(sorted(stats.labels.items()))}")
    return problems


def check_errors_file(dataset_dir: str, manifest: Manifest) -> list[Problem]:
    """errors.jsonl exists, parses, and counts per reason what dataset.json counts."""
    name = manifest.errors_file or ERRORS_NAME
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
    counts = manifest.counts or {}
    unmatched = (manifest.labels or {}).get("unmatched_rows")
    for status, key in ((reasons.SKIPPED, "skipped"), (reasons.FAILED, "failed"),
                        (reasons.REJECTED, "label_rows_rejected")):
        declared = {k: v for k, v in counts.get(key, {}).items() if v}
        if status == reasons.REJECTED and isinstance(unmatched, dict):
            # errors.jsonl holds a sample of the unmatched rows; their own file holds all
            declared = {k: v for k, v in {**declared, reasons.UNMATCHED_LABEL_ROW:
                                          unmatched.get("in_errors_file", 0)}.items() if v}
        if dict(found[status]) != declared:
            problems.append(Problem(name, f"{status} per reason {dict(sorted(found[status].items()))}, "
                                          f"dataset.json counts {declared}"))
    if isinstance(unmatched, dict):
        problems += check_unmatched_rows_file(dataset_dir, unmatched,
                                              counts.get("label_rows_rejected", {}))
    return problems


def check_unmatched_rows_file(dataset_dir: str, block: dict, rejected: dict) -> list[Problem]:
    """The file of the labels CSV rows that label nothing (``labels.unmatched_rows``) holds
    as many JSON lines, in CSV line order, as dataset.json counts."""
    name = str(block.get("file") or UNMATCHED_ROWS_NAME)
    path = FileSystems.join(dataset_dir, name)
    declared = rejected.get(reasons.UNMATCHED_LABEL_ROW, 0)
    if block.get("rows") != declared:
        return [Problem(MANIFEST_NAME, f"labels.unmatched_rows counts {block.get('rows')} rows, "
                                       f"counts.label_rows_rejected {declared}")]
    if not FileSystems.exists(path):
        return [Problem(name, "missing (dataset.json names it)")]
    rows, last = 0, 0
    try:
        with FileSystems.open(path) as handle:
            for text in handle:
                line = json.loads(text)["line"]
                if not isinstance(line, int) or line <= last:
                    return [Problem(name, f"line {rows + 1} is not a CSV line after {last}")]
                rows, last = rows + 1, line
    except Exception as exc:  # noqa: BLE001 - unreadable, not JSON: one problem naming the file
        return [Problem(name, f"line {rows + 1} cannot be read: {exc}")]
    if rows != declared:
        return [Problem(name, f"{rows} rows, dataset.json counts {declared} unmatched_label_row")]
    return []


def stray_files(dataset_dir: str, manifest: Manifest) -> list[str]:
    """Shard-like files dataset.json does not list, and a leftover .incomplete/: notes, not errors."""
    listed = {name for entry in manifest.splits.values() for s in entry.shards
              for name in (s.index_file,) + files_of_shard(s.file)}
    try:
        found = FileSystems.match(FileSystems.join(dataset_dir, SHARD_GLOB))
    except Exception:
        found = []
    notes = [f"{path.rsplit('/', 1)[-1]} is not listed in dataset.json (readers ignore it)"
             for path in sorted(found) if path.rsplit("/", 1)[-1] not in listed]
    if FileSystems.exists(FileSystems.join(dataset_dir, INCOMPLETE_DIR)):
        notes.append(f"{INCOMPLETE_DIR}/ holds temp files of an unfinished run")
    return notes
