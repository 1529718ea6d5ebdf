"""Verifying a committed dataset against its dataset.json, byte by byte (``dcm2tfrecord verify``).

Every shard listed in dataset.json is re-read through the format's file
system (dataset/storage.py: local or gs://, gzip or not) and checked for:

- TFRecord framing: 8-byte little-endian length, masked CRC32C of the length,
  data, masked CRC32C of the data — both CRCs recomputed by the format's
  codec (dataset/tfrecord.py), the one that wrote them;
- record count, byte size and sha256 of the file against dataset.json;
- every record parses as a ``tf.train.Example`` (decoded by the format's
  Example codec, dataset/example.py, no TensorFlow needed) whose features have the kinds
  and value counts dataset.json declares, and whose ``image_raw`` holds exactly
  depth x height x width x channels x itemsize(dtype) bytes;
- with ``--intensity zscore``, ``--crop`` or ``--spacing X,Y,Z`` in dataset.json's options,
  every record shows them (dataset/verify_view.py): one mean and std per channel of a float32
  image, a crop box inside the source's shape, the target spacing;
- the ``{shard}.idx`` index (DALI's "offset size" lines) lists the real record
  offsets and sizes, in the uncompressed record stream;

plus the manifest's own arithmetic (split totals, counts), errors.jsonl's
per-reason counts, and TFDS's files (dataset_info.json, features.json, label.labels.txt)
where present: each must hold what dataset.json makes of it (dataset/tfds_metadata.py).
Each problem names the file and, where there is one, the record number
(0-based, in file order) and the byte offset of the record.

This module runs the checks in order and reports; they live beside it:
records (dataset/verify_records.py, the training view dataset/verify_view.py), shards and indexes
(dataset/verify_shards.py), the manifest and errors.jsonl
(dataset/verify_manifest.py).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from dcm2tfrecord.dataset.encryption import EncryptionError
from dcm2tfrecord.dataset.manifest import Manifest, ManifestError, NewerFormatError, check_format_version, parse_json
from dcm2tfrecord.dataset.names import MANIFEST_NAME
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.dataset.tfds_metadata import check_tfds_metadata
from dcm2tfrecord.dataset.verify_manifest import (check_errors_file, check_manifest, check_split_stats,
                                                  missing_blocks, stray_files)
from dcm2tfrecord.dataset.verify_records import MaskRule, Problem, RecordIds, RecordStats
from dcm2tfrecord.dataset.verify_shards import verify_shard
from dcm2tfrecord.dataset.verify_bricks import plain_schema
from dcm2tfrecord.dataset.verify_view import ViewRule
from dcm2tfrecord.dataset.versions import resolve_dataset_dir


@dataclasses.dataclass
class Report:
    """What verify found: the problems (empty when the dataset is sound) and what it read."""
    dataset_dir: str
    problems: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    shards: int = 0
    records: int = 0
    num_bytes: int = 0
    # an encrypted dataset (convert --encrypt) checked without its key: records not decrypted
    undecrypted: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        """One line: OK with what was checked, or CORRUPT with the first problem."""
        if self.ok and self.undecrypted:
            return (f"OK {self.dataset_dir}: {self.shards} shards, {self.records} records, "
                    f"{self.num_bytes} bytes verified (framing, CRC32C, sha256, index; encrypted records "
                    "not decrypted without the key: schema and pixel sizes not checked)")
        if self.ok:
            return (f"OK {self.dataset_dir}: {self.shards} shards, {self.records} records, "
                    f"{self.num_bytes} bytes verified (framing, CRC32C, sha256, schema, pixel sizes, index)")
        more = len(self.problems) - 1
        tail = f" (+{more} more problem{'s' if more != 1 else ''})" if more else ""
        return f"CORRUPT {self.dataset_dir}: {self.problems[0]}{tail}"


def load_manifest(dataset_dir: str) -> tuple[Optional[dict], list[Problem]]:
    """dataset.json as parsed JSON, untyped (verify checks what is missing key by key), or the
    problem that it is missing or does not parse. One of a newer format_version than this code
    reads is not checked against rules it does not know: NewerFormatError."""
    path = FileSystems.join(dataset_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        return None, [Problem(MANIFEST_NAME, "missing: not a finished dataset "
                                             "(dataset.json is written last, when a conversion commits)")]
    try:
        with FileSystems.open(path) as handle:
            data = parse_json(handle.read(), path)
        check_format_version(data.get("format_version"), path)
        return data, []
    except NewerFormatError:
        raise
    except ManifestError as exc:
        return None, [Problem(MANIFEST_NAME, exc.reason)]
    except Exception as exc:  # noqa: BLE001 - unreadable: say so, as for any file
        return None, [Problem(MANIFEST_NAME, f"cannot be read: {exc}")]


def verify_dataset(dataset_dir: str, key=None, decrypt: bool = True) -> Report:
    """Every check above, shard by shard; problems in the order they are found.

    An encrypted dataset (convert --encrypt) is decrypted with ``key`` (a key URI or KEK;
    default: dataset.json's key URI); with ``decrypt=False`` its records are checked without
    the key: framing, CRC32Cs, sizes, sha256 and indexes (a note says what was not). A key
    that cannot be had is a problem, a wrapped key it does not open one per shard.

    A versioned root (--incremental) is checked at the version LATEST names; a dataset.json
    newer than this code reads is refused (NewerFormatError), not reported as corrupt.
    """
    dataset_dir = resolve_dataset_dir(dataset_dir)
    report = Report(dataset_dir=dataset_dir)
    data, problems = load_manifest(dataset_dir)
    report.problems.extend(problems)
    if data is None:
        return report
    missing = missing_blocks(data)
    if missing and not isinstance(data.get("splits"), dict):
        report.problems.extend(missing)
        return report
    try:
        manifest = Manifest.from_json(data, FileSystems.join(dataset_dir, MANIFEST_NAME))
    except ManifestError as exc:
        report.problems.extend(missing or [Problem(MANIFEST_NAME, exc.reason)])
        return report
    manifest_problems = missing or check_manifest(manifest)
    schema = dict(manifest.features)
    try:
        chunks = manifest.volume_chunks
    except ValueError as exc:
        report.problems.append(Problem(MANIFEST_NAME, f"volume_chunks: {exc}"))
        return report
    if chunks is not None:        # --volume_chunks: records checked with their bricks put back
        schema = plain_schema(schema)
    adapter = manifest.adapter      # the shards' container, once for the dataset
    mask_rule = MaskRule.of(manifest)
    view = ViewRule.of(manifest)
    ids = RecordIds()
    encrypted, keys = manifest.encryption is not None, None
    if encrypted and decrypt:
        try:
            keys = manifest.keys(key)
            keys.kek()
        except EncryptionError as exc:
            report.problems.append(Problem(MANIFEST_NAME, f"the records cannot be decrypted: {exc} "
                                                          "(verify --no_decrypt checks them without it)"))
            keys = None
    report.undecrypted = encrypted and keys is None
    if report.undecrypted and not decrypt:
        report.notes.append(f"records not decrypted (--no_decrypt): encrypted under {manifest.key_uri}")
    for split, entry in sorted(manifest.splits.items()):
        stats, complete = RecordStats(), not report.undecrypted
        for shard in entry.shards:
            check = verify_shard(dataset_dir, shard, schema, adapter, split, mask_rule, view, keys, encrypted,
                                 chunks)
            ids.add(check.file, bytes(check.ids))
            report.problems.extend(check.problems)
            report.shards += 1
            report.records += check.records
            report.num_bytes += check.num_bytes
            stats.merge(check.stats)
            complete = complete and not check.problems
        report.problems.extend(check_split_stats(split, entry, stats, complete))
    report.problems.extend(ids.repeats())
    report.problems.extend(manifest_problems)
    report.problems.extend(check_errors_file(dataset_dir, manifest))
    try:
        tfds_problems, tfds_notes = check_tfds_metadata(dataset_dir, manifest)
    except Exception as exc:  # noqa: BLE001 - a manifest this code cannot describe: say so, go on
        tfds_problems, tfds_notes = [], [f"TFDS metadata not checked: {exc}"]
    report.problems.extend(Problem(name, message) for name, message in tfds_problems)
    report.notes.extend(tfds_notes)
    report.notes.extend(stray_files(dataset_dir, manifest))
    return report
