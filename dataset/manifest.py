"""dataset.json, the contract between the writer and the reader: built, committed and parsed here.

Every key of dataset.json is spelled in this module: the converter hands
:func:`build_manifest` its shard results, outcomes and the blocks it knows
(labels, groups, shard policy, incremental notes) as plain values, and every
reader (``reader.info``, ``reader.RandomAccess``, ``verify``, the subcommands)
parses the file with :func:`parse_manifest`, whatever file system it read
the bytes through.

Written last, through a temp file and a rename: a directory without
dataset.json is never a finished dataset. Nothing time-dependent goes in,
so the same input gives a byte-identical manifest.
"""
from __future__ import annotations

import json
from collections import Counter
from typing import Iterable, Mapping, Optional, Sequence

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.errors import FormatError, OutputError
from dcm2tfrecord.dataset.features import CORE_FEATURES, FORMAT_VERSION
from dcm2tfrecord.dataset.files import read_json, write_atomically
from dcm2tfrecord.dataset.names import ERRORS_NAME, FAILED_RUN_NAME, MANIFEST_NAME, PARENT, index_file_name
from dcm2tfrecord.dataset.results import Outcome, ShardResult
from dcm2tfrecord.dataset.storage import FileSystems

# Distinct [depth, height, width, channels] shapes listed: per shard by the writer, per split in
# dataset.json, per split by verify. Beyond it a split is simply not fixed-shape.
MAX_SHAPES = 16


def label_count_keys(label) -> list[str]:
    """What a record adds to its split's ``label_counts``: its class, or each class of a
    multi-hot; a float label (regression) adds nothing."""
    if isinstance(label, tuple):
        return [str(i) for i, v in enumerate(label) if v == 1] or ["unlabeled" if -1 in label else "none"]
    if isinstance(label, float):
        return []
    return [str(label) if label != -1 else "unlabeled"]


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
        "shapes": sorted(shapes)[:MAX_SHAPES],
        "fixed_shape": len(shapes) == 1,
        "max_depth": max((s.max_depth for s in shards), default=1),
        "label_counts": {str(k): v for k, v in sorted(labels.items())},
        "shards": [{"file": s.file, "index_file": index_file_name(s.file), "num_records": s.num_records,
                    "num_bytes": s.num_bytes, "sha256": s.sha256}
                   for s in sorted(shards, key=lambda s: (s.file, s.index))],
    }


NO_LABELS_FEATURE = {"dtype": "int64", "shape": [], "description": "-1: unlabeled"}


def labels_block(kind: str = "none", class_names: Sequence[str] = (), feature: Optional[Mapping] = None,
                 source: Optional[str] = None, key: Optional[str] = None, column: Optional[str] = None,
                 missing_label: Optional[str] = None, from_dirs: bool = False) -> dict:
    """dataset.json's ``labels`` block; its ``feature`` becomes the ``label`` feature.

    ``kind="none"``: a dataset without labels. ``source`` is the labels CSV as
    recorded in ``options`` (a keyed hash unless --record_input_paths), never
    the path itself; with ``from_dirs`` the labels are folder names.
    """
    if kind == "none":
        return {"source": None, "kind": "none", "class_names": [], "feature": dict(NO_LABELS_FEATURE)}
    return {"source": "folders" if from_dirs else source, "key": None if from_dirs else key,
            "column": None if from_dirs else column, "kind": kind, "class_names": list(class_names),
            "missing_label": missing_label, "feature": dict(feature or {})}


def build_manifest(results: Iterable[ShardResult], outcomes: Iterable[Outcome], matched: int,
                   options: Mapping, tool_version: str, features: Optional[Mapping] = None, *,
                   labels: Optional[Mapping] = None, split_by: Optional[str] = None,
                   num_groups: Optional[Mapping[str, int]] = None, groups_in_several_splits: int = 0,
                   splits_sharing_groups: Sequence[str] = (),
                   min_shards: Optional[Mapping[str, tuple[int, int]]] = None,
                   base_version: Optional[tuple[str, str]] = None,
                   written_also_failed: int = 0) -> dict:
    """dataset.json content.

    ``features``: the features beyond CORE_FEATURES (``dicom/*``, ``source_path``);
    ``labels``: a :func:`labels_block`; ``split_by``, ``num_groups`` (per split) and
    ``groups_in_several_splits``, ``splits_sharing_groups`` (the splits those groups are
    in): the ``groups`` block, when given a ``split_by``;
    ``min_shards``: per split, (shards requested, shards honoured); ``base_version``:
    ``(name, rebuild reason)`` of the version an ``--incremental`` run built on;
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
    all_features = dict(CORE_FEATURES)
    all_features.update(features or {})
    extra: dict = {}
    if labels is not None:
        extra["labels"] = dict(labels)
        all_features["label"] = extra["labels"].pop("feature")
    if split_by is not None:
        extra["groups"] = {"split_by": split_by, "num_groups": dict(sorted((num_groups or {}).items())),
                           "groups_in_several_splits": groups_in_several_splits}
        if groups_in_several_splits:   # committed only with --allow_split_leak
            extra["groups"]["splits_sharing_groups"] = sorted(splits_sharing_groups)
    if min_shards is not None:
        extra["min_shards"] = {split: {"requested": requested, "honoured": honoured}
                               for split, (requested, honoured) in sorted(min_shards.items())}
    if base_version is not None:
        reused = [r for r in results if r.file.startswith(PARENT)]
        extra["incremental"] = {"base_version": base_version[0] or None, "rebuild_reason": base_version[1],
                                "reused_shards": len(reused), "written_shards": len(results) - len(reused),
                                "reused_records": sum(r.num_records for r in reused)}
    splits = {name: _split_entry(shards) for name, shards in sorted(by_split.items())}
    for name, entry in splits.items():
        entry["num_groups"] = (num_groups or {}).get(name, 0)
    manifest = {
        "format_version": FORMAT_VERSION,
        "tool": {"name": "dcm2tfrecord", "version": tool_version},
        "features": all_features,
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


def encode_manifest(manifest: Mapping) -> str:
    """The text of dataset.json: sorted keys, so equal content gives equal bytes."""
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def _write_text(output_dir: str, name: str, text: str) -> str:
    return write_atomically(output_dir, name, text.encode("utf-8"), "application/json")


def errors_jsonl(outcomes: Iterable[Outcome]) -> str:
    ordered = sorted(outcomes, key=lambda o: (o.uri, o.stage, o.reason))
    return "".join(json.dumps(o.as_json(), sort_keys=True) + "\n" for o in ordered)


class CommitConflict(OutputError):
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
    return _write_text(output_dir, MANIFEST_NAME, encode_manifest(manifest))


def refuse_commit(output_dir: str, manifest: dict, outcomes: Iterable[Outcome], reason: str) -> str:
    """Too many failures: errors.jsonl and run_failed.json, and no dataset.json."""
    _write_text(output_dir, ERRORS_NAME, errors_jsonl(outcomes))
    report = {"reason": reason, "counts": manifest["counts"], "errors_file": ERRORS_NAME}
    return _write_text(output_dir, FAILED_RUN_NAME, json.dumps(report, indent=2, sort_keys=True) + "\n")


def read_failed_run(output_dir: str) -> dict | None:
    """run_failed.json of a run that refused to commit, or None."""
    path = FileSystems.join(output_dir, FAILED_RUN_NAME)
    if not FileSystems.exists(path):
        return None
    return read_json(path)


# ---------------------------------------------------------------- parsing


class ManifestError(FormatError, ValueError):
    """A dataset.json that does not parse, or is not a JSON object; ``reason`` says which."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path} {reason}")
        self.path, self.reason = path, reason


def missing_manifest(path: str, dataset_dir: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} not found: {dataset_dir} is not a finished dcm2tfrecord dataset "
        "(dataset.json is written last, when a conversion commits)")


def parse_manifest(data, path: str = MANIFEST_NAME) -> dict:
    """dataset.json's bytes (or text), however they were read, as a dict.

    ManifestError naming ``path`` when they are not JSON or not a JSON object
    (what the object holds is ``verify``'s to check).
    """
    try:
        manifest = json.loads(data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data)
    except ValueError as exc:      # JSONDecodeError, or bytes that are not UTF-8
        raise ManifestError(path, f"does not parse ({exc}): it is incomplete or corrupt (it is "
                                  "written whole at commit, so it was damaged since); restore it, "
                                  "or convert again") from None
    if not isinstance(manifest, dict):
        raise ManifestError(path, "is not a JSON object")
    return manifest


def readable_manifest(manifest: dict, path: str) -> dict:
    """``manifest`` if a reader can use it (it has a ``splits`` object), else ManifestError
    naming ``path`` (``verify`` reports what else is wrong on its own)."""
    if not isinstance(manifest.get("splits"), dict):
        raise ManifestError(path, "is not a dcm2tfrecord manifest (no 'splits' object); restore it, "
                                  "or convert again")
    return manifest


def read_manifest(dataset_dir: str) -> dict:
    """The dataset.json of ``dataset_dir``, read through the format's file system."""
    path = FileSystems.join(dataset_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        raise missing_manifest(path, dataset_dir)
    with FileSystems.open(path) as handle:
        return parse_manifest(handle.read(), path)
