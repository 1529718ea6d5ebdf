"""Reading one planned record back from its source and serializing it."""
from __future__ import annotations

from typing import BinaryIO, Callable

from transforms import dicom_header, raster
from transforms.dicom_pixels import decode_dicom
from transforms.probe import open_source
from transforms.record_format import serialize_record
from transforms.records import ProbedRecord


def decode_record(record: ProbedRecord, fileobj: BinaryIO):
    """(pixels (D, H, W, C), metadata features) for one probed record."""
    if record.kind == "dicom":
        pixels, ds = decode_dicom(fileobj)
        return pixels, dicom_header.metadata(ds)
    return raster.decode_image(fileobj), {}


def build_record(record: ProbedRecord,
                 opener: Callable[[str], BinaryIO] = open_source) -> tuple[bytes, str, tuple]:
    """(serialized Example, stored dtype, shape) for one probed record."""
    with opener(record.source.uri) as fileobj:
        pixels, metadata = decode_record(record, fileobj)
    payload = serialize_record(pixels, record.record_id, record.kind, record.label, metadata)
    return payload, pixels.dtype.newbyteorder("=").name, tuple(int(d) for d in pixels.shape)
