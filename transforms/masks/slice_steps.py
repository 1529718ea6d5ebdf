"""The Beam shells of the mask joins: AttachSliceMasks (--unit file) and SettleUnmasked (--missing_mask).

AttachSliceMasks (--class_map with --unit file): the annotations among the inputs (SEG, RTSTRUCT:
transforms.masks.sources) joined to the records of the series they reference, by key
(transforms.masks.slices)."""
from __future__ import annotations

import apache_beam as beam

from dcm2tfrecord.transforms.counters import OUTCOMES, emit
from dcm2tfrecord.transforms.masks import annotation_cache, slices, sources
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.sources.read import open_source, read_unchanged
from dcm2tfrecord.transforms.sources.steps import ReadsSourcesFn
from dcm2tfrecord.transforms.record_model import ProbedRecord


def read_header(note: ProbedRecord):
    """An annotation's header as the join reads it, as its source says (transforms.masks.sources): a
    SEG's without its pixels; an RTSTRUCT, all header, through the parsed cache the writers of this
    process share (transforms.masks.annotation_cache)."""
    def read():
        return read_unchanged(note.source, open_source)
    return sources.series_source(note.annotation).join_header(
        read, lambda: annotation_cache.CACHE.get(note.source, note.annotation, read))


class SliceMasksFn(ReadsSourcesFn):
    """(series UID, its records and annotations) -> the records with their part of the masks,
    or Outcomes (slices.join)."""

    def process(self, keyed):
        _, records = keyed
        assert self.settings.masks is not None      # AttachSliceMasks runs with --class_map only
        for result in slices.join(list(records), read_header, self.settings.masks):
            yield from emit(result)


class AttachSliceMasks(beam.PTransform):
    """--class_map, --unit file: DICOM records and annotations grouped by series UID (metadata
    only), each record given its part of the series' masks; the others pass by."""

    def __init__(self, settings: DecodeSettings, storage_retry_s: float = 0.0, run: str = ""):
        super().__init__()
        self.settings, self.storage_retry_s, self.run = settings, storage_retry_s, run

    def expand(self, records):
        others, parts = records | "HasSeries" >> beam.Partition(
            lambda r, _: 1 if slices.part_key(r) else 0, 2)  # type: ignore[arg-type]  # Beam: a callable
        joined = (parts
                  | "KeyBySeries" >> beam.Map(lambda r: (slices.part_key(r), r))
                  | "GroupBySeries" >> beam.GroupByKey()
                  # (raw series UID, [ProbedRecord]): one series' records and its annotations
                  | "JoinAnnotations" >> beam.ParDo(SliceMasksFn(self.settings, self.storage_retry_s, self.run))
                  .with_outputs(OUTCOMES, main="records"))
        merged = (others, joined.records) | "OthersAndParts" >> beam.Flatten()
        return merged, joined[OUTCOMES]


class SettleUnmasked(beam.PTransform):
    """--class_map: the records no mask join covered, as --missing_mask says (slices.unmasked)."""

    def __init__(self, masks: MaskSettings):
        super().__init__()
        self.masks = masks

    def expand(self, records):
        settled = records | "Unmasked" >> beam.FlatMap(
            lambda r, masks: (x for result in slices.unmasked(r, masks) for x in emit(result)),
            self.masks).with_outputs(OUTCOMES, main="records")
        return settled.records, settled[OUTCOMES]
