"""Beam's FileSystems under the format package (dataset/storage.py), installed on import.

``transforms`` imports this module, so every process of a conversion (the
launcher and each worker, which imports the DoFns' modules) writes and reads
the dataset through Beam's FileSystems: local paths, ``gs://`` and any scheme
Beam knows, with Beam's retries and credentials.
"""
from __future__ import annotations

from typing import BinaryIO, Sequence

from apache_beam.io.filesystems import CompressionTypes, FileSystems

from dcm2tfrecord.dataset import storage


class BeamFiles:
    """dataset.storage.Backend on Beam's FileSystems; files are raw bytes (never decompressed)."""

    def join(self, base: str, *parts: str) -> str:
        return FileSystems.join(base, *parts)

    def exists(self, path: str) -> bool:
        return FileSystems.exists(path)

    def open(self, path: str) -> BinaryIO:
        return FileSystems.open(path, mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED)

    def create(self, path: str, mime_type: str) -> BinaryIO:
        return FileSystems.create(path, mime_type=mime_type, compression_type=CompressionTypes.UNCOMPRESSED)

    def rename(self, sources: Sequence[str], destinations: Sequence[str]) -> None:
        FileSystems.rename(list(sources), list(destinations))

    def delete(self, paths: Sequence[str]) -> None:
        FileSystems.delete(list(paths))

    def match(self, pattern: str) -> list[str]:
        return sorted(m.path for m in FileSystems.match([pattern])[0].metadata_list)


storage.install(BeamFiles())
