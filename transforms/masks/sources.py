"""The mask-source seam: one protocol every source of masks implements, and ``SOURCES``, the registry of them.

As pydicom's decoder plugins and dataset/file_adapters.py's container adapters: what a kind of
annotation file needs of the pipeline is one ``MaskSource``, registered here under its ``name``
(the kind a ProbedRecord records: ``ProbedRecord.annotation`` of an annotation,
``ProbedRecord.annotations``' pairs of a masked record). The probe, the series and slice joins,
the parse cache and the record builder ask the registry and never name a kind:

- **probe its references** (``sop_classes``, ``probe_header``, ``referenced_series``): a DICOM
  object among the inputs whose SOP Class UID a source claims is no record of its own with
  ``--class_map`` but an annotation, keyed by the one series it references
  (transforms.records.probe). A source paired with its image by path instead (NIfTI, by
  ``--mask_pattern`` or ``--mask_column``: transforms.masks.pairing) claims no SOP class;
- **place on a grid** (``join_header``, ``place``, ``covers``): with ``--unit file``, where the
  annotation lies on the probed records of its series, checked once per series, and each
  record's part of it; with ``--unit series``, a series split into several records, which of
  them it lies on (transforms.masks.slices);
- **draw classes** (``parse``, ``draw``): at write time the annotation parsed and its classes drawn
  on the record's canvas (transforms.masks.classes.Canvas): where ``on_grid``, on the record's
  ``Grid`` (transforms.masks.grid), parsed once per worker and reused by its series' records
  (transforms.masks.annotation_cache); else against the image it was paired with
  (``MaskTarget.image``), read with each record (one mask per image: nothing to reuse).

``SOURCES`` holds SEG, RTSTRUCT and NIfTI. A fourth source (a NRRD label map, a DICOM Parametric
Map) is one module implementing the protocol and one ``register`` call; its tests register it
in the test (tests/transforms/masks/test_sources.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, BinaryIO, Callable, Optional, Protocol, Sequence, cast

import numpy as np
import pydicom

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import classes, nifti_mask, patterns, rtstruct, seg
from dcm2tfrecord.transforms.masks.grid import Grid


@dataclasses.dataclass(frozen=True)
class MaskTarget:
    """The record a source draws on: its ``grid`` (None for a source not ``on_grid``), this
    annotation's placement on it when the record is one part of its series (``--unit file``: the
    RTSTRUCT contours on it, ``()`` for a SEG; None: the record is the whole series), the image's
    own header for a source paired with it (a NIfTI's NiftiSpec) and the volume of a 4-D image."""
    grid: Optional[Grid] = None
    part: Optional[Sequence[Any]] = None
    image: Any = None
    volume: Optional[int] = None


class MaskSource(Protocol):
    """A kind of annotation file that gives records their masks: what the record builder asks of
    every source (module docstring)."""
    name: str                        # the kind recorded on records: "seg", "rtstruct", "nifti", ...
    sop_classes: tuple[str, ...]     # the DICOM objects it claims at probe; () when paired by path
    on_grid: bool                    # drawn on the record's Grid (else against the paired image)
    thread_bound: bool               # its parsed form is usable only in the thread that parsed it

    def parse(self, fileobj: BinaryIO) -> Any:
        """The file parsed as ``draw`` reads it."""

    def draw(self, parsed: Any, target: MaskTarget, class_map: classes.ClassMap, canvas: classes.Canvas) -> None:
        """Its regions of the classes ``class_map`` names, drawn on ``canvas`` (names mapping to no
        class neither drawn nor checked)."""


class SeriesMaskSource(MaskSource, Protocol):
    """A source of DICOM annotations among the inputs (``sop_classes``), joined to the series they
    reference: what the probe and the series and slice joins ask of it besides."""

    def probe_header(self, fileobj: BinaryIO) -> Any:
        """The header as far as the probe needs it (identifiers, what it references)."""

    def referenced_series(self, header: Any) -> Sequence[str]:
        """The Series Instance UIDs the annotation references."""

    def join_header(self, read: Callable[[], BinaryIO], cached: Callable[[], Any]) -> Any:
        """The header the --unit file join places by: ``read()`` the file, or ``cached()``, the
        parsed form through the writers' cache."""

    def place(self, header: Any, parts: Sequence[Any]) -> tuple:
        """Per record of the series (``parts``, ProbedRecords in record order), this annotation's
        part of it; ConversionError when it does not lie on the series."""

    def covers(self, header: Any, parts: Sequence[Any]) -> Optional[tuple[bool, ...]]:
        """Per record of the series, whether anything of the annotation lies on it (a series
        made into several records by --unit series gives each only the annotations on it);
        None: where its placement (``place``) is not empty."""


SOURCES: dict[str, MaskSource] = {}


def register(source: MaskSource) -> MaskSource:
    """Adds ``source`` to the registry under its name (ValueError when the name or one of its SOP
    classes is taken)."""
    if source.name in SOURCES:
        raise ValueError(f"a mask source named {source.name!r} is registered already")
    taken = {uid for other in SOURCES.values() for uid in other.sop_classes} & set(source.sop_classes)
    if taken:
        raise ValueError(f"SOP class {sorted(taken)[0]} is claimed by another mask source already")
    SOURCES[source.name] = source
    return source


def unregister(name: str) -> None:
    """Removes a source (a test's own)."""
    SOURCES.pop(name, None)


def source(name: str) -> MaskSource:
    """The source registered as ``name``."""
    try:
        return SOURCES[name]
    except KeyError:
        raise ValueError(f"no mask source {name!r}: the registered are {', '.join(sorted(SOURCES))}") from None


def claiming(sop_class: str) -> Optional[SeriesMaskSource]:
    """The source whose annotations a DICOM object of this SOP Class UID is, else None."""
    sop_class = (sop_class or "").strip()
    found = next((s for s in SOURCES.values() if sop_class and sop_class in s.sop_classes), None)
    return cast(SeriesMaskSource, found)


def series_source(name: str) -> SeriesMaskSource:
    """The source registered as ``name``, one of DICOM annotations joined to a series."""
    found = source(name)
    if not found.sop_classes:
        raise ValueError(f"mask source {name!r} is paired with its images by path, not joined to a series")
    return cast(SeriesMaskSource, found)


def mapped(numbered: Sequence[tuple[int, str]], class_map: classes.ClassMap) -> list[tuple[int, int]]:
    """(ROI or segment number, class index) of those whose raw name maps to a class;
    ConversionError (mask_invalid) when a rule only a backtracking engine runs passes its bound
    on a name (transforms.masks.patterns; the name is never written: it may hold a patient's)."""
    try:
        return [(number, index) for number, index in ((n, class_map.index_of(name)) for n, name in numbered)
                if index]
    except patterns.PatternTimeout as exc:
        raise ConversionError(reasons.MASK_INVALID, f"--class_map: {exc}") from None


def series_grid(parts: Sequence[Any], single: bool) -> tuple[tuple, tuple, tuple]:
    """(SOP Instance UIDs, positions, orientation) of a series' probed records in record order;
    positions and orientation only when every record is a single slice (``single``)."""
    first = parts[0]
    uids = tuple(p.ids.sop_uid if p.ids else "" for p in parts)
    positions = tuple(tuple(float(v) for v in p.slice_info.position) for p in parts
                      if p.slice_info is not None) if single else ()
    orientation = tuple(float(v) for v in first.slice_info.orientation) if single and first.slice_info else ()
    return uids, positions, orientation


def single_slice(record: Any) -> bool:
    """A probed record that is one slice of one single-frame file, with its position and orientation."""
    info = record.slice_info
    return (record.frame is None and not record.stacks and record.spec.depth == 1 and info is not None
            and len(info.position) == 3 and len(info.orientation) == 6)


ROI_CONTOUR_SEQUENCE = 0x30060039   # an RTSTRUCT's bulk, after every element it references by


class SegSource:
    """DICOM Segmentation (transforms.masks.seg): frames placed on the grid by the slices they name
    or their positions, highdicom reading the pixels."""
    name = "seg"
    sop_classes: tuple[str, ...] = seg.SOP_CLASSES
    on_grid = True
    thread_bound = True      # highdicom's frame index is an SQLite connection of the thread that built it

    def probe_header(self, fileobj: BinaryIO) -> pydicom.Dataset:
        return pydicom.dcmread(fileobj, stop_before_pixels=True, force=True)

    def referenced_series(self, header: Any) -> Sequence[str]:
        return seg.referenced(header).series_uids

    def join_header(self, read: Callable[[], BinaryIO], cached: Callable[[], Any]) -> Any:
        data = read()
        try:
            return self.probe_header(data)
        except Exception as exc:
            raise ConversionError(reasons.INVALID_DICOM, f"the SEG does not parse ({type(exc).__name__})") from exc

    def place(self, header: Any, parts: Sequence[Any]) -> tuple:
        grid = _seg_grid(parts, *series_grid(parts, all(single_slice(p) for p in parts)))
        if grid is not None:
            seg.check_placement(header, grid)
        return ((),) * len(parts)

    def covers(self, header: Any, parts: Sequence[Any]) -> Optional[tuple[bool, ...]]:
        """The parts a frame lies on, where the series' grid has one slice per part; else all."""
        grid = _seg_grid(parts, *series_grid(parts, all(single_slice(p) for p in parts)))
        on = None if grid is None or grid.depth != len(parts) else seg.frames_on_slices(header, grid)
        if on is None:
            return (True,) * len(parts)
        return tuple(k in on for k in range(len(parts)))

    def parse(self, fileobj: BinaryIO) -> Any:
        return seg.load(fileobj)

    def draw(self, parsed: Any, target: MaskTarget, class_map: classes.ClassMap, canvas: classes.Canvas) -> None:
        found = seg.once(parsed, ("classes", class_map),
                         lambda: mapped([(number, label) for number, label in seg.segment_labels(parsed) if number > 0],
                                        class_map))
        if not found:
            return
        assert target.grid is not None
        grid = target.grid
        grid = dataclasses.replace(grid, positions=tuple((p[0], p[1], p[2]) for p in grid.positions))
        stack = seg.masks_on_grid(parsed, grid, [number for number, _ in found], fractional_threshold=0.5,
                                  part=target.part is not None)
        for region, (_, index) in zip(stack, found):
            canvas.add(index, region)


def _seg_grid(parts: Sequence[Any], uids: tuple, positions: tuple, orientation: tuple) -> Optional[Grid]:
    """The series as the SEG check sees it: one slice per single-frame file (its UID and
    position); for multi-frame files, their UIDs alone (each frame is placed at write time, by
    its own position); None when neither is known. Rows and columns are each record's to check."""
    if not positions:
        files = tuple(dict.fromkeys(uids))
        uids = files if all(files) and len(files) == len({p.source.uri for p in parts}) else ()
    elif not all(uids):
        uids = ()
    if not uids and not positions:
        return None
    grid = Grid(rows=max(parts[0].spec.height, 1), columns=max(parts[0].spec.width, 1), instance_uids=uids,
                positions=positions, orientation=orientation)
    grid.check()
    return grid


class RtstructSource:
    """RT Structure Set (transforms.masks.rtstruct): closed planar contours placed on the grid's
    slices and filled, one slice at a time."""
    name = "rtstruct"
    sop_classes: tuple[str, ...] = (rtstruct.RT_STRUCTURE_SET_STORAGE,)
    on_grid = True
    thread_bound = False     # a pydicom Dataset is any thread's

    def probe_header(self, fileobj: BinaryIO) -> pydicom.Dataset:
        """Up to its ROI Contour Sequence, whose thousands of contour items pydicom would otherwise
        parse in full (0.8 s for a 200-slice CT's structure set: its sequences have undefined
        lengths, so they cannot be skipped unread)."""
        return pydicom.filereader.read_partial(fileobj, stop_when=lambda tag, vr, length: tag >= ROI_CONTOUR_SEQUENCE,
                                               force=True)

    def referenced_series(self, header: Any) -> Sequence[str]:
        return rtstruct.referenced(header, images=False).series_uids

    def join_header(self, read: Callable[[], BinaryIO], cached: Callable[[], Any]) -> Any:
        return cached()     # all header: parsed once, for the join and the writers of this process

    def covers(self, header: Any, parts: Sequence[Any]) -> Optional[tuple[bool, ...]]:
        return None         # the slices its contours are placed on

    def place(self, header: Any, parts: Sequence[Any]) -> tuple:
        single = all(single_slice(p) for p in parts)
        if not single:
            raise ConversionError(reasons.MASK_UNSUPPORTED,
                                  "an RTSTRUCT over a series with multi-frame images (frames of --frames split, "
                                  "Enhanced stacks): with --unit file its contours are placed on single-frame "
                                  "slices only")
        uids, positions, orientation = series_grid(parts, single)
        spacings = {p.slice_info.pixel_spacing for p in parts}
        grid = Grid(rows=parts[0].spec.height, columns=parts[0].spec.width, instance_uids=uids,
                    positions=positions, orientation=orientation,
                    pixel_spacing=next(iter(spacings)) if len(spacings) == 1 else ())
        on = rtstruct.assign_contours(header, grid)
        return tuple(on.get(k, ()) for k in range(len(parts)))

    def parse(self, fileobj: BinaryIO) -> Any:
        """The structure set with its contours indexed by ROI and contour once (rtstruct.StructureSet):
        each record of a series then reads only the contours placed on it."""
        return rtstruct.StructureSet(pydicom.dcmread(fileobj, force=True))

    def draw(self, parsed: Any, target: MaskTarget, class_map: classes.ClassMap, canvas: classes.Canvas) -> None:
        found = mapped([(r.number, r.name) for r in rtstruct.roi_info(parsed)], class_map)
        assert target.grid is not None
        grid = target.grid
        part = target.part
        one = part is not None and grid.depth == 1
        placed = rtstruct.placed(parsed, grid, [number for number, _ in found], on_slice=part if one else None,
                                 among=None if one else part)
        region = np.zeros((grid.rows, grid.columns), bool)
        for number, index in found:
            for k, polygons in placed[number].items():
                window = rtstruct.fill(region, polygons)
                if window is not None:
                    canvas.add(index, region[window], k, window)
                    region[window] = False


class NiftiSource:
    """A NIfTI label map paired with a NIfTI image by path (transforms.masks.pairing), its values
    named as text (transforms.masks.nifti_mask); compared with the image's own grid, its affine."""
    name = "nifti"
    sop_classes: tuple[str, ...] = ()
    on_grid = False
    thread_bound = False

    def parse(self, fileobj: BinaryIO) -> Any:
        """(the file, its header): the voxels are read by ``draw``, once the header lies on the image."""
        from dcm2tfrecord.transforms.nifti import read as nifti
        return fileobj, nifti.probe(fileobj)

    def draw(self, parsed: Any, target: MaskTarget, class_map: classes.ClassMap, canvas: classes.Canvas) -> None:
        from dcm2tfrecord.transforms.nifti import read as nifti
        data, found = parsed
        why = nifti_mask.grid_mismatch(target.image, found)
        if why:
            raise ConversionError(reasons.MASK_GRID_MISMATCH, why)
        found, voxels = nifti.read(data, found.num_pixels)
        nifti_mask.draw_record(target.image, found, voxels, target.volume, class_map, canvas)


SEG = register(SegSource())
RTSTRUCT = register(RtstructSource())
NIFTI = register(NiftiSource())
