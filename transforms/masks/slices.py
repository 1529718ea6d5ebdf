"""A series' annotations joined to its records: each slice's part (``--unit file``), each split volume's (``divide``).

With ``--class_map`` and ``--unit file`` each slice (or frame) is a record of its own.

The graph groups, by raw Series Instance UID, the probed image records of a series with the SEG
and RTSTRUCT files that reference it (transforms.masks.slice_steps.AttachSliceMasks: metadata only,
no pixels through the shuffle). ``join`` then decides, once per series, what only the whole
series can tell, and hands each record its part:

- an annotation of a series with no image among the inputs: ``mask_without_image``
  (``without_image``, the series path's rule too);
- a series no annotation references: ``--missing_mask`` (``missing``, the series path's rule
  too): skipped or failed, one outcome per file; with ``empty`` each record is written with an
  all-background mask;
- where each annotation lies on the series, from the probed slices (positions, orientation, SOP
  Instance UIDs) and the annotation's header: an RTSTRUCT's contours are placed on slices by
  rtstruct.assign_contours (a contour on no slice of the series: ``contour_off_grid``; an ROI in
  another frame of reference: ``frame_of_reference_mismatch``, where the grid knows its frame),
  a SEG's frames by seg.check_placement (frames on slices the series does not have:
  ``mask_unreferenced``). A refusal fails the series, every file of it and the annotations,
  as it fails the volume record with ``--unit series``;
- each record then carries the annotations, its mask's planned bytes and a MaskPart: its SOP
  Instance UID (a single-frame file), the RTSTRUCT contours on it, and, for one record of the
  series, the accounting of the annotation files (each input is counted once).

At write time each record's mask is made from its annotations on its own grid
(transforms.records.build ``_mask``, annotation.volume_mask with ``parts``): the SEG's frames on
it, the RTSTRUCT contours placed on it, each annotation parsed once per worker
(transforms.masks.annotation_cache). RTSTRUCT contours are placed on single-frame slices only: a series
with multi-frame images (``--frames split`` frames, Enhanced stacks) and an RTSTRUCT is refused
with ``mask_unsupported`` (their frames' positions are not probed; a SEG places its frames by
the frame's own position at write time instead). Pure functions; the Beam shell is
transforms.masks.slice_steps.

With ``--unit series``, a series that becomes several records (``--series_gaps split`` runs,
``--series_4d split`` volumes) is divided the same way (``divide``, called by
transforms.series.steps): the annotations placed once on the whole series, each record given
those that lie on its slices and only its part of them, a record none lies on following
``--missing_mask``, each annotation accounted for by the first record it lies on.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence, Union

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import annotation, sources
from dcm2tfrecord.transforms.masks.settings import MaskSettings, MissingMask
from dcm2tfrecord.transforms.record_model import MaskPart, ProbedRecord, replaced

STAGE = "group"


def part_key(record: ProbedRecord) -> str:
    """The raw Series Instance UID a DICOM image record is part of, or the one an annotation
    references ("" for the others: they pass by without a mask)."""
    if record.ids is None or record.kind not in (RecordKind.DICOM, annotation.ANNOTATION):
        return ""
    return record.ids.series_uid


def without_image(notes: Sequence[ProbedRecord]) -> list[Outcome]:
    """The annotations of a series with no image among the inputs, failed (mask_without_image)."""
    return [Outcome(note.source.uri, reasons.FAILED, STAGE, reasons.MASK_WITHOUT_IMAGE,
                    f"the {note.annotation.upper()} annotates a series with no image among the inputs: add the "
                    f"series' files to --input")
            for note in sorted(notes, key=lambda r: r.source.uri)]


def missing(uris: Sequence[str], what: str, missing_mask: str) -> list[Outcome]:
    """A series no annotation covers, one outcome per file (--missing_mask skip or error);
    [] for --missing_mask empty (written with an all-background mask)."""
    if missing_mask == "empty":
        return []
    status = reasons.SKIPPED if missing_mask == "skip" else reasons.FAILED
    return [Outcome(uri, status, STAGE, reasons.MISSING_MASK,
                    f"{what}: no SEG or RTSTRUCT among the inputs annotates it (--missing_mask {missing_mask})")
            for uri in sorted(set(uris))]


def unmasked(record: ProbedRecord, masks: Optional[MaskSettings]) -> Iterator[Union[ProbedRecord, Outcome]]:
    """After the mask joins (--class_map): a record none of them gave a mask (a PNG or JPEG, a
    NIfTI without --mask_pattern or --mask_column, a DICOM file without a Series Instance UID)
    follows --missing_mask as an unannotated series does, so that every record of the dataset
    holds a mask: all background (empty), else an outcome."""
    if record.mask_bytes or masks is None:
        yield record
        return
    what = f"{record.source.rel_path}"
    if masks.missing != MissingMask.EMPTY:
        status = reasons.SKIPPED if masks.missing == MissingMask.SKIP else reasons.FAILED
        yield Outcome(record.source.uri, status, STAGE, reasons.MISSING_MASK,
                      f"{what}: no mask source covers it (SEG and RTSTRUCT annotate DICOM series; NIfTI masks "
                      f"pair NIfTI images by --mask_pattern or --mask_column) (--missing_mask "
                      f"{masks.missing})")
        return
    yield replaced(record, annotations=(), mask_bytes=annotation.planned_mask_bytes(record.spec, masks))


def _order(record: ProbedRecord) -> tuple:
    return (record.source.uri, -1 if record.frame is None else record.frame,
            record.stacks[0].index if record.stacks else -1)


def _what(parts: Sequence[ProbedRecord]) -> str:
    files = len({p.source.uri for p in parts})
    return f"series of {files} file{'s' if files != 1 else ''} ({len(parts)} records)"


def _placements(parts: Sequence[ProbedRecord], notes: Sequence[tuple[ProbedRecord, Any]]) -> list[tuple]:
    """Per annotation, per part, its placement on it (the RTSTRUCT contours on it, () for a SEG),
    as its source places it (transforms.masks.sources); ConversionError when an annotation does
    not lie on the series (module docstring)."""
    return [sources.series_source(note.annotation).place(header, parts) for note, header in notes]


def join(records: Sequence[ProbedRecord], read: Callable[[ProbedRecord], Any],
         masks: MaskSettings) -> Iterator[Union[ProbedRecord, Outcome]]:
    """One series' records and annotations (grouped by part_key) -> each record with its part of
    the masks, or Outcomes (module docstring). ``read(note)`` parses an annotation's header (a
    SEG's header alone; an RTSTRUCT is all header), raising ConversionError when it cannot."""
    notes = sorted((r for r in records if r.kind == annotation.ANNOTATION), key=lambda r: r.source.uri)
    parts = sorted((r for r in records if r.kind != annotation.ANNOTATION), key=_order)
    if not parts:
        yield from without_image(notes)
        return
    if not notes:
        outcomes = missing([p.source.uri for p in parts], _what(parts), masks.missing)
        if outcomes:
            yield from outcomes
            return
    try:
        placed = _placements(parts, [(note, read(note)) for note in notes])
    except ConversionError as exc:
        for uri in sorted({p.source.uri for p in parts} | {n.source.uri for n in notes}):
            yield Outcome(uri, reasons.FAILED, STAGE, exc.reason, f"{_what(parts)}: {exc}")
        return
    pairs = tuple((n.source, n.annotation) for n in notes)
    counting = next((p for p in parts if p.counts_sources), parts[0])
    for k, part in enumerate(parts):
        spec = part.spec
        single = part.frame is None and not part.stacks and spec.depth == 1
        yield replaced(part, annotations=pairs, mask_bytes=annotation.planned_mask_bytes(spec, masks),
                       mask_part=MaskPart(uid=part.ids.sop_uid if part.ids and single else "",
                                          contours=tuple(on[k] for on in placed),
                                          counts_annotations=part is counting))


def divide(records: Sequence[ProbedRecord], slices: Sequence[ProbedRecord], notes: Sequence[ProbedRecord],
           read: Callable[[ProbedRecord], Any], masks: MaskSettings) -> Iterator[Union[ProbedRecord, Outcome]]:
    """--unit series, a series made into several records (``records``: the runs of
    ``--series_gaps split``, the volumes of ``--series_4d split``, an Enhanced file's stacks) from
    its ``slices``, and the annotations that reference it (``notes``): each record with the
    annotations that lie on it, each giving it only its own part (an RTSTRUCT's contours on its
    slices, a SEG's frames on them); a record no annotation lies on follows ``--missing_mask``
    (``missing``: skipped or failed, one outcome per file; ``empty``: written all background).
    Each annotation is accounted for by the first record it lies on (MaskPart.counted), once.

    Where each annotation lies is placed once, on the whole series, by its source
    (transforms.masks.sources ``place`` and ``covers``), with the refusals of the ``--unit file``
    join: one fails the series, every file of it and the annotations. An annotation whose source
    tells no slice apart lies on every record; a series whose records are not made of its
    single-frame slices (mosaics, Enhanced stacks) gives every record its annotations whole,
    accounted for by the first."""
    records = list(records)
    notes = sorted(notes, key=lambda r: r.source.uri)
    pairs = tuple((n.source, n.annotation) for n in notes)
    parts = sorted(slices, key=_order)
    index = {p.source.uri: k for k, p in enumerate(parts)}
    whole = not all(sources.single_slice(p) for p in parts) or \
        not all(r.members and all(m.uri in index for m in r.members) for r in records)
    if whole:
        for n, record in enumerate(records):
            yield replaced(record, annotations=pairs, mask_bytes=annotation.planned_mask_bytes(record.spec, masks),
                           mask_part=MaskPart(contours=(None,) * len(pairs), counts_annotations=n == 0,
                                              volume=True))
        return
    try:
        headers = [(note, read(note)) for note in notes]
        placed = _placements(parts, headers)
        covers = [sources.series_source(note.annotation).covers(header, parts) for note, header in headers]
    except ConversionError as exc:
        for uri in sorted({p.source.uri for p in parts} | {n.source.uri for n in notes}):
            yield Outcome(uri, reasons.FAILED, STAGE, exc.reason, f"{_what(parts)}: {exc}")
        return
    lies = [tuple(bool(p) for p in on) if told is None else told for on, told in zip(placed, covers)]
    lies = [told if any(told) else (True,) * len(parts) for told in lies]    # nothing told apart: all
    counted: set[int] = set()
    for record in records:
        ks = [index[m.uri] for m in record.members]
        covering = [(n, tuple(x for k in ks for x in placed[n][k])) for n in range(len(notes))
                    if any(lies[n][k] for k in ks)]
        if not covering:
            what = f"{len(ks)} slice(s) of a series its annotations do not cover"
            outcomes = missing([m.uri for m in record.members], what, masks.missing)
            if outcomes:
                yield from outcomes
            else:
                yield replaced(record, annotations=(), mask_bytes=annotation.planned_mask_bytes(record.spec, masks))
            continue
        mine = tuple(n for n, _ in covering if n not in counted)
        counted.update(mine)
        yield replaced(record, annotations=tuple(pairs[n] for n, _ in covering),
                       mask_bytes=annotation.planned_mask_bytes(record.spec, masks),
                       mask_part=MaskPart(contours=tuple(part for _, part in covering),
                                          counts_annotations=bool(mine),
                                          counted=tuple(i for i, (n, _) in enumerate(covering) if n in mine),
                                          volume=True))
