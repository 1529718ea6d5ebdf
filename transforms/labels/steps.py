"""AttachLabels: records joined to the labels CSV (or their folder names) -> labelled records."""
from __future__ import annotations

import io

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.pvalue import AsSingleton

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.counters import OUTCOMES, count, emit
from dcm2tfrecord.transforms.labels import join
from dcm2tfrecord.transforms.labels import table as labels_lib
from dcm2tfrecord.transforms.labels import unmatched as unmatched_lib
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from dcm2tfrecord.transforms.labels.table import LabelKeyCase
from dcm2tfrecord.transforms.settings import ConversionSettings
from dcm2tfrecord.transforms.splits.steps import group_of
from dcm2tfrecord.transforms.sources.match import uri_key


REPEATED = "repeated"   # rows whose key may occur on several lines: deduplicated by a shuffle
UNMATCHED = "unmatched"   # UnmatchedRows: rows that label nothing (transforms.labels.unmatched)
SLICE_SPLITS = "slice_splits"   # (split, group) of a row naming a volume's other slice


def _parse(uri: str, settings: ConversionSettings):
    raw = FileSystems.open(uri)
    lines = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
    return raw, labels_lib.parse_label_csv(lines, uri, settings.label_key, settings.label_column,
                                           settings.split_column)


def _read_label_rows(uri: str, bits: bytes, settings: ConversionSettings):
    """Streams the CSV twice, holding 8 bytes a row in between: the first pass hashes the
    exact keys (table.exact_key), the second sends a row to the deduplicating shuffle only
    when its key may repeat. Of the rest (almost all), a row whose key no record can have
    (the record keys' KeyFilter, ``bits``) is written where it is read to the unmatched
    rows' part file (transforms.labels.unmatched), counted, and goes no further; the others
    go on as (loose key, row) without a shuffle."""
    import array
    install_beam_storage()      # a worker's step: the unmatched rows' part file through Beam's FileSystems
    fold = settings.label_key_case == LabelKeyCase.FOLD
    hashes = array.array("Q")
    raw, items = _parse(uri, settings)
    with raw:
        for item in items:
            if isinstance(item, labels_lib.LabelRow):
                hashes.append(labels_lib.key_hash(uri_key(labels_lib.exact_key(item.key, fold))))
    repeated = labels_lib.repeated_hashes(hashes)
    del hashes
    record_keys = labels_lib.KeyFilter(bits)
    part = unmatched_lib.PartWriter(settings)
    raw, items = _parse(uri, settings)
    try:
        with raw:
            for item in items:
                if not isinstance(item, labels_lib.LabelRow):
                    yield from emit(item)
                    continue
                key = uri_key(labels_lib.exact_key(item.key, fold))
                if labels_lib.key_hash(key) in repeated:
                    yield beam.pvalue.TaggedOutput(REPEATED, (key, item))
                    continue
                loose = uri_key(labels_lib.loose_key(item.key, fold))
                if loose in record_keys:
                    yield loose, item
                else:
                    part.add(item)
    finally:
        found = part.close()
    if found is not None:
        count(f"{reasons.REJECTED}_{reasons.UNMATCHED_LABEL_ROW}", found.count)
        yield beam.pvalue.TaggedOutput(UNMATCHED, found)


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


def _unmatched(rows):
    """(row, near) pairs the join left over -> UnmatchedRows, counted."""
    rows = tuple(rows)
    count(f"{reasons.REJECTED}_{reasons.UNMATCHED_LABEL_ROW}", len(rows))
    return beam.pvalue.TaggedOutput(UNMATCHED, unmatched_lib.UnmatchedRows(len(rows), rows))


def _rows_that_may_label(keyed, bits: bytes, settings: ConversionSettings):
    """(exact key, row) of a key that may repeat -> (loose key, row) when a record may have
    that key, else the row is unmatched: certainly no record has it (the filter has no
    false negatives)."""
    row = keyed[1]
    key = uri_key(labels_lib.loose_key(row.key, settings.label_key_case == LabelKeyCase.FOLD))
    if key in labels_lib.KeyFilter(bits):
        yield key, row
    else:
        yield _unmatched([(row, False)])


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
    assert settings.labels_csv is not None     # a step of the --labels branch only
    first, rejected = labels_lib.first_row(keyed[1], settings.labels_csv)
    yield keyed[0], first
    for outcome in rejected:
        yield from emit(outcome)


def _slice_keys(record, settings: ConversionSettings):
    """A --unit series volume -> (loose key, its split group) for each of its other slices."""
    fold = settings.label_key_case == LabelKeyCase.FOLD
    paths = join.slice_keys(record, settings.label_key)
    if paths:
        group = group_of(record, settings)
        for path in paths:
            yield uri_key(labels_lib.loose_key(path, fold)), (path, group)


def _match_labels(keyed, settings: ConversionSettings):
    _, grouped = keyed
    matches, left = join.match_rows(grouped["rows"], grouped["records"], settings)
    yield from matches
    slices = grouped["slices"]
    if slices and left:     # rows of a volume's other slices label it: not unmatched
        used, left = join.rows_of_slices(left, [path for path, _ in slices], settings)
        fold = settings.label_key_case == LabelKeyCase.FOLD
        group_of_path = {labels_lib.exact_key(path, fold): group for path, group in slices}
        for row in used:
            split = join.slice_split(row, settings)
            if split is not None:      # counted with the records' splits (CountGroups)
                yield beam.pvalue.TaggedOutput(
                    SLICE_SPLITS, (split, group_of_path[labels_lib.exact_key(row.key, fold)]))
    if left:
        yield _unmatched(left)


def _label_value(match: join.Match):
    """The label value a matched row contributes to the label space (classes come only from
    rows that label a record)."""
    if match.row is not None and match.row.value:
        yield match.row.value


def _encode_label(match: join.Match, space, settings: ConversionSettings):
    yield from emit(join.encode_match(match, space, settings))


def _dir_labelled(record, space, settings: ConversionSettings):
    yield from emit(join.label_from_folder(record, space, settings))


class AttachLabels(beam.PTransform):
    """ProbedRecord -> labelled ProbedRecord; an Outcome per record without a usable label.

    The CSV join is a CoGroupByKey on raw identifiers (metadata only).
    Returns (records, outcomes, label space singleton, UnmatchedRows of the rows that label
    nothing: see transforms.labels.unmatched, and the (split, group) pairs the rows of a
    --unit series volume's other slices give: CountGroups counts them as a record's).
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
            none = records.pipeline | "NoUnmatchedRows" >> beam.Create([])
            no_slices = records.pipeline | "NoSliceSplits" >> beam.Create([])
            return out.records, out[OUTCOMES], space, none, no_slices
        fold = settings.label_key_case == LabelKeyCase.FOLD
        keyed_records = records | "KeyByLabelKey" >> beam.Map(
            lambda r: (uri_key(labels_lib.loose_key(join.join_key(r, settings.label_key), fold)), r))
        slice_keys = records | "KeyOtherSlicesByLabelKey" >> beam.FlatMap(_slice_keys, settings)
        # (loose key, (path, split group)) of each --unit series volume's slices but its first
        record_keys = ((keyed_records | "RecordKeys" >> beam.Keys(),
                        slice_keys | "SliceKeys" >> beam.Keys())
                       | "AllRecordKeys" >> beam.Flatten()
                       | "RecordKeyFilter" >> beam.CombineGlobally(KeyFilterFn()))
        rows = (records.pipeline
                | "ListLabelFiles" >> beam.Create([settings.labels_csv])
                | "ReadLabelRows" >> beam.FlatMap(
                    _read_label_rows, AsSingleton(record_keys), settings).with_outputs(
                    OUTCOMES, REPEATED, UNMATCHED, main="rows"))
        # rows: (loose key, LabelRow) whose key is on one line only and may be a record's;
        # repeated: (exact key, LabelRow) whose key may repeat; outcomes: malformed lines;
        # unmatched: one UnmatchedRows naming the part file of the rows no record can have.
        # The bulk rows never cross a stage boundary: a row no record can have is set
        # aside where it is read, and the join takes only rows a record may match.
        deduplicated = (rows[REPEATED]
                        | "GroupRowsByKey" >> beam.GroupByKey()
                        # (exact key, [LabelRow]): only keys that may repeat
                        | "FirstRowPerKey" >> beam.FlatMap(_first_row_of_key, settings).with_outputs(
                            OUTCOMES, main="rows"))
        # rows: (exact key, the LabelRow that labels it); outcomes: later lines of a key
        repeated_keys = (deduplicated.rows
                         | "RowsOfRecordKeysOfRepeatedKeys" >> beam.FlatMap(
                             _rows_that_may_label, AsSingleton(record_keys), settings).with_outputs(
                             UNMATCHED, main="rows"))
        joinable = (rows.rows, repeated_keys.rows) | "JoinableRows" >> beam.Flatten()
        matched = ({"records": keyed_records, "rows": joinable, "slices": slice_keys}
                   | "JoinLabels" >> beam.CoGroupByKey()
                   # (loose key, {"records": [ProbedRecord], "rows": [LabelRow],
                   #              "slices": [(path, split group)]})
                   | "MatchRows" >> beam.FlatMap(_match_labels, settings).with_outputs(
                       UNMATCHED, SLICE_SPLITS, main="matches"))
        # matches: join.Match per record; unmatched: rows that label no record; slice splits:
        # (split, group) a row of a volume's other slice gives
        space = (matched.matches
                 | "LabelValues" >> beam.FlatMap(_label_value)
                 | "DecideLabelKind" >> beam.CombineGlobally(LabelSpaceFn(settings.multi_label)))
        joined = (matched.matches
                  | "EncodeLabels" >> beam.FlatMap(_encode_label, AsSingleton(space), settings)
                  .with_outputs(OUTCOMES, main="records"))
        outcomes = ((rows[OUTCOMES], deduplicated[OUTCOMES], joined[OUTCOMES])
                    | "LabelOutcomes" >> beam.Flatten())
        unmatched = ((rows[UNMATCHED], repeated_keys[UNMATCHED], matched[UNMATCHED])
                     | "UnmatchedRows" >> beam.Flatten())
        return joined.records, outcomes, space, unmatched, matched[SLICE_SPLITS]
