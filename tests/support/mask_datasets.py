"""Archives of CT series each annotated by a DICOM SEG (highdicom), for datasets whose volume
records hold masks (``--unit series --class_map``): the reader's and verify's tests build theirs
here (tests/transforms/masks/test_masks_e2e.py is the converter's own, fuller account).

``write_seg`` (highdicom) and ``write_rtstruct`` (rt-utils) write the annotation files of a series
from known arrays, for the tests that build their own archives.

Each series gets a planted pixel: every slice's corner pixel [0, 0] is ``CORNER + number``, so a
record read back shows which series it holds (``corner``), however the records were shuffled.
"""
from __future__ import annotations

import io
import os
from typing import Mapping, Sequence

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
SEGMENTS = [("Liver", _ORGAN, CodedConcept("10200004", "SCT", "Liver")),
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


def in_record_order(written: sb.WrittenSeries) -> list[pydicom.Dataset]:
    """The slices of ``written`` as the converter stacks them: along the normal (a record's k)."""
    normal = sb.normal(written.orientation)
    datasets = [pydicom.dcmread(path) for path in written.paths]
    return sorted(datasets, key=lambda ds: float(np.dot([float(v) for v in ds.ImagePositionPatient], normal)))


def write_seg(datasets: Sequence[pydicom.Dataset], masks: np.ndarray, path, series_uid: str, sop_uid: str,
              segments: Sequence[tuple] = SEGMENTS) -> str:
    """A binary SEG (highdicom) of the slices ``datasets`` (in the order of the masks' k axis) from
    ``masks`` [segments, k, j, i], segment n+1 labelled as ``segments[n]`` (label, category, type);
    saved at ``path``, whose str it returns."""
    descriptions = [hd.seg.SegmentDescription(
        segment_number=n, segment_label=label, segmented_property_category=category,
        segmented_property_type=kind, algorithm_type="MANUAL")
        for n, (label, category, kind) in enumerate(segments[:masks.shape[0]], start=1)]
    seg = hd.seg.Segmentation(
        source_images=list(datasets), pixel_array=np.moveaxis(masks, 0, -1), segmentation_type="BINARY",
        segment_descriptions=descriptions, series_instance_uid=series_uid, series_number=90,
        sop_instance_uid=sop_uid, instance_number=1, manufacturer="test",
        manufacturer_model_name="test", software_versions="0", device_serial_number="0")
    buffer = io.BytesIO()
    seg.save_as(buffer)
    with open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return str(path)


def write_rtstruct(series_folder: str, rois: Mapping[str, np.ndarray], path) -> str:
    """An RTSTRUCT (rt-utils) of the series in ``series_folder`` (which holds nothing else) with one
    ROI per [k, j, i] mask, k in rt-utils' ascending order along the normal (record order for an
    axial series); saved at ``path``, whose str it returns. rt-utils reads non-square images
    transposed: give it a square series."""
    from rt_utils import RTStructBuilder
    rt = RTStructBuilder.create_new(dicom_series_path=str(series_folder))
    for name, mask in rois.items():
        rt.add_roi(mask=np.moveaxis(mask, 0, 2), name=name)
    rt.save(str(path))
    return str(path)


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
    masks = rng.random((len(SEGMENTS), depth, *shape)) < 0.3          # [segments, k, j, i]
    write_seg(datasets, masks, os.path.join(str(folder), f"seg_{number}.dcm"), _uid(number, "series"),
              _uid(number, "sop"))
