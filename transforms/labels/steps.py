"""AttachLabels: records joined to the labels CSV (or their folder names) -> labelled records."""
from __future__ import annotations

import io

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsSingleton

from transforms.counters import OUTCOMES, emit
from transforms.labels import join
from transforms.labels import table as labels_lib
from transforms.settings import ConversionSettings
from transforms.sources.match import uri_key


def _read_label_rows(uri: str, settings: ConversionSettings):
    with FileSystems.open(uri) as raw:
        lines = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        for item in labels_lib.parse_label_csv(lines, uri, settings.label_key, settings.label_column,
                                               settings.split_column):
            yield from emit(item)


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


def _first_row_of_key(keyed, settings: ConversionSettings):
    first, rejected = labels_lib.first_row(keyed[1], settings.labels_csv)
    yield keyed[0], first
    for outcome in rejected:
        yield from emit(outcome)


def _join_labels(keyed, space, settings: ConversionSettings):
    key, grouped = keyed
    key = key.decode("utf-8", "surrogateescape")
    for result in join.join_rows(key, grouped["rows"], grouped["records"], space, settings):
        yield from emit(result)


def _dir_labelled(record, space, settings: ConversionSettings):
    yield from emit(join.label_from_folder(record, space, settings))


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
        unique = (rows.rows
                  | "KeyRowsByKey" >> beam.Map(lambda r: (uri_key(r.key), r))
                  | "GroupRowsByKey" >> beam.GroupByKey()
                  # (raw key, [LabelRow]): almost always one
                  | "FirstRowPerKey" >> beam.FlatMap(_first_row_of_key, settings).with_outputs(
                      OUTCOMES, main="rows"))
        # rows: (raw key, the LabelRow that labels it); outcomes: later lines of a key
        space = (unique.rows
                 | "LabelValues" >> beam.Map(lambda kv: kv[1].value)
                 | "DecideLabelKind" >> beam.CombineGlobally(LabelSpaceFn(settings.multi_label)))
        joined = ({"records": records | "KeyByLabelKey" >> beam.Map(
                       lambda r: (uri_key(join.join_key(r, settings.label_key)), r)),
                   "rows": unique.rows}
                  | "JoinLabels" >> beam.CoGroupByKey()
                  # (raw key, {"records": [ProbedRecord], "rows": [LabelRow]})
                  | "EncodeLabels" >> beam.FlatMap(_join_labels, AsSingleton(space), settings)
                  .with_outputs(OUTCOMES, main="records"))
        outcomes = ((rows[OUTCOMES], unique[OUTCOMES], joined[OUTCOMES])
                    | "LabelOutcomes" >> beam.Flatten())
        return joined.records, outcomes, space
