"""verify, shard by shard: a shard read whole (framing, both CRCs, every record against the
schema, size and sha256), its ``.idx``, and its entry in dataset.json."""
from __future__ import annotations

import dataclasses
import hashlib
from typing import BinaryIO, Optional

from dcm2tfrecord.dataset.encryption import EncryptionError
from dcm2tfrecord.dataset.example import ProtoError, decode_example
from dcm2tfrecord.dataset.features import ID
from dcm2tfrecord.dataset.file_adapters import FileAdapter
from dcm2tfrecord.dataset.files import read_json
from dcm2tfrecord.dataset.manifest import ShardEntry
from dcm2tfrecord.dataset.names import records_file_name
from dcm2tfrecord.dataset.storage import FileSystems
from dcm2tfrecord.dataset.tfrecord import HEADER_BYTES, FramingError, parse_index, read_records
from dcm2tfrecord.dataset.bricks import Chunks
from dcm2tfrecord.dataset.verify_records import MaskRule, Problem, RecordStats, check_example, id_bytes
from dcm2tfrecord.dataset.verify_bricks import unbrick
from dcm2tfrecord.dataset.verify_view import ViewRule
from dcm2tfrecord.dataset.versions import shard_uri

_READ_CHUNK = 16 << 20      # bytes read at a time to finish a shard's sha256


class _HashingReader:
    """Counts and hashes the raw (possibly compressed) bytes as they are read."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.sha256, self.num_bytes = raw, hashlib.sha256(), 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha256.update(data)
        self.num_bytes += len(data)
        return data

    def drain(self) -> None:
        while self.read(_READ_CHUNK):
            pass


@dataclasses.dataclass
class ShardCheck:
    """A shard as found on disk."""
    file: str
    records: int = 0
    num_bytes: int = 0
    sha256: str = ""
    index: list = dataclasses.field(default_factory=list)       # (offset, size) per record read
    stats: RecordStats = dataclasses.field(default_factory=RecordStats)
    problems: list = dataclasses.field(default_factory=list)
    ids: bytearray = dataclasses.field(default_factory=bytearray)   # 16 bytes per record read


def read_shard(path: str, name: str, schema: dict, adapter: FileAdapter,
               mask_rule: Optional[MaskRule] = None, view: Optional[ViewRule] = None,
               keys=None, encrypted: bool = False, chunks: Optional[Chunks] = None) -> ShardCheck:
    """Reads one shard start to end: framing, CRCs, records against the schema (and their masks
    against ``mask_rule``, their training view against ``view``), size and sha256; ``adapter`` is
    the dataset's container (``Manifest.adapter``). An ``encrypted`` dataset's records are
    decrypted and authenticated with ``keys`` (dataset.encryption.DatasetKeys) before they are
    checked; without ``keys`` only their framing, CRCs (which cover the ciphertext), sizes and
    sha256 are."""
    check = ShardCheck(file=name)

    def problem(message: str, record: Optional[int] = None, offset: Optional[int] = None) -> Problem:
        """A problem in the shard, its offset in the container's unit."""
        return Problem(name, message, record, offset, adapter.offset_unit)

    try:
        raw = FileSystems.open(path)
    except Exception as exc:
        check.problems.append(Problem(name, f"cannot be opened: {exc}"))
        return check
    with raw:
        hashing = _HashingReader(raw)
        stream = adapter.open_reader(hashing)  # type: ignore[arg-type]
        try:
            for framed in read_records(stream):
                check.records += 1
                check.index.append((framed.offset, framed.size))
                if not framed.data_crc_ok:
                    first = framed.offset + HEADER_BYTES
                    check.problems.append(problem(
                        f"data CRC32C mismatch: the record's data (bytes {first}-"
                        f"{first + len(framed.data) - 1}) or its CRC was altered",
                        framed.index, framed.offset))
                    continue
                data = framed.data
                if encrypted:
                    if keys is None:
                        continue
                    try:
                        data = keys.decrypt(name, data, framed.index)
                    except EncryptionError as exc:
                        check.problems.append(problem(str(exc).removeprefix(f"{name}: "), framed.index,
                                                      framed.offset))
                        continue
                try:
                    features = decode_example(data)
                except ProtoError as exc:
                    check.problems.append(problem(f"not a tf.train.Example: {exc}", framed.index, framed.offset))
                    continue
                if chunks is not None:       # --volume_chunks: the bricks walked, decoded, put back
                    features, messages = unbrick(framed.data, features, chunks)
                    if messages:
                        check.problems.extend(problem(m, framed.index, framed.offset) for m in messages)
                        continue
                messages, summary = check_example(features, schema, mask_rule, view)
                check.problems.extend(problem(m, framed.index, framed.offset) for m in messages)
                kind, values = features.get(ID, (None, []))
                check.ids.extend(id_bytes(values[0] if kind == "bytes" and len(values) == 1 else b""))
                if summary:
                    check.stats.add(summary)
        except FramingError as exc:
            check.problems.append(problem(str(exc), exc.record, exc.offset))
        except adapter.stream_errors as exc:   # e.g. gzip: bad header, CRC, truncation
            record = len(check.index)
            offset = check.index[-1][0] + check.index[-1][1] if check.index else 0
            check.problems.append(problem(f"{adapter.name} stream is corrupt: {exc}", record, offset))
        try:
            hashing.drain()
        except OSError as exc:
            check.problems.append(Problem(name, f"read failed: {exc}"))
    check.num_bytes, check.sha256 = hashing.num_bytes, hashing.sha256.hexdigest()
    return check


def check_index(path: str, name: str, actual: list[tuple[int, int]]) -> list[Problem]:
    try:
        with FileSystems.open(path) as handle:
            offsets, sizes = parse_index(handle.read().decode("ascii"))
        listed = list(zip(offsets.tolist(), sizes.tolist()))
    except Exception as exc:
        return [Problem(name, f"index cannot be read: {exc}")]
    for number, (want, got) in enumerate(zip(actual, listed)):
        if want != got:
            return [Problem(name, f"index line {number + 1} says offset {got[0]} size {got[1]}, "
                                  f"the record is at offset {want[0]} size {want[1]}", number, want[0])]
    if len(listed) != len(actual):
        return [Problem(name, f"index lists {len(listed)} records, the shard holds {len(actual)}")]
    return []


def verify_shard(dataset_dir: str, entry: ShardEntry, schema: dict, adapter: FileAdapter,
                 split: Optional[str] = None, mask_rule: Optional[MaskRule] = None,
                 view: Optional[ViewRule] = None, keys=None, encrypted: bool = False,
                 chunks: Optional[Chunks] = None) -> ShardCheck:
    """One dataset.json shard entry against the files: shard, then its index (and, in a
    versioned dataset, the split its records file says it was written for); ``adapter`` is
    the container the dataset's manifest names (``Manifest.adapter``), found once per dataset."""
    name = entry.file
    path = shard_uri(dataset_dir, name)
    if not FileSystems.exists(path):
        check = ShardCheck(file=name)
        check.problems.append(Problem(name, "listed in dataset.json but missing"))
        return check
    check = read_shard(path, name, schema, adapter, mask_rule, view, keys, encrypted, chunks)
    if check.records != entry.num_records:
        check.problems.append(Problem(name, f"holds {check.records} readable records, dataset.json "
                                            f"says {entry.num_records}"))
    if check.num_bytes != entry.num_bytes:
        check.problems.append(Problem(name, f"is {check.num_bytes} bytes, dataset.json says "
                                            f"{entry.num_bytes}"))
    if check.sha256 != entry.sha256:
        check.problems.append(Problem(name, f"sha256 {check.sha256} differs from dataset.json's "
                                            f"{entry.sha256}"))
    index_name = entry.index
    index_path = shard_uri(dataset_dir, index_name)
    if not FileSystems.exists(index_path):
        check.problems.append(Problem(index_name, "index file missing"))
    else:
        check.problems.extend(check_index(index_path, index_name, check.index))
    records_path = shard_uri(dataset_dir, records_file_name(name))
    if split is not None and FileSystems.exists(records_path):
        try:
            written_for = read_json(records_path)["shard"]["split"]
        except Exception as exc:  # noqa: BLE001
            check.problems.append(Problem(records_file_name(name), f"does not parse: {exc}"))
        else:
            if written_for != split:
                check.problems.append(Problem(name, f"was written for split {written_for!r} but is "
                                                    f"listed under {split!r}"))
    return check
