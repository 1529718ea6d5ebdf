"""Writing one shard of encoded records: frame each, index it, commit atomically.

The writer is handed records already serialized (like Beam's sink, which only
overrides ``write_encoded_record``, or TFDS's ``ShardWriter``); it decodes
nothing. Each record is framed by the format's codec (dataset/tfrecord.py)
onto a file opened through the format's file system (dataset/storage.py), so
local paths and gs:// behave alike, in the container of the run's one
``ShardTarget`` (dataset/shard_target.py, which also named the shard). The shard and its ``.idx`` are written
under ``.incomplete/`` and renamed into place only when complete, the index
first: a file with a final shard name is always whole, and has its index.
With a target's ``key_uri`` (--encrypt) each record is encrypted under the shard's fresh
data key (dataset/encryption.py) before it is framed; the sink's ``wrapped_key`` is that
key wrapped by the KEK, for dataset.json.
"""
from __future__ import annotations

import contextlib
import hashlib
from typing import BinaryIO, Iterator, Optional

from dcm2tfrecord.dataset.files import create_output, incomplete_file
from dcm2tfrecord.dataset.names import index_file_name
from dcm2tfrecord.dataset.shard_target import ShardTarget
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

    def __init__(self, raw: BinaryIO, target: ShardTarget, file_name: str = ""):
        self._cipher = None
        self.wrapped_key: Optional[str] = None
        key = target.kek()
        if key is not None:
            from dcm2tfrecord.dataset.encryption import ShardCipher
            self._cipher, self.wrapped_key = ShardCipher.new(key, file_name)
        self._file = _HashingWriter(raw)
        self._target = target.open_stream(self._file)  # type: ignore[arg-type]
        self.offsets: list[tuple[int, int]] = []    # (offset, size) per record, uncompressed stream
        self._stream_offset = 0

    def append(self, record) -> None:
        """Frames ``record`` onto the shard: bytes, a memoryview of them, or a list of parts
        in order (``serialize_record_parts``), whose large ones are written as they are."""
        if self._cipher is not None:
            plain = b"".join(bytes(p) for p in record) if isinstance(record, list) else record
            record = self._cipher.encrypt(plain, len(self.offsets))
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
def open_shard(target: ShardTarget, file_name: str) -> Iterator[ShardSink]:
    """``with open_shard(target, target.file_name(split, i, n)) as shard: shard.append(record)
    ...``; on a clean exit the ``.idx`` and then the shard are renamed into place in
    ``target.output_dir``, on an exception neither appears.

    The shard is in ``target``'s container (dataset/file_adapters.py) at its level: in
    gzip, one gzip member with a zero timestamp and no file name, so its bytes are
    deterministic too; index offsets always refer to the uncompressed record stream.
    """
    output_dir = target.output_dir
    with incomplete_file(target.path(file_name), output_dir) as tmp:
        with create_output(output_dir, tmp) as raw:
            shard = ShardSink(raw, target, file_name)
            yield shard
            shard._finish()
        with incomplete_file(target.path(index_file_name(file_name)), output_dir) as index_tmp:
            with create_output(output_dir, index_tmp, "text/plain") as handle:
                handle.write(index_lines(shard.offsets))
