"""Everything that shapes a conversion, as one frozen value the Beam graph is built from."""
from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.probe import DEFAULT_MAX_PIXELS
from transforms.shard_plan import ShardBounds


@dataclasses.dataclass(frozen=True)
class ConversionSettings:
    patterns: tuple[str, ...]
    output_dir: str
    bounds: ShardBounds
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0
    compression: str = "none"          # or "gzip"
    min_shards: int = 1
    labels_csv: Optional[str] = None
    label_key: str = "path"
    label_column: str = "label"
    multi_label: bool = False
    labels_from_dirs: bool = False
    missing_label: str = "skip"        # skip | error | unlabeled
    splits: tuple[tuple[str, float], ...] = (("train", 1.0),)
    split_by: Optional[str] = None     # None: patient for DICOM, record otherwise
    split_column: Optional[str] = None

    def split_by_for(self, kind: str) -> str:
        if self.split_by:
            return self.split_by
        return "patient" if kind == "dicom" else "record"
