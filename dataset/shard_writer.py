"""Writing one planned shard: decode each record, frame it, commit atomically.

Records are framed by Beam's TFRecord sink code (``apache_beam.io.tfrecordio``:
length, masked CRC32C, data, masked CRC32C) onto a file opened through Beam's
FileSystems, so local paths and gs:// behave alike. The shard is written under
``.incomplete/`` and renamed into place only when complete: a file with a
final shard name is always whole.
"""
from __future__ import annotations

import gzip
import hashlib
from typing import BinaryIO, Callable, Optional

import numpy as np
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil

from dataset.files import create_output, incomplete_file
from dataset.names import index_file_name, shard_file_name
from transforms import reasons
from transforms.labels.table import label_keys
from transforms.records.build import build_record
from transforms.errors import ConversionError
from transforms.sources.read import open_source
from transforms.records.values import Outcome, ProbedRecord, ShardPlan, ShardResult
from transforms.settings import DecodeSettings

MAX_SHAPES_REPORTED = 8


class _HashingWriter:
    """Counts and hashes bytes on their way to the file: no second read for sha256."""

    def __init__(self, raw: BinaryIO):
        self.raw = raw
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data: bytes) -> None:
        self.sha256.update(data)
        self.raw.write(data)
        self.num_bytes += len(data)



def _index_lines(offsets: list[tuple[int, int]]) -> bytes:
    """NVIDIA DALI's tfrecord2idx format: "offset size" per record, in the record stream."""
    return "".join(f"{offset} {size}\n" for offset, size in offsets).encode("ascii")


def size_mismatch(record: ProbedRecord, dtype: str, shape: tuple) -> str:
    """Why a decoded record may not go into its shard ("" if it may).

    Shard sizes were planned from the header (``record.spec``); a record that
    decodes to more or fewer bytes would push the shard out of its bounds.
    """
    decoded = int(np.prod(shape)) * np.dtype(dtype).itemsize
    planned = record.spec.num_pixel_bytes
    if decoded == planned:
        return ""
    return (f"decoded {tuple(shape)} {dtype} ({decoded} bytes); the header promised "
            f"{record.spec.shape} {record.spec.dtype} ({planned} bytes), on which the shard was planned")


def write_shard(plan: ShardPlan, output_dir: str, compression: str = "none",
                opener: Callable[[str], BinaryIO] = open_source,
                settings: DecodeSettings = DecodeSettings(),
                on_written: Optional[Callable[[ProbedRecord], None]] = None,
                on_error: Optional[Callable[[ProbedRecord, Exception], None]] = None,
                ) -> tuple[ShardResult, list[Outcome]]:
    """Writes ``plan`` (and its .idx) to ``output_dir``; records that fail are reported, not fatal.

    ``on_written`` is called with each record that made it into the shard, ``on_error``
    with each that did not and why (it may raise to stop the shard: a storage outage).

    With ``compression="gzip"`` the shard is one gzip member with a zero
    timestamp and no file name, so its bytes are deterministic too; index
    offsets then refer to the uncompressed record stream.
    """
    outcomes: list[Outcome] = []
    dtypes: set = set()
    shapes: list = []
    labels: dict = {}
    offsets: list[tuple[int, int]] = []
    sources_written = 0
    stream_offset = 0
    max_depth = 1
    file_name = shard_file_name(plan.split, plan.index, plan.num_shards, plan.tag, compression == "gzip")
    final_path = FileSystems.join(output_dir, file_name)
    with incomplete_file(final_path, output_dir) as tmp:
        with create_output(output_dir, tmp) as raw:
            sink = _HashingWriter(raw)
            target = gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0) \
                if compression == "gzip" else sink
            for record in plan.records:
                try:
                    payload, dtype, shape = build_record(record, opener, settings)
                except ConversionError as exc:
                    if on_error is not None:
                        on_error(record, exc)
                    status = reasons.SKIPPED if exc.skipped else reasons.FAILED
                    outcomes.append(Outcome(record.source.uri, status, "decode", exc.reason, str(exc)))
                    continue
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # a codec bug (even a Rust panic) must not take the shard down
                    outcomes.append(Outcome(record.source.uri, reasons.FAILED, "decode",
                                            reasons.DECODE_ERROR, f"{type(exc).__name__}: {exc}"))
                    continue
                mismatch = size_mismatch(record, dtype, shape)
                if mismatch:
                    outcomes.append(Outcome(record.source.uri, reasons.FAILED, "decode",
                                            reasons.DECODED_SIZE_MISMATCH, mismatch))
                    continue
                _TFRecordUtil.write_record(target, payload)
                if on_written is not None:
                    on_written(record)
                offsets.append((stream_offset, len(payload) + 16))
                sources_written += len(record.sources) if record.counts_sources else 0
                stream_offset += len(payload) + 16
                dtypes.add(dtype)
                max_depth = max(max_depth, shape[0])
                if shape not in shapes and len(shapes) < MAX_SHAPES_REPORTED:
                    shapes.append(shape)
                for key in label_keys(record.label):
                    labels[key] = labels.get(key, 0) + 1
            if target is not sink:
                target.close()
        index_path = FileSystems.join(output_dir, index_file_name(file_name))
        with incomplete_file(index_path, output_dir) as index_tmp:
            with create_output(output_dir, index_tmp, "text/plain") as handle:
                handle.write(_index_lines(offsets))
    result = ShardResult(
        split=plan.split, index=plan.index, num_shards=plan.num_shards, file=file_name,
        num_records=len(offsets), num_bytes=sink.num_bytes, sha256=sink.sha256.hexdigest(),
        planned_bytes=sum(r.planned_bytes for r in plan.records),
        dtypes=tuple(sorted(dtypes)), shapes=tuple(sorted(shapes)), sources_written=sources_written,
        label_counts=tuple(sorted(labels.items())),
        kinds=tuple(sorted({r.kind for r in plan.records})), max_depth=max_depth)
    return result, outcomes
