"""BuildVolumes (--unit series): slice records -> one volume record per SeriesInstanceUID."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.pvalue import TaggedOutput

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.counters import OUTCOMES, count_outcome
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.values import ProbedRecord
from dcm2tfrecord.transforms.series import volumes
from dcm2tfrecord.transforms.settings import DecodeSettings, with_salt


def series_key(record: ProbedRecord) -> str:
    """The raw SeriesInstanceUID a whole-file DICOM record stacks under ("" for the others)."""
    return record.ids.series_uid if record.kind == "dicom" and record.ids and record.frame is None else ""


class VolumeOfSeriesFn(beam.DoFn):
    """(series UID, slice records) -> one volume record, or a failed Outcome per slice."""

    def __init__(self, settings: DecodeSettings):
        super().__init__()
        self.settings = settings       # for the salt of the volume's record id

    def setup(self):
        self.settings = with_salt(self.settings)

    def process(self, keyed):
        series_uid, slices = keyed
        slices = list(slices)
        try:
            yield from volumes.volume_records(series_uid, slices, self.settings.id_salt,
                                              self.settings.series_gaps, self.settings.series_4d)
        except ConversionError as exc:
            for member in sorted(s.source.uri for s in slices):
                outcome = Outcome(member, reasons.FAILED, "group", exc.reason,
                                  f"series of {len(slices)} slices: {exc}")
                count_outcome(outcome)
                yield TaggedOutput(OUTCOMES, outcome)


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
