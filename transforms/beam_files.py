"""Beam's FileSystems put under the format package's facade (dataset/storage.py) by one call.

:func:`install_beam_storage` is called explicitly, never on import: at launch
(``pipeline/cli.py`` for every subcommand, ``pipeline/convert.py`` for a library
caller) and in each worker, where the steps' code starts (the DoFns' ``setup``,
the first line of the plain functions the graph maps: ``transforms/*/steps.py``).
From then on that process writes and reads the dataset, the salt file and the class
map through Beam's FileSystems: local paths, ``gs://`` and any scheme Beam knows,
with Beam's retries and credentials.
"""
from __future__ import annotations

import base64
from typing import BinaryIO, Optional, Sequence

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

    def stored_crc32c(self, path: str) -> Optional[int]:
        """GCS's CRC-32C of the object (its metadata's base64 of 4 big-endian bytes: Beam's
        FileSystems.checksum there); None for other schemes, whose checksum means other things
        (a local file's is its size, S3's an ETag)."""
        if not path.startswith("gs://"):
            return None
        return int.from_bytes(base64.b64decode(FileSystems.checksum(path)), "big")


def install_beam_storage() -> None:
    """Routes this process's file calls through dataset.storage to Beam's FileSystems (once:
    a second call, in a worker's next step, keeps the backend installed)."""
    if not isinstance(storage.installed(), BeamFiles):
        storage.install(BeamFiles())
