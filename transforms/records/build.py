"""Reading one planned record back from its source and serializing it."""
from __future__ import annotations

import dataclasses
import functools
from typing import BinaryIO, Callable, Optional

import numpy as np
import pydicom

from dcm2tfrecord.transforms.dicom import diffusion as dicom_diffusion
from dcm2tfrecord.transforms.dicom import functional_groups, patient_space, volume_features
from dcm2tfrecord.transforms.masks import annotation as masks_annotation
from dcm2tfrecord.transforms.masks import nifti_mask
from dcm2tfrecord.transforms.masks import sources as mask_sources
from dcm2tfrecord.transforms.masks.grid import Grid
from dcm2tfrecord.transforms.masks.locations import class_locations
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.masks import annotation_cache
from dcm2tfrecord.transforms.dicom import metadata as dicom_metadata
from dcm2tfrecord.transforms.images import geometry
from dcm2tfrecord.transforms.dicom import native as native_dicom
from dcm2tfrecord.transforms.images import raster
from dcm2tfrecord.transforms.images import crop as crops
from dcm2tfrecord.transforms.images import fingerprint, intensity
from dcm2tfrecord.transforms.images import spacing
from dcm2tfrecord.transforms.nifti import read as nifti
from dcm2tfrecord.dataset import png, reasons
from dcm2tfrecord.transforms.dicom.pixels import decode_dicom
from dcm2tfrecord.transforms.dicom.spec import DicomValues
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.sources.read import open_source
from dcm2tfrecord.dataset.features import SOURCE_PATH, RecordKind, serialize_record_parts
from dcm2tfrecord.transforms.record_model import ProbedRecord
from dcm2tfrecord.transforms.settings import DecodeSettings
from dcm2tfrecord.transforms.sources.read import read_unchanged, with_timeout


def decode_record(record: ProbedRecord, fileobj: BinaryIO,
                  settings: DecodeSettings = DecodeSettings(),
                  opener: Callable[[str], BinaryIO] = open_source):
    """(pixels (D, H, W, C) after values and geometry, metadata features) for one record."""
    native = record.native
    nifti_spec: Optional[nifti.NiftiSpec] = None
    header = None                       # the parsed DICOM header, where the decode parsed one
    if isinstance(native, native_dicom.NativePixels) and record.kind == RecordKind.DICOM and not record.members \
            and settings.dicom_values == DicomValues.MODALITY:
        pixels = native_dicom.decode_native(native_dicom.file_bytes(fileobj), native, record.frame)
        metadata = native_dicom.unpack_metadata(native.metadata, dicom_metadata.metadata_keys(settings))
    elif record.kind == RecordKind.DICOM:
        order = record.stacks[0].frames if record.stacks and record.frame is None else None
        pixels, ds, window = decode_dicom(fileobj, settings, record.frame, order)
        header = ds
        windows = window.pop("frames", None)
        metadata = dicom_metadata.metadata(ds, settings, window)
        if functional_groups.present(ds):
            frames = [record.frame] if record.frame is not None else \
                order if order is not None else range(pixels.shape[0])
            metadata = functional_groups.record_metadata(metadata, ds, list(frames), windows or [],
                                                         record.slice_spacing)
            if record.stacks and record.frame is None:     # a stack is a volume of the file
                metadata.update(_stack_volumes(record, ds, metadata))
            elif record.frame is not None:                 # --frames split: the frame's own encoding
                attrs = functional_groups.frame_attributes(ds)[record.frame]
                metadata.update(volume_features.features([dicom_diffusion.frame_diffusion(attrs)]))
    elif record.kind == RecordKind.NIFTI:
        pixels, metadata, nifti_spec = _decode_nifti(record, fileobj, settings)
    else:
        pixels, metadata = raster.decode_image(fileobj), {}
    if record.kind == RecordKind.DICOM and record.frame is not None and patient_space.POSITION in metadata:
        metadata.update(patient_space.one_slice(metadata, record.frame))
    if record.kind == RecordKind.DICOM:
        metadata[SLICE_SPACING] = _slice_spacing(metadata)
    frame = _frame_of_reference(header if header is not None else fileobj, record, settings) \
        if record.kind == RecordKind.DICOM else ""
    mask = _mask(record, metadata, pixels.shape, (), opener, settings, frame, nifti_spec)
    return _geometry_and_path(pixels, metadata, record, settings, mask)


SLICE_SPACING = "dicom/slice_spacing"


def _decode_nifti(record: ProbedRecord, fileobj: BinaryIO,
                  settings: DecodeSettings) -> tuple[np.ndarray, dict, nifti.NiftiSpec]:
    """A NIfTI record's pixels ``[k, j, i, c]`` (a 4-D file's volume ``record.frame``), its
    geometry under DICOM's names (patient_space.from_affine), nothing else of ``dicom/*``, and
    the file's spec. The file is read whole (transforms.nifti.read), and may not claim more
    voxels than probed (its shape as probed is the record's after --resize or --spacing)."""
    spec = record.spec
    header = nifti.probe(fileobj) if settings.resize is not None or settings.spacing is not None else spec
    plane = header.height * header.width
    planned = header.depth * plane * max(record.source_frames, 1)
    found, pixels = nifti.read(fileobj, planned)
    lps = found.affine
    if pixels.ndim == 5:
        pixels = np.ascontiguousarray(pixels[record.frame or 0])
    elif record.frame not in (None, 0):
        raise ConversionError(reasons.INVALID_NIFTI,
                              f"volume {record.frame} planned, the file now holds one volume: it changed since it "
                              f"was probed")
    return pixels, patient_space.from_affine(lps, pixels.shape[0]), found


def _slice_spacing(metadata: dict, planned: float = 0.0) -> np.ndarray:
    """``planned`` (a volume's, from its planning) or ``dicom/slice_spacing`` as written, else
    (a Siemens mosaic's) the slice step of the record's affine along the normal; empty for one
    slice."""
    if planned > 0:
        return np.asarray([planned], dtype=np.float32)
    given = np.asarray(metadata.get(SLICE_SPACING, ()), dtype=np.float32).reshape(-1)
    if given.size and given[0] > 0:
        return given
    spacing = patient_space.spacing_along_normal(metadata)
    return np.asarray([spacing] if spacing > 0 else [], dtype=np.float32)


def _stack_volumes(record: ProbedRecord, ds, metadata: dict) -> dict:
    """An Enhanced record's volume features: a stack is a volume of its file; a stacked record
    (--series_4d stack, volume_index -1) holds every one, its affine that of the first."""
    attrs = functional_groups.frame_attributes(ds)
    frames = record.stacks[0].frames
    if record.volume_index >= 0:
        return volume_features.features([dicom_diffusion.frame_diffusion(attrs[frames[0]])],
                                        max(record.source_frames, 1), record.stacks[0].index)
    per_volume = len(frames) // record.volumes
    out = volume_features.features([dicom_diffusion.frame_diffusion(attrs[frames[v * per_volume]])
                                    for v in range(record.volumes)], record.volumes, -1)
    positions = np.asarray(metadata[patient_space.POSITION], dtype=np.float64).reshape(-1, 3)
    orientation = patient_space.orientation(attrs[frames[0]].get("ImageOrientationPatient"))
    spacing = patient_space.floats(attrs[frames[0]].get("PixelSpacing"), 2)
    if len(positions) == len(frames) and orientation:
        volumes = positions.reshape(record.volumes, per_volume, 3)
        apart = float(np.abs(volumes - volumes[0]).max())
        if apart > patient_space.GAP_ABSOLUTE:
            raise ConversionError(reasons.SERIES_MIXED_SHAPES,
                                  f"--series_4d stack: the file's {record.volumes} stacks do not lie in one place "
                                  f"(their frames' positions differ by up to {apart:.2f} mm): they are not the "
                                  f"volumes of one 4-D image; convert it with --series_4d split")
        out[patient_space.AFFINE] = patient_space.features(
            orientation, [tuple(p) for p in positions[:per_volume]], spacing,
            record.slice_spacing or 1.0)[patient_space.AFFINE]
    return out


def _frame_of_reference(source, record: ProbedRecord, settings: DecodeSettings) -> str:
    """The image's Frame of Reference UID when its mask is drawn from annotations (checked against
    theirs: transforms.masks.rtstruct, seg), from its parsed header ``source`` or, on the native
    path that parsed none, read from the file object's header; "" otherwise."""
    if settings.masks is None or not record.mask_bytes or not record.annotations:
        return ""
    if not isinstance(source, pydicom.Dataset):
        source.seek(0)
        source = pydicom.dcmread(source, stop_before_pixels=True, force=True, specific_tags=["FrameOfReferenceUID"])
    return str(source.get("FrameOfReferenceUID", "") or "").strip()


def _mask(record: ProbedRecord, metadata: dict, shape: tuple, uids: tuple, opener: Callable[[str], BinaryIO],
          settings: DecodeSettings, frame_of_reference: str = "", image: object = None) -> Optional[np.ndarray]:
    """--class_map: the record's mask ``[k, j, i, c]`` from its annotations, each drawn by its source
    (transforms.masks.sources): on the record's grid (its slices' positions, orientation and pixel
    spacing as its features say; ``uids`` its slices' SOP Instance UIDs where known; its Frame of
    Reference UID, checked against the annotations'), or, for the files paired with it by path,
    against the image's own header ``image``; all background without one (--missing_mask empty)."""
    masks = settings.masks
    if masks is None or not record.mask_bytes:
        return None
    part = record.mask_part
    if not record.annotations and part is None:      # --missing_mask empty: no annotation covers it
        return nifti_mask.empty_mask(shape, masks.class_map, masks.layout)
    if not all(mask_sources.source(kind).on_grid for _, kind in record.annotations):
        return _paired_mask(record, image, shape, opener, masks)
    if part is not None and not part.volume:  # a slice or frame of its series: its own UID, a single-frame file's
        uids = (part.uid,) if part.uid and shape[0] == 1 else ()
    positions = np.asarray(metadata.get(patient_space.POSITION, ()), dtype=np.float64).reshape(-1, 3)
    if len(positions) != shape[0] and len(uids) != shape[0]:
        raise ConversionError(reasons.MASK_GRID_MISMATCH,
                              f"the image's {shape[0]} slices have no position each (and no SOP Instance UIDs): "
                              f"a mask cannot be placed on them")
    grid = Grid(
        rows=int(shape[1]), columns=int(shape[2]), positions=tuple(tuple(p) for p in positions.tolist()),
        orientation=tuple(np.asarray(metadata.get(patient_space.ORIENTATION, ()), np.float64)[:6].tolist()),
        pixel_spacing=tuple(np.asarray(metadata.get("dicom/pixel_spacing", ()), np.float64)[:2].tolist()),
        instance_uids=uids, frame_of_reference_uid=frame_of_reference)
    notes = [(annotation_cache.CACHE.get(source, kind, functools.partial(read_unchanged, source, opener)), kind)
             for source, kind in record.annotations]
    return masks_annotation.volume_mask(notes, grid, masks, None if part is None else part.contours)


def _paired_mask(record: ProbedRecord, image: object, shape: tuple, opener: Callable[[str], BinaryIO],
                 masks: MaskSettings) -> np.ndarray:
    """A file record's mask from the files paired with it by path (--mask_pattern, --mask_column: a
    NIfTI mask, transforms.masks.nifti_mask), each read and drawn against the image's own header;
    a mask that does not fit fails the record in one line naming both files."""
    assert image is not None        # only a NIfTI record pairs with a NIfTI mask
    try:
        notes = [(mask_sources.source(kind).parse(read_unchanged(source, opener)), kind)
                 for source, kind in record.annotations]
        return masks_annotation.record_mask(notes, tuple(shape[:3]), masks,
                                            lambda n: mask_sources.MaskTarget(image=image, volume=record.frame))
    except ConversionError as exc:
        files = ", ".join(source.rel_path for source, _ in record.annotations)
        raise ConversionError(exc.reason, f"mask {files} of image {record.source.rel_path}: {exc}",
                              skipped=exc.skipped, outage=exc.outage) from exc


def _geometry_and_path(pixels, metadata: dict, record: ProbedRecord, settings: DecodeSettings,
                       mask: Optional[np.ndarray] = None):
    if settings.channels != geometry.Channels.KEEP:
        pixels = geometry.convert_channels(pixels, settings.channels)
    if settings.crop != crops.Crop.OFF:
        pixels, mask = _crop(pixels, metadata, record, settings, mask)
    if settings.fingerprint_pass:    # --intensity ct's draw: the cropped pixels and mask, nothing more
        return pixels, {_DRAWN_MASK: mask}
    if settings.intensity == intensity.Intensity.ZSCORE:
        # nnU-Net's order: crop, normalise, resample (float32 from here; planned so at probe)
        pixels, mean, std = intensity.zscore(pixels)
        metadata.update(intensity.features(mean, std))
    elif settings.intensity == intensity.Intensity.CT:
        pixels, per_channel = _ct(pixels, settings)
        metadata.update(fingerprint.features(per_channel))
    if settings.spacing is not None:
        pixels, mask = _respace(pixels, metadata, record, settings, mask)
    if mask is not None and settings.resize is not None:
        mask = geometry.resize_nearest(mask, settings.resize, settings.resize_mode)
    if mask is not None and settings.masks is not None and settings.masks.locations:
        # --class_locations: of the mask as written (after --crop, --spacing, --resize)
        metadata.update(class_locations(mask, record.record_id, settings.masks.locations,
                                        settings.masks.class_count))
    if mask is not None:
        metadata[masks_annotation.MASK_RAW] = mask.data.cast("B")
        metadata[masks_annotation.MASK_DTYPE] = mask.dtype.newbyteorder("=").name
        metadata[masks_annotation.MASK_CHANNELS] = int(mask.shape[-1])
    if settings.resize is not None:
        size = pixels.shape[1:3]
        pixels = geometry.resize(pixels, settings.resize, settings.resize_mode)
        # the affine of its voxels
        if record.kind in (RecordKind.DICOM, RecordKind.NIFTI) and patient_space.AFFINE in metadata:
            scaled, offset = geometry.placement(size, settings.resize, settings.resize_mode)
            metadata.update(patient_space.resized(metadata, size, scaled, offset))
    if settings.keep_source_path:
        metadata[SOURCE_PATH] = record.source.uri
    return pixels, metadata


def _ct(pixels: np.ndarray, settings: DecodeSettings) -> tuple[np.ndarray, tuple]:
    """--intensity ct: the pixels clipped and z-scored with the dataset's fingerprint, and its
    bounds per channel."""
    if not settings.ct_fingerprint:
        raise ConversionError(reasons.INVALID_VALUE,
                              f"--intensity ct: no record of split {fingerprint.TRAINING_SPLIT!r} had a foreground "
                              "voxel, so the dataset has no intensity fingerprint; give the training records "
                              "masks with foreground, or use --intensity zscore")
    try:
        return fingerprint.normalize(pixels, settings.ct_fingerprint), settings.ct_fingerprint
    except ValueError as exc:
        raise ConversionError(reasons.INVALID_VALUE, f"--intensity ct: {exc} (computed from the training "
                                                     "records with that many)") from None


def _volume(record: ProbedRecord) -> bool:
    """Whether a record is a volume (a series', a NIfTI's, an Enhanced stack's): --spacing and
    --crop work on it in 3-D, on any other record in-plane."""
    return bool(record.members or record.kind == RecordKind.NIFTI or (record.stacks and record.frame is None))


def _crop(pixels: np.ndarray, metadata: dict, record: ProbedRecord, settings: DecodeSettings,
          mask: Optional[np.ndarray]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """--crop: the pixels and the mask cut to one box (transforms.images.crop: a volume in 3-D,
    any other record in-plane), before any resampling; its geometry rewritten and the source's
    kept with the box (patient_space.cropped). The record is at most as large as planned (the
    uncropped shape): the shard writer takes it (transforms.output.write.size_mismatch)."""
    box = crops.crop_box(settings.crop, pixels, mask, _volume(record))
    metadata.update(patient_space.cropped(metadata, pixels.shape[:3], box))
    return crops.crop(pixels, box), (None if mask is None else crops.crop(mask, box))


def _respace(pixels: np.ndarray, metadata: dict, record: ProbedRecord, settings: DecodeSettings,
             mask: Optional[np.ndarray]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """--spacing: the pixels and the mask on the grid of the target spacing whose shape the probe
    planned (``record.spec``): a volume (a series', a NIfTI's, an Enhanced stack's) in 3-D, any
    other record in-plane (transforms.images.spacing); its geometry rewritten and the source's
    kept (patient_space.respaced)."""
    # a target in mm: --spacing auto's was put in place by the shard writer (spacing.with_target)
    assert settings.spacing is not None and not isinstance(settings.spacing, str)
    target = spacing.axis_order(settings.spacing)
    original = patient_space.voxel_spacing(metadata)
    depth = _volume(record) and pixels.shape[0] > 1 and original[0] > 0
    if not (original[1] > 0 and original[2] > 0):
        raise ConversionError(reasons.MISSING_ATTRIBUTE,
                              "--spacing: the record has no pixel spacing in mm to resample from; convert it "
                              "without --spacing")
    source = (original[0] if depth else target[0], original[1], original[2])
    scale = [t / s for s, t in zip(source, target)]
    shape: tuple[int, ...] = (record.spec.depth, record.spec.height, record.spec.width)
    size = pixels.shape[:3]
    box = metadata.get(patient_space.CROP_BOX)
    if box is not None and tuple(int(n) for n in box) != crops.full_box(metadata[patient_space.ORIGINAL_SHAPE]):
        # --crop cut it: its own resampled shape, never past the planned (uncropped) one
        shape = tuple(min(int(n), int(p)) for n, p in zip(spacing.planned_shape(size, source, target), shape))
    pixels = spacing.resample_image(pixels, source, target, shape)
    if mask is not None:
        mask = spacing.resample_mask(mask, source, target, shape)
    metadata.update(patient_space.respaced(metadata, size, original, scale, target, shape, depth))
    return pixels, mask


def decode_volume(record: ProbedRecord, opener: Callable[[str], BinaryIO],
                  settings: DecodeSettings = DecodeSettings()):
    """A series record: its slices decoded in their planned (anatomical) order and stacked;
    its geometry from every slice's position (transforms.dicom.patient_space), its diffusion
    encoding from each volume's first slice (transforms.dicom.volume_features)."""
    slices, metadata, positions, encodings, uids, frame = [], None, [], [], [], ""
    held = record.volumes if record.volume_index < 0 else 1     # a stacked 4-D record holds them all
    per_volume = len(record.members) // held
    for n, member in enumerate(record.members):
        pixels, ds, window = decode_dicom(read_unchanged(member, opener), settings)
        slices.append(pixels)
        if metadata is None:
            metadata = dicom_metadata.metadata(ds, settings, window)
            orientation = patient_space.orientation(ds.get("ImageOrientationPatient"))
            pixel_spacing = patient_space.floats(ds.get("PixelSpacing"), 2)
            single = dicom_metadata.single_slice_spacing(ds)
            frame = _frame_of_reference(ds, record, settings)
        positions += dicom_metadata.slice_positions(ds, pixels.shape[0])
        uids.append(str(ds.get("SOPInstanceUID", "") or "") if pixels.shape[0] == 1 else "")
        if n % per_volume == 0:
            encodings.append(dicom_diffusion.diffusion(ds))
    assert metadata is not None     # a series record has members
    placed = positions if all(positions) else []
    # a stacked 4-D record's affine is one volume's: its first len(placed) // held positions
    metadata.update(patient_space.features(orientation, placed, pixel_spacing, single))
    if held > 1 and placed:
        metadata[patient_space.AFFINE] = patient_space.features(
            orientation, placed[:len(placed) // held], pixel_spacing, single)[patient_space.AFFINE]
    metadata.update(volume_features.features(encodings, record.volumes, record.volume_index))
    metadata[SLICE_SPACING] = _slice_spacing(metadata, record.slice_spacing)
    pixels = np.ascontiguousarray(np.concatenate(slices))
    mask = _mask(record, metadata, pixels.shape, tuple(uids) if all(uids) else (), opener, settings, frame)
    return _geometry_and_path(pixels, metadata, record, settings, mask)


def decode_pixels(record: ProbedRecord, opener: Callable[[str], BinaryIO] = open_source,
                  settings: DecodeSettings = DecodeSettings()) -> tuple[np.ndarray, dict]:
    """(pixels (D, H, W, C), metadata features) of one probed record, within --decode_timeout_s."""
    def decode():
        if record.members:
            return decode_volume(record, opener, settings)
        return decode_record(record, read_unchanged(record.source, opener), settings, opener)
    return with_timeout(decode, settings.decode_timeout_s, record.source.uri)


def fingerprint_sample(record: ProbedRecord, opener: Callable[[str], BinaryIO] = open_source,
                       settings: DecodeSettings = DecodeSettings()) -> list:
    """--intensity ct: a training record's draw for the dataset fingerprint
    (transforms.images.fingerprint.sample): its pixels after --crop, before any normalisation
    and --spacing, its foreground from its mask where the run has masks."""
    pixels, drawn = decode_pixels(record, opener, dataclasses.replace(settings, fingerprint_pass=True))
    return fingerprint.sample(pixels, fingerprint.foreground(pixels, drawn[_DRAWN_MASK]), record.record_id)


_DRAWN_MASK = "mask"     # fingerprint_pass: the record's mask (None without), beside its pixels


def build_record(record: ProbedRecord, opener: Callable[[str], BinaryIO] = open_source,
                 settings: DecodeSettings = DecodeSettings()) -> tuple[list, str, tuple]:
    """(serialized Example as parts, ``serialize_record_parts``; stored dtype; shape) for one
    probed record."""
    pixels, metadata = decode_pixels(record, opener, settings)
    try:
        payload = serialize_record_parts(pixels, record.record_id, record.kind, record.label, metadata,
                                         settings.pixel_encoding, settings.chunks)
    except png.NotEncodable as exc:
        raise ConversionError(reasons.NOT_PNG_ENCODABLE,
                              f"--pixel_encoding png cannot hold this record: {exc}; convert it with "
                              "--pixel_encoding raw, or DICOM with --dicom_values "
                              "stored or window (integers)") from None
    return payload, pixels.dtype.newbyteorder("=").name, tuple(int(d) for d in pixels.shape)
