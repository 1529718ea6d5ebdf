"""ProbeHeaders (a SourceFile -> a planned record), DropDuplicates (one record per SOP instance),
PlanSpacing, and the dataset fingerprint of --intensity ct (DrawFingerprint, PoolFingerprint)."""
from __future__ import annotations

from typing import Optional

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.counters import OUTCOMES, count, count_outcome
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.images import fingerprint, spacing
from dcm2tfrecord.transforms.records.build import fingerprint_sample
from dcm2tfrecord.transforms.records.probe import expand_frames, plan_spacing, probe_file, voxel_sample
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.record_model import ProbedRecord, SourceFile, from_bytes, to_bytes
from dcm2tfrecord.transforms.settings import DEFAULT_MAX_PIXELS, DecodeSettings
from dcm2tfrecord.transforms.sources.steps import ReadsSourcesFn


class ProbeHeadersFn(ReadsSourcesFn):
    """SourceFile -> ProbedRecord (one per frame with --frames split), or an Outcome."""

    def __init__(self, max_pixels: int = DEFAULT_MAX_PIXELS, max_record_bytes: Optional[int] = None,
                 settings: DecodeSettings = DecodeSettings(), storage_retry_s: float = 0.0,
                 run: str = ""):
        super().__init__(settings, storage_retry_s, run)
        self.max_pixels, self.max_record_bytes = max_pixels, max_record_bytes

    def process(self, source: SourceFile):
        count("files_probed")
        self.breaker.check()        # storage stopped answering this process: fail fast
        try:
            record = probe_file(source, self.max_pixels, self.max_record_bytes,
                                settings=self.settings)
        except ConversionError as exc:
            self.breaker.note(exc.outage, source.uri, str(exc))
            status = reasons.SKIPPED if exc.skipped else reasons.FAILED
            outcome = Outcome(source.uri, status, "probe", exc.reason, str(exc))
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # never let one file take the run down (Rust panics included)
            outcome = Outcome(source.uri, reasons.FAILED, "probe", reasons.UNEXPECTED,
                              f"{type(exc).__name__}: {exc}")
        else:
            self.breaker.note(False, source.uri, "")
            yield from expand_frames(record, self.settings)
            return
        count_outcome(outcome)
        yield TaggedOutput(OUTCOMES, outcome)


def sop_key(record: ProbedRecord) -> str:
    """What makes two files the same instance: the SOP Instance UID ("" if none).

    Not the frame: with --frames split a file's frames share its key, so the
    frames of a duplicate file (rtdose.dcm, and rtdose_1frame.dcm holding the
    same instance) go with it.
    """
    if record.kind != RecordKind.DICOM or not record.ids or not record.ids.sop_uid:
        return ""
    return record.ids.sop_uid


def instance_key(record: ProbedRecord) -> bytes:
    """The key DropDuplicates groups by: the SOP Instance UID, or for a record without one
    its file's uri behind a NUL (which no UID holds), so that such a file only ever meets
    its own frames and is kept. As bytes, the text's UTF-8 with a name's undecodable bytes
    given back as they were (surrogateescape): a str key would go through Beam's UTF-8
    coder, which refuses such a name."""
    return (sop_key(record) or "\0" + record.source.uri).encode("utf-8", "surrogateescape")


def keep_first_instance(records) -> tuple[list[ProbedRecord], list[Outcome]]:
    """Records sharing a SOP Instance UID: those of the first file by uri are kept (all its
    frames), every other file is skipped as a duplicate, once."""
    records = list(records)
    first = min(r.source.uri for r in records)
    kept = [r for r in records if r.source.uri == first]
    skipped = sorted({r.source.uri for r in records} - {first})
    return kept, [Outcome(uri, reasons.SKIPPED, "probe", reasons.DUPLICATE,
                          f"same SOPInstanceUID as {first}, which is kept") for uri in skipped]


def _keyed_by_instance(record: ProbedRecord) -> tuple[bytes, bytes]:
    return instance_key(record), to_bytes(record)


def _keep_first_sop(keyed):
    encoded = list(keyed[1])
    if len(encoded) == 1:          # one file's one record: nothing to compare (almost always)
        yield from_bytes(encoded[0])
        return
    kept, skipped = keep_first_instance(from_bytes(data) for data in encoded)
    yield from kept
    for outcome in skipped:
        count_outcome(outcome)
        yield TaggedOutput(OUTCOMES, outcome)


class Duplicates(StrEnum):
    """``--duplicates``: files sharing a SOPInstanceUID, the first by sorted uri kept
    (:class:`DropDuplicates`), or all converted."""
    SKIP = "skip"
    KEEP = "keep"


class DropDuplicates(beam.PTransform):
    """Two files with one SOPInstanceUID: the first by sorted uri is kept.

    Every record takes the one GroupByKey (one without a UID keyed by its own file): a
    Partition of records without a UID around it and a Flatten after would put every
    record through one more encoding, the Flatten's, on the local runner. On Dataflow,
    where a Flatten is free, that makes records without a UID (images) cross this
    shuffle too (docs/BENCHMARKS.md §8.3).
    """

    def expand(self, records):
        kept = (records
                | "KeyBySopUid" >> beam.Map(_keyed_by_instance)
                | "GroupBySopUid" >> beam.GroupByKey()
                # (raw SOP Instance UID or NUL + uri, [ProbedRecord as bytes]): one file's
                # (frames), almost always
                | "KeepFirstByUri" >> beam.FlatMap(_keep_first_sop).with_outputs(OUTCOMES, main="kept"))
        return kept.kept, kept[OUTCOMES]


class AutoSpacingFn(beam.CombineFn):
    """--spacing auto: every record's voxel sample (probe.voxel_sample) -> the run's
    spacing.AutoSpacing, nnU-Net v2's rule over the volume records (spacing.auto_spacing), or
    with none the slices' in-plane medians (spacing.auto_spacing_of_slices). The accumulator is
    the list of samples, sorted before the rule: the answer is the same whatever the bundles."""

    def create_accumulator(self):
        return []

    def add_input(self, accumulator, sample):
        accumulator.append(sample)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged: list = []
        for accumulator in accumulators:
            merged.extend(accumulator)
        return merged

    def extract_output(self, accumulator):
        volumes = [(s[1], s[2]) for s in accumulator if s[0] == "volume"]
        if volumes:
            return spacing.auto_spacing(volumes)
        return spacing.auto_spacing_of_slices([s[1] for s in accumulator if s[0] == "slice"])


class ChooseSpacing(beam.PTransform):
    """--spacing auto: records -> one spacing.AutoSpacing (a global combine: the side input that
    PlanSpacingFn and the shard writer both read, and dataset.json records)."""

    def expand(self, records):
        return (records
                | "VoxelSamples" >> beam.FlatMap(lambda r: [s for s in (voxel_sample(r),) if s is not None])
                | "NnunetTargetSpacing" >> beam.CombineGlobally(AutoSpacingFn()))


class PlanSpacingFn(beam.DoFn):
    """--spacing: a record with the shape it will be resampled to (probe.plan_spacing), or, when
    that makes it larger than --max_shard_mb, an Outcome per input it is made of (record_too_large).
    With --spacing auto the target is the side input ``chosen`` (ChooseSpacing)."""

    def __init__(self, settings: DecodeSettings, max_record_bytes: Optional[int] = None):
        super().__init__()
        self.settings, self.max_record_bytes = settings, max_record_bytes

    def process(self, record: ProbedRecord, chosen: Optional[spacing.AutoSpacing] = None):
        settings = spacing.with_target(self.settings, chosen)
        planned = plan_spacing(record, settings)
        if self.max_record_bytes is None or planned.planned_bytes <= self.max_record_bytes:
            yield planned
            return
        auto = " (auto)" if self.settings.spacing == spacing.AUTO else ""
        message = (f"--spacing {','.join(f'{v:g}' for v in settings.spacing or ())}{auto}: the record would be "
                   f"{planned.planned_bytes / (1 << 20):.2f} MB {planned.spec.shape} {planned.spec.dtype}, more than "
                   f"--max_shard_mb {self.max_record_bytes / (1 << 20):g}; raise it, or choose a coarser spacing")
        part, index = "frame", record.frame
        if record.frame is None and record.stacks and record.source_frames > 1:
            part, index = "stack", record.stacks[0].index
        for source in record.sources:
            outcome = Outcome(source.uri, reasons.FAILED, "probe", reasons.RECORD_TOO_LARGE, message, frame=index,
                              frames=record.source_frames, part=part)
            count_outcome(outcome)
            yield TaggedOutput(OUTCOMES, outcome)


class DrawFingerprintFn(ReadsSourcesFn):
    """--intensity ct: a training record -> its draw for the dataset fingerprint
    (transforms.records.build.fingerprint_sample), as ``{channels: pool}``. A record that does
    not decode draws nothing: the shard writer names it when it fails there too."""

    def process(self, record: ProbedRecord):
        self.breaker.check()        # storage stopped answering this process: fail fast
        try:
            pool = fingerprint_sample(record, settings=self.settings)
        except ConversionError as exc:
            self.breaker.note(exc.outage, record.source.uri, str(exc))
            return
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception:    # noqa: BLE001 - the writer decodes it again and names what failed
            return
        count("fingerprint_records")
        yield {len(pool): pool}


class PoolFingerprint(beam.CombineFn):
    """The draws of every training record -> dataset.json's ``fingerprint`` (None without any
    foreground): merged by a sort and a cut, so no runner's bundling or order changes it
    (transforms.images.fingerprint)."""

    def create_accumulator(self):
        return []       # draws ({channels: pool}), cut to one when they hold twice the pool's bound

    def add_input(self, accumulator, pool):
        accumulator.append(pool)
        held = sum(part[0][1].size for draw in accumulator for part in draw.values() if part)
        return [fingerprint.merge_by_channels(accumulator)] if held > 2 * fingerprint.MAX_SAMPLES else accumulator

    def merge_accumulators(self, accumulators):
        return [fingerprint.merge_by_channels([draw for accumulator in accumulators for draw in accumulator])]

    def extract_output(self, accumulator):
        return fingerprint.dataset_statistics(fingerprint.merge_by_channels(accumulator))
