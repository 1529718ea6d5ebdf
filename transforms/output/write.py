"""Writing one planned shard: read and decode each record, hand it encoded to the format's writer.

The decode loop lives here, on the converter's side; the format's shard
writer (dataset/shard_writer.py) only frames, indexes and commits the
encoded records it is given, named and contained by the run's one ShardTarget
(dataset/shard_target.py), which the caller builds once from the settings. A record that fails to decode, or decodes to
another size than its header promised, is reported as an Outcome and left
out; it never takes the shard down.
"""
from __future__ import annotations

import hashlib
import json
from typing import BinaryIO, Callable, Optional

import numpy as np

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.dataset.manifest import MAX_SHAPES, label_count_keys
from dcm2tfrecord.dataset.results import Outcome, ShardResult
from dcm2tfrecord.dataset.shard_target import ShardTarget
from dcm2tfrecord.dataset.shard_writer import open_shard
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.images.crop import Crop
from dcm2tfrecord.transforms.records.build import build_record
from dcm2tfrecord.transforms.record_model import ProbedRecord, ShardPlan
from dcm2tfrecord.transforms.settings import ConversionSettings, DecodeSettings
from dcm2tfrecord.transforms.sources.read import open_source


def size_mismatch(record: ProbedRecord, dtype: str, shape: tuple, at_most: bool = False) -> str:
    """Why a decoded record may not go into its shard ("" if it may).

    Shard sizes were planned from the header (``record.spec``); a record that
    decodes to more or fewer bytes would push the shard out of its bounds.
    ``at_most`` (--crop, whose box the pixels decide): the planned size is the
    uncropped record's, an upper bound, and a record of its dtype and channels
    no larger in any axis goes in (a shard only ever comes out smaller than
    planned, never past --max_shard_mb).
    """
    decoded = int(np.prod(shape)) * np.dtype(dtype).itemsize
    planned = record.spec.num_pixel_bytes
    if decoded == planned:
        return ""
    if at_most and np.dtype(dtype) == np.dtype(record.spec.dtype) and len(shape) == 4 \
            and all(0 < int(n) <= int(p) for n, p in zip(shape, record.spec.shape)) \
            and int(shape[3]) == int(record.spec.channels):
        return ""
    return (f"decoded {tuple(shape)} {dtype} ({decoded} bytes); the header promised "
            f"{record.spec.shape} {record.spec.dtype} ({planned} bytes), on which the shard was planned")


def record_fingerprint(record: ProbedRecord) -> str:
    """What a written record was made of (its line in ``<shard>.records.json``, --incremental);
    equal fingerprints mean an equal record.

    Sources are identified by uri plus size, mtime (on GCS the object's
    update time, which changes with every new generation) and the probe's
    fingerprint of their head (transforms.sources.read.fingerprint): a file
    replaced by another of the same size and mtime is a changed source. A
    version written before sources were fingerprinted lists fingerprints
    without it, which no record matches: its records are converted again.
    """
    label = list(record.label) if isinstance(record.label, tuple) else record.label
    content = [record.record_id, record.frame, record.split, label,
               [[s.uri, s.size, s.mtime, s.fingerprint.hex()] for s in record.inputs]]
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def _outcomes(record: ProbedRecord, status: str, reason: str, message: str) -> list[Outcome]:
    """A record that did not convert, one Outcome per input it is made of (each slice of a
    volume); a frame's says which of how many (one per file at commit), a volume's or a
    multi-frame file's how many slices or frames it has."""
    part, index = ("volume" if record.kind == RecordKind.NIFTI else "frame"), record.frame
    if record.frame is None and record.stacks and record.source_frames > 1:
        part, index = "stack", record.stacks[0].index
    if record.frame is None and record.spec.depth > 1:
        what = f"series of {len(record.members)} slices" if record.members else \
            f"{record.spec.depth} {'slices' if record.kind == RecordKind.NIFTI else 'frames'}"
        message = f"{what}: {message}"
    return [Outcome(source.uri, status, "decode", reason, message, frame=index,
                    frames=record.source_frames, part=part) for source in record.sources]


def shard_target(settings: ConversionSettings, tag: str = "") -> ShardTarget:
    """The run's one ShardTarget: its output directory and ``--compression`` container at
    ``--gzip_level``, ``--encrypt``'s key URI, and ``tag`` (--incremental: "v0002") in the new shards' names."""
    return ShardTarget.of(settings.output_dir, settings.compression, tag, settings.gzip_level,
                          settings.encrypt_key_uri)


def write_shard(plan: ShardPlan, target: ShardTarget,
                opener: Callable[[str], BinaryIO] = open_source,
                settings: DecodeSettings = DecodeSettings(),
                on_written: Optional[Callable[[ProbedRecord], None]] = None,
                on_error: Optional[Callable[[ProbedRecord, Exception], None]] = None
                ) -> tuple[ShardResult, list[Outcome]]:
    """Writes ``plan`` (and its .idx) to ``target``; records that fail are reported, not fatal.

    ``on_written`` is called with each record that made it into the shard, ``on_error``
    with each that did not and why (it may raise to stop the shard: a storage outage).
    """
    outcomes: list[Outcome] = []
    dtypes: set = set()
    shapes: list = []
    labels: dict = {}
    sources_written = 0
    max_depth = 1
    file_name = target.file_name(plan.split, plan.index, plan.num_shards)
    with open_shard(target, file_name) as shard:
        for record in plan.records:
            try:
                payload, dtype, shape = build_record(record, opener, settings)
            except ConversionError as exc:
                if on_error is not None:
                    on_error(record, exc)
                status = reasons.SKIPPED if exc.skipped else reasons.FAILED
                outcomes.extend(_outcomes(record, status, exc.reason, str(exc)))
                continue
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:  # a codec bug (even a Rust panic) must not take the shard down
                outcomes.extend(_outcomes(record, reasons.FAILED, reasons.DECODE_ERROR,
                                          f"{type(exc).__name__}: {exc}"))
                continue
            mismatch = size_mismatch(record, dtype, shape, at_most=settings.crop != Crop.OFF)
            if mismatch:
                outcomes.extend(_outcomes(record, reasons.FAILED, reasons.DECODED_SIZE_MISMATCH, mismatch))
                continue
            shard.append(payload)
            if on_written is not None:
                on_written(record)
            sources_written += len(record.sources) if record.counts_sources else 0
            dtypes.add(dtype)
            max_depth = max(max_depth, shape[0])
            if shape not in shapes and len(shapes) < MAX_SHAPES:
                shapes.append(shape)
            for key in label_count_keys(record.label):
                labels[key] = labels.get(key, 0) + 1
    result = ShardResult(
        split=plan.split, index=plan.index, num_shards=plan.num_shards, file=file_name,
        num_records=shard.num_records, num_bytes=shard.num_bytes, sha256=shard.sha256,
        planned_bytes=sum(r.planned_bytes for r in plan.records),
        dtypes=tuple(sorted(dtypes)), shapes=tuple(sorted(shapes)), sources_written=sources_written,
        label_counts=tuple(sorted(labels.items())),
        kinds=tuple(sorted({r.kind for r in plan.records})), max_depth=max_depth,
        wrapped_key=shard.wrapped_key)
    return result, outcomes
