"""Diffusion encoding of an MR image: b-value and gradient direction (standard attributes)."""
from __future__ import annotations

import dataclasses
from typing import Optional

from dcm2tfrecord.transforms.dicom import patient_space


@dataclasses.dataclass(frozen=True)
class Diffusion:
    bvalue: float
    gradient: tuple[float, ...] = ()      # unit vector, patient LPS; () when none


def diffusion(ds) -> Optional[Diffusion]:
    """From Diffusion b-value (0018,9087) and Diffusion Gradient Orientation (0018,9089)."""
    try:
        value = ds.get("DiffusionBValue")
        if value is None or value == "":
            return None
        bvalue = float(value)
    except (TypeError, ValueError):
        return None
    gradient = patient_space.floats(ds.get("DiffusionGradientOrientation"), 3)
    return Diffusion(bvalue, gradient if any(gradient) else ())
