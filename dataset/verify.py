"""Verifying a committed dataset against its dataset.json, byte by byte (``dcm2tfrecord verify``).

Every shard listed in dataset.json is re-read through Beam's FileSystems
(local or gs://, gzip or not) and checked for:

- TFRecord framing: 8-byte little-endian length, masked CRC32C of the length,
  data, masked CRC32C of the data — both CRCs recomputed by the format's
  codec (dataset/tfrecord.py), the one that wrote them;
- record count, byte size and sha256 of the file against dataset.json;
- every record parses as a ``tf.train.Example`` (decoded by the format's
  Example codec, dataset/example.py, no TensorFlow needed) whose features have the kinds
  and value counts dataset.json declares, and whose ``image_raw`` holds exactly
  depth x height x width x channels x itemsize(dtype) bytes;
- the ``{shard}.idx`` index (DALI's "offset size" lines) lists the real record
  offsets and sizes, in the uncompressed record stream;

plus the manifest's own arithmetic (split totals, counts) and errors.jsonl's
per-reason counts. Each problem names the file and, where there is one, the
record number (0-based, in file order) and the byte offset of the record.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import zlib
from collections import Counter
from typing import BinaryIO, Optional

import numpy as np

from dataset import reasons
from dataset.manifest import label_count_keys
from dataset.example import ProtoError, decode_example
from dataset.files import read_json
from dataset.names import (ERRORS_NAME, GZIP_SUFFIX, INCOMPLETE_DIR, MANIFEST_NAME, SHARD_GLOB,
                           files_of_shard, index_file_name, parse_shard_name, records_file_name)
from dataset.storage import FileSystems
from dataset.tfrecord import HEADER_BYTES, FramingError, parse_index, read_records
from dataset.versions import resolve_dataset_dir, shard_uri

_READ_CHUNK = 16 << 20      # bytes read at a time to finish a shard's sha256


# ---------------------------------------------------------------- results


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with the dataset, located as precisely as the check allows."""
    file: str
    message: str
    record: Optional[int] = None
    offset: Optional[int] = None

    def __str__(self) -> str:
        where = self.file
        if self.record is not None:
            where += f": record {self.record}"
        if self.offset is not None:
            stream = "uncompressed byte" if self.file.endswith(GZIP_SUFFIX) else "byte"
            where += f" at {stream} {self.offset}"
        return f"{where}: {self.message}"


@dataclasses.dataclass
class Report:
    """What verify found: the problems (empty when the dataset is sound) and what it read."""
    dataset_dir: str
    problems: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    shards: int = 0
    records: int = 0
    num_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def verdict(self) -> str:
        """One line: OK with what was checked, or CORRUPT with the first problem."""
        if self.ok:
            return (f"OK {self.dataset_dir}: {self.shards} shards, {self.records} records, "
                    f"{self.num_bytes} bytes verified (framing, CRC32C, sha256, schema, pixel sizes, index)")
        more = len(self.problems) - 1
        tail = f" (+{more} more problem{'s' if more != 1 else ''})" if more else ""
        return f"CORRUPT {self.dataset_dir}: {self.problems[0]}{tail}"


# ---------------------------------------------------------------- schema


def _count_fits(count: int, shape: list) -> bool:
    """Whether ``count`` values fill ``shape``; a -1 dimension is variable (a VarLenFeature)."""
    fixed = int(np.prod([d for d in shape if d != -1] or [1]))
    if -1 in shape:
        return fixed == 0 or count % fixed == 0
    return count == fixed


def _text(values: list) -> str:
    """The first value of a BytesList as text; "" for anything else."""
    if not values or not isinstance(values[0], (bytes, memoryview)):
        return ""
    return bytes(values[0]).decode("utf-8", "replace")


def check_example(features: dict, schema: dict) -> tuple[list[str], dict]:
    """Problems of one parsed record against dataset.json's ``features``; also its summary.

    Every declared feature must be present with its declared kind and value
    count, except ``dicom/*`` on records whose ``format`` is not dicom and
    features the schema marks ``optional`` (written only by some records, e.g.
    the per-frame geometry of Enhanced multi-frame files; variable-length, so
    readers see an absent one as empty). An undeclared feature is a problem
    too: the schema is the reader's contract.
    """
    problems = []
    is_dicom = _text(features.get("format", (None, []))[1]) == "dicom"
    for name, spec in sorted(schema.items()):
        if name not in features:
            if name.startswith("dicom/") and not is_dicom or spec.get("optional"):
                continue
            problems.append(f"feature {name!r} is missing")
            continue
        kind, values = features[name]
        if kind != spec.get("dtype"):
            problems.append(f"feature {name!r} is {kind or 'empty'}, the schema says {spec.get('dtype')}")
        elif not _count_fits(len(values), list(spec.get("shape", []))):
            problems.append(f"feature {name!r} holds {len(values)} values, which do not fit the "
                            f"schema's shape {spec.get('shape', [])}")
    for name in sorted(set(features) - set(schema)):
        problems.append(f"feature {name!r} is not in the schema")
    summary: dict = {}
    needed = ("image_raw", "depth", "height", "width", "channels", "dtype", "label")
    problems.extend(f"feature {name!r} is missing" for name in needed
                    if name not in features and name not in schema)
    if problems:
        return problems, summary
    scalars = ("depth", "height", "width", "channels")
    if any(features[k][0] != "int64" or len(features[k][1]) != 1 for k in scalars) \
            or any(features[k][0] != "bytes" or len(features[k][1]) != 1 for k in ("image_raw", "dtype")):
        return ["image_raw, dtype, depth, height, width and channels are not single values of their "
                "standard kinds"], summary
    dims = [features[k][1][0] for k in scalars]
    dtype_name = _text(features["dtype"][1])
    try:
        itemsize = np.dtype(dtype_name).itemsize
    except Exception:
        return [f"dtype {dtype_name!r} is not a numpy dtype"], summary
    if min(dims) <= 0:
        problems.append(f"non-positive shape {dims}")
    expected = math.prod(dims) * itemsize
    got = len(features["image_raw"][1][0])
    if got != expected:
        problems.append(f"image_raw holds {got} bytes; shape {dims} of {dtype_name} needs {expected}")
    encoding = schema.get("image_raw", {}).get("encoding")
    if encoding and "encoding" in features and _text(features["encoding"][1]) != encoding:
        problems.append(f"encoding {_text(features['encoding'][1])!r}, the schema says {encoding!r}")
    label_spec = schema.get("label", {})
    label_values = features["label"][1]
    if label_spec.get("shape"):
        label = tuple(label_values)
    elif not label_values:
        label = None
    elif label_spec.get("dtype") == "float":
        label = float(label_values[0])
    else:
        label = label_values[0]
    summary = {"dtype": dtype_name, "shape": dims, "label": label}
    return problems, summary


# ---------------------------------------------------------------- one shard


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
class RecordStats:
    """What the records of a shard or split hold, in bounded memory."""
    dtypes: set = dataclasses.field(default_factory=set)
    shapes: set = dataclasses.field(default_factory=set)     # capped at MAX_SHAPES
    max_depth: int = 0
    labels: Counter = dataclasses.field(default_factory=Counter)
    count: int = 0

    MAX_SHAPES = 64

    def add(self, summary: dict) -> None:
        self.count += 1
        self.dtypes.add(summary["dtype"])
        if len(self.shapes) < self.MAX_SHAPES:
            self.shapes.add(tuple(summary["shape"]))
        self.max_depth = max(self.max_depth, summary["shape"][0])
        if summary["label"] is not None and not isinstance(summary["label"], float):
            self.labels.update(label_count_keys(summary["label"]))

    def merge(self, other: "RecordStats") -> None:
        self.count += other.count
        self.dtypes |= other.dtypes
        self.shapes |= set(list(other.shapes)[:max(0, self.MAX_SHAPES - len(self.shapes))])
        self.max_depth = max(self.max_depth, other.max_depth)
        self.labels.update(other.labels)


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


ID_BYTES = 16


def id_bytes(value: bytes) -> bytes:
    """A record's ``id`` feature as 16 bytes: the 32 hex characters the writer gives it, else
    a hash of whatever is there (so a foreign or damaged id is still compared)."""
    value = bytes(value)
    try:
        raw = bytes.fromhex(value.decode("ascii"))
        if len(raw) == ID_BYTES:
            return raw
    except (UnicodeDecodeError, ValueError):
        pass
    return hashlib.sha256(b"foreign:" + value).digest()[:ID_BYTES]


class RecordIds:
    """Every record id of a dataset, 16 bytes each (20 M records: 320 MB), to find an id
    that appears twice: a shard copied in from another split or another run."""

    def __init__(self):
        self.ids = bytearray()
        self.files: list = []          # shard file per block of ids
        self.starts: list = []         # first position of each block

    def add(self, file: str, ids: bytes) -> None:
        self.starts.append(len(self.ids) // ID_BYTES)
        self.files.append(file)
        self.ids.extend(ids)

    def _where(self, position: int) -> tuple[str, int]:
        import bisect
        block = bisect.bisect_right(self.starts, position) - 1
        return self.files[block], position - self.starts[block]

    def repeats(self, limit: int = 10) -> list[Problem]:
        count = len(self.ids) // ID_BYTES
        if count < 2:
            return []
        ids = np.frombuffer(bytes(self.ids), dtype=f"S{ID_BYTES}")
        order = np.argsort(ids, kind="stable")
        ordered = ids[order]
        same = np.flatnonzero(ordered[1:] == ordered[:-1])
        problems = []
        for k in same[:limit]:
            first_file, first = self._where(int(order[k]))
            file, record = self._where(int(order[k + 1]))
            problems.append(Problem(file, f"record id {bytes(ordered[k + 1]).hex()} repeats record "
                                          f"{first} of {first_file}: a record is in the dataset twice "
                                          "(a shard copied from another split or run?)", record))
        if len(same) > limit:
            problems.append(Problem(MANIFEST_NAME, f"{len(same) - limit} more repeated record ids"))
        return problems


def read_shard(path: str, name: str, schema: dict) -> ShardCheck:
    """Reads one shard start to end: framing, CRCs, records against the schema, size and sha256."""
    check = ShardCheck(file=name)
    try:
        raw = FileSystems.open(path)
    except Exception as exc:
        check.problems.append(Problem(name, f"cannot be opened: {exc}"))
        return check
    with raw:
        hashing = _HashingReader(raw)
        stream = gzip.GzipFile(fileobj=hashing, mode="rb") if name.endswith(GZIP_SUFFIX) else hashing
        try:
            for framed in read_records(stream):
                check.records += 1
                check.index.append((framed.offset, framed.size))
                if not framed.data_crc_ok:
                    first = framed.offset + HEADER_BYTES
                    check.problems.append(Problem(
                        name, f"data CRC32C mismatch: the record's data (bytes {first}-"
                              f"{first + len(framed.data) - 1}) or its CRC was altered",
                        framed.index, framed.offset))
                    continue
                try:
                    features = decode_example(framed.data)
                except ProtoError as exc:
                    check.problems.append(Problem(name, f"not a tf.train.Example: {exc}",
                                                  framed.index, framed.offset))
                    continue
                messages, summary = check_example(features, schema)
                check.problems.extend(Problem(name, m, framed.index, framed.offset) for m in messages)
                kind, values = features.get("id", (None, []))
                check.ids.extend(id_bytes(values[0] if kind == "bytes" and len(values) == 1 else b""))
                if summary:
                    check.stats.add(summary)
        except FramingError as exc:
            check.problems.append(Problem(name, str(exc), exc.record, exc.offset))
        except (OSError, EOFError, zlib.error) as exc:   # gzip: bad header, CRC, truncation
            record = len(check.index)
            offset = check.index[-1][0] + check.index[-1][1] if check.index else 0
            check.problems.append(Problem(name, f"gzip stream is corrupt: {exc}", record, offset))
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


def verify_shard(dataset_dir: str, entry: dict, schema: dict, split: Optional[str] = None) -> ShardCheck:
    """One dataset.json shard entry against the files: shard, then its index (and, in a
    versioned dataset, the split its records file says it was written for)."""
    name = entry.get("file", "?")
    path = shard_uri(dataset_dir, name)
    if not FileSystems.exists(path):
        check = ShardCheck(file=name)
        check.problems.append(Problem(name, "listed in dataset.json but missing"))
        return check
    check = read_shard(path, name, schema)
    if check.records != entry.get("num_records"):
        check.problems.append(Problem(name, f"holds {check.records} readable records, dataset.json "
                                            f"says {entry.get('num_records')}"))
    if check.num_bytes != entry.get("num_bytes"):
        check.problems.append(Problem(name, f"is {check.num_bytes} bytes, dataset.json says "
                                            f"{entry.get('num_bytes')}"))
    if check.sha256 != entry.get("sha256"):
        check.problems.append(Problem(name, f"sha256 {check.sha256} differs from dataset.json's "
                                            f"{entry.get('sha256')}"))
    index_name = entry.get("index_file") or index_file_name(name)
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


# ---------------------------------------------------------------- the manifest itself


def check_manifest(manifest: dict) -> list[Problem]:
    """dataset.json's own arithmetic: shard names, split totals, the counts block."""
    problems = []

    def bad(message: str) -> None:
        problems.append(Problem(MANIFEST_NAME, message))

    for key in ("features", "splits", "counts"):
        if not isinstance(manifest.get(key), dict):
            bad(f"has no {key!r} object")
    if problems:
        return problems
    total = 0
    for split, entry in sorted(manifest["splits"].items()):
        shards = entry.get("shards", [])
        if entry.get("num_shards") != len(shards):
            bad(f"split {split!r}: num_shards {entry.get('num_shards')} but {len(shards)} shards listed")
        records = sum(int(s.get("num_records", 0)) for s in shards)
        if entry.get("num_records") != records:
            bad(f"split {split!r}: num_records {entry.get('num_records')} but its shards hold {records}")
        size = sum(int(s.get("num_bytes", 0)) for s in shards)
        if entry.get("num_bytes") != size:
            bad(f"split {split!r}: num_bytes {entry.get('num_bytes')} but its shards total {size}")
        total += records
        if "incremental" in manifest:
            problems.extend(_check_version_names(split, shards))
            continue
        for position, shard in enumerate(shards):
            name = parse_shard_name(str(shard.get("file", "")))
            if (name is None or name.version or name.parent or name.split != split
                    or name.index != position or name.num_shards != len(shards)):
                bad(f"split {split!r}: shard {position} is named {shard.get('file')!r}, expected "
                    f"{split}-{position:05d}-of-{len(shards):05d}.tfrecord[.gz]")
    counts = manifest["counts"]
    if counts.get("records") != total:
        bad(f"counts.records {counts.get('records')} but the splits hold {total}")
    skipped = sum(counts.get("skipped", {}).values())
    failed = sum(counts.get("failed", {}).values())
    written = counts.get("written", 0)
    if counts.get("unaccounted") != counts.get("matched", 0) - written - skipped - failed:
        bad(f"counts do not add up: matched {counts.get('matched')} - written {written} - skipped "
            f"{skipped} - failed {failed} != unaccounted {counts.get('unaccounted')}")
    return problems


def _check_version_names(split: str, shards: list) -> list[Problem]:
    """Shards of a versioned dataset: ``[../MMMM/]<split>-vMMMM-<i>-of-<n>``, each once."""
    problems, seen = [], set()
    for shard in shards:
        name = str(shard.get("file", ""))
        parsed = parse_shard_name(name)
        if (parsed is None or not parsed.version or parsed.split != split
                or parsed.index >= parsed.num_shards or (parsed.parent and parsed.parent != parsed.version)):
            problems.append(Problem(MANIFEST_NAME, f"split {split!r}: shard {name!r} is not named "
                                                   f"[../NNNN/]{split}-vNNNN-<i>-of-<n>.tfrecord[.gz]"))
        elif name in seen:
            problems.append(Problem(MANIFEST_NAME, f"split {split!r}: shard {name!r} listed twice"))
        seen.add(name)
    return problems


def check_split_stats(split: str, entry: dict, stats: RecordStats, complete: bool) -> list[Problem]:
    """The records' dtypes, shapes and labels against the split's entry in dataset.json.

    ``complete`` is False when some record could not be read: then only what
    the records read contradict (dtypes, shapes, depth) is checked, not totals.
    """
    problems = []

    def bad(message: str) -> None:
        problems.append(Problem(MANIFEST_NAME, f"split {split!r}: {message}"))

    if not stats.count:
        return problems
    if not stats.dtypes <= set(entry.get("dtypes", [])):
        bad(f"records are {sorted(stats.dtypes)}, dataset.json lists dtypes {entry.get('dtypes')}")
    listed = {tuple(x) for x in entry.get("shapes", [])}
    if entry.get("fixed_shape") and stats.shapes != listed:
        bad(f"fixed_shape {entry.get('shapes')} but records have {sorted(stats.shapes)[:4]}")
    if stats.max_depth > entry.get("max_depth", 1):
        bad(f"a record has depth {stats.max_depth}, max_depth says {entry.get('max_depth', 1)}")
    declared = {k: v for k, v in entry.get("label_counts", {}).items() if v}
    if complete and "label_counts" in entry and dict(stats.labels) != declared:
        bad(f"label_counts {declared} but the records hold {dict(sorted(stats.labels.items()))}")
    return problems


def check_errors_file(dataset_dir: str, manifest: dict) -> list[Problem]:
    """errors.jsonl exists, parses, and counts per reason what dataset.json counts."""
    name = manifest.get("errors_file", ERRORS_NAME)
    path = FileSystems.join(dataset_dir, name)
    if not FileSystems.exists(path):
        return [Problem(name, "missing (dataset.json names it)")]
    found: dict = {reasons.SKIPPED: Counter(), reasons.FAILED: Counter(), reasons.REJECTED: Counter()}
    try:
        with FileSystems.open(path) as handle:
            lines = handle.read().decode("utf-8").splitlines()
    except Exception as exc:
        return [Problem(name, f"cannot be read: {exc}")]
    for number, line in enumerate(lines, start=1):
        try:
            item = json.loads(line)
            found.setdefault(item.get("status"), Counter())[item.get("reason")] += 1
        except (ValueError, AttributeError) as exc:
            return [Problem(name, f"line {number} is not a JSON object: {exc}")]
    problems = []
    counts = manifest.get("counts", {})
    for status, key in ((reasons.SKIPPED, "skipped"), (reasons.FAILED, "failed"),
                        (reasons.REJECTED, "label_rows_rejected")):
        declared = {k: v for k, v in counts.get(key, {}).items() if v}
        if dict(found[status]) != declared:
            problems.append(Problem(name, f"{status} per reason {dict(sorted(found[status].items()))}, "
                                          f"dataset.json counts {declared}"))
    return problems


def stray_files(dataset_dir: str, manifest: dict) -> list[str]:
    """Shard-like files dataset.json does not list, and a leftover .incomplete/: notes, not errors."""
    listed = {name for entry in manifest.get("splits", {}).values() for s in entry.get("shards", [])
              for name in (s.get("index_file"),) + files_of_shard(str(s.get("file")))}
    try:
        found = FileSystems.match(FileSystems.join(dataset_dir, SHARD_GLOB))
    except Exception:
        found = []
    notes = [f"{path.rsplit('/', 1)[-1]} is not listed in dataset.json (readers ignore it)"
             for path in sorted(found) if path.rsplit("/", 1)[-1] not in listed]
    if FileSystems.exists(FileSystems.join(dataset_dir, INCOMPLETE_DIR)):
        notes.append(f"{INCOMPLETE_DIR}/ holds temp files of an unfinished run")
    return notes


# ---------------------------------------------------------------- the whole dataset


def load_manifest(dataset_dir: str) -> tuple[Optional[dict], list[Problem]]:
    path = FileSystems.join(dataset_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        return None, [Problem(MANIFEST_NAME, "missing: not a finished dataset "
                                             "(dataset.json is written last, when a conversion commits)")]
    try:
        with FileSystems.open(path) as handle:
            manifest = json.loads(handle.read().decode("utf-8"))
    except Exception as exc:
        return None, [Problem(MANIFEST_NAME, f"does not parse: {exc}")]
    if not isinstance(manifest, dict):
        return None, [Problem(MANIFEST_NAME, "is not a JSON object")]
    return manifest, []


def verify_dataset(dataset_dir: str) -> Report:
    """Every check above, shard by shard; problems in the order they are found.

    A versioned root (--incremental) is checked at the version LATEST names.
    """
    dataset_dir = resolve_dataset_dir(dataset_dir)
    report = Report(dataset_dir=dataset_dir)
    manifest, problems = load_manifest(dataset_dir)
    report.problems.extend(problems)
    if manifest is None:
        return report
    manifest_problems = check_manifest(manifest)
    if manifest_problems and not isinstance(manifest.get("splits"), dict):
        report.problems.extend(manifest_problems)
        return report
    schema = manifest.get("features") or {}
    ids = RecordIds()
    for split, entry in sorted(manifest["splits"].items()):
        stats, complete = RecordStats(), True
        for shard in entry.get("shards", []):
            check = verify_shard(dataset_dir, shard, schema, split)
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
    report.notes.extend(stray_files(dataset_dir, manifest))
    return report
