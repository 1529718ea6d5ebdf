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


REPEATED = "repeated"   # rows whose key may occur on several lines: deduplicated by a shuffle


def _parse(uri: str, settings: ConversionSettings):
    raw = FileSystems.open(uri)
    lines = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
    return raw, labels_lib.parse_label_csv(lines, uri, settings.label_key, settings.label_column,
                                           settings.split_column)


def _read_label_rows(uri: str, settings: ConversionSettings):
    """Streams the CSV twice, holding 8 bytes a row in between: the first pass hashes the
    keys, the second sends a row to the deduplicating shuffle only when its key may repeat;
    the rest (almost all) go on as (key, row) without a shuffle."""
    import array
    hashes = array.array("Q")
    raw, items = _parse(uri, settings)
    with raw:
        for item in items:
            if isinstance(item, labels_lib.LabelRow):
                hashes.append(labels_lib.key_hash(uri_key(item.key)))
    repeated = labels_lib.repeated_hashes(hashes)
    del hashes
    raw, items = _parse(uri, settings)
    with raw:
        for item in items:
            if not isinstance(item, labels_lib.LabelRow):
                yield from emit(item)
                continue
            key = uri_key(item.key)
            if labels_lib.key_hash(key) in repeated:
                yield beam.pvalue.TaggedOutput(REPEATED, (key, item))
            else:
                yield key, item


class KeyFilterFn(beam.CombineFn):
    """Record join keys -> KeyFilter (a fixed-size Bloom filter)."""

    def create_accumulator(self):
        return labels_lib.KeyFilter()

    def add_input(self, acc, key):
        return acc.add(key)

    def merge_accumulators(self, accs):
        accs = list(accs)
        for other in accs[1:]:
            accs[0].merge(other)
        return accs[0]

    def extract_output(self, acc):
        return bytes(acc.bits)


def _may_label_a_record(keyed, bits: bytes) -> bool:
    return keyed[0] in labels_lib.KeyFilter(bits)


class LabelSpaceFn(beam.CombineFn):
    """Label values -> LabelSpace (kind and sorted class names)."""

    def __init__(self, multi: bool, extract: bool = True):
        super().__init__()
        self.multi, self.extract = multi, extract

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
        return acc.result() if self.extract else acc


class MergeLabelSpacesFn(LabelSpaceFn):
    """LabelSpaceAccumulators -> LabelSpace."""

    def add_input(self, acc, other):
        return acc.merge(other)


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
        keyed_records = records | "KeyByLabelKey" >> beam.Map(
            lambda r: (uri_key(join.join_key(r, settings.label_key)), r))
        record_keys = (keyed_records
                       | "RecordKeys" >> beam.Keys()
                       | "RecordKeyFilter" >> beam.CombineGlobally(KeyFilterFn()))
        rows = (records.pipeline
                | "ListLabelFiles" >> beam.Create([settings.labels_csv])
                | "ReadLabelRows" >> beam.FlatMap(_read_label_rows, settings).with_outputs(
                    OUTCOMES, REPEATED, main="rows"))
        # rows: (raw key, LabelRow) whose key is on one line only, never shuffled in bulk;
        # repeated: (raw key, LabelRow) whose key may repeat; outcomes: malformed lines
        deduplicated = (rows[REPEATED]
                        | "GroupRowsByKey" >> beam.GroupByKey()
                        # (raw key, [LabelRow]): only keys that may repeat
                        | "FirstRowPerKey" >> beam.FlatMap(_first_row_of_key, settings).with_outputs(
                            OUTCOMES, main="rows"))
        # rows: (raw key, the LabelRow that labels it); outcomes: later lines of a key
        # The bulk rows never cross a stage boundary: the label values are folded into an
        # accumulator where they are read, and the join takes only rows a record may match.
        values = [part
                  | f"LabelValues{name}" >> beam.Map(lambda kv: kv[1].value)
                  | f"FoldLabelValues{name}" >> beam.CombineGlobally(
                      LabelSpaceFn(settings.multi_label, extract=False))
                  for name, part in (("", rows.rows), ("OfRepeatedKeys", deduplicated.rows))]
        space = (tuple(values) | "BothFolds" >> beam.Flatten()
                 | "DecideLabelKind" >> beam.CombineGlobally(MergeLabelSpacesFn(settings.multi_label)))
        joinable = tuple(part | f"RowsOfRecordKeys{name}" >> beam.Filter(_may_label_a_record,
                                                                        AsSingleton(record_keys))
                         for name, part in (("", rows.rows), ("OfRepeatedKeys", deduplicated.rows))
                         ) | "JoinableRows" >> beam.Flatten()
        joined = ({"records": keyed_records, "rows": joinable}
                  | "JoinLabels" >> beam.CoGroupByKey()
                  # (raw key, {"records": [ProbedRecord], "rows": [LabelRow]})
                  | "EncodeLabels" >> beam.FlatMap(_join_labels, AsSingleton(space), settings)
                  .with_outputs(OUTCOMES, main="records"))
        outcomes = ((rows[OUTCOMES], deduplicated[OUTCOMES], joined[OUTCOMES])
                    | "LabelOutcomes" >> beam.Flatten())
        return joined.records, outcomes, space
