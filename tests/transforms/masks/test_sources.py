"""transforms.masks.sources: the mask-source registry holds SEG, RTSTRUCT and NIfTI, and a fourth
source registered in the test (a DICOM label map: one frame of class values per slice, naming the
slice it labels) converts end to end through the unchanged probe, joins, writer and reader, as
tests/dataset/test_file_adapters.py does for a container."""
from __future__ import annotations

import json
import os

import numpy as np
import pydicom
import pytest
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

from dcm2tfrecord import reader
from dcm2tfrecord.transforms.masks import annotation, annotation_cache, classes, rtstruct, seg, sources
from dcm2tfrecord.transforms.masks.grid import Grid
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from tests.support import mask_datasets as md
from tests.support import run_convert

PARAMETRIC_MAP_STORAGE = "1.2.840.10008.5.1.4.1.1.30"     # claimed by no source of the product
OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True)
CLASS_MAP_YAML = 'Liver: ["1"]\nTumour: ["2"]\n'           # value 3 names no class: background


class LabelDicomSource:
    """A fourth mask source, for the test only: a DICOM object of class values, one frame per slice
    of the series it references, each frame naming its slice (Referenced Image Sequence, in frame
    order); a value is named as text, as a NIfTI mask's is."""
    name = "labeldicom"
    sop_classes: tuple[str, ...] = (PARAMETRIC_MAP_STORAGE,)
    on_grid = True
    thread_bound = False

    def probe_header(self, fileobj):
        return pydicom.dcmread(fileobj, stop_before_pixels=True, force=True)

    def referenced_series(self, header):
        return [str(item.SeriesInstanceUID) for item in header.ReferencedSeriesSequence]

    def join_header(self, read, cached):
        return self.probe_header(read())

    def place(self, header, parts):
        return ((),) * len(parts)          # each frame names its slice: placed by UID when drawn

    def parse(self, fileobj):
        return pydicom.dcmread(fileobj, force=True)

    def draw(self, parsed, target, class_map, canvas):
        frames = parsed.pixel_array.reshape(-1, int(parsed.Rows), int(parsed.Columns))
        slices = list(target.grid.instance_uids)
        for frame, item in zip(frames, parsed.ReferencedImageSequence):
            uid = str(item.ReferencedSOPInstanceUID)
            if uid not in slices:           # a slice of another record of the series
                continue
            for value in np.unique(frame):
                index = class_map.index_of(str(int(value))) if value else 0
                if index:
                    canvas.add(index, frame == value, slices.index(uid))


@pytest.fixture
def label_source():
    added = sources.register(LabelDicomSource())
    try:
        yield added
    finally:
        sources.unregister(added.name)


def _write_label_dicom(series: md.Series, labels: np.ndarray, path) -> str:
    """A DICOM label map of ``series``: ``labels`` [k, j, i] uint8 in record order, frame k naming slice k."""
    first = series.datasets[0]
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.MediaStorageSOPClassUID = PARAMETRIC_MAP_STORAGE
    ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID = PARAMETRIC_MAP_STORAGE
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID
    ds.PatientID, ds.StudyInstanceUID = first.PatientID, first.StudyInstanceUID
    ds.SeriesInstanceUID, ds.Modality = generate_uid(), "OT"
    ds.FrameOfReferenceUID = first.FrameOfReferenceUID
    referenced = Dataset()
    referenced.SeriesInstanceUID = first.SeriesInstanceUID
    ds.ReferencedSeriesSequence = [referenced]
    items = []
    for slice_ds in series.datasets:
        item = Dataset()
        item.ReferencedSOPClassUID, item.ReferencedSOPInstanceUID = slice_ds.SOPClassUID, slice_ds.SOPInstanceUID
        items.append(item)
    ds.ReferencedImageSequence = items
    ds.Rows, ds.Columns = labels.shape[1:]
    ds.NumberOfFrames = labels.shape[0]
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 8, 8, 7, 0
    ds.PixelData = np.ascontiguousarray(labels, np.uint8).tobytes()
    ds.save_as(str(path), enforce_file_format=True)
    return str(path)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    root = tmp_path_factory.mktemp("label_dicom")
    series = md.series(os.path.join(str(root), "in", "ct"), n=4)
    labels = np.random.default_rng(5).integers(0, 4, (series.depth, *series.shape), dtype=np.uint8)
    labels[1] = 0                                            # a slice without a class: all background
    _write_label_dicom(series, labels, root / "in" / "labels.dcm")
    class_map = os.path.join(str(root), "classes.yaml")
    with open(class_map, "w") as handle:
        handle.write(CLASS_MAP_YAML)
    expected = np.where(labels == 3, 0, labels)[..., None]   # value 3 maps to no class
    return root, series, expected, class_map


def test_the_registry_holds_seg_rtstruct_and_nifti():
    assert {"seg", "rtstruct", "nifti"} <= set(sources.SOURCES)
    assert all(sources.claiming(uid) is sources.SEG for uid in (seg.SEG_STORAGE, seg.LABEL_MAP_SEG_STORAGE))
    assert sources.claiming(rtstruct.RT_STRUCTURE_SET_STORAGE) is sources.RTSTRUCT
    assert sources.claiming(PARAMETRIC_MAP_STORAGE) is None and sources.claiming("") is None
    assert sources.NIFTI.sop_classes == () and not sources.NIFTI.on_grid       # paired by path, never probed
    with pytest.raises(ValueError, match="paired with its images by path"):
        sources.series_source("nifti")
    with pytest.raises(ValueError, match="registered already"):
        sources.register(sources.SEG)
    with pytest.raises(ValueError, match="claimed by another"):
        sources.register(type("Thief", (LabelDicomSource,), {"name": "thief", "sop_classes": seg.SOP_CLASSES})())


def test_a_registered_source_is_asked_by_the_probe_and_the_writer(label_source, labelled):
    assert annotation.kind_of(PARAMETRIC_MAP_STORAGE) == label_source.name
    root, series, expected, class_map = labelled
    with open(root / "in" / "labels.dcm", "rb") as handle:
        header = annotation.probe_header(handle, label_source.name)
    assert annotation.referenced_series(header, label_source.name) == str(series.datasets[0].SeriesInstanceUID)
    with open(root / "in" / "labels.dcm", "rb") as handle:
        parsed = label_source.parse(handle)
    uids = tuple(str(ds.SOPInstanceUID) for ds in series.datasets)
    masks = _masks(class_map)
    drawn = annotation.volume_mask([(parsed, label_source.name)], Grid(*series.shape, instance_uids=uids), masks)
    np.testing.assert_array_equal(drawn, expected)


def _masks(class_map: str) -> MaskSettings:
    with open(class_map) as handle:
        return MaskSettings(class_map=classes.parse_mapping(handle.read(), class_map))


@pytest.mark.parametrize("unit", ["series", "file"])
def test_a_fourth_source_registered_in_the_test_converts_end_to_end(label_source, labelled, tmp_path, unit):
    root, series, expected, class_map = labelled
    annotation_cache.CACHE.clear()
    out = tmp_path / "out"
    summary = run_convert(root / "in", out, class_map=class_map, unit=unit, **OPTIONS)
    assert summary["failed"] == {} and summary["skipped"] == {}, summary
    access = reader.RandomAccess(str(out), "train")
    records = [access[i] for i in range(len(access))]
    with open(out / "dataset.json") as handle:
        assert json.load(handle)["mask_classes"] == ["Liver", "Tumour"]
    if unit == "series":
        [record] = records
        np.testing.assert_array_equal(record["mask"], expected)
    else:
        assert len(records) == series.depth
        for k, ds in enumerate(series.datasets):
            pixels = np.asarray(pydicom.pixels.apply_modality_lut(ds.pixel_array, ds))
            [record] = [r for r in records if np.array_equal(r["image"][..., 0], pixels)]     # one slice: [h, w, c]
            np.testing.assert_array_equal(record["mask"], expected[k])
        # parsed once for the series' records (transforms.masks.annotation_cache)
        assert annotation_cache.CACHE.parses[str(root / "in" / "labels.dcm")] == 1
    assert expected.any() and not expected[1].any()


def test_without_its_source_the_label_dicom_is_no_annotation(labelled, tmp_path):
    """The same archive with the fourth source not registered: its file is claimed by no source, so the
    probe takes it for an image (a record of its own), and the series is left without a mask."""
    root, _, _, class_map = labelled
    summary = run_convert(root / "in", tmp_path / "out", class_map=class_map, unit="series", missing_mask="error",
                          **OPTIONS)
    # the CT slices: no annotation; the label map: an image of its own (a series without positions)
    assert summary["records"] == 0 and summary["failed"] == {"missing_mask": 4, "series_unordered": 1}, summary


def test_no_product_module_tells_masks_on_or_a_kind_apart_but_through_the_seam():
    """'Masks on' is ``settings.masks is not None`` (transforms.masks.settings.MaskSettings), never a
    test of a settings' class map (the option itself, ``--class_map`` given or not, is what the
    option checks and ``ConvertOptions.mask_settings`` read); an annotation kind is told apart by
    the registry, never by its name."""
    import re
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    rules = {"class map tested for masks on": re.compile(r"class_map\s+is\s+(not\s+)?None"),
             "a kind compared by name": re.compile(r"""[=!]=\s*["'](seg|rtstruct)["']|annotation\.(SEG|RTSTRUCT)\b""")}
    found = []
    for package in ("dataset", "reader", "pipeline", "transforms"):
        for folder, _, files in os.walk(os.path.join(root, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    with open(path) as handle:
                        text = handle.read()
                    found += [f"{os.path.relpath(path, root)}: {what}" for what, rule in rules.items()
                              if rule.search(text)]
    assert found == [], found
