"""PairMasks (--mask_pattern, --mask_column): NIfTI images joined to their NIfTI mask files by path.

Metadata only: the join moves records (a few hundred bytes), never voxels; the writer reads
each mask beside its image (transforms.records.build). The decisions are transforms.masks.pairing's.
"""
from __future__ import annotations

import io

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.counters import OUTCOMES, emit
from dcm2tfrecord.transforms.labels import table as labels_lib
from dcm2tfrecord.transforms.masks import pairing
from dcm2tfrecord.transforms.settings import ConversionSettings
from dcm2tfrecord.transforms.sources.match import uri_key

OFFERS = "offers"


def _emit_all(results):
    for result in results:
        if isinstance(result, list):
            for outcome in result:
                yield from emit(outcome)
        else:
            yield result


def _mask_rows(uri: str, settings: ConversionSettings):
    """(loose path key, LabelRow whose value is the --mask_column cell) per row naming a mask;
    malformed rows are the labels join's to report."""
    fold = settings.label_key_case == "fold"
    assert settings.masks is not None and settings.masks.column is not None
    with FileSystems.open(uri) as raw:
        lines = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        for item in labels_lib.parse_label_csv(lines, uri, settings.label_key, settings.masks.column):
            if isinstance(item, labels_lib.LabelRow) and item.value:
                yield uri_key(labels_lib.loose_key(item.key, fold)), item


def _named_by_rows(keyed, settings: ConversionSettings):
    grouped = keyed[1]
    yield from _emit_all(pairing.named_by_rows(grouped["records"], grouped["rows"], settings))


def _claims(named: pairing.Named):
    if named.mask_uri:
        record = named.record
        yield pairing.path_key(named.mask_uri), pairing.Claim(record.source.uri, record.source.rel_path,
                                                             named.mask_uri)


def _resolve(keyed):
    grouped = keyed[1]
    images, offers, outcomes = pairing.resolve_mask_file(list(grouped["files"]), grouped["claims"])
    for named in images:
        yield pairing.path_key(named.record.source.uri), named
    for offer in offers:
        yield beam.pvalue.TaggedOutput(OFFERS, (pairing.path_key(offer.image_uri), offer))
    yield from _emit_all([outcomes])


def _attach(keyed, settings):
    grouped = keyed[1]
    records, outcomes = pairing.attach(list(grouped["images"]), list(grouped["offers"]), settings)
    yield from records
    yield from _emit_all([outcomes])


class PairMasks(beam.PTransform):
    """ProbedRecords -> (records, the NIfTI images carrying their masks; Outcomes). The other
    records go on untouched: BuildVolumes or AttachSliceMasks joins SEG and RTSTRUCT files to
    DICOM series, and SettleUnmasked holds those no mask covers to --missing_mask."""

    def __init__(self, settings: ConversionSettings):
        super().__init__()
        self.settings = settings

    def expand(self, records):
        settings, masks = self.settings, self.settings.masks
        assert masks is not None        # PairMasks runs with --class_map only
        nifti, others = records | "NiftiOrOther" >> beam.Partition(
            lambda r, _: 0 if r.kind == RecordKind.NIFTI else 1, 2)  # type: ignore[arg-type]  # Beam: a callable
        if masks.pattern is not None:
            named = nifti | "NameMasksByPattern" >> beam.FlatMap(
                lambda r, pattern: _emit_all([pairing.named_by_pattern(r, pattern)]),
                masks.pattern).with_outputs(OUTCOMES, main="named")
        else:
            fold = settings.label_key_case == "fold"
            rows = (records.pipeline
                    | "ListMaskColumn" >> beam.Create([settings.labels_csv])
                    | "ReadMaskRows" >> beam.FlatMap(_mask_rows, settings))
            keyed = nifti | "KeyByPath" >> beam.Map(
                lambda r: (uri_key(labels_lib.loose_key(r.source.rel_path, fold)), r))
            named = ({"records": keyed, "rows": rows}
                     | "JoinMaskColumn" >> beam.CoGroupByKey()
                     # (loose path key, {"records": [ProbedRecord], "rows": [LabelRow]})
                     | "NameMasksByColumn" >> beam.FlatMap(_named_by_rows, settings).with_outputs(
                         OUTCOMES, main="named"))
        files = named.named | "KeyByOwnPath" >> beam.Map(lambda n: (pairing.path_key(n.record.source.uri), n))
        claims = named.named | "KeyByMaskPath" >> beam.FlatMap(_claims)
        resolved = ({"files": files, "claims": claims}
                    | "JoinMaskFiles" >> beam.CoGroupByKey()
                    # (path, {"files": [Named] of the file there, "claims": [Claim] of images naming it})
                    | "ResolveMaskFiles" >> beam.FlatMap(_resolve).with_outputs(OUTCOMES, OFFERS, main="images"))
        attached = ({"images": resolved.images, "offers": resolved[OFFERS]}
                    | "JoinImagesToMasks" >> beam.CoGroupByKey()
                    # (image path, {"images": [Named] of its volumes, "offers": [Offer]})
                    | "AttachMasks" >> beam.FlatMap(_attach, masks).with_outputs(OUTCOMES, main="records"))
        parts, outcomes = [attached.records, others], [named[OUTCOMES], resolved[OUTCOMES], attached[OUTCOMES]]
        return (tuple(parts) | "PairedAndOthers" >> beam.Flatten(),
                tuple(outcomes) | "PairingOutcomes" >> beam.Flatten())
