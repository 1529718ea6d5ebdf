"""Which volume of a 4-D series a record is, and the diffusion encoding of each volume.

A series whose slices repeat each position, differing in time, b-value, gradient or
echo, is 4-D (transforms.series.volumes): with ``--series_4d split`` each volume is a
record, with ``--series_4d stack`` the record holds all its volumes one after the
other along depth (``depth = volumes x slices``). The features (docs/DICOM.md, "4-D series and diffusion"):

- ``dicom/volumes``: how many volumes the record's series has (1 for 3-D);
- ``dicom/volume_index``: which volume the record is (0 for 3-D); -1 for a stacked
  record, which holds volumes 0 .. volumes - 1 one after the other along depth;
- ``dicom/diffusion_bvalue``: b-value in s/mm^2, one per volume the record holds;
- ``dicom/diffusion_gradient``: the unit gradient direction in patient LPS coordinates,
  3 per volume; empty when no volume has one (b = 0, isotropic, not diffusion) and
  (0, 0, 0) for such a volume among others that have one.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from dcm2tfrecord.transforms.dicom import diffusion

VOLUMES = "dicom/volumes"
VOLUME_INDEX = "dicom/volume_index"
BVALUE = "dicom/diffusion_bvalue"
GRADIENT = "dicom/diffusion_gradient"

FEATURES = {
    VOLUMES: {"dtype": "int64", "shape": [],
              "description": "volumes of the record's 4-D series (1 for 3-D); --series_4d stack: "
                             "depth = volumes x slices"},
    VOLUME_INDEX: {"dtype": "int64", "shape": [],
                   "description": "which volume of its series the record is (0 for 3-D; -1: all, stacked along depth)"},
    BVALUE: {"dtype": "float", "shape": [-1], "description": "diffusion b-value, s/mm^2, one per volume"},
    GRADIENT: {"dtype": "float", "shape": [-1],
               "description": "diffusion gradient direction, unit vector in patient LPS, 3 per volume"},
}


def features(encodings: Sequence[Optional["diffusion.Diffusion"]], volumes: int = 1,
             volume_index: int = 0) -> dict:
    """The four features for a record holding volumes with these diffusion encodings (None:
    the volume has none)."""
    have_b = bool(encodings) and all(e is not None for e in encodings)
    have_gradient = have_b and any(e.gradient for e in encodings if e is not None)
    bvalues = [e.bvalue for e in encodings if e is not None] if have_b else []
    gradients = [x for e in encodings if e is not None for x in (e.gradient or (0.0, 0.0, 0.0))] \
        if have_gradient else []
    return {VOLUMES: int(volumes), VOLUME_INDEX: int(volume_index),
            BVALUE: np.asarray(bvalues, dtype=np.float32), GRADIENT: np.asarray(gradients, dtype=np.float32)}


def of_file(ds) -> dict:
    """A file's record as one volume: its diffusion encoding as its header gives it."""
    return features([diffusion.diffusion(ds)])
