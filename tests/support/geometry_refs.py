"""Independent references for issue 32's geometry: dcm2niix, nibabel and SimpleITK read the
same files as the converter, and ``assert_same_geometry`` compares an affine in the record
contract's convention (voxel [k, j, i] = slice in record order, row, column -> LPS mm) with
theirs voxel by voxel, after finding by value which of their axes is which of ours.

Conventions. Every affine here maps the index tuple of ITS OWN array, in that array's axis
order, to millimetres: a NIfTI's data[i0, i1, i2] <-> affine_ras @ [i0, i1, i2, 1] (RAS);
``nibabel_series``'s array [row, column, slice] <-> its LPS affine; ``sitk_series`` returns
[z, y, x] and an LPS affine already for that order, i.e. the contract's. DICOM is LPS; NIfTI
is RAS = diag(-1, -1, 1) LPS.

Measured behaviour (dcm2niix v1.0.20260724, SimpleITK 2.5 / ITK 5.4, nibabel 5.4, on the
series of tests/support/series_builders.py; tests/transforms/series/test_geometry_refs.py
asserts each point, so a new version that behaves otherwise fails there):

- nibabel 5.4's ``Wrapper.get_data()`` is NOT transposed: it is [row, column] as pydicom's
  pixel_array, and ``Wrapper.affine`` maps [row, column, slice] (column 0 = column cosine x
  row spacing, column 1 = row cosine x column spacing, column 2 = normal x SpacingBetweenSlices
  or SliceThickness). ``nibabel_series`` replaces column 2 with the step between the first and
  last positions nibabel parsed.
- dcm2niix on a regular series: one NIfTI, data [column, row reversed, slice], the slices in
  ascending order along the normal whatever the files' order (det(affine) < 0); bvec in FSL's
  convention, in those image axes (``fsl_bvecs_to_lps`` turns it back into LPS).
- dcm2niix on uneven slice positions (the GE gap, missing slices, a repeated position):
  warns "Interslice distance varies in this volume (incompatible with NIfTI format)" and writes
  two files, no split: NAME.nii, every file stacked as acquired (the repeated position twice)
  with an affine that uses the FIRST step for every slice (only the first two slices sit where
  the DICOM says: the GE case's last slice is 402.5 mm off), and NAME_Eq_1.nii, resampled to
  equidistant slices (GE case: 8 of 29.29 mm; missing slices: the full run of 10 of 2.5 mm;
  repeated position: 5 of 2 mm), so not comparable voxel for voxel.
- dcm2niix with a localizer in the series (same series and size, orthogonal orientation):
  stacks it into the volume among the axial slices (6 slices of 6 files), with the
  same "Interslice distance varies" warning and an _Eq_1 file; it does not split it off.
- dcm2niix on a tilted gantry (0018,1120 set, the table stepping along z, not along the
  normal): prints "Gantry Tilt based on 0018,1120 15, estimated from slice vector 15" and
  writes the slices as acquired in NAME.nii, whose affine keeps the tilted in-plane columns but
  steps |step| cos(tilt) along z per slice (2.415 mm for 2.5 mm at 15 degrees: slice k is
  k x 0.085 mm off along z), and NAME_Tilt_1.nii, resampled (more rows: 103 for 96) onto an
  unsheared grid, not comparable voxel for voxel.
- dcm2niix on 4-D (TemporalPositionIdentifier) and DWI (DiffusionBValue/GradientOrientation)
  series: one 4-D NIfTI [x, y, z, volume]; the DWI one with .bval and .bvec.
- SimpleITK (ImageSeriesReader on GDCMSeriesFileNames): sorts the files along the normal and
  builds an orthogonal grid: spacing |P_last - P_first| / (n - 1), direction the slice normal.
  On uneven positions it warns (stderr) "Non uniform sampling or missing slices detected" and
  keeps that mean spacing, which is the contract's column 0, so it agrees with the contract's
  affine there (and both misplace the middle slices); a repeated position is stacked twice,
  a localizer is stacked in; on the tilted gantry it says nothing and steps 2.5 mm along the
  normal instead of along z (slice 7 is 4.57 mm off); 4-D and DWI series come back as one 3-D
  stack of every file (T x Z slices, sorted along the normal, a "Non uniform sampling" warning).
"""
from __future__ import annotations

import glob
import itertools
import json
import os
import subprocess
import warnings
from typing import NamedTuple, Sequence

import dcm2niix
import nibabel as nib
import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)           # "The DICOM readers are highly experimental"
    from nibabel.nicom import dicomwrappers

DCM2NIIX = dcm2niix.bin                                 # the PyPI wheel's own binary
RAS_FROM_LPS = np.diag([-1.0, -1.0, 1.0, 1.0])           # its own inverse
TOLERANCE_MM = 1e-3


class NiftiVolume(NamedTuple):
    data: np.ndarray             # as nibabel loads it: [i0, i1, i2] or [i0, i1, i2, volume]
    affine_ras: np.ndarray       # 4 x 4, data index -> RAS mm
    bval: np.ndarray | None      # one per volume, from NAME.bval
    bvec: np.ndarray | None      # [volume, 3], from NAME.bvec (FSL convention, see fsl_bvecs_to_lps)
    sidecar: dict                # NAME.json (BIDS sidecar)


class Dcm2niixRun(NamedTuple):
    volumes: dict[str, NiftiVolume]    # by file name without .nii, e.g. "7_ge_gap", "7_ge_gap_Eq_1"
    log: str                           # dcm2niix's stdout and stderr


def dcm2niix_run(folder: str, tmp: str) -> Dcm2niixRun:
    """Runs dcm2niix on ``folder`` (uncompressed NIfTI, BIDS sidecars not anonymised, names
    SERIESNUMBER_PROTOCOL plus dcm2niix's suffixes) into the new or empty folder ``tmp``."""
    os.makedirs(tmp, exist_ok=True)
    if os.listdir(tmp):
        raise ValueError(f"{tmp} is not empty: dcm2niix would add suffixes to the names it writes")
    done = subprocess.run([DCM2NIIX, "-z", "n", "-b", "y", "-ba", "n", "-f", "%s_%p", "-o", tmp, folder],
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"dcm2niix failed ({done.returncode}): {done.stdout}{done.stderr}")
    volumes = {}
    for path in sorted(glob.glob(os.path.join(tmp, "*.nii"))):
        stem = path[:-len(".nii")]
        image = nib.load(path)
        assert isinstance(image, nib.Nifti1Image), path
        sidecar_path = stem + ".json"
        if not os.path.exists(sidecar_path):            # _Eq_ and _Tilt_ files share the plain name's
            sidecar_path = stem.rsplit("_", 2)[0] + ".json"
        with open(sidecar_path) as handle:
            sidecar = json.load(handle)
        bval = np.loadtxt(stem + ".bval", ndmin=1) if os.path.exists(stem + ".bval") else None
        bvec = np.loadtxt(stem + ".bvec", ndmin=2).T if os.path.exists(stem + ".bvec") else None
        volumes[os.path.basename(stem)] = NiftiVolume(np.asarray(image.get_fdata()), np.asarray(image.affine, float),
                                                      bval, bvec, sidecar)
    return Dcm2niixRun(volumes, done.stdout + done.stderr)


def dcm2niix_volumes(folder: str, tmp: str) -> list[NiftiVolume]:
    """dcm2niix's NIfTIs of ``folder``, in file-name order (see ``dcm2niix_run``)."""
    return list(dcm2niix_run(folder, tmp).volumes.values())


def fsl_bvecs_to_lps(bvec: np.ndarray, affine_ras: np.ndarray) -> np.ndarray:
    """dcm2niix's FSL-convention gradients ([volume, 3], in the NIfTI's voxel axes) as unit
    vectors in patient LPS, as DICOM's (0018,9089). FSL negates the first axis of a NIfTI whose
    affine has a positive determinant; dcm2niix writes negative ones (row order reversed), the
    only case handled here."""
    if np.linalg.det(affine_ras[:3, :3]) > 0:
        raise ValueError("a NIfTI with det(affine) > 0: its FSL bvecs have the first axis negated, not handled")
    rotation = affine_ras[:3, :3] / np.linalg.norm(affine_ras[:3, :3], axis=0)
    return (np.diag([-1.0, -1.0, 1.0]) @ rotation @ np.asarray(bvec, float).T).T


def nibabel_series(paths_in_order: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """nibabel's view of single-frame files stacked in the given order: (array [row, column,
    slice] of ``get_data()``, LPS affine for that array). The slice column is the step between
    the first and last Image Positions nibabel parsed, the rest is the first file's affine."""
    wrappers = [dicomwrappers.wrapper_from_file(p) for p in paths_in_order]
    array = np.stack([w.get_data() for w in wrappers], axis=-1)
    affine = np.array(wrappers[0].affine, float)
    if len(wrappers) > 1:
        affine[:3, 2] = (wrappers[-1].image_position - wrappers[0].image_position) / (len(wrappers) - 1)
    return array, affine


def nibabel_affine(paths_in_order: Sequence[str]) -> np.ndarray:
    """``nibabel_series``'s affine in the contract's convention: our voxel [k, j, i] is
    nibabel's [row j, column i, slice k], so our columns are its columns 2, 0, 1."""
    return nibabel_series(paths_in_order)[1][:, [2, 0, 1, 3]]


def sitk_series(folder: str, series_id: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """SimpleITK's reading of the series ``series_id`` (the first GDCM finds by default):
    (array [z, y, x] = GetArrayFromImage, LPS affine for [z, y, x], the contract's order)."""
    import SimpleITK as sitk

    ids = sitk.ImageSeriesReader.GetGDCMSeriesIDs(folder)
    if not ids:
        raise AssertionError(f"SimpleITK finds no DICOM series in {folder}")
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(sitk.ImageSeriesReader.GetGDCMSeriesFileNames(folder, series_id or ids[0]))
    image = reader.Execute()
    direction = np.array(image.GetDirection(), float).reshape(3, 3)     # columns: index axes x, y, z
    spacing = np.array(image.GetSpacing(), float)
    affine = np.eye(4)
    affine[:3, :3] = (direction * spacing)[:, ::-1]                    # [x, y, z] -> [z, y, x]
    affine[:3, 3] = image.GetOrigin()
    return sitk.GetArrayFromImage(image), affine


def our_affine_from_slices(positions: Sequence[Sequence[float]], iop: Sequence[float],
                           pixel_spacing: Sequence[float], single_slice_spacing: float | None = None) -> np.ndarray:
    """The contract's affine written out: voxel [k, j, i, 1] -> LPS; column 0 the mean slice step
    (P_last - P_first) / (n - 1) (normal x ``single_slice_spacing`` for one slice), column 1
    the column cosine x row spacing, column 2 the row cosine x column spacing, column 3 P_first."""
    points = np.asarray(positions, float).reshape(-1, 3)
    row, col = np.asarray(iop[:3], float), np.asarray(iop[3:6], float)
    if len(points) > 1:
        step = (points[-1] - points[0]) / (len(points) - 1)
    elif single_slice_spacing is not None:
        step = np.cross(row, col) * single_slice_spacing
    else:
        raise ValueError("one slice: give single_slice_spacing")
    affine = np.eye(4)
    affine[:3, 0], affine[:3, 1], affine[:3, 2] = step, col * float(pixel_spacing[0]), row * float(pixel_spacing[1])
    affine[:3, 3] = points[0]
    return affine


def world_corners(affine: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The LPS (or RAS) points of the 8 corner voxels' centres, [8, 3], in itertools.product order
    of (0, n - 1) over the axes."""
    corners = np.array(list(itertools.product(*[(0, n - 1) for n in shape[:3]])), float)
    return (np.asarray(affine, float) @ np.c_[corners, np.ones(len(corners))].T).T[:, :3]


def _three_d(array: np.ndarray, who: str) -> np.ndarray:
    array = np.asarray(array)
    while array.ndim > 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim != 3:
        raise AssertionError(f"{who} array has shape {array.shape}, not 3-D")
    return array.astype(np.float64)


def _fits_linearly(candidate: np.ndarray, theirs: np.ndarray) -> bool:
    """theirs == a * candidate + b (a > 0) to 1e-6 of its spread: rescaling is allowed, reordering is not."""
    x, y = candidate.ravel(), theirs.ravel()
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return bool(np.ptp(x) == np.ptp(y) == 0)
    design = np.c_[x, np.ones_like(x)]
    (a, b), *_ = np.linalg.lstsq(design, y, rcond=None)
    return bool(a > 0 and np.max(np.abs(a * x + b - y)) <= 1e-6 * np.ptp(y))


def axis_matches(our_array: np.ndarray, their_array: np.ndarray) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every (perm, flipped) with np.flip(np.transpose(ours, perm), flipped) equal to theirs up
    to a rescaling a * value + b (a > 0): their axis a is our axis perm[a], reversed if a is in
    ``flipped``. Of the 48 for 3-D; flips of length-1 axes are left out (they change nothing)."""
    ours, theirs = _three_d(our_array, "our"), _three_d(their_array, "their")
    found = []
    for perm in itertools.permutations(range(3)):
        moved = np.transpose(ours, perm)
        if moved.shape != theirs.shape:
            continue
        axes = [a for a in range(3) if theirs.shape[a] > 1]
        for count in range(len(axes) + 1):
            for flipped in itertools.combinations(axes, count):
                if _fits_linearly(np.flip(moved, flipped) if flipped else moved, theirs):
                    found.append((perm, flipped))
    return found


def _our_index(their_index: Sequence[int], perm: Sequence[int], flipped: Sequence[int],
               their_shape: Sequence[int]) -> list[int]:
    ours = [0, 0, 0]
    for a, v in enumerate(their_index):
        ours[perm[a]] = their_shape[a] - 1 - v if a in flipped else v
    return ours


def assert_same_geometry(our_affine: np.ndarray, our_array: np.ndarray, their_affine: np.ndarray,
                         their_array: np.ndarray, *, their_space: str, atol: float = TOLERANCE_MM) -> float:
    """Asserts that ``our_affine`` (contract convention, LPS, for ``our_array`` [k, j, i] or
    [k, j, i, 1]) and ``their_affine`` (for ``their_array`` in its own axis order, in
    ``their_space`` "lps" or "ras") put the same voxels at the same place: finds the one axis
    permutation and flips that map our values onto theirs, then checks that each of their 8
    corner voxels and our voxel holding the same value map to one LPS point within ``atol`` mm.
    Fails when no mapping fits, when several that disagree fit (symmetric data decides nothing),
    or when a corner is off. Returns the largest corner distance (mm)."""
    if their_space not in ("lps", "ras"):
        raise ValueError("their_space is 'lps' or 'ras'")
    theirs_lps = np.asarray(their_affine, float) if their_space == "lps" else RAS_FROM_LPS @ their_affine
    their_shape = _three_d(their_array, "their").shape
    matches = axis_matches(our_array, their_array)
    if not matches:
        raise AssertionError(f"no axis permutation/flip maps our array {np.shape(our_array)} onto theirs "
                             f"{np.shape(their_array)} by value: different voxels, not just another order")
    their_corners = list(itertools.product(*[(0, n - 1) for n in their_shape]))
    correspondences = {tuple(tuple(_our_index(c, p, f, their_shape)) for c in their_corners) for p, f in matches}
    if len(correspondences) > 1:
        raise AssertionError(f"the values fit {len(matches)} axis mappings that disagree {matches}: "
                             "the data are too symmetric to decide the geometry")
    ours_idx = np.array(next(iter(correspondences)), float)
    ours_world = (np.asarray(our_affine, float) @ np.c_[ours_idx, np.ones(8)].T).T[:, :3]
    their_world = (theirs_lps @ np.c_[np.array(their_corners, float), np.ones(8)].T).T[:, :3]
    distance = np.linalg.norm(ours_world - their_world, axis=1)
    if distance.max() > atol:
        worst = int(distance.argmax())
        raise AssertionError(
            f"corner voxels differ by up to {distance.max():.4g} mm (> {atol} mm): their voxel "
            f"{their_corners[worst]} = our {tuple(int(v) for v in ours_idx[worst])} at theirs "
            f"{np.round(their_world[worst], 4).tolist()} vs ours {np.round(ours_world[worst], 4).tolist()} "
            f"(axis mapping {matches[0]})")
    return float(distance.max())
