"""``copy``: a committed dataset (or one version of a versioned root) copied between stores,
every byte checked at the destination, resumable, and never looking complete before it is.

What is copied: the dataset directory's own files (shards, their ``.idx`` and
``.records.json``, ``errors.jsonl``, the TFDS metadata files) and, for a version of a root
written with ``--incremental``, the shards it reuses from earlier versions, under the same
relative paths (``versions/NNNN/...``), so every ``dataset.json`` is copied byte for byte and
reads the same at the destination. Never copied: what a run leaves beside its dataset while it
runs (``.lock``, ``.incomplete/``, ``.progress/``, ``plan.json``, ``run_failed.json``).

How it is checked, once, where it lands (docs/CONVERTING.md "Copying a dataset"): locally each
file goes into a temp file under the destination's ``.incomplete/`` (by the kernel,
``copy_file_range``, where the source is local too; downloaded by the store's client where the
installed backend moves whole files of the source's store, ``FileSystems.direct_transfer``:
gs://; else streamed, its CRC-32C computed) and, but for a download, read back once: a shard's
sha256 must equal the manifest's, another file's CRC-32C and size the source's; a download is
checked as it arrives instead: the CRC-32C of the bytes received against the store's (the
client's own check, and here against the CRC-32C the backend returns), a shard's sha256 against
the manifest's. Then it is renamed to its name. To an object store a file is written straight
to its name (an object appears only whole; a rename there is a server-side copy), uploaded by
the store's client where the backend has one (``FileSystems.upload``: gs://, the client's
CRC-32C check) else streamed, while its sha256 (shards: against the manifest) and CRC-32C are
computed; the CRC-32C the store computed of the object (its answer to the upload, or
``FileSystems.stored_crc32c``: GCS's metadata, no byte read back) must equal the computed one;
a store keeping none has the object read back instead. A shard that does not match the manifest
is hashed once more at the source, to tell a damaged source (the copy stops, naming the shard)
from a damaged write. What fails is removed (a temp file) or deleted (an object). So a file
under its final name at the destination is whole and equal to the source.

Resuming: the first thing written is ``.dcm2tfrecord-copy.json`` naming the source's manifest
(its sha256). A copy started again into a destination holding that marker keeps every file
already there whose bytes hash as expected (the manifest's sha256, or the source file's) and
copies the rest. ``dataset.json`` is written after every other file, then ``LATEST`` for a
version, then the marker is removed: until then no reader takes the destination for a dataset.

Refused (``CopyRefused``, before anything is written): a destination holding another dataset
(its ``dataset.json`` differs), or files that are neither this dataset's copy nor an interrupted
copy of it. Encrypted or not, shards are copied as bytes: nothing is decoded.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import errno
import hashlib
import io
import json
import os
import time
from typing import BinaryIO, Callable, Optional

import google_crc32c

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.errors import FormatError, OutputError
from dcm2tfrecord.dataset.files import create_output, incomplete_file, remove_empty_incomplete_dir
from dcm2tfrecord.dataset.manifest import parse_manifest
from dcm2tfrecord.dataset.names import (FAILED_RUN_NAME, INCOMPLETE_DIR, LATEST_NAME, MANIFEST_NAME,
                                        PLAN_NAME, VERSIONS_DIR, strip_parent)
from dcm2tfrecord.dataset.storage import FileSystems, StoreChecksumMismatch
from dcm2tfrecord.dataset.versions import resolve_dataset_dir, set_latest

MARKER_NAME = ".dcm2tfrecord-copy.json"
CHUNK = 8 << 20                 # bytes read and written at a time
WORKERS = 4                     # files copied at a time
_NOT_DATA = (FAILED_RUN_NAME, PLAN_NAME)


class CopyRefused(OutputError):
    """The destination holds something this copy must not overwrite."""


class CopyFailed(FormatError):
    """A file could not be copied whole: the source is damaged or the destination lost bytes."""


@dataclasses.dataclass(frozen=True)
class FileToCopy:
    relative: str                   # its path under the source root and the destination
    sha256: Optional[str] = None    # what the manifest says it holds (shards), else None


@dataclasses.dataclass
class CopyReport:
    source: str
    destination: str
    version: Optional[str] = None
    copied: int = 0
    copied_bytes: int = 0
    kept: int = 0                   # already at the destination, verified
    kept_bytes: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        mb = self.copied_bytes / 1e6
        rate = f" at {mb / self.seconds:.1f} MB/s" if self.seconds > 0 and self.copied else ""
        what = f"version {self.version} of {self.source}" if self.version else self.source
        kept = (f"; {self.kept} files ({self.kept_bytes / 1e6:.1f} MB) already there, verified"
                if self.kept else "")
        return (f"copied {what} to {self.destination}: {self.copied} files ({mb:.1f} MB){rate}, "
                f"every byte checked{kept}")


def _sha256_of(path: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with FileSystems.open(path) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _is_data_file(name: str) -> bool:
    return bool(name) and not name.startswith(".") and name not in _NOT_DATA


def _listing(folder: str) -> list[str]:
    """The names of the regular files directly in ``folder``."""
    found = []
    for path in FileSystems.match(FileSystems.join(folder, "*")):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if "://" not in path and not os.path.isfile(path):
            continue                                        # a local folder (.progress, ...)
        found.append(name)
    return found


def files_of(root: str, dataset_dir: str, manifest_bytes: bytes) -> list[FileToCopy]:
    """Every file of the dataset in ``dataset_dir`` (under ``root``) but its dataset.json, by
    its path relative to ``root``, with the manifest's sha256 where it gives one."""
    manifest = parse_manifest(manifest_bytes, FileSystems.join(dataset_dir, MANIFEST_NAME))
    prefix = dataset_dir[len(root):].strip("/")
    base = f"{prefix}/" if prefix else ""
    digests: dict[str, Optional[str]] = {}
    for split in manifest.splits.values():
        for shard in split.shards:
            for file, digest in ((shard.file, shard.sha256), (shard.index, None)):
                if file.startswith(names.PARENT):       # reused from an earlier version
                    relative = f"{VERSIONS_DIR}/{strip_parent(file)}"
                else:
                    relative = base + file
                digests[relative] = digest if digest is not None else digests.get(relative)
            if shard.file.startswith(names.PARENT):
                records = shard.file + names.RECORDS_SUFFIX
                relative = f"{VERSIONS_DIR}/{strip_parent(records)}"
                if FileSystems.exists(FileSystems.join(root, relative)):
                    digests.setdefault(relative, None)
    for name in _listing(dataset_dir):
        if _is_data_file(name) and name != MANIFEST_NAME:
            digests.setdefault(base + name, None)
    return [FileToCopy(relative, digests[relative]) for relative in sorted(digests)]


def _damaged_source(source: str, read: str, expected: str) -> CopyFailed:
    return CopyFailed(f"{source} does not hold what its dataset.json says (sha256 {read[:12]}... "
                      f"against {expected[:12]}...): the source is damaged; run dcm2tfrecord verify on it")


def _lost_bytes(path: str, size: int, written_size: int) -> CopyFailed:
    return CopyFailed(f"{path}: the bytes written ({written_size}) read back differently from the {size} "
                      f"read; run copy again")


def _stream(source: str, target: str, dst_root: str, expected: Optional[str],
            sha256: bool) -> tuple[int, int]:
    """``source``'s bytes written to ``target``: their CRC-32C and size; with ``sha256``, their
    sha256 is also computed on the way and must equal ``expected`` (else the source is damaged)."""
    digest = hashlib.sha256() if sha256 and expected is not None else None
    crc, size = 0, 0
    with FileSystems.open(source) as reader, create_output(dst_root, target) as writer:
        while chunk := reader.read(CHUNK):
            if digest is not None:
                digest.update(chunk)
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
            writer.write(chunk)
    if digest is not None and expected is not None and digest.hexdigest() != expected:
        raise _damaged_source(source, digest.hexdigest(), expected)
    return crc, size


def _kernel_copy(source: str, target: str, dst_root: str) -> Optional[int]:
    """Local ``source`` to local ``target`` by the kernel (``copy_file_range``: no byte through
    this process); its size, or None where the kernel cannot (the caller then streams)."""
    if "://" in source or not hasattr(os, "copy_file_range"):
        return None
    with open(source, "rb") as reader:
        size = os.fstat(reader.fileno()).st_size
        with create_output(dst_root, target) as writer:
            copied = 0
            try:
                while copied < size:
                    step = os.copy_file_range(reader.fileno(), writer.fileno(), min(size - copied, 1 << 30))
                    if step == 0:
                        break
                    copied += step
            except OSError as error:      # EXDEV on old kernels, ENOSYS, EINVAL on some file systems
                if copied or error.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                return None
    return copied


def _crc32c_of(path: str) -> tuple[int, int]:
    crc, size = 0, 0
    with FileSystems.open(path) as handle:
        while chunk := handle.read(CHUNK):
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
    return crc, size


def _check_local(source: str, written: str, expected: Optional[str], crc: Optional[int], size: int) -> None:
    """The local file ``written`` read back once: a shard's sha256 must equal the manifest's
    (``expected``; where it does not, the source is hashed to tell a damaged source from a
    damaged write), another file's CRC-32C and size the source's (``crc`` where the stream
    computed it, else the source read once more: such files are small)."""
    if expected is not None:
        digest, written_size = _sha256_of(written)
        if digest != expected:
            read, _ = _sha256_of(source)
            if read != expected:
                raise _damaged_source(source, read, expected)
            raise _lost_bytes(written, size, written_size)
        return
    if crc is None:
        crc, size = _crc32c_of(source)
    written_crc, written_size = _crc32c_of(written)
    if (written_crc, written_size) != (crc, size):
        raise _lost_bytes(written, size, written_size)


class _HashingReader:
    """A reader over ``inner`` computing the sha256 (``sha256``) and CRC-32C of every byte it
    hands out, once each, as the store's client reads it (a rewind for a retry re-reads bytes
    already hashed: they are skipped)."""

    def __init__(self, inner: BinaryIO, sha256: bool) -> None:
        self.inner = inner
        self.digest = hashlib.sha256() if sha256 else None
        self.crc = 0
        self.position = 0
        self.hashed = 0                 # bytes [0, hashed) went into the digests
        self.gap = False                # a read skipped bytes never hashed: digests unusable

    def read(self, size: int = -1) -> bytes:
        chunk = self.inner.read() if size is None or size < 0 else self.inner.read(size)
        end = self.position + len(chunk)
        if self.position > self.hashed:
            self.gap = True
        elif end > self.hashed:
            new = chunk if self.hashed == self.position else chunk[self.hashed - self.position:]
            if self.digest is not None:
                self.digest.update(new)
            self.crc = google_crc32c.extend(self.crc, new)
            self.hashed = end
        self.position = end
        return chunk

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = self.inner.seek(offset, whence)
        return self.position


class _HashingWriter:
    """A writer passing every byte on to ``inner``, computing their sha256 (``sha256``),
    CRC-32C and count on the way, a CHUNK at a time (the store's client writes 8 KiB pieces:
    gathered, the digests and the file see a few large calls, not thousands of small ones);
    :meth:`flush` before reading the digests."""

    def __init__(self, inner: BinaryIO, sha256: bool) -> None:
        self.inner = inner
        self.digest = hashlib.sha256() if sha256 else None
        self.crc = 0
        self.size = 0
        self.pending = bytearray()

    def write(self, chunk: bytes) -> int:
        self.pending += chunk
        if len(self.pending) >= CHUNK:
            self.flush()
        return len(chunk)

    def flush(self) -> None:
        if self.pending:
            data = bytes(self.pending)
            self.pending.clear()
            if self.digest is not None:
                self.digest.update(data)
            self.crc = google_crc32c.extend(self.crc, data)
            self.size += len(data)
            self.inner.write(data)


def _store_differs(path: str, size: int, stored: int, crc: int, sent: bool) -> CopyFailed:
    what = "sent" if sent else "received"
    return CopyFailed(f"{path}: the store's CRC-32C of the object ({stored:08x}) differs from that of the "
                      f"{size} bytes {what} ({crc:08x}); run copy again")


def _upload(source: str, destination: str, expected: Optional[str]) -> int:
    """Local ``source`` to the object ``destination`` by the store's client (one request for a
    small file): the sha256 (against ``expected``) and CRC-32C of the bytes computed as the
    client reads them; the CRC-32C checked by the client and the store (StoreChecksumMismatch)
    and against the store's answer here."""
    size = os.path.getsize(source)
    with open(source, "rb") as handle:
        reader = _HashingReader(handle, sha256=expected is not None)
        try:
            stored = FileSystems.upload(reader, destination, size)   # type: ignore[arg-type]
        except StoreChecksumMismatch as error:
            raise CopyFailed(f"{destination}: the store's CRC-32C of the object differs from that of the "
                             f"{size} bytes sent ({error}); run copy again") from error
    if reader.gap or reader.hashed != size:         # the client read it unlike a stream: hash again
        crc, read = _crc32c_of(source)
        reader.crc, reader.hashed = crc, read
        if expected is not None:
            reader.digest = None
            digest, _ = _sha256_of(source)
            if digest != expected:
                raise _damaged_source(source, digest, expected)
    if reader.digest is not None and expected is not None and reader.digest.hexdigest() != expected:
        raise _damaged_source(source, reader.digest.hexdigest(), expected)
    if stored is None:
        stored = FileSystems.stored_crc32c(destination)
    if stored is None:
        stored, written_size = _crc32c_of(destination)
        if (stored, written_size) != (reader.crc, size):
            raise _lost_bytes(destination, size, written_size)
    elif stored != reader.crc:
        raise _store_differs(destination, size, stored, reader.crc, sent=True)
    return size


def _download(source: str, tmp: str, dst_root: str, expected: Optional[str]) -> int:
    """The object ``source`` into the local temp file ``tmp`` by the store's client: the
    CRC-32C of the bytes received checked against the store's by the client and here, a
    shard's sha256 computed on the way against ``expected`` (where it differs, the source is
    hashed again: a damaged source, or bytes lost on the way)."""
    with create_output(dst_root, tmp) as handle:
        writer = _HashingWriter(handle, sha256=expected is not None)
        try:
            stored = FileSystems.download(source, writer)          # type: ignore[arg-type]
            writer.flush()
        except StoreChecksumMismatch as error:
            raise CopyFailed(f"{source}: the bytes received differ from the store's CRC-32C of the object "
                             f"({error}); run copy again") from error
    if stored is None:
        stored = FileSystems.stored_crc32c(source)
    if stored is None:
        _check_local(source, tmp, expected, None, writer.size)
        return writer.size
    if stored != writer.crc:
        raise _store_differs(source, writer.size, stored, writer.crc, sent=False)
    if writer.digest is not None and expected is not None and writer.digest.hexdigest() != expected:
        read, _ = _sha256_of(source)
        if read != expected:
            raise _damaged_source(source, read, expected)
        raise _lost_bytes(tmp, writer.size, writer.size)
    return writer.size


def _copy_one(source: str, destination: str, dst_root: str, expected: Optional[str]) -> int:
    """``source`` to ``destination``, checked there; its bytes (module docstring).

    Locally through a temp file renamed once checked: the bytes copied by the kernel where the
    source is local too (else streamed), then read back once; from a store the backend moves
    whole files of (gs://), by its client, checked as they arrive (no read-back). To an object
    store straight to its name, since an object appears only whole (a rename there is a
    server-side copy: twice the writing): by the store's client where the backend has one
    (gs://, local source), else streamed; the sha256 checked on the way, then the store's own
    CRC-32C of the object against the one computed on the way (GCS), or, where the store keeps
    none, the object read back; an object that does not match is deleted before the error."""
    if "://" in destination:
        try:
            if "://" not in source and FileSystems.direct_transfer(destination):
                return _upload(source, destination, expected)
            crc, size = _stream(source, destination, dst_root, expected, sha256=True)
            stored = FileSystems.stored_crc32c(destination)
            if stored is None:              # a store keeping no CRC-32C: the object read back
                stored, written_size = _crc32c_of(destination)
                if (stored, written_size) != (crc, size):
                    raise _lost_bytes(destination, size, written_size)
            elif stored != crc:
                raise _store_differs(destination, size, stored, crc, sent=True)
        except CopyFailed:
            if FileSystems.exists(destination):
                FileSystems.delete([destination])
            raise
        return size
    with incomplete_file(destination, dst_root) as tmp:
        if "://" in source and FileSystems.direct_transfer(source):
            return _download(source, tmp, dst_root, expected)
        copied = _kernel_copy(source, tmp, dst_root)
        streamed: Optional[int] = None          # the CRC-32C of what was streamed, if it was
        if copied is None:
            streamed, copied = _stream(source, tmp, dst_root, expected, sha256=False)
        _check_local(source, tmp, expected, streamed, copied)
    return copied


def _check_destination(dst_root: str, manifest_at_dst: str, manifest_bytes: bytes, marker: dict) -> bool:
    """Whether the destination is an earlier copy (whole or interrupted) of this dataset;
    CopyRefused when it holds anything else. False: it is empty (or absent)."""
    if FileSystems.exists(manifest_at_dst):
        with FileSystems.open(manifest_at_dst) as handle:
            if handle.read() == manifest_bytes:
                return True
        raise CopyRefused(f"{dst_root} holds another dataset (its {MANIFEST_NAME} differs): copy into an "
                          f"empty folder, or remove that dataset first")
    marker_path = FileSystems.join(dst_root, MARKER_NAME)
    if FileSystems.exists(marker_path):
        with FileSystems.open(marker_path) as handle:
            try:
                found = json.loads(handle.read())
            except ValueError:
                found = {}
        if found.get("manifest_sha256") == marker["manifest_sha256"] and found.get("version") == marker["version"]:
            return True
        raise CopyRefused(f"{dst_root} holds an interrupted copy of another dataset ({MARKER_NAME} names "
                          f"{str(found.get('source'))[:80]!r}): finish that copy, or remove the folder")
    if FileSystems.exists(FileSystems.join(dst_root, LATEST_NAME)) or any(
            _is_data_file(name) for name in _listing(dst_root)) or FileSystems.match(
            FileSystems.join(dst_root, VERSIONS_DIR, "*")):
        raise CopyRefused(f"{dst_root} is not empty and holds no copy of this dataset: copy into an empty "
                          f"folder")
    return False


def copy_dataset(source: str, destination: str, version: Optional[str] = None,
                 progress: Callable[[str], None] = lambda line: None, workers: int = WORKERS) -> CopyReport:
    """Copies the dataset at ``source`` (a dataset directory, or a versioned root: its LATEST
    version, or ``version``) to ``destination``, ``workers`` files at a time; see the module
    docstring."""
    src_root = source.rstrip("/") or "/"
    dst_root = destination.rstrip("/") or "/"
    dataset_dir = resolve_dataset_dir(src_root, version)
    manifest_path = FileSystems.join(dataset_dir, MANIFEST_NAME)
    if not FileSystems.exists(manifest_path):
        raise CopyRefused(f"{source} holds no committed dataset ({MANIFEST_NAME} missing"
                          + (f" for version {version}" if version else "") + "): give the --output of a "
                          "finished conversion")
    with FileSystems.open(manifest_path) as handle:
        manifest_bytes = handle.read()
    versioned = dataset_dir.rstrip("/") != src_root
    name = dataset_dir.rstrip("/").rsplit("/", 1)[-1] if versioned else None
    relative_dir = f"{VERSIONS_DIR}/{name}" if versioned else ""
    manifest_at_dst = FileSystems.join(dst_root, relative_dir, MANIFEST_NAME) if versioned else \
        FileSystems.join(dst_root, MANIFEST_NAME)
    marker = {"source": src_root, "version": name,
              "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest()}
    report = CopyReport(src_root, dst_root, name)
    started = time.monotonic()
    resumed = _check_destination(dst_root, manifest_at_dst, manifest_bytes, marker)
    marker_path = FileSystems.join(dst_root, MARKER_NAME)
    if not FileSystems.exists(manifest_at_dst):
        marker_bytes = json.dumps(marker, indent=2).encode() + b"\n"
        if FileSystems.direct_transfer(marker_path):        # one request; an object appears whole
            FileSystems.upload(io.BytesIO(marker_bytes), marker_path, len(marker_bytes))
        else:
            with incomplete_file(marker_path, dst_root) as tmp, create_output(dst_root, tmp) as handle:
                handle.write(marker_bytes)
    def one(item: FileToCopy) -> tuple[FileToCopy, bool, int]:
        """(the file, whether it was copied (else kept, verified), its bytes)."""
        src = FileSystems.join(src_root, item.relative)
        dst = FileSystems.join(dst_root, item.relative)
        if resumed and FileSystems.exists(dst):
            digest, size = _sha256_of(dst)
            expected = item.sha256 if item.sha256 is not None else _sha256_of(src)[0]
            if digest == expected:
                return item, False, size
        return item, True, _copy_one(src, dst, dst_root, item.sha256)

    # a few files at a time: hashing releases the GIL and storage answers each stream on its
    # own, so reads, writes and digests of several files overlap (docs/BENCHMARKS.md)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, item) for item in files_of(src_root, dataset_dir, manifest_bytes)]
        try:
            for future in concurrent.futures.as_completed(futures):
                item, copied, size = future.result()
                if copied:
                    report.copied += 1
                    report.copied_bytes += size
                    progress(f"{item.relative} ({size / 1e6:.1f} MB)")
                else:
                    report.kept += 1
                    report.kept_bytes += size
        except BaseException:
            for future in futures:
                future.cancel()             # the files not started; those under way finish whole
            raise
    if not (resumed and FileSystems.exists(manifest_at_dst)):
        _copy_one(manifest_path, manifest_at_dst, dst_root, hashlib.sha256(manifest_bytes).hexdigest())
        report.copied += 1
        report.copied_bytes += len(manifest_bytes)
    if versioned and name is not None:
        set_latest(dst_root, name)
    leftovers = FileSystems.match(FileSystems.join(dst_root, INCOMPLETE_DIR, "*"))    # a killed copy's
    finished = [marker_path, *leftovers] if FileSystems.exists(marker_path) else leftovers
    if finished:
        FileSystems.delete(finished)
    remove_empty_incomplete_dir(dst_root)
    report.seconds = time.monotonic() - started
    return report
