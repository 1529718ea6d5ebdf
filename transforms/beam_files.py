"""Beam's FileSystems put under the format package's facade (dataset/storage.py) by one call.

:func:`install_beam_storage` is called explicitly, never on import: at launch
(``pipeline/cli.py`` for every subcommand, ``pipeline/convert.py`` for a library
caller) and in each worker, where the steps' code starts (the DoFns' ``setup``,
the first line of the plain functions the graph maps: ``transforms/*/steps.py``).
From then on that process writes and reads the dataset, the salt file and the class
map through Beam's FileSystems: local paths, ``gs://`` and any scheme Beam knows,
with Beam's retries and credentials.

Whole files to and from gs:// (``dcm2tfrecord copy``) go through the google-cloud-storage
client Beam itself builds (``gcsio.GcsIO``: Beam's credentials, ``STORAGE_EMULATOR_HOST``),
one per process, with the library's CRC-32C check (:meth:`BeamFiles.upload`,
:meth:`BeamFiles.download`): one request per file where Beam's writer makes resumable uploads
with a fresh client per call.
"""
from __future__ import annotations

import base64
import os
import threading
from typing import BinaryIO, Optional, Sequence

from apache_beam.io.filesystems import CompressionTypes, FileSystems

from dcm2tfrecord.dataset import storage


def _crc32c(encoded: Optional[str]) -> Optional[int]:
    """GCS's base64 of 4 big-endian bytes as an int; None for None."""
    return None if encoded is None else int.from_bytes(base64.b64decode(encoded), "big")


class BeamFiles:
    """dataset.storage.Backend on Beam's FileSystems; files are raw bytes (never decompressed)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple, object] = {}

    def _blob(self, path: str):
        """The google.cloud.storage Blob at gs:// ``path``, on the client Beam builds for
        gs:// (its credentials and options), one per process and emulator host: a copy's
        threads share its connection pool."""
        from apache_beam.io.gcp import gcsio
        key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"), os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"))
        with self._lock:
            client = self._clients.get(key)
            if client is None:
                options = getattr(FileSystems.get_filesystem(path), "_pipeline_options", None)
                client = self._clients[key] = gcsio.GcsIO(pipeline_options=options).client
        bucket, _, name = path[len("gs://"):].partition("/")
        return client.bucket(bucket).blob(name)             # type: ignore[attr-defined]

    def direct_transfer(self, path: str) -> bool:
        return path.startswith("gs://")

    def upload(self, reader: BinaryIO, path: str, size: int) -> Optional[int]:
        """One request for a file up to 8 MiB (multipart: the library sends the CRC-32C of the
        bytes it read in the object's metadata, the store refuses the object where its own
        differs), else a resumable upload in 100 MiB chunks (the library sends its CRC-32C with
        the last one and compares it with the store's in the answer: DataCorruption). Retried
        on 429/5xx and lost connections (the library's DEFAULT_RETRY). Returns the store's
        CRC-32C from its answer."""
        from google.api_core import exceptions
        from google.cloud.storage.exceptions import DataCorruption
        from google.cloud.storage.retry import DEFAULT_RETRY
        blob = self._blob(path)
        try:
            blob.upload_from_file(reader, size=size, checksum="crc32c", retry=DEFAULT_RETRY,
                                  content_type="application/octet-stream")
        except DataCorruption as error:
            raise storage.StoreChecksumMismatch(f"{path}: {error}") from error
        except (exceptions.BadRequest, exceptions.Conflict) as error:
            if "crc32c" in str(error).lower():          # the store refused the metadata's CRC-32C
                raise storage.StoreChecksumMismatch(f"{path}: {error}") from error
            raise
        return _crc32c(blob.crc32c)

    def download(self, path: str, writer: BinaryIO) -> Optional[int]:
        """The object's bytes as stored (``raw_download``: never decompressed); the library
        computes their CRC-32C as they arrive and compares it with the store's (its
        X-Goog-Hash header): DataCorruption. Returns that header's CRC-32C."""
        from google.cloud.storage.exceptions import DataCorruption
        blob = self._blob(path)
        try:
            blob.download_to_file(writer, checksum="crc32c", raw_download=True)
        except DataCorruption as error:
            raise storage.StoreChecksumMismatch(f"{path}: {error}") from error
        return _crc32c(blob.crc32c)

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
        return _crc32c(FileSystems.checksum(path))


def install_beam_storage() -> None:
    """Routes this process's file calls through dataset.storage to Beam's FileSystems (once:
    a second call, in a worker's next step, keeps the backend installed)."""
    if not isinstance(storage.installed(), BeamFiles):
        storage.install(BeamFiles())
