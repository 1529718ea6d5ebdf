"""The image grid a mask is drawn on, declared once: ``Grid``, used by every mask source and by the record builder.

A record's grid is its slices in record order (k), rows (j) and columns (i), as
docs/DICOM.md "Geometry" and transforms.dicom.patient_space describe: each slice's SOP
Instance UID and/or Image Position (Patient) (LPS mm), the Image Orientation (Patient) (row
then column cosines), the Pixel Spacing (DICOM's row spacing, column spacing) and the Frame of
Reference UID. A source checks what it needs of it (transforms.masks.seg: ``check``;
transforms.masks.rtstruct: its plane), and leaves unchecked what it does not have.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from dcm2tfrecord.transforms.record_model import ProbedRecord


@dataclasses.dataclass(frozen=True)
class Grid:
    """The image volume a mask must lie on, its slices in record order (k).

    ``instance_uids`` (one per slice) and/or ``positions`` (Image Position (Patient), LPS mm,
    one per slice) place a slice; ``orientation`` (6 cosines), ``pixel_spacing`` (row spacing,
    column spacing) and ``frame_of_reference_uid`` are checked against an annotation where both
    have them. ``slice_spacing``: mm, the step of a grid of one slice (more: measured from its
    positions), where the record knows it.
    """
    rows: int
    columns: int
    instance_uids: Sequence[str] = ()
    positions: Sequence[Sequence[float]] = ()
    orientation: Sequence[float] = ()
    pixel_spacing: Sequence[float] = ()
    frame_of_reference_uid: str = ""
    slice_spacing: float = 0.0

    def check(self) -> None:
        """ValueError when the grid cannot place a mask's slices: no pixels, neither UIDs nor
        positions, or facts of the wrong length."""
        if self.rows < 1 or self.columns < 1:
            raise ValueError(f"a grid of {self.rows} x {self.columns} pixels")
        if not self.instance_uids and not self.positions:
            raise ValueError("a grid needs its slices' SOP Instance UIDs or positions")
        if self.instance_uids and self.positions and len(self.instance_uids) != len(self.positions):
            raise ValueError(f"{len(self.instance_uids)} UIDs for {len(self.positions)} positions")
        if any(len(p) != 3 for p in self.positions):
            raise ValueError("a position is 3 numbers")
        if self.orientation and len(self.orientation) != 6:
            raise ValueError("an orientation is 6 direction cosines")
        if self.pixel_spacing and len(self.pixel_spacing) != 2:
            raise ValueError("a pixel spacing is 2 numbers (row spacing, column spacing)")

    @property
    def depth(self) -> int:
        """The number of slices: one per position, else one per UID."""
        return len(self.positions) or len(self.instance_uids)

    @classmethod
    def of_slices(cls, slices: Sequence["ProbedRecord"], pixel_spacing: Sequence[float] = (),
                  frame_of_reference_uid: str = "") -> "Grid":
        """The grid of a series volume's probed slices in record order
        (transforms.series.volumes.Volume.members): UIDs, positions and orientation from
        their headers; Pixel Spacing is not probed, so the caller passes it where known."""
        first = slices[0]
        uids = tuple(s.ids.sop_uid if s.ids else "" for s in slices)
        infos = [s.slice_info for s in slices]
        positions = tuple(tuple(float(v) for v in i.position) for i in infos if i is not None and
                          len(i.position) == 3)
        orientation = tuple(float(v) for v in (infos[0].orientation if infos[0] is not None else ()))
        grid = cls(rows=first.spec.height, columns=first.spec.width,
                   instance_uids=uids if all(uids) else (),
                   positions=positions if len(positions) == len(slices) else (),
                   orientation=orientation if len(orientation) == 6 else (),
                   pixel_spacing=tuple(float(v) for v in pixel_spacing),
                   frame_of_reference_uid=frame_of_reference_uid)
        grid.check()
        return grid
