"""Probing: header-only inspection that plans a record without decoding pixels."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
from pydicom.dataelem import RawDataElement
from pydicom.uid import DeflatedExplicitVRLittleEndian

from typing import BinaryIO, Callable, Optional

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.errors import Dcm2TfrecordError
from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms.dicom import diffusion as dicom_diffusion
from dcm2tfrecord.transforms.dicom import functional_groups, patient_space
from dcm2tfrecord.transforms.masks import annotation as masks_annotation
from dcm2tfrecord.transforms.dicom import content as dicom_content
from dcm2tfrecord.transforms.dicom import header as dicom_header
from dcm2tfrecord.transforms.dicom import mosaic as dicom_mosaic
from dcm2tfrecord.transforms.dicom import spec as dicom_spec
from dcm2tfrecord.transforms.dicom.syntax import transfer_syntax
from dcm2tfrecord.transforms.dicom import integrity
from dcm2tfrecord.transforms.images import raster
from dcm2tfrecord.transforms.nifti import read as nifti
from dcm2tfrecord.transforms.sources import sniff
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.hashing import record_id
from dcm2tfrecord.transforms.dicom.native import NativePixels, native_layout
from dcm2tfrecord.transforms.images import spacing
from dcm2tfrecord.transforms.images.intensity import Intensity
from dcm2tfrecord.transforms.images.geometry import plan_spec
from dcm2tfrecord.transforms.record_model import Identifiers, ImageSpec, ProbedRecord, SliceInfo, SourceFile, replaced
from dcm2tfrecord.transforms.settings import DEFAULT_MAX_PIXELS, DecodeSettings
from dcm2tfrecord.transforms.sources.read import (FINGERPRINT_BYTES, fingerprint, fingerprint_length, not_regular,
                                                  open_checked, open_source, special_kind)

_SOP_INSTANCE_UID = 0x00080018
_UID_MAX_BYTES = 64


class Frames(StrEnum):
    """``--frames``: a multi-frame DICOM file as one record with depth = frames, or one record
    per frame (:func:`expand_frames`)."""
    STACK = "stack"
    SPLIT = "split"


def _identifiers(ds) -> Identifiers:
    def text(keyword: str) -> str:
        try:
            return str(ds.get(keyword, "") or "").strip()
        except Exception:
            return ""
    return Identifiers(patient_id=text("PatientID"), study_uid=text("StudyInstanceUID"),
                       series_uid=text("SeriesInstanceUID"), sop_uid=text("SOPInstanceUID"))


def _value(ds, keyword: str):
    try:
        return ds.get(keyword)
    except Exception:
        return None


def _number(ds, keyword: str):
    try:
        value = ds.get(keyword)
        if value is None or value == "":
            return None
        if not isinstance(value, (str, bytes, int, float)) and hasattr(value, "__iter__"):
            value = list(value)[0]
        number = float(value)
    except Exception:
        return None
    return number if np.isfinite(number) else None


def _slice_info(ds, layout: Optional[dicom_mosaic.Mosaic] = None) -> SliceInfo:
    """The slice's geometry, whether it is a localizer, and what tells it apart from another
    slice at its position (SliceInfo.volume_key); a Siemens mosaic's position is that of its
    first slice (mosaic.slice_positions), its stored one being the corner of the whole mosaic."""
    instance = _number(ds, "InstanceNumber")
    try:
        image_type = [str(v).upper() for v in (ds.get("ImageType") or ())]
    except Exception:
        image_type = []
    encoding = dicom_diffusion.diffusion(ds)
    key = [("temporal", _number(ds, "TemporalPositionIdentifier")), ("trigger", _number(ds, "TriggerTime")),
           ("acquisition", _number(ds, "AcquisitionNumber")), ("echo", _number(ds, "EchoNumbers")),
           ("echo_time", _number(ds, "EchoTime")),
           ("b", encoding.bvalue if encoding else None),
           ("gradient", tuple(round(g, 4) + 0.0 for g in encoding.gradient) if encoding and encoding.gradient
            else None)]
    position = patient_space.floats(_value(ds, "ImagePositionPatient"), 3)
    if layout is not None:
        positions = dicom_mosaic.slice_positions(ds, layout)
        position = positions[0] if positions else ()
    return SliceInfo(orientation=patient_space.orientation(_value(ds, "ImageOrientationPatient")), position=position,
                     instance=int(instance) if instance is not None and instance.is_integer() else None,
                     localizer="LOCALIZER" in image_type,
                     volume_key=tuple((name, value) for name, value in key if value is not None),
                     pixel_spacing=patient_space.floats(_value(ds, "PixelSpacing"), 2))


def _uid_end(header, file_size: int) -> int:
    """Where the SOP Instance UID element ends in the file, as parsed (0 where not known): what
    the fingerprint must reach to hold it. In a Deflated file the parse's positions are the
    inflated stream's: the whole file, when it may lie past the fingerprint's bytes."""
    elem = header.ds._dict.get(_SOP_INSTANCE_UID)
    tell: Optional[int]
    if isinstance(elem, RawDataElement):
        tell, length = elem.value_tell, elem.length
    else:       # converted (its value's position kept; a UID is at most 64 bytes)
        tell, length = getattr(elem, "file_tell", None), _UID_MAX_BYTES
    if tell is None:
        return 0
    end = int(tell) + int(length)
    if end > FINGERPRINT_BYTES // 2 and transfer_syntax(header) == DeflatedExplicitVRLittleEndian:
        return file_size
    return end


def _probe_dicom(fileobj: BinaryIO, sniffed: str, settings: DecodeSettings, file_size: int,
                 max_pixels: int = DEFAULT_MAX_PIXELS,
                 ) -> tuple[ImageSpec, Identifiers, SliceInfo, Optional[NativePixels], tuple, int]:
    def whole(ds, walked: bool) -> None:     # on the elements as parsed; noise is not judged truncated
        if sniffed == sniff.DICOM or dicom_content.looks_like_dicom(ds):
            integrity.check_whole(ds, integrity.stream_size(ds, file_size), walked)

    header, raw_pixels = dicom_header.read_probe_header(fileobj, settings, file_size, max_pixels,
                                                        check=whole)
    ds = header.ds
    if sniffed == sniff.DICOM and len(ds) == 0:
        raise ConversionError(reasons.TRUNCATED_FILE, "DICOM preamble, then the file ends before any element")
    if sniffed == sniff.MAYBE_DICOM and not dicom_content.looks_like_dicom(ds):
        raise ConversionError(reasons.INVALID_DICOM, "no DICOM preamble and no DICOM elements")
    # every keyword read below, each element converted once (HeaderValues stands in for the Dataset)
    ds = header  # type: ignore[assignment]
    uid_end = _uid_end(header, file_size)
    if settings.masks is not None:
        kind = masks_annotation.kind_of(str(ds.get("SOPClassUID", "") or ""))
        if kind is not None:
            raise _Annotation(kind)
    if not dicom_content.has_pixel_data(ds):
        sop = str(ds.get("SOPClassUID", "") or "unknown SOP class")
        raise ConversionError(reasons.NO_PIXEL_DATA, f"no pixel data ({sop})", skipped=True)
    if dicom_content.burned_in_annotation(ds) and not settings.allow_burned_in:
        raise ConversionError(reasons.BURNED_IN_ANNOTATION,
                              "Burned In Annotation is YES: text (possibly patient identity) is part "
                              "of the pixels; pass --allow_burned_in to convert it anyway", skipped=True)
    layout = dicom_mosaic.mosaic_layout(ds)
    spec = dicom_spec.image_spec(ds, settings, layout)
    if spec.depth * spec.height * spec.width <= max_pixels:   # else too_many_pixels says it
        integrity.check_frames_fit(ds, fileobj, transfer_syntax(ds))
    stacks = () if not functional_groups.present(ds) else functional_groups.split_stack(ds) \
        if settings.frames == Frames.SPLIT else functional_groups.plan_stacks(ds)
    native = None
    if raw_pixels is not None and settings.dicom_values == dicom_spec.DicomValues.MODALITY and not stacks:
        native = native_layout(ds, raw_pixels, spec.dtype, settings, file_size, layout)
    info = _slice_info(ds, layout)
    if settings.spacing is not None and stacks and not info.pixel_spacing:
        # --spacing: an Enhanced file's Pixel Spacing is its functional groups' (its first stack's first frame)
        frame = functional_groups.frame_attributes(ds)[stacks[0].frames[0]]
        info = dataclasses.replace(info, pixel_spacing=patient_space.floats(frame.get("PixelSpacing"), 2))
    return spec, _identifiers(ds), info, native, stacks, uid_end


def _probe_image(fileobj: BinaryIO) -> ImageSpec:
    return raster.image_spec(raster.open_image(fileobj))


def _probe_nifti(fileobj: BinaryIO, max_pixels: int,
                 settings: DecodeSettings = DecodeSettings()) -> tuple[ImageSpec, int, Optional[SliceInfo], float]:
    """(the spec of one volume, how many volumes, its in-plane spacing, its slice step) from a
    NIfTI header (transforms.nifti.read); ``max_pixels`` bounds the whole file, every volume of a
    4-D one (the writer reads it whole). With --spacing X,Y,Z the spec is the resampled volume's,
    planned from the header's affine; with --spacing auto the spec is the file's and its voxel
    spacing, from the affine, is kept (a SliceInfo's pixel_spacing, the step), for the target to
    be taken from (voxel_sample) and the record planned with it (plan_spacing)."""
    found = nifti.probe(fileobj, max_pixels)
    spec = ImageSpec(found.depth, found.height, found.width, found.channels, found.dtype)
    target = settings.spacing
    if target is None:
        return spec, found.volumes, None, 0.0
    step, rows, columns = patient_space.voxel_spacing({patient_space.AFFINE: found.affine})
    if isinstance(target, str):         # spacing.AUTO
        return spec, found.volumes, SliceInfo(pixel_spacing=(rows, columns)), step
    spec = spacing.plan_depth(spacing.plan_in_plane(spec, (rows, columns), target), step, target)
    return spec, found.volumes, None, 0.0


def _sniff_and_probe(source: SourceFile, settings: DecodeSettings,
                     opener: Callable[[str], BinaryIO], max_pixels: int = DEFAULT_MAX_PIXELS,
                     ) -> tuple[ImageSpec, str, Optional[Identifiers], Optional[SliceInfo],
                                Optional[NativePixels], tuple, int, bytes, float]:
    """(spec, kind, identifiers, slice info, native layout, Enhanced stacks, NIfTI volumes (0
    for others), the file's fingerprint (transforms.sources.read.fingerprint), a NIfTI's slice
    step with --spacing auto (0.0 otherwise))."""
    with open_checked(source.uri, opener, source.size) as fileobj:
        try:
            head = fileobj.read(FINGERPRINT_BYTES)
            fileobj.seek(0)
        except Exception as exc:
            raise fileobj.checked(ConversionError(reasons.UNREADABLE, f"read failed: {exc}")) from exc
        kind = sniff.sniff(head[:sniff.HEAD_BYTES], source.uri)
        if kind == sniff.OTHER:
            raise ConversionError(reasons.UNSUPPORTED_FORMAT,
                                  f"not DICOM, NIfTI or a raster image "
                                  f"({sniff.extension(source.uri) or 'no extension'})",
                                  skipped=True)
        try:
            if kind == sniff.IMAGE:
                return (_probe_image(fileobj), RecordKind.IMAGE, None, None, None, (), 0,
                        _fingerprint(fileobj, head, source.size), 0.0)
            if kind == sniff.NIFTI:
                spec, volumes, info, step = _probe_nifti(fileobj, max_pixels, settings)
                return (spec, RecordKind.NIFTI, None, info, None, (), volumes,
                        _fingerprint(fileobj, head, source.size), step)
            try:
                spec, ids, info, native, stacks, uid_end = _probe_dicom(fileobj, kind, settings, source.size,
                                                                        max_pixels)
            except _Annotation as found:
                return (_ANNOTATION_SPEC, f"{masks_annotation.ANNOTATION}:{found.kind}",
                        _annotation_identifiers(fileobj, found.kind), None, None, (), 0,
                        _fingerprint(fileobj, head, source.size), 0.0)
            return (spec, RecordKind.DICOM, ids, info, native, stacks, 0,
                    _fingerprint(fileobj, head, source.size, uid_end), 0.0)
        except ConversionError as exc:
            if fileobj.error is not None:      # a read failed underneath the parser
                raise fileobj.checked(exc) from exc
            named_dicom = sniff.extension(source.uri) in sniff.DICOM_EXTENSIONS
            if kind == sniff.MAYBE_DICOM and exc.reason == reasons.INVALID_DICOM and not named_dicom:
                raise ConversionError(reasons.UNSUPPORTED_FORMAT,
                                      "not DICOM (no preamble, no DICOM elements) and not an image",
                                      skipped=True) from exc
            raise


def _fingerprint(fileobj: BinaryIO, head: bytes, size: int, cover: int = 0) -> bytes:
    """The fingerprint of the file the probe read (transforms.sources.read.fingerprint): its
    head, read first, or (a header whose SOP Instance UID lies past it, ``cover``) as far as
    that, read again."""
    length = fingerprint_length(size, cover)
    if length > len(head):
        fileobj.seek(0)
        head = fileobj.read(length)
    return fingerprint(head, min(length, len(head)))


def special_file_kind(uri: str) -> str:
    """What a local input that is not a regular file is ("" for a regular file, a
    storage object, or one that cannot be stat'ed: opening it then says why)."""
    if "://" in uri:
        return ""
    try:
        mode = os.stat(uri).st_mode
    except OSError:
        return ""
    return special_kind(mode)


def probe_file(source: SourceFile, max_pixels: int = DEFAULT_MAX_PIXELS,
               max_record_bytes: Optional[int] = None,
               opener: Callable[[str], BinaryIO] = open_source,
               settings: DecodeSettings = DecodeSettings()) -> ProbedRecord:
    """Plans the record of one file from its header, or raises ConversionError.

    ``expand_frames`` turns it into one record per frame with ``--frames split``. Non-DICOM,
    non-image files are skipped unless their name says DICOM, in which case
    they failed: a ``.dcm`` that does not parse is a broken file.
    """
    if source.size == 0:
        kind = special_file_kind(source.uri)
        if kind:
            raise not_regular(kind)
        raise ConversionError(reasons.EMPTY_FILE, "file is empty (0 bytes)")
    spec, kind, ids, info, native, stacks, volumes, found, step = _sniff_and_probe(source, settings, opener,
                                                                                  max_pixels)
    source = replaced(source, fingerprint=found)     # what the writer checks it reads
    if kind.startswith(masks_annotation.ANNOTATION):
        return ProbedRecord(source=source, record_id=record_id(source.rel_path, settings.id_salt),
                            kind=masks_annotation.ANNOTATION, spec=spec, ids=ids,
                            annotation=kind.partition(":")[2])
    pixels = spec.depth * spec.height * spec.width
    if pixels > max_pixels:
        raise ConversionError(reasons.TOO_MANY_PIXELS,
                              f"header claims {spec.depth}x{spec.height}x{spec.width} = {pixels} pixels "
                              f"> --max_pixels {max_pixels}")
    if pixels == 0:
        raise ConversionError(reasons.INVALID_VALUE, f"header claims an empty image {spec.shape}")
    spec = plan_spec(spec, settings.resize, settings.channels)
    if settings.intensity != Intensity.NONE:     # the record builder writes float32 (images/intensity.py)
        spec = dataclasses.replace(spec, dtype="float32")
    if settings.spacing is not None and kind != RecordKind.NIFTI:    # a NIfTI's is planned from its affine
        _check_spacing(kind, info)
    record = ProbedRecord(source=source, record_id=record_id(source.rel_path, settings.id_salt),
                          kind=kind, spec=spec, ids=ids, slice_info=info, native=native, stacks=stacks,
                          source_frames=volumes if volumes > 1 else 0, slice_spacing=step)
    largest = max(expand_frames(record, settings), key=lambda r: r.planned_bytes)
    if max_record_bytes is not None and largest.planned_bytes > max_record_bytes:
        raise ConversionError(reasons.RECORD_TOO_LARGE,
                              f"record of {largest.planned_bytes / (1 << 20):.2f} MB {largest.spec.shape} "
                              f"{spec.dtype} exceeds --max_shard_mb {max_record_bytes / (1 << 20):g}")
    return record


def _check_spacing(kind: str, info: Optional[SliceInfo]) -> None:
    """--spacing: a record resampled needs a pixel spacing in mm (a DICOM file's Pixel Spacing, an
    Enhanced file's in its functional groups); a raster image or a DICOM file without one fails."""
    if kind == RecordKind.IMAGE:
        raise ConversionError(reasons.MISSING_ATTRIBUTE,
                              "--spacing: a raster image has no pixel spacing in mm; convert it without --spacing")
    if info is None or not info.pixel_spacing or not all(v > 0 for v in info.pixel_spacing):
        raise ConversionError(reasons.MISSING_ATTRIBUTE,
                              "--spacing: no Pixel Spacing (0028,0030) in mm to resample from; convert it "
                              "without --spacing")


def plan_spacing(record: ProbedRecord, settings: DecodeSettings) -> ProbedRecord:
    """--spacing: a DICOM record's spec (and its mask's planned bytes) as the record builder will
    resample it, planned once the record is what it will be (a series' volume built, its masks
    attached, which placed them on the source's rows and columns), before the shards are planned
    from it: in-plane from its Pixel Spacing, and a volume (a series', an Enhanced file's stack)
    along its slices from its slice step. A NIfTI's was planned at probe, from its affine, but with
    --spacing auto (``settings.spacing`` then the target the run chose) here, from the spacing the
    probe kept."""
    target = settings.spacing
    if target is None or isinstance(target, str):      # off, or auto before its target is chosen
        return record
    nifti_auto = record.kind == RecordKind.NIFTI and record.slice_info is not None
    if record.kind != RecordKind.DICOM and not nifti_auto:
        return record
    info = record.slice_info
    if info is None or len(info.pixel_spacing) != 2:
        return record           # refused at probe (_check_spacing)
    spec = spacing.plan_in_plane(record.spec, info.pixel_spacing, target)
    if nifti_auto or record.members or (record.stacks and record.frame is None):
        spec = spacing.plan_depth(spec, record.slice_spacing, target)
    masks = settings.masks
    mask_bytes = masks_annotation.planned_mask_bytes(spec, masks) if record.mask_bytes and masks is not None \
        else record.mask_bytes
    return replaced(record, spec=spec, mask_bytes=mask_bytes)


def voxel_sample(record: ProbedRecord) -> Optional[tuple]:
    """--spacing auto: what the record adds to the choice of the target (spacing.auto_spacing),
    from its header as probed, before any pixel is read: a volume (a series', an Enhanced stack's,
    a NIfTI's) ``("volume", (step, row, column) mm, (depth, height, width))``, any other record
    with a pixel spacing ``("slice", (row, column) mm)``; None without one (refused at probe)."""
    info = record.slice_info
    if info is None or len(info.pixel_spacing) != 2 or not all(v > 0 for v in info.pixel_spacing):
        return None
    rows, columns = (float(v) for v in info.pixel_spacing)
    volume = record.kind == RecordKind.NIFTI or bool(record.members) or bool(record.stacks and record.frame is None)
    if volume and record.slice_spacing > 0:
        return ("volume", (float(record.slice_spacing), rows, columns),
                (record.spec.depth, record.spec.height, record.spec.width))
    return ("slice", (rows, columns))


_ANNOTATION_SPEC = ImageSpec(1, 1, 1, 1, "uint8")     # an annotation plans no pixels of its own


class _Annotation(Dcm2TfrecordError):
    """The header is an annotation's (a SEG's, an RTSTRUCT's: a mask source claims its SOP class,
    transforms.masks.sources) and --class_map is on (control flow only: caught
    in _sniff_and_probe, never raised past it)."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _annotation_identifiers(fileobj: BinaryIO, kind: str) -> Identifiers:
    """An annotation's identifiers, its series being the one it references (transforms.masks.annotation)."""
    fileobj.seek(0)
    try:
        ds = masks_annotation.probe_header(fileobj, kind)
    except Exception as exc:
        raise ConversionError(reasons.INVALID_DICOM, f"the {kind.upper()} does not parse: {exc}") from exc
    own = _identifiers(ds)
    return Identifiers(patient_id=own.patient_id, study_uid=own.study_uid,
                       series_uid=masks_annotation.referenced_series(ds, kind), sop_uid=own.sop_uid)


def expand_frames(record: ProbedRecord, settings: DecodeSettings) -> list[ProbedRecord]:
    """With ``--frames split``, one record per frame of a multi-frame DICOM; else one record
    per stack of an Enhanced multi-frame file (transforms.dicom.functional_groups), one per
    volume of a 4-D NIfTI, or the record.

    A file of one stack keeps the record id of its path; the stacks of a file holding several
    are told apart by their label (``path#stack=...``), a 4-D NIfTI's volumes by their index
    (``path#volume=v``, as ``--series_4d split`` does for a series; ``frame`` is the volume).
    """
    rel = record.source.rel_path
    if record.kind == RecordKind.NIFTI:
        if record.source_frames <= 1 or record.frame is not None:
            return [record]
        return [dataclasses.replace(record, frame=v, record_id=record_id(f"{rel}#volume={v}", settings.id_salt))
                for v in range(record.source_frames)]
    if settings.frames == "split" and record.kind == RecordKind.DICOM and record.spec.depth > 1:
        spec = dataclasses.replace(record.spec, depth=1)
        return [dataclasses.replace(record, spec=spec, frame=i, stacks=(), source_frames=record.spec.depth,
                                    record_id=record_id(f"{rel}#frame={i}", settings.id_salt))
                for i in range(record.spec.depth)]
    if len(record.stacks) <= 1:
        if record.stacks:
            return [dataclasses.replace(record, slice_spacing=record.stacks[0].spacing)]
        return [record]
    return [dataclasses.replace(record, spec=dataclasses.replace(record.spec, depth=len(stack.frames)),
                                stacks=(stack,), slice_spacing=stack.spacing, source_frames=len(record.stacks),
                                record_id=record_id(f"{rel}#stack={stack.label}", settings.id_salt))
            for stack in record.stacks]
