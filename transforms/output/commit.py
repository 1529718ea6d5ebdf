"""What a finished run commits: its dataset.json, and whether it may commit at all. Pure."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from dcm2tfrecord.dataset import manifest, reasons
from dcm2tfrecord.dataset.features import (ENCODING_RAW, SOURCE_PATH, SOURCE_PATH_FEATURE, RecordKind,
                                           class_location_features, image_features)
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.dicom import metadata as dicom_metadata
from dcm2tfrecord.transforms.dicom import patient_space
from dcm2tfrecord.transforms.images.crop import Crop
from dcm2tfrecord.transforms.images import fingerprint, intensity
from dcm2tfrecord.transforms.masks import annotation as masks_annotation
from dcm2tfrecord.dataset.encryption import encryption_block
from dcm2tfrecord.transforms.settings import ConversionSettings

if TYPE_CHECKING:
    from dcm2tfrecord.dataset.results import ShardResult
    from dcm2tfrecord.dataset.versions import BaseVersion
    from dcm2tfrecord.transforms.planning.shards import SplitLayout


@dataclasses.dataclass(frozen=True)
class CommitInputs:
    """Everything the commit step reads, as one value.

    The run's constants are set when the graph is built; what the run produced
    (``results`` .. ``layouts``) arrives as the commit step's side inputs, by these
    field names (transforms.output.steps.commit_step fills them in).
    """
    settings: ConversionSettings
    options: Mapping[str, Any]            # dataset.json's options (ConvertOptions.recorded)
    version: str                          # the tool version
    base: Optional["BaseVersion"] = None  # --incremental: the version built on
    results: Sequence["ShardResult"] = ()     # every shard written or reused
    outcomes: Sequence[Outcome] = ()          # every input that did not become a record
    matched: int = 0                          # files and broken links matched
    space: Any = None                         # the label space (None: no labels)
    group_counts: Mapping[str, Any] = dataclasses.field(default_factory=dict)   # split -> groups
    leaking: tuple = (0, ())                  # (groups in several splits, those splits)
    layouts: Mapping[str, "SplitLayout"] = dataclasses.field(default_factory=dict)   # split -> layout
    unmatched: Sequence[Any] = ()             # labels CSV rows that label nothing (UnmatchedRows)
    fingerprint: Optional[Mapping[str, Any]] = None   # --intensity ct: the one the shards were written with
    spacing: Any = None                       # --spacing auto: the target chosen (spacing.AutoSpacing)

    # side inputs of the commit step, by name (spacing only with --spacing auto)
    PRODUCED = ("results", "outcomes", "matched", "space", "group_counts", "leaking", "layouts",
                "unmatched", "fingerprint", "spacing")


def _frame_list(frames: list[int]) -> str:
    """0, 2-5, 9 (at most 8 ranges, then how many more)."""
    ranges: list[list[int]] = []
    for f in frames:
        if ranges and f == ranges[-1][1] + 1:
            ranges[-1][1] = f
        else:
            ranges.append([f, f])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:8]]
    if len(ranges) > 8:
        text.append(f"... {len(ranges) - 8} more ranges")
    return ", ".join(text)


def one_outcome_per_input(outcomes: Iterable[Outcome]) -> tuple[list[Outcome], int]:
    """Outcomes as counted: one per input file, and how many of those inputs a shard
    also counted as written.

    With --frames split one file's frames are separate records: each frame that does
    not convert (at write) or is not labelled (before) has an Outcome. They become one,
    whose message says how many of its frames failed, which, and why the first did.
    A file whose frame 0 was written was counted written by its shard (frame 0 stands
    for the file there): those are the second value, to be taken off the written count.
    """
    by_uri: dict = {}
    merged: list[Outcome] = []
    for outcome in outcomes:
        if outcome.status == reasons.REJECTED:
            merged.append(outcome)
        else:
            by_uri.setdefault(outcome.uri, []).append(outcome)
    counted_written = 0
    for uri, group in by_uri.items():
        if len(group) == 1 and group[0].frame is None:
            merged.append(group[0])
            continue
        group.sort(key=lambda o: (o.status != reasons.FAILED, -1 if o.frame is None else o.frame,
                                  o.stage, o.reason))
        first = group[0]
        status = reasons.FAILED if first.status == reasons.FAILED else reasons.SKIPPED
        framed = sorted({o.frame for o in group if o.frame is not None})
        if framed and all(o.frame is not None for o in group):
            total = max(o.frames for o in group) or framed[-1] + 1
            if 0 not in framed:
                counted_written += 1
            part = first.part
            message = (f"{len(framed)} of {total} {part}s did not convert ({part} {_frame_list(framed)}), "
                       f"{total - len(framed)} written; {part} {first.frame}: {first.message}")
        else:
            message = (f"all {len(group)} records of the file (its frames or stacks): {first.message}"
                       if len(group) > 1 else first.message)
        merged.append(Outcome(uri, status, first.stage, first.reason, message))
    return merged, counted_written


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


def leak_verdict(leaking, split_by: str, allow_split_leak: bool) -> str:
    """Why a run that put one group in several splits must not commit ("" if it may).

    ``leaking``: (groups found in more than one split, the splits they are in), as
    transforms.splits.steps.CountGroups gives it. Only --split_column can do this
    (hashed splits follow the group key); a patient in both train and test would
    leak test data into training, so it takes --allow_split_leak. ``split_by``:
    what a group is (dataset.json's ``groups.split_by``).
    """
    groups, splits = leaking
    if not groups or allow_split_leak:
        return ""
    return (f"{groups} group(s) (split by {split_by}) appear in more than one split, across splits "
            f"{', '.join(splits)}: check the --split_column values of those records' rows; nothing is "
            "committed (--allow_split_leak commits such a dataset anyway)")


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


def run_manifest(inputs: CommitInputs, outcomes: list, written_also_failed: int = 0) -> manifest.Manifest:
    """dataset.json of a run: shards, counts, labels, groups, shard policy, incremental notes.

    ``outcomes`` are ``inputs.outcomes`` one per input (one_outcome_per_input),
    ``written_also_failed`` the inputs among them that a shard also counted written.
    """
    results, matched, space = list(inputs.results), inputs.matched, inputs.space
    group_counts, leaking, layouts = inputs.group_counts, inputs.leaking, inputs.layouts
    settings, options, version, base = inputs.settings, inputs.options, inputs.version, inputs.base
    if base is not None:   # a version never lists a shard that holds nothing
        results = [r for r in results if r.num_records > 0]
    has_dicom = any(RecordKind.DICOM in r.kinds for r in results)
    features = dicom_metadata.metadata_feature_names(settings.decode.keep_tags) if has_dicom else {}
    if any(RecordKind.NIFTI in r.kinds for r in results):      # a NIfTI record's geometry, under DICOM's names
        features.update({k: dict(v) for k, v in patient_space.FEATURES.items() if k not in features})
    if settings.decode.spacing is not None and (has_dicom or any(RecordKind.NIFTI in r.kinds for r in results)):
        features.update({k: dict(v) for k, v in patient_space.SPACING_FEATURES.items()})   # what undoes it
    if settings.decode.crop != Crop.OFF:      # --crop: every record's box and its source's grid
        features.update({k: dict(v) for k, v in patient_space.SPACING_FEATURES.items()})
        features.update({k: dict(v) for k, v in patient_space.CROP_FEATURES.items()})
    if settings.decode.intensity == intensity.Intensity.ZSCORE:     # what undoes it (reader.intensity)
        features.update({k: dict(v) for k, v in intensity.FEATURES.items()})
    elif settings.decode.intensity == intensity.Intensity.CT:
        features.update({k: dict(v) for k, v in fingerprint.FEATURES.items()})
    if settings.decode.keep_source_path:
        features[SOURCE_PATH] = dict(SOURCE_PATH_FEATURE)
    masks = settings.masks
    if masks is not None:
        features.update({k: dict(v) for k, v in masks_annotation.FEATURES.items()})
        if masks.locations:         # --class_locations
            features.update(class_location_features(masks.class_count))
    if settings.decode.pixel_encoding != ENCODING_RAW:
        features.update(image_features(settings.decode.pixel_encoding))
    return manifest.build_manifest(
        results, outcomes, matched, options, version, features,
        labels=labels_entry(space, settings, options.get("labels")),
        split_by=settings.split_by or "patient for DICOM, record otherwise",
        num_groups=group_counts, groups_in_several_splits=leaking[0], splits_sharing_groups=leaking[1],
        min_shards={split: (lay.min_shards_requested, lay.min_shards_honoured)
                    for split, lay in layouts.items()},
        base_version=None if base is None else (base.name, base.rebuild_reason),
        written_also_failed=written_also_failed,
        mask_classes=None if masks is None else list(masks.class_map.classes),
        fingerprint=inputs.fingerprint if settings.decode.intensity == intensity.Intensity.CT else None,
        auto_spacing=None if inputs.spacing is None else inputs.spacing.manifest_entry(),
        encryption=encryption_block(settings.encrypt_key_uri) if settings.encrypt_key_uri else None,
        volume_chunks=settings.decode.chunks)
