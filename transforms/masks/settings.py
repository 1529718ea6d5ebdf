"""The mask settings as one frozen value, ``MaskSettings``, whose absence is the only "masks off", and the mask choices.

``--class_map`` turns masks on; with it come ``--mask_layout``, ``--missing_mask`` and the
NIfTI pairings ``--mask_pattern`` or ``--mask_column``. ``pipeline/options/table.py``'s
``settings()`` builds one ``MaskSettings`` of them (the class map read and checked with the
other options, before any work) and puts it on ``DecodeSettings.masks``; without
``--class_map`` that field is None, and every step asks ``settings.masks is None`` and nothing
else. The choices are ``StrEnum``s: they equal, print and record as the same strings.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.dataset.choices import StrEnum

if TYPE_CHECKING:
    from dcm2tfrecord.transforms.masks.classes import ClassMap
    from dcm2tfrecord.transforms.masks.pairing import MaskPattern

class MaskLayout(StrEnum):
    """``--mask_layout``: how a record's mask holds its classes (dataset/masks.py owns the dtype and
    channel rule of each; transforms.masks.classes.Canvas draws them)."""
    LABEL_MAP = mask_format.LABEL_MAP
    BINARY = mask_format.BINARY


class MissingMask(StrEnum):
    """``--missing_mask``: what becomes of a record no mask source covers."""
    SKIP = "skip"
    EMPTY = "empty"
    ERROR = "error"


@dataclasses.dataclass(frozen=True)
class MaskSettings:
    """Everything that shapes the masks of a conversion with ``--class_map``."""
    class_map: "ClassMap"                          # the classes, and the rules naming them
    layout: MaskLayout = MaskLayout.LABEL_MAP
    missing: MissingMask = MissingMask.SKIP
    # NIfTI masks paired with NIfTI images (transforms.masks.pairing): by a path pattern, or by a
    # column of the labels CSV
    pattern: Optional["MaskPattern"] = None
    column: Optional[str] = None
    # --class_locations: up to this many voxels of each class kept with the record, its voxel count
    # and box (transforms.masks.locations); 0: none
    locations: int = 0

    def __post_init__(self) -> None:     # a choice given as its string holds its member
        object.__setattr__(self, "layout", MaskLayout(self.layout))
        object.__setattr__(self, "missing", MissingMask(self.missing))

    @property
    def class_count(self) -> int:
        return len(self.class_map.classes)

    @property
    def pairs_files(self) -> bool:
        """Whether NIfTI masks are paired with NIfTI images (--mask_pattern or --mask_column)."""
        return self.pattern is not None or bool(self.column)
