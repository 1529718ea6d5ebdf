"""dataset.json: the contract between the writer and the reader.

Written last, through a temp file and a rename: a directory without
dataset.json is never a finished dataset. Nothing time-dependent goes in,
so the same input gives a byte-identical manifest.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Iterable, Mapping

from apache_beam.io.filesystems import FileSystems

from dataset.files import read_json, write_atomically
from dataset.names import ERRORS_NAME, FAILED_RUN_NAME, MANIFEST_NAME, index_file_name
from transforms import reasons
from transforms.records.features import CORE_FEATURES, FORMAT_VERSION
from transforms.records.values import Outcome, ShardResult

MAX_SHAPES_LISTED = 16


def _split_entry(shards: list[ShardResult]) -> dict:
    shapes: list = []
    for shard in shards:
        for shape in shard.shapes:
            if list(shape) not in shapes:
                shapes.append(list(shape))
    labels: Counter = Counter()
    for shard in shards:
        labels.update(dict(shard.label_counts))
    return {
        "num_records": sum(s.num_records for s in shards),
        "num_bytes": sum(s.num_bytes for s in shards),
        "num_shards": len(shards),
        "dtypes": sorted({d for s in shards for d in s.dtypes}),
        "shapes": sorted(shapes)[:MAX_SHAPES_LISTED],
        "fixed_shape": len(shapes) == 1,
        "max_depth": max((s.max_depth for s in shards), default=1),
        "label_counts": {str(k): v for k, v in sorted(labels.items())},
        "shards": [{"file": s.file, "index_file": index_file_name(s.file), "num_records": s.num_records,
                    "num_bytes": s.num_bytes, "sha256": s.sha256}
                   for s in sorted(shards, key=lambda s: (s.file, s.index))],
    }


def build_manifest(results: Iterable[ShardResult], outcomes: Iterable[Outcome], matched: int,
                   options: Mapping, tool_version: str, extra_features: Mapping | None = None,
                   extra: Mapping | None = None, written_also_failed: int = 0) -> dict:
    """dataset.json content; ``extra`` adds labels, groups and shard-policy notes.

    ``written_also_failed``: inputs the shards counted written that are also failed
    outcomes (a file some of whose frames were written): each counts once, as failed.
    """
    results, outcomes = list(results), list(outcomes)
    by_split: dict = {}
    for result in results:
        by_split.setdefault(result.split, []).append(result)
    skipped = Counter(o.reason for o in outcomes if o.status == reasons.SKIPPED)
    failed = Counter(o.reason for o in outcomes if o.status == reasons.FAILED)
    rejected_rows = Counter(o.reason for o in outcomes if o.status == reasons.REJECTED)
    written = sum(r.sources_written for r in results) - written_also_failed
    features = dict(CORE_FEATURES)
    features.update(extra_features or {})
    extra = dict(extra or {})
    if "labels" in extra:
        features["label"] = extra["labels"].pop("feature")
    group_counts = extra.get("groups", {}).get("num_groups", {})
    splits = {name: _split_entry(shards) for name, shards in sorted(by_split.items())}
    for name, entry in splits.items():
        entry["num_groups"] = group_counts.get(name, 0)
    manifest = {
        "format_version": FORMAT_VERSION,
        "tool": {"name": "dcm2tfrecord", "version": tool_version},
        "features": features,
        "splits": splits,
        "counts": {
            "matched": matched,
            "written": written,
            "records": sum(r.num_records for r in results),
            "skipped": dict(sorted(skipped.items())),
            "failed": dict(sorted(failed.items())),
            "unaccounted": matched - written - sum(skipped.values()) - sum(failed.values()),
            "label_rows_rejected": dict(sorted(rejected_rows.items())),
        },
        "errors_file": ERRORS_NAME,
        "options": dict(options),
    }
    manifest.update(extra)
    return manifest


def _write_text(output_dir: str, name: str, text: str) -> str:
    return write_atomically(output_dir, name, text.encode("utf-8"), "application/json")


def errors_jsonl(outcomes: Iterable[Outcome]) -> str:
    ordered = sorted(outcomes, key=lambda o: (o.uri, o.stage, o.reason))
    return "".join(json.dumps(o.as_json(), sort_keys=True) + "\n" for o in ordered)


class CommitConflict(Exception):
    """dataset.json appeared while this run was writing: another run committed here."""


def commit(output_dir: str, manifest: dict, outcomes: Iterable[Outcome]) -> str:
    """Writes errors.jsonl, then dataset.json last; returns the manifest path.

    Never over a dataset.json that is already there: the launcher removed an
    earlier one (--overwrite) before the run, so one found now was committed
    by another run meanwhile, and both cannot be right.
    """
    if FileSystems.exists(FileSystems.join(output_dir, MANIFEST_NAME)):
        raise CommitConflict(f"{FileSystems.join(output_dir, MANIFEST_NAME)} was committed by another "
                             "run while this one ran; this run commits nothing")
    _write_text(output_dir, ERRORS_NAME, errors_jsonl(outcomes))
    return _write_text(output_dir, MANIFEST_NAME, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def refuse_commit(output_dir: str, manifest: dict, outcomes: Iterable[Outcome], reason: str) -> str:
    """Too many failures: errors.jsonl and run_failed.json, and no dataset.json."""
    _write_text(output_dir, ERRORS_NAME, errors_jsonl(outcomes))
    report = {"reason": reason, "counts": manifest["counts"], "errors_file": ERRORS_NAME}
    return _write_text(output_dir, FAILED_RUN_NAME, json.dumps(report, indent=2, sort_keys=True) + "\n")


def read_failed_run(output_dir: str) -> dict | None:
    path = FileSystems.join(output_dir, FAILED_RUN_NAME)
    if not FileSystems.exists(path):
        return None
    return read_json(path)


def read_manifest(output_dir: str) -> dict:
    return read_json(FileSystems.join(output_dir, MANIFEST_NAME))
