"""What a finished run commits: its dataset.json, and whether it may commit at all. Pure."""
from __future__ import annotations

from typing import Mapping, Optional

from dataset import manifest
from dataset.features import SOURCE_PATH_FEATURE
from transforms.dicom import header as dicom_header
from transforms.settings import ConversionSettings


def failure_verdict(failed: int, matched: int, max_failure_ratio: float,
                    max_failures: Optional[int]) -> str:
    """Why a run with ``failed`` of ``matched`` inputs failed must not commit ("" if it may)."""
    too_many = failed > max_failure_ratio * max(matched, 1) or (
        max_failures is not None and failed > max_failures)
    if not too_many:
        return ""
    return (f"{failed} of {matched} inputs failed ({100.0 * failed / max(matched, 1):.1f}%), more than "
            f"--max_failure_ratio {max_failure_ratio:g}"
            + (f" / --max_failures {max_failures}" if max_failures is not None else ""))


def accounting_verdict(counts: Mapping) -> str:
    """Why a run whose counts do not add up must not commit ("" if they do).

    Every matched input ends written, skipped or failed; an input that is none
    of these was lost between steps (Beam's local runner has dropped large elements
    without an error: docs/ARCHITECTURE.md, "Why plan, then write"), and a dataset
    missing it must not be committed as if complete.
    """
    unaccounted = counts["unaccounted"]
    if unaccounted == 0:
        return ""
    return (f"the counts do not add up: {counts['matched']} inputs matched, {counts['written']} written, "
            f"{sum(counts['skipped'].values())} skipped, {sum(counts['failed'].values())} failed "
            f"({unaccounted:+d} unaccounted): inputs were lost or counted twice between steps; "
            "nothing is committed, rerun (a rerun with the same arguments is safe)")


def empty_verdict(counts: Mapping, allow_empty: bool) -> str:
    """Why a run that matched inputs but wrote no record must not commit ("" if it may)."""
    if counts["records"] or not counts["matched"] or allow_empty:
        return ""
    why = {**{f"skipped {k}": v for k, v in counts["skipped"].items()},
           **{f"failed {k}": v for k, v in counts["failed"].items()}}
    listed = ", ".join(f"{k}: {v}" for k, v in sorted(why.items(), key=lambda kv: -kv[1])) or "none"
    return (f"none of the {counts['matched']} matched inputs was converted ({listed}); nothing to "
            "commit (--allow_empty commits an empty dataset)")


def labels_entry(space, settings: ConversionSettings, source: Optional[str] = None) -> dict:
    """dataset.json's ``labels`` block for this run's label space (None: no labels).

    ``source``: the labels CSV as recorded in ``options`` (a keyed hash unless
    --record_input_paths), never the path itself.
    """
    if space is None:
        return manifest.labels_block()
    return manifest.labels_block(space.kind, space.class_names, space.feature(), source,
                                 settings.label_key, settings.label_column, settings.missing_label,
                                 from_dirs=settings.labels_from_dirs)


def run_manifest(results: list, outcomes: list, matched: int, space, group_counts: Mapping,
                 leaking: int, layouts: Mapping, settings: ConversionSettings, options: Mapping,
                 version: str, base=None) -> dict:
    """dataset.json of a run: shards, counts, labels, groups, shard policy, incremental notes."""
    if base is not None:   # a version never lists a shard that holds nothing
        results = [r for r in results if r.num_records > 0]
    has_dicom = any("dicom" in r.kinds for r in results)
    features = dicom_header.metadata_feature_names(settings.decode.keep_tags) if has_dicom else {}
    if settings.decode.keep_source_path:
        features["source_path"] = dict(SOURCE_PATH_FEATURE)
    return manifest.build_manifest(
        results, outcomes, matched, options, version, features,
        labels=labels_entry(space, settings, options.get("labels")),
        split_by=settings.split_by or "patient for DICOM, record otherwise",
        num_groups=group_counts, groups_in_several_splits=leaking,
        min_shards={split: (lay.min_shards_requested, lay.min_shards_honoured)
                    for split, lay in layouts.items()},
        base_version=None if base is None else (base.name, base.rebuild_reason))
