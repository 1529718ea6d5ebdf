"""A run's shard target: the output directory, version tag, container and level its shards are written with.

One value built once per run (transforms/output/write.py's caller, from the settings) and
handed through the shard writer (dataset/shard_writer.py) to both things that depend on the
container: the names (dataset/names.py, the adapter's suffix) and the record stream
(the adapter's writer at the target's level). Modelled on Beam's ``FileBasedSink``, whose
one object carries the path prefix, the suffix and the compression to naming and to
opening each file, and on TFDS's ``ShardedFileTemplate``, which both builds and parses
shard names. The container is looked up from its ``--compression`` name once, when the
target is made (:meth:`ShardTarget.of`); after that every shard asks the target.

The read side needs no target: a dataset's container is the one its manifest names
(``Manifest.adapter``, dataset/manifest.py).
"""
from __future__ import annotations

import dataclasses
from typing import BinaryIO, Optional, Union

from dcm2tfrecord.dataset import file_adapters, names
from dcm2tfrecord.dataset.file_adapters import FileAdapter
from dcm2tfrecord.dataset.storage import FileSystems


_KEKS: dict = {}      # key URI -> its KEK, in this process


@dataclasses.dataclass(frozen=True)
class ShardTarget:
    """Where a run's new shards go and what they are in; ``file_name`` and ``parse`` are
    inverse, and ``open_stream`` writes the container the names say."""
    output_dir: str
    adapter: FileAdapter = file_adapters.ADAPTERS[file_adapters.DEFAULT]
    tag: str = ""                   # --incremental: "v0002" in the new shards' names, "" otherwise
    level: Optional[int] = None     # the compressor's level (--gzip_level; None: the container's default)
    key_uri: str = ""               # --encrypt: the KEK's key URI (dataset/encryption.py); "": plain records

    @classmethod
    def of(cls, output_dir: str, compression: Union[FileAdapter, str, None] = None, tag: str = "",
           level: Optional[int] = None, key_uri: str = "") -> "ShardTarget":
        """The target of ``--compression`` value ``compression`` (ValueError naming the known
        containers when none has that name); ``key_uri``: --encrypt's."""
        return cls(str(output_dir), file_adapters.adapter(compression), tag, level, key_uri or "")

    @property
    def compression(self) -> str:
        """The container's ``--compression`` value."""
        return self.adapter.name

    def file_name(self, split: str, index: int, num_shards: int) -> str:
        """Shard ``index`` of ``num_shards`` of ``split``:
        ``{split}[-{tag}]-{index:05d}-of-{num_shards:05d}.tfrecord{suffix}``."""
        return names.shard_file_name(split, index, num_shards, self.tag, self.adapter)

    def parse(self, file: str) -> Optional[names.ShardName]:
        """A shard name this target writes, parsed (its split, index, count, version); None
        for a name it would not write (another container, another version, not a shard)."""
        parsed = names.parse_shard_name(file)
        if parsed is None or parsed.parent or parsed.compression != self.adapter.name \
                or names.version_tag(parsed.version) != self.tag:
            return None
        return parsed

    def kek(self):
        """The KEK of ``key_uri`` (read once per process: each worker reads the key file or
        reaches KMS itself); None for plain records."""
        if not self.key_uri:
            return None
        found = _KEKS.get(self.key_uri)
        if found is None:
            from dcm2tfrecord.dataset.encryption import kek
            found = _KEKS[self.key_uri] = kek(self.key_uri)
        return found

    def path(self, file: str) -> str:
        """Where shard ``file`` (or a file named after it) is written."""
        return FileSystems.join(self.output_dir, file)

    def open_stream(self, raw: BinaryIO) -> BinaryIO:
        """The record stream onto ``raw`` in the target's container at its level; closing it
        (when it is not ``raw``) finishes the container."""
        return self.adapter.open_writer(raw, self.level)
