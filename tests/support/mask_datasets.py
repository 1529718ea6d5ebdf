"""Archives of CT series each annotated by a DICOM SEG (highdicom), for datasets whose volume
records hold masks (``--unit series --class_map``): the reader's and verify's tests build theirs
here (tests/transforms/masks/test_masks_e2e.py is the converter's own, fuller account).

Each series gets a planted pixel: every slice's corner pixel [0, 0] is ``CORNER + number``, so a
record read back shows which series it holds (``corner``), however the records were shuffled.
"""
from __future__ import annotations

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
    descriptions = [hd.seg.SegmentDescription(
        segment_number=n, segment_label=label, segmented_property_category=category,
        segmented_property_type=kind, algorithm_type="MANUAL")
        for n, (label, category, kind) in enumerate(_SEGMENTS, start=1)]
    seg = hd.seg.Segmentation(
        source_images=datasets, pixel_array=np.moveaxis(masks, 0, -1), segmentation_type="BINARY",
        segment_descriptions=descriptions, series_instance_uid=_uid(number, "series"), series_number=90,
        sop_instance_uid=_uid(number, "sop"), instance_number=1, manufacturer="test",
        manufacturer_model_name="test", software_versions="0", device_serial_number="0")
    buffer = io.BytesIO()
    seg.save_as(buffer)
    with open(os.path.join(str(folder), f"seg_{number}.dcm"), "wb") as handle:
        handle.write(buffer.getvalue())
