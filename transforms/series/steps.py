"""BuildVolumes (--unit series): slice records -> one volume record per SeriesInstanceUID."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.counters import OUTCOMES, count_outcome, emit
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.record_model import ProbedRecord, replaced
from dcm2tfrecord.transforms.masks import annotation
from dcm2tfrecord.transforms.masks import slices as mask_slices
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.masks.slice_steps import read_header
from dcm2tfrecord.transforms.series import volumes
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.settings import DecodeSettings, with_salt


def series_key(record: ProbedRecord) -> str:
    """The raw SeriesInstanceUID a whole-file DICOM record stacks under, or the one an annotation
    references (--class_map) ("" for the others)."""
    if record.kind == annotation.ANNOTATION and record.ids:
        return record.ids.series_uid
    return record.ids.series_uid if record.kind == RecordKind.DICOM and record.ids and record.frame is None else ""


class VolumeOfSeriesFn(beam.DoFn):
    """(series UID, slice records) -> one volume record, or a failed Outcome per slice."""

    def __init__(self, settings: DecodeSettings):
        super().__init__()
        self.settings = settings       # for the salt of the volume's record id

    def setup(self):
        install_beam_storage()      # the salt file: Beam's FileSystems
        self.settings = with_salt(self.settings)

    def process(self, keyed):
        series_uid, slices = keyed
        slices = list(slices)
        notes = [s for s in slices if s.kind == annotation.ANNOTATION]
        slices = [s for s in slices if s.kind != annotation.ANNOTATION]
        if not slices:          # annotations of a series not among the inputs
            yield from emit(tuple(mask_slices.without_image(notes)))
            return
        try:
            built = volumes.volume_records(series_uid, slices, self.settings.id_salt,
                                           self.settings.series_gaps, self.settings.series_4d)
        except ConversionError as exc:
            for member in sorted(s.source.uri for s in slices + notes):
                yield self._outcome(member, reasons.FAILED, exc.reason, f"series of {len(slices)} slices: {exc}")
            return
        masks = self.settings.masks
        if masks is None:
            yield from built
            return
        missing = [] if notes else mask_slices.missing([s.source.uri for s in slices],
                                                       f"series of {len(slices)} slices", masks.missing)
        if missing:
            yield from emit(tuple(missing))
            return
        if len(built) > 1:      # runs, volumes or stacks: each given the annotations' part on it
            for result in mask_slices.divide(built, slices, notes, read_header, masks):
                yield from emit(result)
            return
        yield from masked_records(built, notes, masks)

    @staticmethod
    def _outcome(uri: str, status: str, reason: str, message: str):
        outcome = Outcome(uri, status, "group", reason, message)
        count_outcome(outcome)
        return TaggedOutput(OUTCOMES, outcome)


def masked_records(built, notes, masks: MaskSettings):
    """Volume records with their annotations and their mask's planned bytes (--class_map)."""
    pairs = tuple(sorted(((n.source, n.annotation) for n in notes), key=lambda p: p[0].uri))
    for record in built:
        yield replaced(record, annotations=pairs, mask_bytes=annotation.planned_mask_bytes(record.spec, masks))


class BuildVolumes(beam.PTransform):
    """--unit series: slice records -> one volume record per SeriesInstanceUID (metadata only)."""

    def __init__(self, settings: DecodeSettings):
        super().__init__()
        self.settings = settings

    def expand(self, records):
        files, slices = records | "HasSeries" >> beam.Partition(
            lambda r, _: 1 if series_key(r) else 0, 2)  # type: ignore[arg-type]  # Beam: WithTypeHints, or a callable
        built = (slices
                 | "KeyBySeries" >> beam.Map(lambda r: (series_key(r), r))
                 | "GroupBySeries" >> beam.GroupByKey()
                 # (raw series UID, [ProbedRecord]): one series' slice list
                 | "OrderSlices" >> beam.ParDo(VolumeOfSeriesFn(self.settings)).with_outputs(
                     OUTCOMES, main="volumes"))
        merged = (files, built.volumes) | "FilesAndVolumes" >> beam.Flatten()
        return merged, built[OUTCOMES]
