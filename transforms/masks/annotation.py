"""Annotations (DICOM SEG, RTSTRUCT) as masks of the volume they reference (issue 33).

With ``--class_map`` a SEG or RTSTRUCT among the inputs is no record of its own: the probe
plans it as an annotation keyed by the Series Instance UID it references
(``referenced_series``), ``--unit series`` groups it with that series' slices, and the
series' volume record is written with the annotation's masks on its grid (``volume_mask``):
``mask_raw`` aligned voxel for voxel with ``image_raw``. Pure functions of datasets and
numbers; the Beam shells are transforms.series.steps and transforms.records.build.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import pydicom

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.features import MASK_CHANNELS, MASK_DTYPE, MASK_RAW
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import classes, rtstruct, seg

SEG = "seg"
RTSTRUCT = "rtstruct"
ANNOTATION = "annotation"          # ProbedRecord.kind of an annotation
FEATURES = {
    MASK_RAW: {"dtype": "bytes", "shape": [], "encoding": "raw",
               "description": "the mask, little-endian, row-major [depth, height, width, mask_channels], "
                              "aligned voxel for voxel with image_raw (--class_map)"},
    MASK_DTYPE: {"dtype": "bytes", "shape": [], "description": "numpy dtype name of mask_raw"},
    MASK_CHANNELS: {"dtype": "int64", "shape": [],
                    "description": "1 for --mask_layout label_map (class indices, 0 background), else "
                                   "the number of classes"},
}


def kind_of(sop_class: str) -> Optional[str]:
    """SEG or RTSTRUCT for an annotation's SOP Class UID, else None."""
    sop_class = (sop_class or "").strip()
    if sop_class in seg.SOP_CLASSES:
        return SEG
    if sop_class == rtstruct.RT_STRUCTURE_SET_STORAGE:
        return RTSTRUCT
    return None


ROI_CONTOUR_SEQUENCE = 0x30060039   # an RTSTRUCT's bulk, after every element it references by


def probe_header(fileobj, kind: str) -> pydicom.Dataset:
    """An annotation's header as far as the probe needs it (identifiers, what it references): a
    SEG's without its pixels; an RTSTRUCT's up to its ROI Contour Sequence, whose thousands of
    contour items pydicom would otherwise parse in full (0.8 s for a 200-slice CT's structure
    set: its sequences have undefined lengths, so they cannot be skipped unread)."""
    if kind == RTSTRUCT:
        return pydicom.filereader.read_partial(fileobj, stop_when=lambda tag, vr, length: tag >= ROI_CONTOUR_SEQUENCE,
                                               force=True)
    return pydicom.dcmread(fileobj, stop_before_pixels=True, force=True)


def referenced_series(ds: pydicom.Dataset, kind: str) -> str:
    """The one Series Instance UID an annotation references (ConversionError when none, or
    several: a structure set over two series is split by no rule of ours)."""
    series = seg.referenced(ds).series_uids if kind == SEG else rtstruct.referenced(ds, images=False).series_uids
    series = tuple(dict.fromkeys(s for s in series if s))
    if len(series) != 1:
        raise ConversionError(reasons.MASK_INVALID,
                              f"the {kind.upper()} references {len(series)} series (it must reference one: the "
                              f"series it annotates)")
    return series[0]


def planned_mask_bytes(spec, settings) -> int:
    """The bytes of the mask_raw of a record planned as ``spec`` (an ImageSpec: depth, height,
    width) under ``settings`` (DecodeSettings: class_map, mask_layout): what planning adds to
    its size."""
    count, layout = len(settings.class_map.classes), settings.mask_layout
    itemsize = np.dtype(classes.mask_dtype(layout, count)).itemsize
    return spec.depth * spec.height * spec.width * classes.mask_channels(layout, count) * itemsize


@dataclasses.dataclass(frozen=True)
class VolumeGrid:
    """The grid of a volume record: its slices in record order."""
    rows: int
    columns: int
    positions: tuple[tuple[float, ...], ...]
    orientation: tuple[float, ...]
    pixel_spacing: tuple[float, ...]
    instance_uids: tuple[str, ...]
    frame_of_reference_uid: str = ""


def _mapped(numbered: Sequence[tuple[int, str]], class_map: classes.ClassMap) -> list[tuple[int, int]]:
    """(ROI or segment number, class index) of those whose raw name maps to a class."""
    return [(number, index) for number, index in ((n, class_map.index_of(name)) for n, name in numbered) if index]


def _draw_seg(ds: pydicom.Dataset, grid: VolumeGrid, class_map: classes.ClassMap, canvas: classes.Canvas,
              part: bool) -> None:
    mapped = _mapped([(s.number, s.label) for s in seg.segment_info(ds) if s.number > 0], class_map)
    if not mapped:
        return
    stack = seg.masks_on_grid(ds, seg.Grid(grid.rows, grid.columns, grid.instance_uids,
                                           tuple((p[0], p[1], p[2]) for p in grid.positions),
                                           grid.orientation, grid.pixel_spacing, grid.frame_of_reference_uid),
                              [number for number, _ in mapped], fractional_threshold=0.5, part=part)
    for region, (_, index) in zip(stack, mapped):
        canvas.add(index, region)


def _draw_rtstruct(ds: pydicom.Dataset, grid: VolumeGrid, class_map: classes.ClassMap, canvas: classes.Canvas,
                   contours: Optional[Sequence[tuple[int, int]]]) -> None:
    mapped = _mapped([(r.number, r.name) for r in rtstruct.roi_info(ds)], class_map)
    placed = rtstruct.placed(ds, rtstruct.Grid(grid.positions, grid.orientation, grid.pixel_spacing, grid.rows,
                                               grid.columns, grid.instance_uids, grid.frame_of_reference_uid),
                             [number for number, _ in mapped], on_slice=contours)
    region = np.zeros((grid.rows, grid.columns), bool)
    for number, index in mapped:
        for k, polygons in placed[number].items():
            window = rtstruct.fill(region, polygons)
            if window is not None:
                canvas.add(index, region[window], k, window)
                region[window] = False


def volume_mask(annotations: Sequence[tuple[pydicom.Dataset, str]], grid: VolumeGrid, class_map: classes.ClassMap,
                layout: str, parts: Optional[Sequence[Sequence[tuple[int, int]]]] = None) -> np.ndarray:
    """The record's mask ``[k, j, i, channels]`` from its annotations (each a dataset and its kind):
    every ROI/segment mapped to its class (names mapping to none neither drawn nor checked),
    a class's united, laid out as ``layout`` (transforms.masks.classes.Canvas). No annotation:
    all background. Memory: the mask and one region at a time (one slice for an RTSTRUCT).

    ``parts``: the record is one part of its annotated series (--unit file: a slice, a frame,
    a stack; transforms.masks.slices placed the annotations on the whole series), and these
    are, per annotation, the RTSTRUCT contours on it (``()`` for a SEG): a SEG's frames on
    other parts are left out, an RTSTRUCT draws only these."""
    canvas = classes.Canvas((len(grid.positions) or len(grid.instance_uids), grid.rows, grid.columns),
                            len(class_map.classes), layout)
    for n, (ds, kind) in enumerate(annotations):
        contours = None if parts is None else parts[n]
        if kind == SEG:
            _draw_seg(ds, grid, class_map, canvas, part=contours is not None)
        else:
            _draw_rtstruct(ds, grid, class_map, canvas, contours)
    return canvas.array
