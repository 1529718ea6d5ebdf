"""Diffusion-weighted MR: the b-value and gradient direction of one image (or one frame).

``diffusion(ds)`` reads, in this order (the first that says anything wins):

1. the standard attributes, Diffusion b-value (0018,9087) and Diffusion
   Gradient Orientation (0018,9089), at the top level or inside the MR
   Diffusion Sequence (0018,9117) / Diffusion Gradient Direction Sequence
   (0018,9076), as Enhanced MR keeps them and some classic files copy them;
2. Siemens: the CSA Image Header (0029,xx10 of the ``SIEMENS CSA HEADER``
   block), parsed by nibabel's ``nibabel.nicom.csareader`` (``B_value``,
   ``DiffusionGradientDirection``), as ``nibabel.nicom.dicomwrappers.SiemensWrapper``
   reads it; where the CSA header (or one of those two in it) is missing, the
   ``SIEMENS MR HEADER`` block's own copies: (0019,xx0C) ``B_value`` (IS) and
   (0019,xx0E) ``DiffusionGradientDirection`` (FD, 3 values), which non-mosaic
   images keep without a CSA header (dcm2niix kDiffusion_bValueSiemens and
   kDiffusionGradientDirectionSiemens, nii_dicom.cpp: it reads the header's
   group 0019 first and the CSA header (0029) after it, over the same fields,
   and takes (0019,xx0C) only where no CSA ``B_value`` was read, issue 409);
3. GE: b-value the first value of (0043,xx39) modulo 1e9, gradient (0019,xxBB/BC/BD);
4. Philips: b-value (2001,xx03), gradient (2005,xxB0/B1/B2).

The gradient returned is a unit vector in the DICOM patient frame (LPS), as
Diffusion Gradient Orientation is, or ``()`` when the image has none (b = 0,
isotropic / trace images, a zero vector). Vendor conventions (cited from
dcm2niix, https://github.com/rordenlab/dcm2niix, console/nii_dicom.cpp and
console/nii_dicom_batch.cpp, commit 98ecd0b):

- Siemens CSA ``DiffusionGradientDirection``, Siemens (0019,xx0E) and Philips
  (2005,10B0..B2) are in the patient frame already: dcm2niix's
  siemensPhilipsCorrectBvecs treats them as world (patient) coordinates and
  projects them on the image axes.
- GE (0019,10BB..BD) are in GE's logical frame (dcm2niix GE/README.md: "MR
  physics logical coordinate"); geCorrectBvecs turns them into dcm2niix's
  image-frame bvec by a swap (row phase encoding), sign flips that depend on
  the slice orientation, and its row flip. ``_ge_to_lps`` undoes dcm2niix's
  image frame (bvec = (g.row, -g.column, g.normal), siemensPhilipsCorrectBvecs)
  on that result, so a GE gradient comes out in LPS as the others do.
- GE b-values carry a bias of 1e9 on some software (set_bValGE: ``bVal % 1000000000``,
  dcm2niix issue 602); and a gradient of length between 0.03 and 0.97 means
  the b-value was scaled by |g|^2 (geCorrectBvecs, issues 163, 245): the
  b-value is then b |g|^2 rounded to 5 (at least 5), the vector normalised.

Vendor private data that does not parse gives None (the image is converted
without diffusion metadata); a standard attribute that does not parse is a
ConversionError. Pure functions of the header.
"""
from __future__ import annotations

import dataclasses
import math
import struct
from typing import Optional

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.transforms.dicom import quiet
from dcm2tfrecord.transforms.errors import ConversionError


@dataclasses.dataclass(frozen=True)
class Diffusion:
    """One image's diffusion weighting: b in s/mm^2, gradient a unit LPS vector or ()."""
    bvalue: float
    gradient: tuple[float, ...] = ()


# manufacturer (upper case, as its Manufacturer (0008,0070) starts) -> the private blocks it keeps
# diffusion in: (group, private creator, element offsets within the block)
SIEMENS, GE, PHILIPS = "SIEMENS", "GE", "PHILIPS"
PRIVATE_BLOCKS = {
    SIEMENS: ((0x0029, "SIEMENS CSA HEADER", (0x10,)), (0x0019, "SIEMENS MR HEADER", (0x0C, 0x0E))),
    GE: ((0x0043, "GEMS_PARM_01", (0x39,)), (0x0019, "GEMS_ACQU_01", (0xBB, 0xBC, 0xBD))),
    PHILIPS: ((0x2001, "Philips Imaging DD 001", (0x03,)), (0x2005, "Philips MR Imaging DD 001",
                                                           (0xB0, 0xB1, 0xB2))),
}
_GE_B_BIAS = 1_000_000_000
_ZERO = 1e-6          # a gradient shorter than this is none


def vendor(ds) -> str:
    """SIEMENS, GE or PHILIPS for an MR image of theirs, else ""."""
    try:
        if str(ds.get("Modality", "") or "").strip().upper() != "MR":
            return ""
        manufacturer = str(ds.get("Manufacturer", "") or "").strip().upper()
    except Exception:
        return ""
    if manufacturer.startswith("SIEMENS"):
        return SIEMENS
    if manufacturer.startswith("GE ") or manufacturer.startswith("GE_") or manufacturer == "GE" \
            or manufacturer.startswith("GENERAL ELECTRIC"):
        return GE
    if manufacturer.startswith("PHILIPS"):
        return PHILIPS
    return ""


def _dataset(ds):
    """The pydicom Dataset under a transforms.dicom.record_elements.HeaderValues, or ``ds``."""
    inner = getattr(ds, "ds", None)
    return inner if inner is not None and hasattr(inner, "_dict") else ds


def private_block(ds, group: int, creator: str) -> Optional[int]:
    """The first element number (e.g. 0x1000) of ``creator``'s block in ``group``, or None.
    The Private Creator elements are read, not converted (the dataset is left as it was)."""
    elements = _dataset(ds)._dict
    for slot in range(0x10, 0x100):
        elem = elements.get(group << 16 | slot)
        if elem is None:
            continue
        value = elem.value
        if isinstance(value, bytes):
            value = value.decode("latin-1", "replace")
        if str(value or "").strip().rstrip("\0").strip() == creator:
            return slot << 8
    return None


def _vendor_blocks(ds, which: str) -> list[tuple[int, ...]]:
    """The tags of each of ``which``'s PRIVATE_BLOCKS found in ``ds`` (one tuple a block, in
    PRIVATE_BLOCKS' order; () for a block not there)."""
    out: list[tuple[int, ...]] = []
    for group, creator, offsets in PRIVATE_BLOCKS.get(which, ()):
        block = private_block(ds, group, creator)
        if block is None and which != SIEMENS:
            block = 0x1000
        elif block is None and group == 0x0019 and (group << 16 | 0x10) not in _dataset(ds)._dict:
            block = 0x1000        # SIEMENS MR HEADER's creator stripped: its usual block, as dcm2niix
        out.append(tuple(group << 16 | block | offset for offset in offsets) if block is not None else ())
    return out


def private_tags(ds) -> tuple[int, ...]:
    """The private tags diffusion() may read in this file: none unless a Siemens, GE or
    Philips MR (vendor); the blocks found by their private creators, GE's and Philips' at
    their usual block (xx = 10) where the creator is missing, as dcm2niix reads them (it reads
    them by tag alone), and Siemens' SIEMENS MR HEADER (0019,xx0C/0E) there only where group
    0019 has no private creator at xx = 10 at all (the CSA header only by its creator, as
    nibabel's reader finds it)."""
    return tuple(tag for block in _vendor_blocks(ds, vendor(ds)) for tag in block)


# ---------------------------------------------------------------- values


def _unit(vector) -> tuple[float, ...]:
    norm = math.sqrt(sum(v * v for v in vector))
    if not math.isfinite(norm) or norm < _ZERO:
        return ()
    return tuple(float(v) / norm + 0.0 for v in vector)


def _numbers(value) -> list[float]:
    """A DS/IS/FD/FL value (one or many, maybe still bytes: UN in an Implicit VR file) as floats."""
    if value is None:
        return []
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("ascii").strip("\0 ").split("\\")
    if isinstance(value, str):
        value = value.split("\\")
    if not hasattr(value, "__iter__"):
        value = [value]
    out = [float(v) for v in value]
    if not all(math.isfinite(v) for v in out):
        raise ValueError("not a finite number")
    return out


def _standard(ds) -> Optional[Diffusion]:
    bvalue, gradient, directionality = ds.get("DiffusionBValue"), ds.get("DiffusionGradientOrientation"), None
    items = ds.get("MRDiffusionSequence")
    if items:
        item = items[0]
        bvalue = item.get("DiffusionBValue", bvalue)
        directionality = item.get("DiffusionDirectionality")
        nested = item.get("DiffusionGradientDirectionSequence")
        if nested:
            gradient = nested[0].get("DiffusionGradientOrientation", gradient)
    return standard_values(bvalue, gradient, directionality)


def standard_values(bvalue, gradient, directionality=None) -> Optional[Diffusion]:
    """A Diffusion from Diffusion b-value, Diffusion Gradient Orientation and Diffusion
    Directionality values (None where absent), or None without a b-value."""
    if bvalue is None or bvalue == "":
        return None
    try:
        b = _numbers(bvalue)
        g = _numbers(gradient) if gradient not in (None, "") else []
    except (TypeError, ValueError) as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"Diffusion b-value / Gradient Orientation: {exc}") from exc
    if len(b) != 1 or b[0] < 0 or g and len(g) != 3:
        raise ConversionError(reasons.INVALID_VALUE,
                              f"Diffusion b-value {bvalue!r} / Gradient Orientation {gradient!r}: expected "
                              f"one non-negative number and 3 numbers")
    directional = str(directionality or "DIRECTIONAL").strip().upper() in ("DIRECTIONAL", "BMATRIX")
    return Diffusion(b[0], _unit(g) if directional and b[0] > 0 else ())


def _siemens_csa(ds) -> tuple[Optional[float], Optional[list[float]]]:
    """(B_value, DiffusionGradientDirection) of the CSA Image Header, None for each it lacks."""
    csareader = quiet.csareader()
    try:
        csa = csareader.get_csa_header(_dataset(ds))
        if csa is None:
            return None, None
        bvalue = csareader.get_b_value(csa)
        vector = csareader.get_g_vector(csa)
        return (None if bvalue is None else float(bvalue),
                None if vector is None else [float(v) for v in vector])
    except Exception:       # a CSA header that does not parse: nothing read from it
        return None, None


def _doubles(ds, tag: int) -> Optional[list[float]]:
    """An FD value of the file's private element ``tag``, or None where absent; still bytes
    (UN: an Implicit VR file without its private creator) it is read as dcm2niix's
    dcmMultiFloatDouble does, its length / 3 bytes a value (8: doubles, 4: floats)."""
    inner = _dataset(ds)
    if tag not in inner._dict:
        return None
    value = inner[tag].value
    if isinstance(value, (bytes, bytearray)):
        size = {24: "d", 12: "f"}[len(value)]
        encoding = getattr(inner, "original_encoding", None) or (True, True)
        value = struct.unpack(("<" if encoding[1] in (True, None) else ">") + 3 * size, bytes(value))
    return _numbers(value)


def _siemens(ds, tags: tuple[int, ...]) -> Optional[Diffusion]:
    csa_b, csa_g = _siemens_csa(ds)
    try:
        b = csa_b
        if b is None and tags:
            values = _private_numbers(ds, tags[0])          # (0019,xx0C) B_value
            b = float(values[0]) if values else None
        if b is None or not math.isfinite(b) or b < 0:
            return None
        if b == 0:
            return Diffusion(0.0, ())
        vector = csa_g
        if vector is None and tags:
            vector = _doubles(ds, tags[1])                  # (0019,xx0E) DiffusionGradientDirection
        if vector is not None and len(vector) != 3:
            return None
        return Diffusion(b, _unit(vector) if vector is not None else ())
    except Exception:       # a private value that does not parse: no diffusion read from it
        return None


def _private_numbers(ds, tag: int) -> Optional[list[float]]:
    inner = _dataset(ds)
    if tag not in inner._dict:
        return None
    return _numbers(inner[tag].value)


def _ge_to_lps(v: tuple[float, float, float], orientation, row_phase: bool) -> tuple[float, ...]:
    """GE's logical gradient -> LPS, by dcm2niix's geCorrectBvecs (nii_dicom_batch.cpp) then
    the inverse of its image frame (bvec = (g.row, -g.column, g.normal))."""
    row, col = orientation[:3], orientation[3:]
    normal = (row[1] * col[2] - row[2] * col[1], row[2] * col[0] - row[0] * col[2],
              row[0] * col[1] - row[1] * col[0])
    x, y, z = v
    if row_phase:             # "if (!col)": swap, then negate the new y
        x, y = y, -x
    # sliceDir: the patient axis the slice normal lies most along (1 sagittal, 2 coronal, 3 axial);
    # a negative sliceDir flips both dcm2niix's k axis and its z sign, which cancel in LPS
    axis = max(range(3), key=lambda a: abs(normal[a]))
    flip = ((1, 1, 0), (0, 1, 1), (0, 0, 1))[axis]
    bvec = [-c if f else c for c, f in zip((x, y, z), flip)]
    bvec[1] = -bvec[1]                     # dcm2niix's row flip (opts.isFlipY)
    bvec = [-c for c in bvec]              # "polar opposite" of dicm2nii's, kept by dcm2niix
    bx, by, bz = bvec
    return tuple(bx * r - by * c + bz * n for r, c, n in zip(row, col, normal))


def _round5(b: float) -> float:
    return 5.0 if 0 < b < 5 else float(int((b + 2.5) / 5) * 5)


def _ge(ds, tags: dict) -> Optional[Diffusion]:
    try:
        values = _private_numbers(ds, tags["b"])
        if not values:
            return None
        b = float(int(values[0]) % _GE_B_BIAS)
        parts = [_private_numbers(ds, t) for t in tags["g"]]
        if b <= 0 or any(not p for p in parts):
            return Diffusion(b, ())
        v = [p[0] for p in parts]  # type: ignore[index]
        length = math.sqrt(sum(c * c for c in v))
        if length < _ZERO:
            return Diffusion(b, ())
        if 0.03 < length < 0.97:           # b scaled by |g|^2 (geCorrectBvecs)
            b = _round5(b * length * length)
        orientation = [float(c) for c in ds.get("ImageOrientationPatient") or ()]
        phase = str(ds.get("InPlanePhaseEncodingDirection", "") or "").strip().upper()
        if len(orientation) != 6 or phase not in ("ROW", "COL"):
            return Diffusion(b, ())        # dcm2niix: "Unable to determine DTI gradients"
        unit = _unit(v)
        return Diffusion(b, _unit(_ge_to_lps((unit[0], unit[1], unit[2]), orientation, phase == "ROW")))
    except Exception:
        return None


def _philips(ds, tags: dict) -> Optional[Diffusion]:
    try:
        values = _private_numbers(ds, tags["b"])
        if not values:
            return None
        b = float(values[0])
        if not b >= 0:
            return None
        parts = [_private_numbers(ds, t) for t in tags["g"]]
        if b == 0 or any(not p for p in parts):
            return Diffusion(b, ())
        return Diffusion(b, _unit([p[0] for p in parts]))  # type: ignore[index]
    except Exception:
        return None


def _vendor_tags(ds, which: str) -> dict:
    found = private_tags(ds)
    if which == GE and len(found) == 4:
        return {"b": found[0], "g": found[1:]}
    if which == PHILIPS and len(found) == 4:
        return {"b": found[0], "g": found[1:]}
    return {}


def diffusion(ds) -> Optional[Diffusion]:
    """The image's diffusion weighting, or None when its header says none (see the module).

    ``ds``: a pydicom Dataset, or the probe's HeaderValues (its private elements are read
    from the Dataset underneath)."""
    try:
        standard = _standard(ds)
    except ConversionError:      # a malformed standard attribute: as if absent (the vendor's, if any)
        standard = None
    if standard is not None:
        return standard
    which = vendor(ds)
    if which == SIEMENS:
        return _siemens(ds, _vendor_blocks(ds, SIEMENS)[1])
    if which in (GE, PHILIPS):
        tags = _vendor_tags(ds, which)
        if not tags:
            return None
        return _ge(ds, tags) if which == GE else _philips(ds, tags)
    return None


def frame_diffusion(attrs: dict) -> Optional[Diffusion]:
    """One Enhanced frame's diffusion weighting from its lifted functional group attributes
    (transforms.dicom.functional_groups.frame_attributes: DiffusionBValue,
    DiffusionDirectionality, DiffusionGradientOrientation), or None without a b-value."""
    return standard_values(attrs.get("DiffusionBValue"), attrs.get("DiffusionGradientOrientation"),
                           attrs.get("DiffusionDirectionality"))
