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


def referenced_series(ds: pydicom.Dataset, kind: str) -> str:
    """The one Series Instance UID an annotation references (ConversionError when none, or
    several: a structure set over two series is split by no rule of ours)."""
    series = seg.referenced(ds).series_uids if kind == SEG else rtstruct.referenced(ds).series_uids
    series = tuple(dict.fromkeys(s for s in series if s))
    if len(series) != 1:
        raise ConversionError(reasons.MASK_INVALID,
                              f"the {kind.upper()} references {len(series)} series (it must reference one: the "
                              f"series it annotates)")
    return series[0]


def mask_dtype(layout: str, class_count: int) -> str:
    return "uint16" if layout == classes.LABEL_MAP and class_count >= 256 else "uint8"


def mask_channels(layout: str, class_count: int) -> int:
    return 1 if layout == classes.LABEL_MAP else class_count


def planned_mask_bytes(depth: int, height: int, width: int, layout: str, class_count: int) -> int:
    """The bytes of a record's mask_raw, from its planned shape: what planning adds to its size."""
    itemsize = np.dtype(mask_dtype(layout, class_count)).itemsize
    return depth * height * width * mask_channels(layout, class_count) * itemsize


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


def _masks(ds: pydicom.Dataset, kind: str, grid: VolumeGrid,
           contours: Optional[Sequence[tuple[int, int]]] = None) -> tuple[list[np.ndarray], list[str]]:
    """(one mask [k, j, i] per ROI or segment, their raw names); ``contours`` not None: the grid
    is one part of the annotated series, and these its RTSTRUCT contours (slices.py)."""
    if kind == SEG:
        segments = [s for s in seg.segment_info(ds) if s.number > 0]
        stack = seg.masks_on_grid(ds, seg.Grid(grid.rows, grid.columns, grid.instance_uids,
                                               tuple((p[0], p[1], p[2]) for p in grid.positions),
                                               grid.orientation, grid.pixel_spacing, grid.frame_of_reference_uid),
                                  [s.number for s in segments], fractional_threshold=0.5,
                                  part=contours is not None)
        return [stack[n] for n in range(len(segments))], [s.label for s in segments]
    rois = rtstruct.roi_info(ds)
    stack = rtstruct.rasterise(ds, rtstruct.Grid(grid.positions, grid.orientation, grid.pixel_spacing, grid.rows,
                                                 grid.columns, grid.instance_uids, grid.frame_of_reference_uid),
                               on_slice=contours)
    return [stack[n] for n in range(len(rois))], [r.name for r in rois]


def volume_mask(annotations: Sequence[tuple[pydicom.Dataset, str]], grid: VolumeGrid, class_map: classes.ClassMap,
                layout: str, parts: Optional[Sequence[Sequence[tuple[int, int]]]] = None) -> np.ndarray:
    """The record's mask ``[k, j, i, channels]`` from its annotations (each a dataset and its kind):
    every ROI/segment mapped to its class (names mapping to none left out), a class's united,
    laid out as ``layout`` (transforms.masks.classes). No annotation: all background.

    ``parts``: the record is one part of its annotated series (--unit file: a slice, a frame,
    a stack; transforms.masks.slices placed the annotations on the whole series), and these
    are, per annotation, the RTSTRUCT contours on it (``()`` for a SEG): a SEG's frames on
    other parts are left out, an RTSTRUCT draws only these."""
    shape = (len(grid.positions) or len(grid.instance_uids), grid.rows, grid.columns)
    per_class = np.zeros((len(class_map.classes),) + shape, dtype=bool)
    for n, (ds, kind) in enumerate(annotations):
        masks, names = _masks(ds, kind, grid, None if parts is None else parts[n])
        merged, _ = classes.merged(masks, names, class_map, shape)
        per_class |= merged
    return classes.layout(per_class, layout)
