"""Writing one shard of encoded records: frame each, index it, commit atomically.

The writer is handed records already serialized (like Beam's sink, which only
overrides ``write_encoded_record``, or TFDS's ``ShardWriter``); it decodes
nothing. Each record is framed by the format's codec (dataset/tfrecord.py)
onto a file opened through the format's file system (dataset/storage.py), so
local paths and gs:// behave alike. The shard and its ``.idx`` are written
under ``.incomplete/`` and renamed into place only when complete, the index
first: a file with a final shard name is always whole, and has its index.
"""
from __future__ import annotations

import contextlib
import hashlib
from typing import BinaryIO, Iterator, Optional

from dcm2tfrecord.dataset import file_adapters
from dcm2tfrecord.dataset.files import create_output, incomplete_file
from dcm2tfrecord.dataset.names import index_file_name
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.dataset.tfrecord import framed_segments, index_lines


class _HashingWriter:
    """Counts and hashes bytes on their way to the file: no second read for sha256."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data) -> None:
        self.sha256.update(data)
        self.raw.write(data)
        self.num_bytes += len(data)

    def flush(self) -> None:     # a writable file object, as a compressor's fileobj wants (never called)
        self.raw.flush()


class ShardSink:
    """The open shard: ``append`` one encoded record at a time."""

    def __init__(self, raw: BinaryIO,
                 adapter: file_adapters.FileAdapter = file_adapters.ADAPTERS[file_adapters.DEFAULT],
                 level: Optional[int] = None):
        self._file = _HashingWriter(raw)
        self._target = adapter.open_writer(self._file, level)  # type: ignore[arg-type]
        self.offsets: list[tuple[int, int]] = []    # (offset, size) per record, uncompressed stream
        self._stream_offset = 0

    def append(self, record) -> None:
        """Frames ``record`` onto the shard: bytes, a memoryview of them, or a list of parts
        in order (``serialize_record_parts``), whose large ones are written as they are."""
        segments = framed_segments(record if isinstance(record, list) else [record])
        if self._target is self._file:
            for segment in segments:
                self._file.write(segment)
        else:
            self._target.write(b"".join(segments))   # one write, as compressed streams come out the same
        size = sum(len(segment) for segment in segments)
        self.offsets.append((self._stream_offset, size))
        self._stream_offset += size

    def _finish(self) -> None:
        if self._target is not self._file:
            self._target.close()

    @property
    def num_records(self) -> int:
        return len(self.offsets)

    @property
    def num_bytes(self) -> int:
        """Bytes of the file (compressed, in a compressing container)."""
        return self._file.num_bytes

    @property
    def sha256(self) -> str:
        return self._file.sha256.hexdigest()


@contextlib.contextmanager
def open_shard(output_dir: str, file_name: str, compression: str = "none",
               level: Optional[int] = None) -> Iterator[ShardSink]:
    """``with open_shard(out, name) as shard: shard.append(record) ...``; on a clean exit the
    ``.idx`` and then the shard are renamed into place, on an exception neither appears.

    ``compression`` names the container (dataset/file_adapters.py): with
    ``"gzip"`` the shard is one gzip member with a zero timestamp and no file
    name, so its bytes are deterministic too; index offsets always refer to
    the uncompressed record stream. ``level``: gzip's level (--gzip_level; None: the
    container's default).
    """
    final_path = FileSystems.join(output_dir, file_name)
    with incomplete_file(final_path, output_dir) as tmp:
        with create_output(output_dir, tmp) as raw:
            shard = ShardSink(raw, file_adapters.adapter(compression), level)
            yield shard
            shard._finish()
        index_path = FileSystems.join(output_dir, index_file_name(file_name))
        with incomplete_file(index_path, output_dir) as index_tmp:
            with create_output(output_dir, index_tmp, "text/plain") as handle:
                handle.write(index_lines(shard.offsets))
