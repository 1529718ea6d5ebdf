"""The bundled sample archive: pydicom's real test files plus generated images.

Used by ``./run_local.sh`` and the tests. Generation is deterministic (fixed
seeds), so the sample converts to the same dataset on every machine.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
from PIL import Image

# pydicom's test folder also holds notes, JSON, ICC profiles and dumps; the
# sample takes its DICOM files only.
_NOT_DICOM = {".txt", ".json", ".icc", ".dump", ".gz", ".py"}


def pydicom_test_files() -> str:
    import pydicom
    return os.path.join(os.path.dirname(pydicom.__file__), "data", "test_files")


def copy_dicom_files(dest: str) -> int:
    src_root = pydicom_test_files()
    copied = 0
    for folder, _, files in os.walk(src_root):
        for name in sorted(files):
            if os.path.splitext(name)[1].lower() in _NOT_DICOM or name.upper().startswith("README"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), src_root)
            target = os.path.join(dest, "dicom", rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(folder, name), target)
            copied += 1
    return copied


def synthetic_image(rng: np.random.Generator, height: int, width: int, channels: int,
                    dtype: str = "uint8") -> np.ndarray:
    """A smooth gradient with a few blobs: compresses like a real image, not noise."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    base = (np.sin(xx / rng.uniform(5, 30)) + np.cos(yy / rng.uniform(5, 30)) + 2) / 4
    for _ in range(3):
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(3, max(4, height / 4))
        base += 0.5 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
    base = np.clip(base / base.max(), 0, 1)
    top = np.iinfo(dtype).max
    planes = [base if c == 0 else np.roll(base, 7 * c, axis=1) for c in range(channels)]
    arr = np.stack(planes, axis=-1) * top
    return arr.astype(dtype) if channels > 1 else arr[..., 0].astype(dtype)


def write_images(dest: str, count: int = 36, seed: int = 7) -> int:
    """PNG (gray, RGB, RGBA, 16-bit) and JPEG (gray, RGB) images of mixed sizes."""
    rng = np.random.default_rng(seed)
    kinds = [("png", 1, "uint8"), ("png", 3, "uint8"), ("png", 4, "uint8"),
             ("png", 1, "uint16"), ("jpg", 1, "uint8"), ("jpg", 3, "uint8")]
    os.makedirs(os.path.join(dest, "images"), exist_ok=True)
    for i in range(count):
        ext, channels, dtype = kinds[i % len(kinds)]
        height, width = int(rng.integers(32, 160)), int(rng.integers(32, 160))
        arr = synthetic_image(rng, height, width, channels, dtype)
        if dtype == "uint16":
            image = Image.fromarray(arr)
        else:
            image = Image.fromarray(arr, mode={1: "L", 3: "RGB", 4: "RGBA"}[channels])
        path = os.path.join(dest, "images", f"img_{i:03d}.{ext}")
        if ext == "jpg":
            image.save(path, quality=90)
        else:
            image.save(path)
    return count


def build_sample_archive(dest: str) -> str:
    """(Re)creates the sample archive under ``dest``; returns ``dest``."""
    if os.path.isdir(dest):
        shutil.rmtree(dest)
    os.makedirs(dest)
    copy_dicom_files(dest)
    write_images(dest)
    return dest
