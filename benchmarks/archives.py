"""Deterministic, cached benchmark archives.

Six kinds, each written under ``benchmarks/.cache/<name>/`` (git-ignored):

* ``ct_archive(total_mb)``: uncompressed 512x512 int16 CT slices (Explicit VR
  Little Endian, Modality CT, RescaleSlope 1, RescaleIntercept -1024,
  BitsStored 12, PixelRepresentation 1), a few patients with two series each,
  a smooth anatomy-like phantom (body, fat, lungs, spine, ribs, organs) plus a
  little noise. ``total_mb`` is the archive size (MiB of .dcm files, about the
  same as the decoded output: 512 KiB of pixels per slice).
* ``ct_vendor_archive(total_mb)``: the same slices (pixels, patients, series,
  positions) under a real scanner's header: every element of pydicom's
  ``CT_small.dcm`` (a GE HiSpeed CT/i slice: 258 top-level elements, 179 of them
  in nine private groups, an Other Patient IDs Sequence), plus a private
  sequence of nested items (a vendor protocol block) and a Referenced Image
  Sequence; per slice, the UIDs, Instance Number, Image Position, Slice
  Location, Content/Acquisition Time and every numeric private value (DS, FL,
  FD, SL) vary, as a scanner's table position, mid-scan time and checksums do.
  The Image Pixel module is the ``ct`` kind's (512x512, Bits Stored 12,
  Pixel Representation 1, Rescale -1024/1), so the two kinds differ only in
  their headers (~7.1 KiB against ~1.3 KiB).
* ``jpeg_archive(total_mb)``: 8-bit grayscale 1024x1024 JPEG radiograph-like
  images; ``total_mb`` is the *decoded* pixel size (1 MiB per image), the
  archive itself is ~10x smaller.
* ``png_archive(total_mb)``: 224x224 RGB PNG photo-like images; ``total_mb`` is
  the decoded pixel size (147 KiB per image).
* ``mf_archive(total_mb)``: few large files: multi-frame CT volumes, 80 frames
  of 512x512 int16 (40 MiB of pixels each), CT Image Storage with
  NumberOfFrames, Explicit VR Little Endian, one top-level RescaleSlope 1 /
  RescaleIntercept -1024; frame k is ``ct_pixels`` at height k/79 of the
  file's own series (own anatomy parameters, own noise per frame), spread
  over 4 patients. ``total_mb`` is the *decoded* pixel size (40 MiB per file);
  the files are that size plus a ~2 KiB header.
* ``mf_rle_archive(total_mb)``: the same volumes, pixel for pixel, in RLE
  Lossless (1.2.840.10008.1.2.5), encoded by pydicom (``Dataset.compress``);
  ~17 MiB per file (2.4x).

``DCM2TFRECORD_BENCH_CACHE`` names another folder for the cache (read at import: every
benchmark that imports ``CACHE_DIR`` follows it); tests/e2e/test_bench_smoke_a.py gives each
smoke run its own, so runs in parallel neither share nor reuse what another built.

Every file depends only on (kind, parameters, index), so generation is
resumable: files are written to a temp name and renamed, existing ones are
kept, and a marker ``<name>.complete`` next to the archive directory (JSON:
parameters, counts, bytes) is written last. An archive whose marker matches its parameters is reused as is.

CLI: ``python -m benchmarks.archives ct 500`` (kinds: ct, ct_vendor, jpeg, png, mf, mf_rle).
"""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import multiprocessing
import os
import sys
import time
from typing import Callable, Optional

import numpy as np

MIB = 1 << 20
GENERATOR_VERSION = 1
BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
CACHE_DIR = os.environ.get("DCM2TFRECORD_BENCH_CACHE") or os.path.join(BENCH_DIR, ".cache")
MARKER = ".complete"

CT_SIZE = 512
CT_SLICE_BYTES = CT_SIZE * CT_SIZE * 2
MF_FRAMES = 80                          # frames per multi-frame volume: 40 MiB decoded
JPEG_SIZE = 1024
PNG_SIZE = 224


@dataclasses.dataclass(frozen=True)
class Archive:
    kind: str
    path: str
    files: int
    source_bytes: int      # bytes of the files on disk
    pixel_bytes: int       # bytes of the decoded pixels (what a converter writes, plus framing)
    params: dict

    @property
    def source_mb(self) -> float:
        return self.source_bytes / MIB

    @property
    def pixel_mb(self) -> float:
        return self.pixel_bytes / MIB

    def file_paths(self) -> list[str]:
        out = []
        for folder, dirs, names in os.walk(self.path):
            dirs.sort()
            out.extend(os.path.join(folder, n) for n in sorted(names) if not n.startswith("."))
        return out


# ---------------------------------------------------------------- CT phantom

_GRID: Optional[tuple[np.ndarray, np.ndarray]] = None


def _grid() -> tuple[np.ndarray, np.ndarray]:
    global _GRID
    if _GRID is None:
        c = (np.arange(CT_SIZE, dtype=np.float32) - CT_SIZE / 2 + 0.5)
        _GRID = np.meshgrid(c, c, indexing="xy")   # (x, y), millimetre-ish units of 0.7 mm
    return _GRID


def _series_params(seed: int, series: int) -> dict:
    rng = np.random.default_rng([seed, 1, series])
    return {
        "body_a": rng.uniform(190, 225), "body_b": rng.uniform(140, 170),
        "dx": rng.uniform(-12, 12), "dy": rng.uniform(-10, 10),
        "lung_x": rng.uniform(75, 95), "organs": rng.uniform(-60, 60, size=(4, 2)),
        "organ_hu": rng.uniform(-30, 60, size=4), "organ_r": rng.uniform(20, 45, size=4),
        "ribs": int(rng.integers(8, 12)), "rot": rng.uniform(-0.1, 0.1),
    }


Z_LEVELS = 64   # anatomy is computed at 64 heights per series and cached; noise is per slice


@functools.lru_cache(maxsize=8)
def _anatomy(seed: int, series: int, zq: int) -> np.ndarray:
    """Noise-free HU of one series at height zq / Z_LEVELS (float32)."""
    z = zq / Z_LEVELS
    x, y = _grid()
    p = _series_params(seed, series)
    x = x - p["dx"]
    y = y - p["dy"]
    hu = np.full(x.shape, -1000.0, dtype=np.float32)                     # air
    shape_z = 0.85 + 0.15 * math.sin(math.pi * z)
    a, b = p["body_a"] * shape_z, p["body_b"] * shape_z
    body = (x / a) ** 2 + (y / b) ** 2
    hu[body <= 1.0] = -100.0                                              # subcutaneous fat
    inner = body <= 0.85
    hu[inner] = 40.0                                                      # soft tissue
    for (ox, oy), val, r in zip(p["organs"], p["organ_hu"], p["organ_r"]):
        blob = np.exp(-((x - ox) ** 2 + (y - oy) ** 2) / (2 * r * r))
        hu += np.where(inner, val * blob, 0.0).astype(np.float32)
    lung_size = max(0.0, math.sin(math.pi * min(1.0, max(0.0, (z - 0.15) / 0.7))))
    if lung_size > 0.05:
        for side in (-1, 1):
            lx, ly = side * p["lung_x"], -10.0
            la, lb = 0.3 * a * lung_size + 5, 0.55 * b * lung_size + 5
            lung = ((x - lx) / la) ** 2 + ((y - ly) / lb) ** 2
            hu[lung <= 1.0] = -850.0 + 40.0 * lung[lung <= 1.0]
    r_spine = np.hypot(x, y - 0.62 * b)
    hu[r_spine <= 18] = 250.0                                             # cancellous bone
    hu[(r_spine > 18) & (r_spine <= 24)] = 900.0                         # cortical bone
    for k in range(p["ribs"]):
        t = p["rot"] + 2 * math.pi * (k + 0.5) / p["ribs"]
        rx, ry = 0.9 * a * math.cos(t), 0.9 * b * math.sin(t)
        hu[np.hypot(x - rx, y - ry) <= 7] = 700.0
    return hu


def ct_pixels(seed: int, series: int, z: float, index: int) -> np.ndarray:
    """Stored values (HU + 1024), int16, of one 512x512 slice at height z in [0, 1]."""
    x, y = _grid()
    hu = _anatomy(seed, series, int(round(z * Z_LEVELS))).copy()
    rng = np.random.default_rng([index, series, seed])
    hu += rng.standard_normal(size=hu.shape, dtype=np.float32) * np.float32(12.0)  # quantum noise
    hu[x * x + y * y > (CT_SIZE / 2) ** 2] = -1024.0                    # outside the field of view
    stored = np.clip(np.rint(hu) + 1024, 0, 2047)
    return stored.astype("<i2")


def _uid(*parts) -> str:
    from pydicom.uid import generate_uid
    return generate_uid(entropy_srcs=["dcm2tfrecord-bench"] + [str(p) for p in parts])


def _ct_dataset(seed: int, patient: int, series: int, sop: str, sop_class: str, syntax: str):
    """The header shared by the CT kinds: patient, study, series, equipment, image pixel module."""
    from pydicom.dataset import FileDataset, FileMetaDataset
    from pydicom.uid import PYDICOM_IMPLEMENTATION_UID

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = sop_class
    meta.MediaStorageSOPInstanceUID = sop
    meta.TransferSyntaxUID = syntax
    meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    ds = FileDataset("", {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.ImageType = ["ORIGINAL", "PRIMARY", "AXIAL"]
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = sop
    ds.StudyDate = ds.SeriesDate = ds.ContentDate = f"2024{1 + patient % 12:02d}{1 + series % 28:02d}"
    ds.StudyTime = ds.SeriesTime = "101500"
    ds.AccessionNumber = f"ACC{seed:02d}{patient:04d}"
    ds.Modality = "CT"
    ds.Manufacturer = "BenchCorp"
    ds.ManufacturerModelName = "Phantom 512"
    ds.InstitutionName = "dcm2tfrecord benchmark"
    ds.StudyDescription = "CT CHEST ABDOMEN"
    ds.SeriesDescription = ["AXIAL 1.25mm", "AXIAL 2.5mm"][series % 2]
    ds.PatientName = f"BENCH^PATIENT{patient:03d}"
    ds.PatientID = f"BENCH{seed:02d}{patient:04d}"
    ds.PatientBirthDate = f"19{50 + patient % 40:02d}0101"
    ds.PatientSex = "MF"[patient % 2]
    ds.BodyPartExamined = "CHEST"
    ds.SliceThickness = "1.25"
    ds.KVP = "120"
    ds.DataCollectionDiameter = "500"
    ds.ReconstructionDiameter = "360"
    ds.ConvolutionKernel = "STANDARD"
    ds.PatientPosition = "FFS"
    ds.StudyInstanceUID = _uid(seed, "study", patient)
    ds.SeriesInstanceUID = _uid(seed, "series", series)
    ds.StudyID = str(patient + 1)
    ds.SeriesNumber = series + 1
    ds.ImageOrientationPatient = ["1", "0", "0", "0", "1", "0"]
    ds.FrameOfReferenceUID = _uid(seed, "for", series)
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows = ds.Columns = CT_SIZE
    ds.PixelSpacing = ["0.703125", "0.703125"]
    ds.BitsAllocated = 16
    ds.BitsStored = 12
    ds.HighBit = 11
    ds.PixelRepresentation = 1
    ds.WindowCenter = "40"
    ds.WindowWidth = "400"
    ds.RescaleIntercept = "-1024"
    ds.RescaleSlope = "1"
    ds.RescaleType = "HU"
    return ds


def _save(ds) -> bytes:
    buf = io.BytesIO()
    ds.save_as(buf, enforce_file_format=True)
    return buf.getvalue()


def ct_file_bytes(seed: int, patient: int, series: int, slice_index: int, num_slices: int,
                  index: int) -> bytes:
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian

    z = slice_index / max(1, num_slices - 1)
    pixels = ct_pixels(seed, series, z, index)
    ds = _ct_dataset(seed, patient, series, _uid(seed, "sop", index), CTImageStorage, ExplicitVRLittleEndian)
    ds.ContentTime = f"1015{slice_index % 60:02d}"
    ds.InstanceNumber = slice_index + 1
    ds.ImagePositionPatient = ["-180", "-180", f"{-1.25 * slice_index:.2f}"]
    ds.SliceLocation = f"{-1.25 * slice_index:.2f}"
    ds.PixelData = pixels.tobytes()
    return _save(ds)


@functools.lru_cache(maxsize=1)
def _vendor_template():
    """pydicom's CT_small.dcm, parsed once per process, every element converted."""
    import pydicom
    import pydicom.data
    ds = pydicom.dcmread(pydicom.data.get_testdata_file("CT_small.dcm"))
    for _ in ds:
        pass
    return ds


def _vendor_items(slice_index: int):
    """A vendor protocol block: a private sequence of items that hold sequences themselves."""
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence
    items = []
    for k in range(3):
        item = Dataset()
        item.add_new(0x00510010, "LO", "BENCH_PROTOCOL_01")
        item.add_new(0x00511001, "LO", f"STEP{k}")
        item.add_new(0x00511002, "DS", f"{0.5 * k + 0.01 * slice_index:.2f}")
        inner = Dataset()
        inner.add_new(0x00510010, "LO", "BENCH_PROTOCOL_01")
        inner.add_new(0x00511003, "SL", 1000 * k + slice_index)
        inner.add_new(0x00511004, "SH", "KERNEL_B")
        item.add_new(0x00511010, "SQ", Sequence([inner, inner.copy()]))
        items.append(item)
    return Sequence(items)


def ct_vendor_file_bytes(seed: int, patient: int, series: int, slice_index: int, num_slices: int,
                         index: int) -> bytes:
    """A ``ct_file_bytes`` slice (same pixels, identifiers and geometry) under every element of
    pydicom's CT_small.dcm, its per-slice values varied (see the module docstring)."""
    import copy

    from pydicom.dataset import Dataset, FileDataset
    from pydicom.sequence import Sequence

    z = slice_index / max(1, num_slices - 1)
    pixels = ct_pixels(seed, series, z, index)
    tidy = _ct_dataset(seed, patient, series, _uid(seed, "sop", index), _vendor_template().SOPClassUID,
                       _vendor_template().file_meta.TransferSyntaxUID)
    template = copy.deepcopy(_vendor_template())
    ds = FileDataset("", {}, file_meta=tidy.file_meta, preamble=b"\0" * 128)
    for elem in template:
        ds.add(elem)
    for elem in tidy:                       # identifiers, equipment, Image Pixel module of the ct kind
        ds.add(elem)
    for elem in list(ds):
        if elem.tag.is_private and elem.VR in ("DS", "FL", "FD", "SL") and elem.VM == 1 \
                and elem.value not in (None, ""):
            if elem.VR == "DS":
                elem.value = f"{float(elem.value) + 0.625 * slice_index:.6f}"
            elif elem.VR == "SL":
                elem.value = (int(elem.value) + 7 * slice_index) % (1 << 31)
            else:
                elem.value = float(elem.value) + 0.5 * slice_index
    ds.add_new(0x00510010, "LO", "BENCH_PROTOCOL_01")
    ds.add_new(0x00511000, "SQ", _vendor_items(slice_index))
    previous = Dataset()
    previous.ReferencedSOPClassUID = ds.SOPClassUID
    previous.ReferencedSOPInstanceUID = _uid(seed, "sop", max(0, index - 1))
    ds.ReferencedImageSequence = Sequence([previous])
    ds.ContentTime = ds.AcquisitionTime = f"1015{slice_index % 60:02d}.{slice_index % 1000:03d}"
    ds.InstanceNumber = slice_index + 1
    ds.ImagePositionPatient = ["-180", "-180", f"{-1.25 * slice_index:.2f}"]
    ds.SliceLocation = f"{-1.25 * slice_index:.2f}"
    ds.PixelData = pixels.tobytes()
    return _save(ds)


def mf_pixels(seed: int, volume: int, frames: int) -> np.ndarray:
    """(frames, 512, 512) int16 stored values: one CT series from top to bottom, a
    ``ct_pixels`` slice per frame (own noise per frame), so it compresses like real CT."""
    out = np.empty((frames, CT_SIZE, CT_SIZE), dtype="<i2")
    for k in range(frames):
        out[k] = ct_pixels(seed, volume, k / max(1, frames - 1), volume * frames + k)
    return out


def mf_file_bytes(seed: int, patient: int, volume: int, frames: int, rle: bool) -> bytes:
    """One multi-frame CT volume: CT Image Storage with NumberOfFrames (the legacy
    multi-frame layout: a single top-level Rescale Slope/Intercept for all frames, which
    the converter applies), Explicit VR Little Endian or RLE Lossless.

    RLE is encoded by pydicom (``Dataset.compress``: its pylibjpeg-rle plugin when
    installed, else its own numpy encoder; both give the same bytes).
    """
    from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, RLELossless

    pixels = mf_pixels(seed, volume, frames)
    ds = _ct_dataset(seed, patient, volume, _uid(seed, "mf-sop", volume), CTImageStorage,
                     ExplicitVRLittleEndian)
    ds.ContentTime = "101500"
    ds.InstanceNumber = 1
    ds.ImagePositionPatient = ["-180", "-180", "0.00"]
    ds.SliceLocation = "0.00"
    ds.SpacingBetweenSlices = "1.25"
    ds.NumberOfFrames = frames
    ds.FrameIncrementPointer = 0x00182005          # Slice Location Vector below
    ds.SliceLocationVector = [f"{-1.25 * k:.2f}" for k in range(frames)]
    if rle:
        ds.compress(RLELossless, pixels, generate_instance_uid=False)   # keep the deterministic UID
    else:
        ds.PixelData = pixels.tobytes()
    return _save(ds)


def _ct_layout(n: int, series: int) -> list[tuple[int, int, int]]:
    """(series, first index, slices) for n slices split over `series` series."""
    out = []
    for s in range(series):
        start, stop = s * n // series, (s + 1) * n // series
        out.append((s, start, stop - start))
    return out


# ---------------------------------------------------------------- images


def radiograph_pixels(seed: int, index: int, size: int = JPEG_SIZE) -> np.ndarray:
    """A chest-radiograph-like 8-bit image: smooth body, darker lungs, bright bones, grain.

    The smooth part is computed at a quarter of the resolution and resized
    (it has no fine detail); the grain is added at full resolution.
    """
    from PIL import Image
    rng = np.random.default_rng([seed, 2, index])
    low = max(16, size // 4)
    c = np.linspace(-1.0, 1.0, low, dtype=np.float32)
    x, y = np.meshgrid(c, c, indexing="xy")
    img = 0.3 + 0.45 * np.exp(-((x / rng.uniform(0.75, 0.9)) ** 4 + (y / 1.1) ** 4))
    for side in (-1, 1):
        lx, ly = side * rng.uniform(0.32, 0.42), rng.uniform(-0.15, 0.0)
        lung = ((x - lx) / rng.uniform(0.22, 0.3)) ** 2 + ((y - ly) / rng.uniform(0.45, 0.55)) ** 2
        img -= 0.3 * np.exp(-lung ** 2)
    img += 0.15 * np.exp(-(x / 0.06) ** 2) * (y > -0.7)                  # spine
    for k in range(rng.integers(8, 12)):                                  # ribs
        yy = -0.55 + 0.11 * k
        img += 0.05 * np.exp(-((y - yy - 0.15 * x ** 2) / 0.02) ** 2) * (np.abs(x) < 0.75)
    img += 0.2 * np.exp(-(((x - rng.uniform(-0.1, 0.1)) / 0.18) ** 2 + ((y - 0.25) / 0.2) ** 2))  # heart
    full = np.asarray(Image.fromarray(img.astype(np.float32), mode="F").resize((size, size), Image.BILINEAR))
    full = full + rng.standard_normal(size=full.shape, dtype=np.float32) * np.float32(0.015)
    return np.clip(full * 255.0, 0, 255).astype(np.uint8)


def photo_pixels(seed: int, index: int, size: int = PNG_SIZE) -> np.ndarray:
    """A 224x224 RGB photo-like image: coloured gradients, a few soft objects, sensor noise."""
    rng = np.random.default_rng([seed, 3, index])
    c = np.linspace(0.0, 1.0, size, dtype=np.float32)
    x, y = np.meshgrid(c, c, indexing="xy")
    planes = []
    for ch in range(3):
        base = rng.uniform(0.2, 0.6) + rng.uniform(-0.3, 0.3) * x + rng.uniform(-0.3, 0.3) * y
        base = base + 0.1 * np.sin(x * rng.uniform(3, 20) + ch) * np.cos(y * rng.uniform(3, 20))
        planes.append(base)
    img = np.stack(planes, axis=-1)
    for _ in range(rng.integers(3, 7)):
        cx, cy, r = rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0.05, 0.25)
        color = rng.uniform(-0.5, 0.5, size=3).astype(np.float32)
        img += np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * r * r))[..., None] * color
    img += rng.normal(0.0, 0.02, size=img.shape).astype(np.float32)
    return np.clip(img * 255.0, 0, 255).astype(np.uint8)


def _image_bytes(arr: np.ndarray, fmt: str) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    if fmt == "jpeg":
        Image.fromarray(arr, mode="L").save(buf, format="JPEG", quality=90)
    else:
        Image.fromarray(arr, mode="RGB").save(buf, format="PNG")
    return buf.getvalue()


# ---------------------------------------------------------------- generic cached builder


def _atomic_write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _make_item(task: tuple) -> int:
    """Writes one file unless already there; returns its size. Runs in a pool worker."""
    kind, root, params, index, rel, extra = task
    path = os.path.join(root, rel)
    if os.path.exists(path):
        return os.path.getsize(path)
    seed = params["seed"]
    if kind == "ct":
        data = ct_file_bytes(seed, *extra, index)
    elif kind == "ct_vendor":
        data = ct_vendor_file_bytes(seed, *extra, index)
    elif kind in ("mf", "mf_rle"):
        data = mf_file_bytes(seed, *extra, params["frames"], kind == "mf_rle")
    elif kind == "jpeg":
        data = _image_bytes(radiograph_pixels(seed, index, params["size"]), "jpeg")
    else:
        data = _image_bytes(photo_pixels(seed, index, params["size"]), "png")
    _atomic_write(path, data)
    return len(data)


def _tasks(kind: str, root: str, params: dict, n: int) -> list[tuple]:
    if kind in ("ct", "ct_vendor"):
        tasks = []
        for series, start, count in _ct_layout(n, params["series"]):
            patient = series // params["series_per_patient"]
            for k in range(count):
                rel = os.path.join(f"patient_{patient:03d}", f"series_{series:03d}", f"slice_{k:05d}.dcm")
                tasks.append((kind, root, params, start + k, rel, (patient, series, k, count)))
        return tasks
    if kind in ("mf", "mf_rle"):
        patients = params["patients"]
        return [(kind, root, params, i, os.path.join(f"patient_{i * patients // n:03d}", f"volume_{i:05d}.dcm"),
                 (i * patients // n, i)) for i in range(n)]
    ext = "jpg" if kind == "jpeg" else "png"
    return [(kind, root, params, i, os.path.join(f"part_{i // 1000:03d}", f"img_{i:06d}.{ext}"), None)
            for i in range(n)]


def _marker_path(root: str) -> str:
    """The marker sits next to the archive, not inside it: converters see data files only."""
    return root + MARKER


def _read_marker(root: str, params: dict) -> Optional[dict]:
    legacy = os.path.join(root, MARKER)          # first version kept it inside
    if os.path.exists(legacy) and not os.path.exists(_marker_path(root)):
        os.replace(legacy, _marker_path(root))
    try:
        with open(_marker_path(root)) as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    return marker if marker.get("params") == params else None


def _build(kind: str, name: str, params: dict, n: int, pixel_bytes_each: int,
           workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    root = os.path.join(CACHE_DIR, name)
    marker = _read_marker(root, params)
    if marker is None:
        started = time.time()
        tasks = _tasks(kind, root, params, n)
        existing = sum(1 for t in tasks if os.path.exists(os.path.join(root, t[4])))
        log(f"[archives] generating {name}: {n} files ({existing} already there) ...")
        os.makedirs(root, exist_ok=True)
        workers = workers or os.cpu_count() or 1
        if workers > 1:
            # small chunks when there are few files (multi-frame: 40 MiB each) so both cores work
            chunksize = max(1, min(16, len(tasks) // (4 * workers)))
            with multiprocessing.get_context("spawn").Pool(workers) as pool:
                sizes = pool.map(_make_item, tasks, chunksize=chunksize)
        else:
            sizes = [_make_item(t) for t in tasks]
        marker = {"params": params, "files": n, "source_bytes": int(sum(sizes)),
                  "pixel_bytes": n * pixel_bytes_each, "generator_version": GENERATOR_VERSION,
                  "seconds": round(time.time() - started, 1)}
        _atomic_write(_marker_path(root), json.dumps(marker, indent=1).encode())
        log(f"[archives] {name}: {marker['source_bytes'] / MIB:.1f} MiB in {marker['seconds']} s")
    return Archive(kind=kind, path=root, files=marker["files"], source_bytes=marker["source_bytes"],
                   pixel_bytes=marker["pixel_bytes"], params=params)


def _count(total_mb: float, each: int) -> int:
    return max(1, int(round(total_mb * MIB / each)))


def ct_archive(total_mb: float, seed: int = 0, patients: int = 4, series_per_patient: int = 2,
               workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    """Uncompressed 512x512 int16 CT slices totalling ~total_mb MiB on disk."""
    params = {"kind": "ct", "total_mb": total_mb, "seed": seed, "series": patients * series_per_patient,
              "series_per_patient": series_per_patient, "v": GENERATOR_VERSION}
    n = _count(total_mb, CT_SLICE_BYTES)
    return _build("ct", f"ct_{total_mb:g}MB_s{seed}_v{GENERATOR_VERSION}", params, n,
                  CT_SLICE_BYTES, workers, log)


def ct_vendor_archive(total_mb: float, seed: int = 0, patients: int = 4, series_per_patient: int = 2,
                      workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    """The ct_archive slices under a vendor header (CT_small.dcm's elements), ~total_mb MiB."""
    params = {"kind": "ct_vendor", "total_mb": total_mb, "seed": seed,
              "series": patients * series_per_patient, "series_per_patient": series_per_patient,
              "v": GENERATOR_VERSION}
    n = _count(total_mb, CT_SLICE_BYTES)
    return _build("ct_vendor", f"ct_vendor_{total_mb:g}MB_s{seed}_v{GENERATOR_VERSION}", params, n,
                  CT_SLICE_BYTES, workers, log)


def jpeg_archive(total_mb: float, seed: int = 0, size: int = JPEG_SIZE,
                 workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    """8-bit grayscale size x size JPEGs whose decoded pixels total ~total_mb MiB."""
    params = {"kind": "jpeg", "total_mb": total_mb, "seed": seed, "size": size, "v": GENERATOR_VERSION}
    n = _count(total_mb, size * size)
    return _build("jpeg", f"jpeg{size}_{total_mb:g}MB_s{seed}_v{GENERATOR_VERSION}", params, n,
                  size * size, workers, log)


def png_archive(total_mb: float, seed: int = 0, size: int = PNG_SIZE,
                workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    """size x size RGB PNGs whose decoded pixels total ~total_mb MiB."""
    params = {"kind": "png", "total_mb": total_mb, "seed": seed, "size": size, "v": GENERATOR_VERSION}
    n = _count(total_mb, size * size * 3)
    return _build("png", f"png{size}_{total_mb:g}MB_s{seed}_v{GENERATOR_VERSION}", params, n,
                  size * size * 3, workers, log)


def _mf_archive(kind: str, total_mb: float, seed: int, frames: int, patients: int,
                workers: Optional[int], log: Callable[[str], None]) -> Archive:
    params = {"kind": kind, "total_mb": total_mb, "seed": seed, "frames": frames, "patients": patients,
              "v": GENERATOR_VERSION}
    each = frames * CT_SLICE_BYTES
    n = _count(total_mb, each)
    return _build(kind, f"{kind}{frames}_{total_mb:g}MB_s{seed}_v{GENERATOR_VERSION}", params, n, each,
                  workers, log)


def mf_archive(total_mb: float, seed: int = 0, frames: int = MF_FRAMES, patients: int = 4,
               workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    """Uncompressed multi-frame CT volumes (frames x 512 x 512 int16, 40 MiB each at 80
    frames) whose decoded pixels total ~total_mb MiB."""
    return _mf_archive("mf", total_mb, seed, frames, patients, workers, log)


def mf_rle_archive(total_mb: float, seed: int = 0, frames: int = MF_FRAMES, patients: int = 4,
                   workers: Optional[int] = None, log: Callable[[str], None] = print) -> Archive:
    """The same volumes as mf_archive, pixel for pixel, in RLE Lossless (~17 MiB each)."""
    return _mf_archive("mf_rle", total_mb, seed, frames, patients, workers, log)


BUILDERS = {"ct": ct_archive, "ct_vendor": ct_vendor_archive, "jpeg": jpeg_archive, "png": png_archive,
            "mf": mf_archive, "mf_rle": mf_rle_archive}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in BUILDERS:
        print(f"usage: python -m benchmarks.archives {{{'|'.join(BUILDERS)}}} TOTAL_MB", file=sys.stderr)
        return 2
    archive = BUILDERS[argv[0]](float(argv[1]))
    print(f"{archive.path}: {archive.files} files, {archive.source_mb:.1f} MiB on disk, "
          f"{archive.pixel_mb:.1f} MiB decoded")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
