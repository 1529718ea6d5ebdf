"""Annotations as masks of the records they label: what a record's mask is made of, whatever its sources (issue 33).

With ``--class_map`` a DICOM annotation among the inputs (a SEG, an RTSTRUCT: any source of
transforms.masks.sources that claims its SOP class) is no record of its own: the probe plans it
as an annotation keyed by the Series Instance UID it references (``referenced_series``), the
series or slice joins give the records of that series its masks, and each record is written
with them on its grid (``record_mask``): ``mask_raw`` aligned voxel for voxel with
``image_raw``. Pure functions of datasets and numbers, each kind's own work asked of its source
through the registry; the Beam shells are transforms.series.steps, transforms.masks.slice_steps
and transforms.records.build.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np
import pydicom

from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.features import MASK_CHANNELS, MASK_DTYPE, MASK_RAW
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.masks import classes, sources
from dcm2tfrecord.transforms.masks.grid import Grid
from dcm2tfrecord.transforms.masks.settings import MaskSettings

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
    """The name of the mask source whose annotation a DICOM object of this SOP Class UID is, else None."""
    found = sources.claiming(sop_class)
    return None if found is None else found.name


def probe_header(fileobj, kind: str) -> pydicom.Dataset:
    """An annotation's header as far as the probe needs it (identifiers, what it references), as
    its source reads it."""
    return sources.series_source(kind).probe_header(fileobj)


def referenced_series(ds: pydicom.Dataset, kind: str) -> str:
    """The one Series Instance UID an annotation references (ConversionError when none, or
    several: a structure set over two series is split by no rule of ours)."""
    series = tuple(dict.fromkeys(s for s in sources.series_source(kind).referenced_series(ds) if s))
    if len(series) != 1:
        raise ConversionError(reasons.MASK_INVALID,
                              f"the {kind.upper()} references {len(series)} series (it must reference one: the "
                              f"series it annotates)")
    return series[0]


def planned_mask_bytes(spec, masks: MaskSettings) -> int:
    """The bytes of the mask_raw of a record planned as ``spec`` (an ImageSpec: depth, height,
    width) under ``masks``: what planning adds to its size (dataset/masks.py's rule)."""
    count, layout = masks.class_count, masks.layout
    itemsize = np.dtype(mask_format.mask_dtype(layout, count)).itemsize
    return spec.depth * spec.height * spec.width * mask_format.mask_channels(layout, count) * itemsize


def record_mask(annotations: Sequence[tuple[Any, str]], shape: tuple[int, int, int], masks: MaskSettings,
                target: Callable[[int], sources.MaskTarget]) -> np.ndarray:
    """The record's mask ``[k, j, i, channels]`` of ``shape`` from its annotations (each parsed, and
    its source's name): every ROI, segment or label mapped to its class (names mapping to none
    neither drawn nor checked), a class's united, laid out as ``masks.layout``
    (transforms.masks.classes.Canvas), each drawn by its source on ``target(n)``, annotation n's
    MaskTarget. No annotation: all background. Memory: the mask and one region at a time (one
    slice for an RTSTRUCT)."""
    canvas = classes.Canvas(shape, masks.class_count, masks.layout)
    for n, (parsed, kind) in enumerate(annotations):
        sources.source(kind).draw(parsed, target(n), masks.class_map, canvas)
    return canvas.array


def volume_mask(annotations: Sequence[tuple[Any, str]], grid: Grid, masks: MaskSettings,
                parts: Optional[Sequence[Sequence[tuple[int, int]]]] = None) -> np.ndarray:
    """The record's mask from its annotations on ``grid`` (record_mask).

    ``parts``: the record is one part of its annotated series (--unit file: a slice, a frame,
    a stack; transforms.masks.slices placed the annotations on the whole series), and these
    are, per annotation, its placement on it (the RTSTRUCT contours on it, ``()`` for a SEG): a
    SEG's frames on other parts are left out, an RTSTRUCT draws only these."""
    shape = (len(grid.positions) or len(grid.instance_uids), grid.rows, grid.columns)
    return record_mask(annotations, shape, masks,
                       lambda n: sources.MaskTarget(grid=grid, part=None if parts is None else parts[n]))
