"""Transfer-syntax facts of a dataset: its UID, the native (uncompressed) syntaxes, and
the syntax a file without (0002,0010) was encoded in."""
from __future__ import annotations

from pydicom.dataset import Dataset
from pydicom.uid import (DeflatedExplicitVRLittleEndian, ExplicitVRBigEndian, ExplicitVRLittleEndian,
                         ImplicitVRLittleEndian)

NATIVE_SYNTAXES = {ImplicitVRLittleEndian, ExplicitVRLittleEndian, ExplicitVRBigEndian,
                   DeflatedExplicitVRLittleEndian}


def infer_transfer_syntax(ds: Dataset) -> None:
    """Files without (0002,0010): native pixel data is read the way the dataset was encoded."""
    meta = getattr(ds, "file_meta", None)
    if meta is not None and meta.get("TransferSyntaxUID"):
        return
    if "PixelData" not in ds or ds["PixelData"].is_undefined_length:
        return
    implicit, little = getattr(ds, "original_encoding", (None, None))
    if implicit is None:
        return
    from pydicom.dataset import FileMetaDataset
    if meta is None:
        ds.file_meta = meta = FileMetaDataset()
    meta.TransferSyntaxUID = (ImplicitVRLittleEndian if implicit
                              else ExplicitVRLittleEndian if little else ExplicitVRBigEndian)


def transfer_syntax(ds: Dataset) -> str:
    meta = getattr(ds, "file_meta", None)
    uid = meta.get("TransferSyntaxUID", None) if meta is not None else None
    return str(uid) if uid else ""
