"""Thin Beam shells around the pure functions: the boxes of DESIGN.md's picture.

Only metadata crosses a GroupByKey or Reshuffle here (SourceFile,
ProbedRecord, ShardPlan, ShardResult, Outcome); pixels are read, decoded and
written inside WriteShards, one shard per DoFn call.
"""
from __future__ import annotations

import dataclasses
import json
import logging

from typing import Iterable, Mapping, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.pvalue import AsDict, AsList, AsSingleton, TaggedOutput

from transforms import dicom_header
from transforms import manifest as manifest_lib
from transforms import reasons
from transforms import series as series_lib
from transforms import versions
from transforms.incremental import ReuseShards
from transforms.errors import ConversionError
from transforms.probe import expand_frames, probe_file
from transforms.settings import DEFAULT_MAX_PIXELS, DecodeSettings
from transforms.records import Outcome, ProbedRecord, ShardPlan, SourceFile
from transforms import labels as labels_lib
from transforms import splits as splits_lib
from transforms.settings import ConversionSettings
from transforms.shard_plan import (ShardBounds, assign_shards, bucket_of, bucket_starts, layout,
                                   sort_key)
from transforms.shard_writer import write_shard
from transforms.sources import broken_links, expand_pattern

NAMESPACE = "dcm2tfrecord"
OUTCOMES = "outcomes"


def count(name: str, n: int = 1) -> None:
    """Beam counters with stable names: the Dataflow UI shows the same numbers."""
    Metrics.counter(NAMESPACE, name).inc(n)


def _count_outcome(outcome: Outcome) -> None:
    count(f"{outcome.status}_{outcome.reason}")


# ---------------------------------------------------------------- match


def _expand_counted(pattern: str) -> Iterable[SourceFile]:
    for source in expand_pattern(pattern):
        count("files_matched")
        yield source


def _broken_links(pattern: str) -> Iterable[Outcome]:
    for path in broken_links(pattern):
        outcome = Outcome(path, reasons.FAILED, "match", reasons.BROKEN_SYMLINK,
                          "symbolic link to a missing target")
        count("files_matched")
        _count_outcome(outcome)
        yield outcome


def _first_by_rel_path(sources: Iterable[SourceFile]) -> SourceFile:
    return min(sources, key=lambda s: s.rel_path)


class MatchSources(beam.PTransform):
    """--input patterns -> (every matched file once, broken links as Outcomes)."""

    def __init__(self, patterns: list[str]):
        super().__init__()
        self.patterns = sorted(set(patterns))

    def expand(self, pbegin):
        patterns = pbegin | "ListInputPatterns" >> beam.Create(self.patterns)
        broken = (patterns
                  | "FindBrokenLinks" >> beam.FlatMap(_broken_links)
                  | "KeyLinkByUri" >> beam.Map(lambda o: (o.uri, o))
                  | "DropRepeatedLinks" >> beam.CombinePerKey(lambda outcomes: min(outcomes, key=lambda o: o.uri))
                  | "DropLinkKey" >> beam.Values())
        return (patterns
                | "ExpandPatterns" >> beam.FlatMap(_expand_counted)
                # SourceFile
                | "KeyByUri" >> beam.Map(lambda s: (s.uri, s))
                | "DropRepeatedMatches" >> beam.CombinePerKey(_first_by_rel_path)
                | "DropUriKey" >> beam.Values()), broken
                # SourceFile, each uri once; Outcome per broken link


# ---------------------------------------------------------------- probe


class ProbeFn(beam.DoFn):
    """SourceFile -> ProbedRecord (one per frame with --frames split), or an Outcome."""

    def __init__(self, max_pixels: int = DEFAULT_MAX_PIXELS, max_record_bytes: Optional[int] = None,
                 settings: DecodeSettings = DecodeSettings()):
        super().__init__()
        self.max_pixels, self.max_record_bytes, self.settings = max_pixels, max_record_bytes, settings

    def process(self, source: SourceFile):
        count("files_probed")
        try:
            record = probe_file(source, self.max_pixels, self.max_record_bytes,
                                settings=self.settings)
        except ConversionError as exc:
            status = reasons.SKIPPED if exc.skipped else reasons.FAILED
            outcome = Outcome(source.uri, status, "probe", exc.reason, str(exc))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # never let one file take the run down (Rust panics included)
            outcome = Outcome(source.uri, reasons.FAILED, "probe", reasons.UNEXPECTED,
                              f"{type(exc).__name__}: {exc}")
        else:
            yield from expand_frames(record, self.settings)
            return
        _count_outcome(outcome)
        yield TaggedOutput(OUTCOMES, outcome)


# ---------------------------------------------------------------- plan


class SplitTotalsFn(beam.CombineFn):
    """(planned bytes) -> (total bytes, records, largest record) per split."""

    def create_accumulator(self):
        return 0, 0, 0

    def add_input(self, acc, planned_bytes):
        return acc[0] + planned_bytes, acc[1] + 1, max(acc[2], planned_bytes)

    def merge_accumulators(self, accs):
        accs = list(accs)
        return (sum(a[0] for a in accs), sum(a[1] for a in accs), max(a[2] for a in accs))

    def extract_output(self, acc):
        return acc


def _bucket_key(record: ProbedRecord, layouts: Mapping, seed: int):
    return (record.split, bucket_of(record, layouts[record.split].num_buckets, seed)), record


def _shards_of_bucket(keyed, starts: Mapping, layouts: Mapping, seed: int):
    (split, bucket), records = keyed
    for index, record in assign_shards(records, starts[(split, bucket)], layouts[split], seed):
        yield (split, index), record


def _to_plan(keyed, layouts: Mapping, seed: int) -> ShardPlan:
    (split, index), records = keyed
    ordered = tuple(sorted(records, key=lambda r: sort_key(r, seed)))
    return ShardPlan(split=split, index=index, num_shards=layouts[split].num_shards, records=ordered)


class PlanShards(beam.PTransform):
    """ProbedRecord -> (ShardPlan, (split, SplitLayout)), from header metadata only.

    See transforms.shard_plan for why this keeps shards within bounds without
    any step holding a whole split.
    """

    def __init__(self, bounds: ShardBounds, seed: int = 0, min_shards: int = 1):
        super().__init__()
        self.bounds, self.seed, self.min_shards = bounds, seed, min_shards

    def expand(self, records):
        bounds, seed, min_shards = self.bounds, self.seed, self.min_shards
        layouts = (records
                   | "KeyPlannedBytesBySplit" >> beam.Map(lambda r: (r.split, r.planned_bytes))
                   | "SumSplitBytes" >> beam.CombinePerKey(SplitTotalsFn())
                   # (split, (bytes, records, largest record))
                   | "ChooseShardCounts" >> beam.MapTuple(
                       lambda split, t: (split, layout(t[0], t[1], t[2], bounds, min_shards))))
                   # (split, SplitLayout)
        layouts_by_split = AsDict(layouts)
        bucketed = (records
                    | "AssignHashBucket" >> beam.Map(_bucket_key, layouts_by_split, seed))
                    # ((split, bucket), ProbedRecord)
        starts = (bucketed
                  | "BucketPlannedBytes" >> beam.MapTuple(lambda key, r: (key, r.planned_bytes))
                  | "SumBucketBytes" >> beam.CombinePerKey(sum)
                  | "CollectBucketSizes" >> beam.combiners.ToList()
                  | "PrefixSumBuckets" >> beam.Map(bucket_starts))
                  # {(split, bucket): start offset}
        plans = (bucketed
                 | "GroupHashBuckets" >> beam.GroupByKey()
                 # ((split, bucket), [ProbedRecord]): smaller than a shard
                 | "AssignShards" >> beam.FlatMap(_shards_of_bucket, AsSingleton(starts),
                                                  layouts_by_split, seed)
                 # ((split, shard index), ProbedRecord)
                 | "GroupShards" >> beam.GroupByKey()
                 | "OrderShardRecords" >> beam.Map(_to_plan, layouts_by_split, seed))
                 # ShardPlan
        return plans, layouts


# ---------------------------------------------------------------- duplicates


def _sop_key(record: ProbedRecord) -> str:
    if record.kind != "dicom" or not record.ids or not record.ids.sop_uid:
        return ""
    return f"{record.ids.sop_uid}#{record.frame}"


def _keep_first_sop(keyed):
    _, records = keyed
    ordered = sorted(records, key=lambda r: r.source.uri)
    yield ordered[0]
    for dup in ordered[1:]:
        if dup.counts_sources:
            outcome = Outcome(dup.source.uri, reasons.SKIPPED, "probe", reasons.DUPLICATE,
                              f"same SOPInstanceUID as {ordered[0].source.uri}, which is kept")
            _count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)


class DropDuplicateInstances(beam.PTransform):
    """Two files with one SOPInstanceUID: the first by sorted uri is kept."""

    def expand(self, records):
        plain, dicom = records | "HasSopUid" >> beam.Partition(lambda r, _: 1 if _sop_key(r) else 0, 2)
        kept = (dicom
                | "KeyBySopUid" >> beam.Map(lambda r: (_sop_key(r), r))
                | "GroupBySopUid" >> beam.GroupByKey()
                # (raw SOP Instance UID#frame, [ProbedRecord]): almost always one
                | "KeepFirstByUri" >> beam.FlatMap(_keep_first_sop).with_outputs(OUTCOMES, main="kept"))
        return (plain, kept.kept) | "AllInstances" >> beam.Flatten(), kept[OUTCOMES]


# ---------------------------------------------------------------- series


def _series_key(record: ProbedRecord):
    return record.ids.series_uid if record.kind == "dicom" and record.ids and record.frame is None else ""


def _volume_of_series(keyed, salt: str):
    series_uid, slices = keyed
    slices = list(slices)
    try:
        yield series_lib.build_volume_record(series_uid, slices, salt)
    except ConversionError as exc:
        for member in sorted(s.source.uri for s in slices):
            outcome = Outcome(member, reasons.FAILED, "group", exc.reason,
                              f"series of {len(slices)} slices: {exc}")
            _count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)


class GroupSeries(beam.PTransform):
    """--unit series: slice records -> one volume record per SeriesInstanceUID (metadata only)."""

    def __init__(self, salt: str):
        super().__init__()
        self.salt = salt

    def expand(self, records):
        files, slices = records | "HasSeries" >> beam.Partition(
            lambda r, _: 1 if _series_key(r) else 0, 2)
        volumes = (slices
                   | "KeyBySeries" >> beam.Map(lambda r: (_series_key(r), r))
                   | "GroupSeries" >> beam.GroupByKey()
                   # (raw series UID, [ProbedRecord]): one series' slice list
                   | "OrderSlices" >> beam.FlatMap(_volume_of_series, self.salt).with_outputs(
                       OUTCOMES, main="volumes"))
        merged = (files, volumes.volumes) | "FilesAndVolumes" >> beam.Flatten()
        return merged, volumes[OUTCOMES]


# ---------------------------------------------------------------- labels


def _join_key(record: ProbedRecord, label_key: str) -> str:
    if label_key == "path":
        return record.source.rel_path
    ids = record.ids
    if ids is None:
        return ""
    return {"sop_instance_uid": ids.sop_uid, "series_instance_uid": ids.series_uid,
            "study_instance_uid": ids.study_uid, "patient_id": ids.patient_id}[label_key]


def _read_label_rows(uri: str, settings: ConversionSettings):
    import io
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(uri) as raw:
        lines = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        for item in labels_lib.parse_label_csv(lines, uri, settings.label_key, settings.label_column,
                                               settings.split_column):
            if isinstance(item, Outcome):
                _count_outcome(item)
                yield TaggedOutput(OUTCOMES, item)
            else:
                yield item


class LabelSpaceFn(beam.CombineFn):
    """Label values -> LabelSpace (kind and sorted class names)."""

    def __init__(self, multi: bool):
        super().__init__()
        self.multi = multi

    def create_accumulator(self):
        return labels_lib.LabelSpaceAccumulator(self.multi)

    def add_input(self, acc, value):
        return acc.add(value)

    def merge_accumulators(self, accs):
        accs = list(accs)
        first = accs[0]
        for other in accs[1:]:
            first.merge(other)
        return first

    def extract_output(self, acc):
        return acc.result()


def _emit(result):
    """A labelled record on the main output, or a counted Outcome on ``outcomes``."""
    if isinstance(result, Outcome):
        _count_outcome(result)
        yield TaggedOutput(OUTCOMES, result)
    else:
        yield result


def _missing(record: ProbedRecord, settings: ConversionSettings, space, why: str):
    if settings.missing_label == "unlabeled":
        return dataclasses.replace(record, label=space.unlabeled())
    status = reasons.SKIPPED if settings.missing_label == "skip" else reasons.FAILED
    return Outcome(record.source.uri, status, "labels", reasons.MISSING_LABEL, why)


def _labelled(record: ProbedRecord, raw: str, split: Optional[str], space, settings):
    try:
        label = space.encode(raw)
    except (ValueError, IndexError) as exc:
        return Outcome(record.source.uri, reasons.FAILED, "labels", reasons.INVALID_LABEL,
                       f"label {raw!r} is not a valid {space.kind} label: {exc}")
    if settings.split_column:
        if not split:
            return Outcome(record.source.uri, reasons.FAILED, "labels", reasons.INVALID_LABEL,
                           f"empty {settings.split_column} for this record")
        return dataclasses.replace(record, label=label, split=split)
    return dataclasses.replace(record, label=label)


def _join_labels(keyed, space, settings: ConversionSettings):
    key, grouped = keyed
    rows = sorted(grouped["rows"], key=lambda r: r.line)
    records = list(grouped["records"])
    if rows and records:
        for extra in rows[1:]:
            outcome = Outcome(f"{settings.labels_csv}:{extra.line}", reasons.FAILED, "labels",
                              reasons.MALFORMED_LABEL_ROW,
                              f"line {extra.line}: key already labelled at line {rows[0].line}")
            _count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)
    for record in records:
        if not key:
            result = _missing(record, settings, space, f"record has no {settings.label_key}")
        elif not rows or not rows[0].value:
            result = _missing(record, settings, space,
                              f"no label for {settings.label_key} in {settings.labels_csv}")
        else:
            result = _labelled(record, rows[0].value, rows[0].split, space, settings)
        yield from _emit(result)


def _dir_labelled(record: ProbedRecord, space, settings: ConversionSettings):
    name = labels_lib.dir_label(record.source.rel_path)
    result = (_labelled(record, name, None, space, settings) if name
              else _missing(record, settings, space, "file is not inside a class folder"))
    yield from _emit(result)


class AttachLabels(beam.PTransform):
    """ProbedRecord -> labelled ProbedRecord; an Outcome per record without a usable label.

    The CSV join is a CoGroupByKey on raw identifiers (metadata only).
    Returns (records, outcomes, label space singleton).
    """

    def __init__(self, settings: ConversionSettings):
        super().__init__()
        self.settings = settings

    def expand(self, records):
        settings = self.settings
        if settings.labels_from_dirs:
            space = (records
                     | "FolderNames" >> beam.Map(lambda r: labels_lib.dir_label(r.source.rel_path))
                     | "DecideLabelKind" >> beam.CombineGlobally(LabelSpaceFn(settings.multi_label)))
            out = (records | "LabelFromFolder" >> beam.FlatMap(
                _dir_labelled, AsSingleton(space), settings).with_outputs(OUTCOMES, main="records"))
            return out.records, out[OUTCOMES], space
        rows = (records.pipeline
                | "ListLabelFiles" >> beam.Create([settings.labels_csv])
                | "ReadLabelRows" >> beam.FlatMap(_read_label_rows, settings).with_outputs(
                    OUTCOMES, main="rows"))
        # rows: LabelRow (raw key, raw value, split, line); outcomes: malformed lines
        space = (rows.rows
                 | "LabelValues" >> beam.Map(lambda r: r.value)
                 | "DecideLabelKind" >> beam.CombineGlobally(LabelSpaceFn(settings.multi_label)))
        joined = ({"records": records | "KeyByLabelKey" >> beam.Map(
                       lambda r: (_join_key(r, settings.label_key), r)),
                   "rows": rows.rows | "KeyRowsByKey" >> beam.Map(lambda r: (r.key, r))}
                  | "JoinLabels" >> beam.CoGroupByKey()
                  # (raw key, {"records": [ProbedRecord], "rows": [LabelRow]})
                  | "EncodeLabels" >> beam.FlatMap(_join_labels, AsSingleton(space), settings)
                  .with_outputs(OUTCOMES, main="records"))
        outcomes = ((rows[OUTCOMES], joined[OUTCOMES]) | "LabelOutcomes" >> beam.Flatten())
        return joined.records, outcomes, space


# ---------------------------------------------------------------- splits


def _group_key(record: ProbedRecord, settings: ConversionSettings) -> str:
    return splits_lib.group_key(settings.split_by_for(record.kind), record.ids, record.record_id)


def _with_split(record: ProbedRecord, settings: ConversionSettings) -> ProbedRecord:
    split = splits_lib.assign_split(_group_key(record, settings), settings.splits)
    return dataclasses.replace(record, split=split)


def _splits_of_group(groups):
    return len(set(groups))


class CountGroups(beam.PTransform):
    """ProbedRecord -> ({split: distinct groups}, groups found in more than one split)."""

    def __init__(self, settings: ConversionSettings):
        super().__init__()
        self.settings = settings

    def expand(self, records):
        settings = self.settings
        pairs = (records
                 | "SplitAndGroup" >> beam.Map(lambda r: (r.split, _group_key(r, settings)))
                 | "DistinctSplitGroups" >> beam.Distinct())
        # (split, group key): raw identifiers, counted, never written
        per_split = pairs | "CountGroupsPerSplit" >> beam.combiners.Count.PerKey()
        leaking = (pairs
                   | "GroupFirst" >> beam.KvSwap()
                   | "SplitsPerGroup" >> beam.CombinePerKey(_splits_of_group)
                   | "GroupsInSeveralSplits" >> beam.Filter(lambda kv: kv[1] > 1)
                   | "CountLeakingGroups" >> beam.combiners.Count.Globally())
        return per_split, leaking


# ---------------------------------------------------------------- progress

PROGRESS_DIR = ".progress"   # removed when a run commits; see pipeline.progress
PLAN_NAME = "plan.json"
DONE_SUFFIX = ".done"


def _write_progress(output_dir: str, name: str, content: dict) -> None:
    """Best effort: progress files are for watching a run, never a reason to fail it."""
    try:
        path = FileSystems.join(output_dir, PROGRESS_DIR, name)
        with FileSystems.create(path, mime_type="application/json") as handle:
            handle.write(json.dumps(content, sort_keys=True).encode("utf-8"))
    except Exception as exc:  # noqa: BLE001
        logging.getLogger(__name__).warning("progress file %s not written: %s", name, exc)


def _record_plan(_, layouts: Mapping, output_dir: str) -> str:
    """{output}/.progress/plan.json: planned records, bytes and shards per split."""
    _write_progress(output_dir, PLAN_NAME, {"splits": {
        split: {"records": lay.num_records, "bytes": lay.total_bytes, "shards": lay.num_shards}
        for split, lay in sorted(layouts.items())}})
    return PLAN_NAME


# ---------------------------------------------------------------- write


class WriteShardFn(beam.DoFn):
    """ShardPlan -> ShardResult, plus an Outcome per record that did not convert."""

    def __init__(self, output_dir: str, compression: str = "none",
                 settings: DecodeSettings = DecodeSettings(), records_files: bool = False,
                 tag: str = ""):
        super().__init__()
        self.output_dir, self.compression, self.settings = output_dir, compression, settings
        self.records_files = records_files   # --incremental: <shard>.records.json beside each shard
        self.tag = tag                       # --incremental: "v0002" in the new shards' names

    def process(self, plan: ShardPlan, plan_recorded: Optional[str] = None):
        # plan_recorded: a side input that only orders this step after _record_plan
        if self.tag:
            plan = dataclasses.replace(plan, tag=self.tag)
        written: list = []
        result, outcomes = write_shard(plan, self.output_dir, self.compression,
                                       settings=self.settings, on_written=written.append)
        if self.records_files:
            versions.write_records_file(self.output_dir, result,
                                        [versions.record_fingerprint(r) for r in written])
        _write_progress(self.output_dir, result.file + DONE_SUFFIX, {
            "split": result.split, "records": result.num_records, "bytes": result.num_bytes,
            "planned_records": len(plan.records), "planned_bytes": result.planned_bytes})
        count("records_written", result.num_records)
        count("bytes_written", result.num_bytes)
        count("shards_written")
        yield result
        for outcome in outcomes:
            _count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)


# ---------------------------------------------------------------- commit


def _commit(_, results: list, outcomes: list, matched: int, space, group_counts: dict,
            leaking: int, layouts: dict, settings: ConversionSettings, options: dict,
            version: str, base: Optional[versions.BaseVersion] = None) -> str:
    if base is not None:   # a version never lists a shard that holds nothing
        results = [r for r in results if r.num_records > 0]
    has_dicom = any("dicom" in r.kinds for r in results)
    extra = {
        "labels": _labels_entry(space, settings),
        "groups": {"split_by": settings.split_by or "patient for DICOM, record otherwise",
                   "num_groups": dict(sorted(group_counts.items())),
                   "groups_in_several_splits": leaking},
        "min_shards": {split: {"requested": lay.min_shards_requested,
                               "honoured": lay.min_shards_honoured}
                       for split, lay in sorted(layouts.items())},
    }
    if base is not None:
        reused = [r for r in results if r.file.startswith(versions.PARENT)]
        extra["incremental"] = {"base_version": base.name or None, "rebuild_reason": base.rebuild_reason,
                                "reused_shards": len(reused), "written_shards": len(results) - len(reused),
                                "reused_records": sum(r.num_records for r in reused)}
    features = dicom_header.metadata_feature_names(settings.decode.keep_tags) if has_dicom else {}
    if settings.decode.keep_source_path:
        features["source_path"] = {"dtype": "bytes", "shape": [], "description": "--keep_source_path"}
    manifest = manifest_lib.build_manifest(results, outcomes, matched, options, version, features,
                                           extra=extra)
    failed = sum(manifest["counts"]["failed"].values())
    too_many = failed > settings.max_failure_ratio * max(matched, 1) or (
        settings.max_failures is not None and failed > settings.max_failures)
    if too_many:
        return manifest_lib.refuse_commit(settings.output_dir, manifest, outcomes, (
            f"{failed} of {matched} inputs failed ({100.0 * failed / max(matched, 1):.1f}%), more than "
            f"--max_failure_ratio {settings.max_failure_ratio:g}"
            + (f" / --max_failures {settings.max_failures}" if settings.max_failures is not None else "")))
    return manifest_lib.commit(settings.output_dir, manifest, outcomes)


def _labels_entry(space, settings: ConversionSettings) -> dict:
    if space is None:
        return {"source": None, "kind": "none", "class_names": [],
                "feature": {"dtype": "int64", "shape": [], "description": "-1: unlabeled"}}
    return {"source": "folders" if settings.labels_from_dirs else settings.labels_csv,
            "key": None if settings.labels_from_dirs else settings.label_key,
            "column": None if settings.labels_from_dirs else settings.label_column,
            "kind": space.kind, "class_names": list(space.class_names),
            "missing_label": settings.missing_label, "feature": space.feature()}


class ConvertArchive(beam.PTransform):
    """The whole job: match -> probe -> labels -> splits -> plan -> reshuffle -> write -> commit."""

    def __init__(self, settings: ConversionSettings, options: dict, version: str,
                 base: Optional[versions.BaseVersion] = None, version_name: str = ""):
        super().__init__()
        self.settings, self.options, self.version = settings, options, version
        self.base = base   # --incremental: the version to build on (no shards for the first)
        self.version_tag = f"v{version_name}" if version_name else ""

    def expand(self, pbegin):
        settings = self.settings
        sources, broken = pbegin | "MatchInputs" >> MatchSources(list(settings.patterns))
        # SourceFile; Outcome per broken link
        probed = (sources
                  | "ProbeHeaders" >> beam.ParDo(ProbeFn(settings.max_pixels,
                                                         settings.bounds.max_bytes, settings.decode))
                  .with_outputs(OUTCOMES, main="records"))
        # records: ProbedRecord; outcomes: Outcome
        records = probed.records
        outcome_parts = [broken, probed[OUTCOMES]]
        if settings.duplicates == "skip":
            records, duplicates = records | "DropDuplicates" >> DropDuplicateInstances()
            outcome_parts.append(duplicates)
        if settings.unit == "series":
            records, series_outcomes = records | "BuildVolumes" >> GroupSeries(settings.decode.id_salt)
            outcome_parts.append(series_outcomes)
        space = None
        if settings.labels_csv or settings.labels_from_dirs:
            records, label_outcomes, space = records | "AttachLabels" >> AttachLabels(settings)
            outcome_parts.append(label_outcomes)
        if not settings.split_column:
            records = records | "AssignSplits" >> beam.Map(_with_split, settings)
        # ProbedRecord with label and split
        group_counts, leaking = records | "CountGroups" >> CountGroups(settings)
        to_write = records
        if self.base is not None:
            to_write, reused = records | "ReuseShards" >> ReuseShards(self.base, settings.bounds)
            # to_write: ProbedRecord not held by a reused shard; reused: ShardResult
        plans, layouts = to_write | "PlanShards" >> PlanShards(settings.bounds, settings.seed,
                                                               settings.min_shards)
        plan_recorded = (pbegin
                         | "ProgressOnce" >> beam.Create([None])
                         | "RecordPlanForProgress" >> beam.Map(_record_plan, AsDict(layouts),
                                                               settings.output_dir))
                         # "plan.json", written under {output}/.progress/
        written = (plans
                   | "DistributeShards" >> beam.Reshuffle()
                   | "WriteShards" >> beam.ParDo(WriteShardFn(settings.output_dir,
                                                              settings.compression, settings.decode,
                                                              records_files=self.base is not None,
                                                              tag=self.version_tag),
                                                 AsSingleton(plan_recorded))
                   .with_outputs(OUTCOMES, main="shards"))
        # shards: ShardResult; outcomes: Outcome
        shards = written.shards
        if self.base is not None:
            shards = (written.shards, reused) | "WrittenAndReused" >> beam.Flatten()
        outcome_parts.append(written[OUTCOMES])
        outcomes = tuple(outcome_parts) | "CollectOutcomes" >> beam.Flatten()
        matched = ((sources | "CountFiles" >> beam.combiners.Count.Globally(),
                    broken | "CountBrokenLinks" >> beam.combiners.Count.Globally())
                   | "FilesAndLinks" >> beam.Flatten()
                   | "CountMatched" >> beam.CombineGlobally(sum))
        space_side = (AsSingleton(space) if space is not None
                      else AsSingleton(pbegin | "NoLabels" >> beam.Create([None])))
        return (pbegin
                | "CommitOnce" >> beam.Create([None])
                | "CommitDataset" >> beam.Map(
                    _commit, AsList(shards), AsList(outcomes), AsSingleton(matched),
                    space_side, AsDict(group_counts), AsSingleton(leaking), AsDict(layouts),
                    settings, self.options, self.version, self.base))
                # path of dataset.json
