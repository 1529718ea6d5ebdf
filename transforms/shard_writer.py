"""Writing one planned shard: decode each record, frame it, commit atomically.

Records are framed by Beam's TFRecord sink code (``apache_beam.io.tfrecordio``:
length, masked CRC32C, data, masked CRC32C) onto a file opened through Beam's
FileSystems, so local paths and gs:// behave alike. The shard is written under
``.incomplete/`` and renamed into place only when complete: a file with a
final shard name is always whole.
"""
from __future__ import annotations

import contextlib
import hashlib
import uuid
from typing import BinaryIO, Callable, Iterator

from apache_beam.io.filesystems import CompressionTypes, FileSystems
from apache_beam.io.tfrecordio import _TFRecordUtil

from transforms import reasons
from transforms.decode import build_record
from transforms.errors import ConversionError
from transforms.probe import open_source
from transforms.records import Outcome, ShardPlan, ShardResult

INCOMPLETE_DIR = ".incomplete"
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


@contextlib.contextmanager
def incomplete_file(final_path: str, output_dir: str) -> Iterator[str]:
    """Yields a temp path; renames it to ``final_path`` only if the block succeeds."""
    name = final_path.rsplit("/", 1)[-1]
    tmp = FileSystems.join(output_dir, INCOMPLETE_DIR, f"{name}.{uuid.uuid4().hex}")
    try:
        yield tmp
        FileSystems.rename([tmp], [final_path])
    except BaseException:
        with contextlib.suppress(Exception):
            FileSystems.delete([tmp])
        raise


def write_shard(plan: ShardPlan, output_dir: str,
                opener: Callable[[str], BinaryIO] = open_source) -> tuple[ShardResult, list[Outcome]]:
    """Writes ``plan`` to ``output_dir``; records that fail are reported, not fatal."""
    outcomes: list[Outcome] = []
    dtypes: set = set()
    shapes: list = []
    labels: dict = {}
    written = 0
    max_depth = 1
    final_path = FileSystems.join(output_dir, plan.file_name)
    with incomplete_file(final_path, output_dir) as tmp:
        with FileSystems.create(tmp, mime_type="application/octet-stream",
                                compression_type=CompressionTypes.UNCOMPRESSED) as raw:
            sink = _HashingWriter(raw)
            for record in plan.records:
                try:
                    payload, dtype, shape = build_record(record, opener)
                except ConversionError as exc:
                    status = reasons.SKIPPED if exc.skipped else reasons.FAILED
                    outcomes.append(Outcome(record.source.uri, status, "decode", exc.reason, str(exc)))
                    continue
                except Exception as exc:  # a codec bug must not take the shard down
                    outcomes.append(Outcome(record.source.uri, reasons.FAILED, "decode",
                                            reasons.DECODE_ERROR, f"{type(exc).__name__}: {exc}"))
                    continue
                _TFRecordUtil.write_record(sink, payload)
                written += 1
                dtypes.add(dtype)
                max_depth = max(max_depth, shape[0])
                if shape not in shapes and len(shapes) < MAX_SHAPES_REPORTED:
                    shapes.append(shape)
                labels[record.label] = labels.get(record.label, 0) + 1
    result = ShardResult(
        split=plan.split, index=plan.index, num_shards=plan.num_shards, file=plan.file_name,
        num_records=written, num_bytes=sink.num_bytes, sha256=sink.sha256.hexdigest(),
        planned_bytes=sum(r.planned_bytes for r in plan.records),
        dtypes=tuple(sorted(dtypes)), shapes=tuple(sorted(shapes)), sources_written=written,
        label_counts=tuple(sorted(labels.items())),
        kinds=tuple(sorted({r.kind for r in plan.records})), max_depth=max_depth)
    return result, outcomes
