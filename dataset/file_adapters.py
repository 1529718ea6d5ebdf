"""One adapter per container format of a shard, as TFDS's ``core/file_adapters.py``.

A shard is a stream of TFRecord-framed records (dataset/tfrecord.py) in a
container: the plain file, or one gzip member. Everything that differs
between containers is an attribute or method of its :class:`FileAdapter`:

- ``name``: its ``--compression`` value (a :class:`Compression` member), recorded in
  dataset.json's ``options.compression``, and its key in :data:`ADAPTERS`;
- ``suffix``: what its shard names add after ``.tfrecord`` (dataset/names.py
  asks for it when it builds and parses shard names);
- ``open_writer`` / ``open_reader``: the record stream over a raw byte file,
  for the shard writer (dataset/shard_writer.py) and ``verify``
  (dataset/verify_shards.py); ``stream_errors``: what a damaged container
  raises while it is read;
- ``tf_compression_type``: what ``tf.data.TFRecordDataset`` takes for it (the
  reader, reader/tfdata.py; this package imports no TensorFlow);
- ``random_access``: whether ``reader.RandomAccess`` can enter a shard at an
  ``.idx`` offset; ``random_access_refusal`` says why not when it cannot;
- ``tfds_refusal``: why TFDS cannot read its shards ("" when it can), so no TFDS
  metadata is written beside them (dataset/tfds_metadata.py).

A new container is one adapter registered here (:func:`register`), its
:class:`Compression` member (the ``--compression`` choices, held to this registry when
this module loads) and its tests; no other consumer names a container
(tests/dataset/test_file_adapters.py). A run's shards are written through one
``ShardTarget`` (dataset/shard_target.py) holding its adapter; a dataset's shards are
read through the adapter its manifest names (``Manifest.adapter``).
"""
from __future__ import annotations

import dataclasses
import gzip
import zlib
from typing import BinaryIO, Iterable, Mapping, Optional, Union

from dcm2tfrecord.dataset.choices import StrEnum


class Compression(StrEnum):
    """The ``--compression`` choices: one member per adapter of :data:`ADAPTERS` (checked below)."""
    NONE = "none"
    GZIP = "gzip"


DEFAULT = Compression.NONE
# gzip's deflate level when none is given (--gzip_level's default). Converting 512x512 int16 CT
# slices, level 1 costs 1.76x the CPU of a plain write for 0.423 of its bytes, level 3 2.05x for
# 0.413, level 9 (gzip.GzipFile's default, which every gzip shard was written with before
# --gzip_level) 8.97x for 0.409 (docs/BENCHMARKS.md, "14. Gzip shards at codec speed")
DEFAULT_GZIP_LEVEL = 1
GZIP_LEVELS = range(1, 10)


@dataclasses.dataclass(frozen=True)
class FileAdapter:
    """The plain container: records framed straight onto the file (``--compression none``)."""
    name: str = DEFAULT
    suffix: str = ""
    tf_compression_type: str = ""
    random_access: bool = True
    random_access_refusal: str = ""
    tfds_refusal: str = ""
    # what the index's offsets address, for messages ("byte 1234")
    offset_unit: str = "byte"

    def open_writer(self, raw: BinaryIO, level: Optional[int] = None) -> BinaryIO:
        """The stream records are framed onto; closing it (when it is not ``raw``) finishes
        the container, and leaves ``raw`` open. ``raw`` itself when nothing wraps it.
        ``level``: the compressor's level, where the container has one (None: its default)."""
        return raw

    def open_reader(self, raw: BinaryIO) -> BinaryIO:
        """The record stream of a shard read from ``raw``."""
        return raw

    @property
    def stream_errors(self) -> tuple[type[BaseException], ...]:
        """What reading a damaged container raises, beyond the framing's own errors."""
        return ()

    def owns(self, file: str) -> bool:
        """Whether shard ``file`` (a shard name or path) may be in this container: its name
        ends in the suffix (every name does in the plain one; :func:`of_file` takes the longest)."""
        return file.endswith(self.suffix)


class GzipAdapter(FileAdapter):
    """One gzip member with a zero timestamp and no file name, so its bytes are
    deterministic too; ``.idx`` offsets address the uncompressed record stream."""

    def open_writer(self, raw: BinaryIO, level: Optional[int] = None) -> BinaryIO:
        level = DEFAULT_GZIP_LEVEL if level is None else level
        if level not in GZIP_LEVELS:
            raise ValueError(f"gzip level {level!r} is not 1 to 9")
        return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0,  # type: ignore[return-value]
                             compresslevel=level)

    def open_reader(self, raw: BinaryIO) -> BinaryIO:
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]

    @property
    def stream_errors(self) -> tuple[type[BaseException], ...]:
        return (OSError, EOFError, zlib.error)    # bad header, CRC, truncation


GZIP = GzipAdapter(
    name=Compression.GZIP, suffix=".gz", tf_compression_type="GZIP", random_access=False,
    offset_unit="uncompressed byte",
    random_access_refusal=(
        "holds gzip shards, which RandomAccess cannot read: their .idx offsets address the "
        "uncompressed stream, and a gzip stream cannot be entered at an offset without "
        "decompressing all that precedes it. Read them with reader.load, or convert with "
        "--compression none for random access."),
    # tensorflow_datasets' TfRecordFileAdapter opens every shard as tf.data.TFRecordDataset(path),
    # with no compression type, and its dataset_info.json has no field to name one
    tfds_refusal=("TFDS reads TFRecord shards uncompressed only (it opens them with no compression "
                  "type): convert with --compression none for tfds.builder_from_directory"))

ADAPTERS: dict[str, FileAdapter] = {DEFAULT: FileAdapter(), GZIP.name: GZIP}
if tuple(ADAPTERS) != tuple(Compression):
    raise TypeError(f"Compression {tuple(Compression)} disagrees with the adapters {tuple(ADAPTERS)}")


def register(adapter: FileAdapter) -> FileAdapter:
    """Adds ``adapter`` under its name (a new ``--compression`` value); returns it."""
    if adapter.name in ADAPTERS and ADAPTERS[adapter.name] != adapter:
        raise ValueError(f"a file adapter named {adapter.name!r} is registered already")
    ADAPTERS[adapter.name] = adapter
    return adapter


def adapter(name: Union[FileAdapter, str, None]) -> FileAdapter:
    """The adapter of ``--compression`` value ``name`` (None: the default; an adapter: itself)."""
    if isinstance(name, FileAdapter):
        return name
    try:
        return ADAPTERS[name or DEFAULT]
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise ValueError(f"compression {name!r} is not a shard container this dcm2tfrecord "
                         f"knows ({known})") from None


def level_refusal(compression: str, level: int) -> str:
    """Why --gzip_level ``level`` cannot go with --compression ``compression`` ("" if it can)."""
    if level not in GZIP_LEVELS:
        return f"--gzip_level must be 1 (fastest) to 9 (smallest), not {level}"
    if compression != GZIP.name and level != DEFAULT_GZIP_LEVEL:
        return (f"--gzip_level {level} applies to --compression gzip only; add --compression gzip "
                "or drop --gzip_level")
    return ""


def suffixes() -> tuple[str, ...]:
    """The suffixes that follow ``.tfrecord`` in shard names, longest first."""
    return tuple(sorted({a.suffix for a in ADAPTERS.values() if a.suffix}, key=len, reverse=True))


def of_suffix(suffix: str) -> FileAdapter:
    """The adapter whose shard names end in ``.tfrecord`` + ``suffix``."""
    for found in ADAPTERS.values():
        if found.suffix == suffix:
            return found
    raise ValueError(f"no shard container has suffix {suffix!r}")


def of_file(file: str) -> FileAdapter:
    """The adapter a shard's name says it is in (the longest suffix that matches)."""
    best = ADAPTERS[DEFAULT]
    for found in ADAPTERS.values():
        if found.owns(file) and len(found.suffix) > len(best.suffix):
            best = found
    return best


def of_dataset(options: Optional[Mapping], files: Iterable[str]) -> FileAdapter:
    """The container of a dataset's shards: its ``options.compression`` when that names an
    adapter other than the default, else the one every listed shard's name says (a manifest
    written by hand may record no options), else the default."""
    named = (options or {}).get("compression")
    if isinstance(named, str) and named in ADAPTERS and named != DEFAULT:
        return ADAPTERS[named]
    found = {of_file(f).name for f in files}
    if len(found) == 1:
        return ADAPTERS[found.pop()]
    return ADAPTERS[DEFAULT]
