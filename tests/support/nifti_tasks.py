"""An MSD-like NIfTI task folder for the mask tests (imagesTr/<case>_0000.nii.gz and
labelsTr/<case>.nii.gz, int16 images and uint8 label maps of values 0-4 on one oblique affine),
its --mask_pattern and its class map (1 -> kidney, 2 and 3 -> tumour, 4 -> no class)."""
from __future__ import annotations

import os

import nibabel as nib
import numpy as np
from nibabel.affines import from_matvec
from nibabel.eulerangles import euler2mat

OBLIQUE = from_matvec(euler2mat(0.3, -0.2, 0.45) @ np.diag((0.7, 0.9, 2.5)), [-101.5, 40.25, -12.0])
PATTERN = r"imagesTr/(.*)_0000\.nii\.gz=labelsTr/\1.nii.gz"
CLASS_MAP = 'kidney: ["1"]\ntumour: ["2", "3"]\n'
CLASSES = ["kidney", "tumour"]
SHAPES = {"case_1": (9, 7, 5), "case_2": (6, 8, 4), "case_3": (5, 5, 3)}


def image(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-1024, 3000, size=shape, dtype=np.int16)


def labels(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 100).integers(0, 5, size=shape, dtype=np.uint8)


def save(path, data: np.ndarray, affine=OBLIQUE) -> None:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    img = nib.Nifti1Image(data, affine)
    img.header.set_data_dtype(data.dtype)
    nib.save(img, str(path))


def class_map(folder) -> str:
    path = os.path.join(str(folder), "classes.yaml")
    with open(path, "w") as handle:
        handle.write(CLASS_MAP)
    return path


def msd(root, cases=SHAPES) -> dict:
    """An MSD-like task folder: imagesTr/<case>_0000.nii.gz and labelsTr/<case>.nii.gz; name -> (image, labels)."""
    written = {}
    for n, (case, shape) in enumerate(sorted(cases.items())):
        image_, labels_ = image(shape, n), labels(shape, n)
        save(os.path.join(str(root), "imagesTr", f"{case}_0000.nii.gz"), image_)
        save(os.path.join(str(root), "labelsTr", f"{case}.nii.gz"), labels_)
        written[case] = (image_, labels_)
    return written


def oblique(spacing_ijk) -> np.ndarray:
    """OBLIQUE's rotation and origin with voxel steps ``spacing_ijk`` (mm, along the file's i, j, k)."""
    return from_matvec(euler2mat(0.3, -0.2, 0.45) @ np.diag(spacing_ijk), [-101.5, 40.25, -12.0])


def msd_spacings(root, cases) -> dict:
    """:func:`msd` with a spacing of each case's own: ``cases`` name -> (shape, spacing along i, j, k)."""
    written = {}
    for n, (case, (shape, steps)) in enumerate(sorted(cases.items())):
        image_, labels_ = image(shape, n), labels(shape, n)
        save(os.path.join(str(root), "imagesTr", f"{case}_0000.nii.gz"), image_, oblique(steps))
        save(os.path.join(str(root), "labelsTr", f"{case}.nii.gz"), labels_, oblique(steps))
        written[case] = (image_, labels_)
    return written
