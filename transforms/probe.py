"""Probing: header-only inspection that plans a record without decoding pixels."""
from __future__ import annotations

from typing import BinaryIO, Callable, Optional

from apache_beam.io.filesystems import CompressionTypes, FileSystems

from transforms import dicom_header, raster, reasons, sniff
from transforms.errors import ConversionError
from transforms.hashing import record_id
from transforms.records import Identifiers, ImageSpec, ProbedRecord, SourceFile

DEFAULT_MAX_PIXELS = 1 << 28


def open_source(uri: str) -> BinaryIO:
    """Opens a source as raw bytes: a ``.gz`` DICOM is not ours to decompress."""
    try:
        return FileSystems.open(uri, mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as exc:
        raise ConversionError(reasons.UNREADABLE, f"cannot open: {exc}") from exc


def _identifiers(ds) -> Identifiers:
    def text(keyword: str) -> str:
        try:
            return str(ds.get(keyword, "") or "").strip()
        except Exception:
            return ""
    return Identifiers(patient_id=text("PatientID"), study_uid=text("StudyInstanceUID"),
                       series_uid=text("SeriesInstanceUID"), sop_uid=text("SOPInstanceUID"))


def _probe_dicom(fileobj: BinaryIO, sniffed: str) -> tuple[ImageSpec, Identifiers]:
    ds = dicom_header.read_header(fileobj)
    if sniffed == sniff.MAYBE_DICOM and not dicom_header.looks_like_dicom(ds):
        raise ConversionError(reasons.INVALID_DICOM, "no DICOM preamble and no DICOM elements")
    if not dicom_header.has_pixel_data(ds):
        sop = str(ds.get("SOPClassUID", "") or "unknown SOP class")
        raise ConversionError(reasons.NO_PIXEL_DATA, f"no pixel data ({sop})", skipped=True)
    return dicom_header.image_spec(ds), _identifiers(ds)


def _probe_image(fileobj: BinaryIO) -> ImageSpec:
    return raster.image_spec(raster.open_image(fileobj))


def probe_file(source: SourceFile, max_pixels: int = DEFAULT_MAX_PIXELS,
               max_record_bytes: Optional[int] = None,
               opener: Callable[[str], BinaryIO] = open_source) -> ProbedRecord:
    """Plans one record from a file's header, or raises ConversionError.

    Non-DICOM, non-image files are skipped unless their name says DICOM, in
    which case they failed: a ``.dcm`` that does not parse is a broken file.
    """
    if source.size == 0:
        raise ConversionError(reasons.EMPTY_FILE, "file is empty (0 bytes)")
    with opener(source.uri) as fileobj:
        try:
            head = fileobj.read(sniff.HEAD_BYTES)
            fileobj.seek(0)
        except Exception as exc:
            raise ConversionError(reasons.UNREADABLE, f"read failed: {exc}") from exc
        kind = sniff.sniff(head, source.uri)
        if kind == sniff.OTHER:
            raise ConversionError(reasons.UNSUPPORTED_FORMAT,
                                  f"not DICOM or a raster image ({sniff.extension(source.uri) or 'no extension'})",
                                  skipped=True)
        if kind == sniff.IMAGE:
            spec, record_kind, ids = _probe_image(fileobj), "image", None
        else:
            try:
                (spec, ids), record_kind = _probe_dicom(fileobj, kind), "dicom"
            except ConversionError as exc:
                named_dicom = sniff.extension(source.uri) in sniff.DICOM_EXTENSIONS
                if kind == sniff.MAYBE_DICOM and exc.reason == reasons.INVALID_DICOM and not named_dicom:
                    raise ConversionError(reasons.UNSUPPORTED_FORMAT,
                                          "not DICOM (no preamble, no DICOM elements) and not an image",
                                          skipped=True) from exc
                raise
    pixels = spec.depth * spec.height * spec.width
    if pixels > max_pixels:
        raise ConversionError(reasons.TOO_MANY_PIXELS,
                              f"header claims {spec.depth}x{spec.height}x{spec.width} = {pixels} pixels "
                              f"> --max_pixels {max_pixels}")
    if pixels == 0:
        raise ConversionError(reasons.INVALID_VALUE, f"header claims an empty image {spec.shape}")
    record = ProbedRecord(source=source, record_id=record_id(source.rel_path),
                          kind=record_kind, spec=spec, ids=ids)
    if max_record_bytes is not None and record.planned_bytes > max_record_bytes:
        raise ConversionError(reasons.RECORD_TOO_LARGE,
                              f"record of {record.planned_bytes / (1 << 20):.2f} MB {spec.shape} {spec.dtype} "
                              f"exceeds --max_shard_mb {max_record_bytes / (1 << 20):g}")
    return record
