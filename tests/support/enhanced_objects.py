"""Enhanced multi-frame CT objects made by independent code, and the single-frame originals they
were made from.

The originals are single-frame CT slices written from pydicom's CT_small.dcm (position, UIDs,
rescale, window and pixels varied per slice); highdicom's LegacyConvertedEnhancedCTImage
(third-party code, not this project's) converts each series into one Legacy Converted Enhanced
CT file, which keeps rescale, window, position, orientation and pixel spacing in its
functional groups. The converted file's frames are then stored in another order than along
the slice normal, and frames of several stacks are interleaved, as scanners do.
"""
from __future__ import annotations

import copy
import os
import warnings

import numpy as np
import pydicom
from pydicom.data import get_testdata_file
from pydicom.sequence import Sequence
from pydicom.uid import generate_uid

AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
CORONAL = (1.0, 0.0, 0.0, 0.0, 0.0, -1.0)


def _uid(*parts) -> str:
    return generate_uid(entropy_srcs=[str(p) for p in parts])


def slices(name: str, count: int, slope="1", intercepts=("-1024",), orientation=AXIAL, spacing=2.5,
           windows=None, patient="ENH1", pixel_offset=0) -> list:
    """``count`` single-frame CT datasets of one series, slice i at i * spacing along the normal."""
    template = pydicom.dcmread(get_testdata_file("CT_small.dcm"))
    base = template.pixel_array.astype(np.int32)
    row, col = np.asarray(orientation[:3]), np.asarray(orientation[3:])
    normal = np.cross(row, col)
    origin = np.asarray([-80.0, -90.0, -70.0])
    out = []
    for i in range(count):
        ds = copy.deepcopy(template)
        ds.PatientID = patient
        ds.StudyInstanceUID = _uid("study", patient)
        ds.SeriesInstanceUID = _uid("series", name)
        ds.SOPInstanceUID = _uid("sop", name, i)
        ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
        ds.FrameOfReferenceUID = _uid("for", patient)
        ds.InstanceNumber = i + 1
        ds.ImageOrientationPatient = [f"{v:g}" for v in orientation]
        ds.ImagePositionPatient = [f"{v:.4f}" for v in origin + normal * (i * spacing)]
        ds.SliceLocation = f"{float(np.dot(normal, origin + normal * i * spacing)):.4f}"
        ds.RescaleSlope = slope
        ds.RescaleIntercept = intercepts[i % len(intercepts)]
        if windows is not None:
            ds.WindowCenter, ds.WindowWidth = windows[i % len(windows)]
        pixels = np.clip(base + 37 * i + pixel_offset, -32768, 32767).astype(np.int16)
        ds.PixelData = pixels.tobytes()
        out.append(ds)
    return out


def write_slices(folder, datasets) -> list[str]:
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, ds in enumerate(datasets):
        path = os.path.join(str(folder), f"slice_{i:03d}.dcm")
        ds.save_as(path)
        paths.append(path)
    return paths


def legacy_enhanced(datasets, name: str):
    """highdicom's Legacy Converted Enhanced CT of ``datasets`` (one series UID given to all)."""
    from highdicom.legacy import LegacyConvertedEnhancedCTImage
    series = _uid("legacy-input-series", name)
    inputs = []
    for ds in datasets:
        copied = copy.deepcopy(ds)
        copied.SeriesInstanceUID = series
        inputs.append(copied)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LegacyConvertedEnhancedCTImage(
            inputs, series_instance_uid=_uid("enhanced-series", name), series_number=900,
            sop_instance_uid=_uid("enhanced-sop", name), instance_number=1)


def source_of_frames(enhanced) -> list[str]:
    """The SOP Instance UID of the single-frame original of each stored frame."""
    return [str(item.ConversionSourceAttributesSequence[0].ReferencedSOPInstanceUID)
            for item in enhanced.PerFrameFunctionalGroupsSequence]


def reorder_frames(enhanced, order) -> None:
    """Stores frame ``order[k]`` as frame k: pixels and per-frame functional groups together."""
    frames = int(enhanced.NumberOfFrames)
    pixels = np.frombuffer(enhanced.PixelData, dtype="<i2").reshape(frames, -1)
    enhanced.PixelData = pixels[list(order)].tobytes()
    items = list(enhanced.PerFrameFunctionalGroupsSequence)
    enhanced.PerFrameFunctionalGroupsSequence = Sequence([items[i] for i in order])


def set_temporal_positions(enhanced, phases: dict) -> None:
    """Frame Content: Temporal Position Index of each frame, by the SOP UID of its original."""
    for item, sop in zip(enhanced.PerFrameFunctionalGroupsSequence, source_of_frames(enhanced)):
        item.FrameContentSequence[0].TemporalPositionIndex = phases[sop]


def save(enhanced, path) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    enhanced.save_as(str(path))
    return str(path)


def enhanced_mr_4d(phases: int = 2, slices: int = 56, size: int = 8, temporal_indices=None,
                   pointers=("StackID", "InStackPositionNumber", "TemporalPositionIndex"), order=None):
    """An Enhanced MR (built with pydicom) of ``phases`` x ``slices`` frames of ``size`` x ``size``,
    frame k of phase t and slice s holding t * 1000 + s everywhere, with a Dimension Index
    Sequence on ``pointers`` and Dimension Index Values by pointer: 1 for Stack ID, s + 1 for
    In-Stack Position Number, t + 1 for any other (the phase: Temporal Position Index, or a
    Trigger Delay Time, or a private element, as scanners point at). ``temporal_indices``: a
    callable (t, s) -> the frame's Temporal Position Index (default t + 1), which may disagree
    with its Dimension Index Values, as scanners' do. ``order``: the stored order of the (t, s)
    pairs (default phase-major)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.datadict import tag_for_keyword
    from pydicom.uid import ExplicitVRLittleEndian
    pairs = list(order) if order is not None else [(t, s) for t in range(phases) for s in range(slices)]
    temporal = temporal_indices or (lambda t, s: t + 1)
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.4.1"
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = _uid("enhanced-mr-4d", phases, slices)
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.StudyInstanceUID, ds.SeriesInstanceUID = _uid("study-4d"), _uid("series-4d")
    ds.FrameOfReferenceUID = _uid("for-4d")
    ds.PatientID, ds.Modality, ds.Manufacturer = "ENH4D", "MR", "SIEMENS"
    ds.ImageType = ["ORIGINAL", "PRIMARY", "M", "NONE"]
    ds.InstanceNumber = 1
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.Rows = ds.Columns = size
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    ds.NumberOfFrames = len(pairs)
    ds.ContentDate, ds.ContentTime, ds.AcquisitionDateTime = "20240101", "120000", "20240101120000"
    dimension_uid = _uid("dimension-4d")
    index = []
    for keyword in pointers:
        item = Dataset()
        item.DimensionOrganizationUID = dimension_uid
        item.DimensionIndexPointer = tag_for_keyword(keyword)
        item.FunctionalGroupPointer = tag_for_keyword("FrameContentSequence")
        index.append(item)
    ds.DimensionIndexSequence = Sequence(index)
    organization = Dataset()
    organization.DimensionOrganizationUID = dimension_uid
    ds.DimensionOrganizationSequence = Sequence([organization])
    shared = Dataset()
    measures = Dataset()
    measures.PixelSpacing, measures.SliceThickness = [1.5, 1.5], 3.0
    shared.PixelMeasuresSequence = Sequence([measures])
    orientation = Dataset()
    orientation.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
    shared.PlaneOrientationSequence = Sequence([orientation])
    ds.SharedFunctionalGroupsSequence = Sequence([shared])
    items, frames = [], []
    for t, s in pairs:
        item = Dataset()
        content = Dataset()
        content.StackID = "1"
        content.InStackPositionNumber = s + 1
        content.TemporalPositionIndex = temporal(t, s)
        content.DimensionIndexValues = [1 if k == "StackID" else s + 1 if k == "InStackPositionNumber" else t + 1
                                        for k in pointers]
        item.FrameContentSequence = Sequence([content])
        position = Dataset()
        position.ImagePositionPatient = [-6.0, -6.0, 3.0 * s - 80.0]
        item.PlanePositionSequence = Sequence([position])
        items.append(item)
        frames.append(np.full((size, size), t * 1000 + s, dtype=np.uint16))
    ds.PerFrameFunctionalGroupsSequence = Sequence(items)
    ds.PixelData = np.stack(frames).tobytes()
    return ds
