"""Archives of CT series each annotated by a DICOM SEG (highdicom), for datasets whose volume
records hold masks (``--unit series --class_map``): the reader's and verify's tests build theirs
here (tests/transforms/masks/test_masks_e2e.py is the converter's own, fuller account).

Each series gets a planted pixel: every slice's corner pixel [0, 0] is ``CORNER + number``, so a
record read back shows which series it holds (``corner``), however the records were shuffled.
"""
from __future__ import annotations

import dataclasses
import io
import os

import highdicom as hd
import numpy as np
import pydicom
from highdicom.sr import CodedConcept
from pydicom.uid import generate_uid

from tests.support import series_builders as sb

CLASS_MAP_YAML = 'Liver: ["liver"]\nTumour: [".*tumou?r"]\n'
CLASSES = ["Liver", "Tumour"]
CORNER = 1000
_ORGAN = CodedConcept("123037004", "SCT", "Anatomical Structure")
_TISSUE = CodedConcept("85756007", "SCT", "Tissue")
_SEGMENTS = [("Liver", _ORGAN, CodedConcept("10200004", "SCT", "Liver")),
             ("tumour", _TISSUE, CodedConcept("108369006", "SCT", "Neoplasm"))]


def _uid(*parts) -> str:
    return str(generate_uid(entropy_srcs=["tests.support.mask_datasets", *map(str, parts)]))


def class_map(folder) -> str:
    """The YAML class map (Liver, Tumour) written in ``folder``; its path."""
    path = os.path.join(str(folder), "classes.yaml")
    with open(path, "w") as handle:
        handle.write(CLASS_MAP_YAML)
    return path


def corner(image: np.ndarray) -> int:
    """A record's planted corner value (its first slice's [0, 0], channel 0; after the modality
    LUT): one per series, the key that pairs a batch's image with a record read another way."""
    return int(image[0, 0, 0, 0]) if image.ndim == 4 else int(image[0, 0, 0])


def annotated_series(folder, number: int, depth: int = 4, shape: tuple[int, int] = (32, 32)) -> None:
    """A CT series of ``depth`` slices in ``folder``/ct_<number> and its SEG (Liver, tumour: random
    masks seeded by ``number``) in ``folder``/seg_<number>.dcm."""
    written = sb.regular(os.path.join(str(folder), f"ct_{number}"), depth, 2.5, shape=shape, seed=number)
    datasets = []
    for path in written.paths:
        ds = pydicom.dcmread(path)
        pixels = ds.pixel_array.copy()
        pixels[0, 0] = CORNER + number
        ds.PixelData = pixels.tobytes()
        ds.save_as(path, enforce_file_format=True)
        datasets.append(ds)
    normal = sb.normal(written.orientation)
    datasets.sort(key=lambda ds: float(np.dot([float(v) for v in ds.ImagePositionPatient], normal)))
    rng = np.random.default_rng(number)
    masks = rng.random((len(_SEGMENTS), depth, *shape)) < 0.3          # [segments, k, j, i]
    save_seg(datasets, masks, os.path.join(str(folder), f"seg_{number}.dcm"), str(number), _SEGMENTS)


def save_seg(source_images, masks: np.ndarray, path, name: str, segments=None) -> str:
    """A binary SEG (highdicom) of ``source_images`` from ``masks`` [segments, k, j, i] (k: the
    source images' slices in the order given, or a multi-frame image's frames), saved at ``path``;
    its segments described by ``segments`` ((label, category, type) each; default SEGMENTS)."""
    segments = SEGMENTS if segments is None else segments
    descriptions = [hd.seg.SegmentDescription(
        segment_number=n, segment_label=label, segmented_property_category=category,
        segmented_property_type=kind, algorithm_type="MANUAL")
        for n, (label, category, kind) in enumerate(segments[:masks.shape[0]], start=1)]
    seg = hd.seg.Segmentation(
        source_images=list(source_images), pixel_array=np.moveaxis(masks, 0, -1), segmentation_type="BINARY",
        segment_descriptions=descriptions, series_instance_uid=_uid(name, "series"), series_number=90,
        sop_instance_uid=_uid(name, "sop"), instance_number=1, manufacturer="test",
        manufacturer_model_name="test", software_versions="0", device_serial_number="0")
    buffer = io.BytesIO()
    seg.save_as(buffer)
    with open(str(path), "wb") as handle:
        handle.write(buffer.getvalue())
    return str(path)


# ---------------------------------------------------------------- series with known masks


ORGAN = _ORGAN
TISSUE = _TISSUE
# segment labels as an annotator typed them: the second maps to Tumour, the third to no class
SEGMENTS = [("Liver", _ORGAN, CodedConcept("10200004", "SCT", "Liver")),
            ("Pat Smith tumour", _TISSUE, CodedConcept("108369006", "SCT", "Neoplasm")),
            ("Jones spleen", _ORGAN, CodedConcept("78961009", "SCT", "Spleen"))]


@dataclasses.dataclass
class Series:
    """A CT series as written, and its slices in record order (along the normal)."""
    written: sb.WrittenSeries
    order: list[int]                           # build indices in record order
    datasets: list[pydicom.Dataset]            # in record order

    @property
    def depth(self) -> int:
        return len(self.order)

    @property
    def shape(self) -> tuple[int, int]:
        return self.written.slices[0].pixels.shape


def series(folder, n: int = 6, spacing: float = 2.5, **kwargs) -> Series:
    """A regular CT series of ``n`` slices in ``folder`` (tests.support.series_builders.regular)."""
    written = sb.regular(str(folder), n, spacing, **kwargs)
    normal = sb.normal(written.orientation)
    order = sorted(range(n), key=lambda i: float(np.dot(written.positions[i], normal)))
    return Series(written, order, [pydicom.dcmread(written.paths[i]) for i in order])


def write_seg(series: Series, masks: np.ndarray, path, name: str) -> str:
    """A binary SEG of ``series`` from ``masks`` [segments, k, j, i] (record order), saved at ``path``."""
    return save_seg(series.datasets, masks, path, name)


def random_masks(series: Series, segments: int, seed: int) -> np.ndarray:
    """[segments, k, j, i] bool, ~30 % of the voxels each, overlapping; one slice left empty."""
    rng = np.random.default_rng(seed)
    masks = rng.random((segments, series.depth, *series.shape)) < 0.3
    masks[:, 1] = False
    return masks


def label_map(per_class: np.ndarray) -> np.ndarray:
    """[classes, k, j, i] bool -> [k, j, i, 1] uint8, the first-listed class winning an overlap."""
    out = np.zeros(per_class.shape[1:], np.uint8)
    for index in range(per_class.shape[0], 0, -1):        # the last first: earlier ones overwrite
        out[per_class[index - 1]] = index
    return out[..., None]


def channels(per_class: np.ndarray) -> np.ndarray:
    """[classes, k, j, i] bool -> [k, j, i, classes] uint8 (--mask_layout binary)."""
    return np.moveaxis(per_class, 0, -1).astype(np.uint8)


RT_SIZE = 96                     # rt-utils reads non-square images transposed: a square series


def disc(centre, radius) -> np.ndarray:
    jj, ii = np.mgrid[:RT_SIZE, :RT_SIZE]
    return (jj - centre[0]) ** 2 + (ii - centre[1]) ** 2 <= radius ** 2


def write_rtstruct(series: Series, rois: dict[str, np.ndarray], path) -> str:
    """An RTSTRUCT (rt-utils) of ``series`` (its folder holds nothing else) with one ROI per
    [k, j, i] mask (record order = rt-utils' ascending order along the normal for an axial series)."""
    from rt_utils import RTStructBuilder
    rt = RTStructBuilder.create_new(dicom_series_path=series.written.folder)
    for name, mask in rois.items():
        rt.add_roi(mask=np.moveaxis(mask, 0, 2), name=name)
    rt.save(str(path))
    return str(path)


def two_series(root, depths: tuple[int, int, int] = (6, 4, 5), seed: int = 3, **b_kwargs):
    """``root/in``: series A with a SEG (seg_a.dcm), series B without one, and the SEG of a series C
    whose images are not among the inputs (seg_orphan.dcm, C's slices in ``root/absent``):
    (A, B, A's known masks [2, k, j, i])."""
    a = series(os.path.join(str(root), "in", "a"), n=depths[0], seed=seed)
    b = series(os.path.join(str(root), "in", "b"), n=depths[1], seed=seed + 1, **b_kwargs)
    c = series(os.path.join(str(root), "absent", "c"), n=depths[2], seed=seed + 2)
    assert len({a.written.series_uid, b.written.series_uid, c.written.series_uid}) == 3
    known = random_masks(a, 2, seed=seed + 3)
    write_seg(a, known, os.path.join(str(root), "in", "seg_a.dcm"), f"seg_a_{seed}")
    write_seg(c, random_masks(c, 2, seed=seed + 4), os.path.join(str(root), "in", "seg_orphan.dcm"),
              f"seg_orphan_{seed}")
    return a, b, known


def assert_no_raw_names(out, parts) -> None:
    """No file under ``out`` holds any of ``parts`` (raw ROI / segment names: never written)."""
    for folder, _, files in os.walk(str(out)):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                data = handle.read()
            for part in parts:
                assert part not in data, f"{part!r} in {os.path.join(folder, name)}"


def seg_archive(root, seed: int, depth: int = 6):
    """``root/in``: a CT series of ``depth`` slices and its SEG (seg.dcm) of three segments: Liver,
    "Pat Smith tumour" (Tumour) and "Jones spleen" (no class); (series, known masks [3, k, j, i])."""
    written = series(os.path.join(str(root), "in", "ct"), n=depth, spacing=2.5)
    known = random_masks(written, 3, seed=seed)
    write_seg(written, known, os.path.join(str(root), "in", "seg.dcm"), f"seg_{seed}")
    return written, known
