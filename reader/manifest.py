"""dataset.json, read through TensorFlow's file system layer (local, gs://, ram://).

``info(dataset_dir)`` returns the parsed manifest as a dict (typed, as
``dataset.manifest.Manifest``, in its ``manifest`` attribute), with the
questions a training script asks of it as methods: how many records and
steps a split holds, the class names, the element spec ``load`` produces.
Wherever a method takes a split, it also takes a split spec (``"train[:10%]"``,
``"train+validation"``; see ``reader.splits``).
"""
from __future__ import annotations

import math
import operator
from typing import Optional

from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.reader.tfquiet import tf

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.file_adapters import FileAdapter
from dcm2tfrecord.dataset.manifest import Manifest, SplitEntry, missing_manifest, parse_json
from dcm2tfrecord.dataset.versions import locate_dataset
from dcm2tfrecord.reader import splits
from dcm2tfrecord.reader.parse_spec import label_spec
from dcm2tfrecord.reader.layout import Layout, mask_classes, mask_dtype, split_layout
from dcm2tfrecord.reader.sharding import ReadPlan, plan_reads


class DatasetInfo(dict):
    """The parsed dataset.json (a plain dict underneath) of one dataset directory; typed, as
    a ``Manifest``, in :attr:`manifest`, which every method here reads."""

    def __init__(self, manifest: dict, dataset_dir: str, typed: Optional[Manifest] = None):
        super().__init__(manifest)
        self.dataset_dir = dataset_dir
        self.manifest: Manifest = typed if typed is not None else Manifest.from_json(dict(manifest), dataset_dir)

    def __reduce__(self):
        return (DatasetInfo, (dict(self), self.dataset_dir))

    @property
    def split_names(self) -> list[str]:
        return self.manifest.split_names

    def split(self, split: str) -> dict:
        """The manifest entry of ``split`` (as dataset.json holds it); a clear error naming the
        splits there are."""
        self.split_entry(split)
        return self["splits"][split]

    def split_entry(self, split: str) -> SplitEntry:
        """:meth:`split`, typed."""
        try:
            return self.manifest.splits[split]
        except KeyError:
            known = ", ".join(self.split_names) or "none"
            raise ValueError(f"split {splits.shown(split)} not in {self.dataset_dir} "
                             f"(splits: {known})") from None

    def slices(self, spec: str = "train") -> tuple[splits.Slice, ...]:
        """The ``(split, start, stop)`` record ranges a split spec names."""
        sizes = {name: entry.num_records for name, entry in self.manifest.splits.items()}
        return splits.resolve(spec, sizes, self.dataset_dir)

    def pieces(self, spec: str = "train") -> list[splits.Piece]:
        """The shards ``spec`` reads, in order, with the run of records it reads of each."""
        slices = self.slices(spec)
        records = {s.split: self.split_entry(s.split).shard_records for s in slices}
        return splits.pieces(slices, records)

    def entry(self, spec: str = "train") -> SplitEntry:
        """The manifest entry of ``spec``: the split's own, or for a slice or union one computed
        like it (counts, dtypes, shapes; see ``reader.splits.selection_entry``)."""
        return splits.selection_entry(self.manifest, spec, self.slices(spec))

    def shard_paths(self, split: str = "train") -> list[str]:
        """Shard files from the manifest, never from a glob: stale files are not read.

        For a slice, the shards holding its records (one per piece, in reading order)."""
        return [self._piece_path(p) for p in self.pieces(split)]

    def shard_records(self, split: str = "train") -> list[int]:
        """Records read of each of ``shard_paths(split)``."""
        return [p.count for p in self.pieces(split)]

    def _piece_path(self, piece: splits.Piece) -> str:
        return shard_path(self.dataset_dir, self.manifest.splits[piece.split].shards[piece.shard].file)

    @property
    def adapter(self) -> FileAdapter:
        """The container of the shards (``dataset.file_adapters``)."""
        return self.manifest.adapter

    @property
    def compression(self) -> str:
        """The shards' ``compression_type`` as ``tf.data.TFRecordDataset`` takes it (``""``: none)."""
        return self.adapter.tf_compression_type

    def read_plan(self, split: str = "train", input_context=None) -> ReadPlan:
        """Which shards (and which records of them) one input pipeline reads."""
        pieces = self.pieces(split)
        return plan_reads([self._piece_path(p) for p in pieces], [p.count for p in pieces],
                          input_context, [p.start for p in pieces], [p.whole for p in pieces])

    def num_records(self, split: str = "train", input_context=None) -> int:
        """Records in ``split`` (or spec), or in the part of it one input pipeline reads."""
        if input_context is None:
            return sum(s.num_records for s in self.slices(split))
        return self.read_plan(split, input_context).num_records

    def steps_per_epoch(self, split: str = "train", batch_size: int = 32,
                        drop_remainder: bool = False, input_context=None) -> int:
        """Batches in one epoch of ``load(..., split, batch_size, drop_remainder=...)``."""
        records = self.num_records(split, input_context)
        return records // batch_size if drop_remainder else math.ceil(records / batch_size)

    @property
    def class_names(self) -> list[str]:
        """Label index -> class name (empty when labels are numbers or absent)."""
        return self.manifest.class_names

    @property
    def has_masks(self) -> bool:
        """Whether the records hold masks (converted with ``--class_map``: ``load(masks=True)``)."""
        return self.manifest.has_masks

    @property
    def mask_classes(self) -> list[str]:
        """The mask classes, index 1 first: label_map value ``i`` is ``mask_classes[i - 1]`` (0
        background), binary channel ``c`` is ``mask_classes[c]``; empty without masks."""
        return mask_classes(self.manifest)

    def int2str(self, index) -> str:
        """The class name of label ``index`` (a Python or NumPy integer), like TFDS's ClassLabel."""
        names_ = self._class_names_or_error()
        try:
            i = operator.index(index)
        except TypeError:
            raise TypeError(f"int2str takes an integer label, not {type(index).__name__} {index!r}") from None
        if not 0 <= i < len(names_):
            unlabeled = " (-1 marks an unlabeled record)" if i == -1 else ""
            raise ValueError(f"label {i} is not a class index of {self.dataset_dir}{unlabeled}: "
                             f"0..{len(names_) - 1} for {_listed(names_)}")
        return names_[i]

    def str2int(self, name: str) -> int:
        """The label index of class ``name``, like TFDS's ClassLabel."""
        names_ = self._class_names_or_error()
        try:
            return names_.index(name)
        except ValueError:
            raise ValueError(f"{name!r} is not a class of {self.dataset_dir}: {_listed(names_)}") from None

    def _class_names_or_error(self) -> list[str]:
        if not self.class_names:
            kind = self.manifest.label_kind
            what = "no labels" if kind == "none" else f"{kind} labels"
            raise ValueError(f"{self.dataset_dir} has {what}, not class names: int2str and str2int "
                             "need a dataset converted with class labels (--labels_from_dirs, or "
                             "--labels with class names)")
        return self.class_names

    def layout(self, split: str = "train") -> Layout:
        return split_layout(self.manifest, split, self.entry(split))

    @property
    def element_spec(self) -> dict:
        """Per split, the ``(images, labels)`` spec ``load`` yields with default options."""
        return {name: self.element_spec_of(name) for name in self.split_names}

    def element_spec_of(self, split: str = "train", dtype: Optional[str] = None,
                        scale: Optional[float] = None, masks: bool = False) -> tuple:
        """The spec of ``load(split, dtype=..., scale=..., masks=...)``'s batches (tuple output)."""
        layout = self.layout(split)
        out = tf.float32 if dtype is None and scale is not None else tf.as_dtype(dtype or layout.dtype)
        label = label_spec(self.manifest)
        images = tf.TensorSpec([None] + layout.image_shape(), out)
        labels = tf.TensorSpec([None] + list(label.shape), label.dtype)
        if not masks:
            return images, labels
        channels = mask_format.shared_channels(len(self.mask_classes))
        return images, tf.TensorSpec([None] + layout.image_shape()[:-1] + [channels],
                                     tf.as_dtype(mask_dtype(self.manifest))), labels


def _listed(class_names: list[str], limit: int = 20) -> str:
    """The classes for an error message, the first ``limit`` of many."""
    shown = ", ".join(map(repr, class_names[:limit]))
    return f"{len(class_names)} classes ({shown}{', ...' if len(class_names) > limit else ''})"


def shard_path(dataset_dir: str, file: str) -> str:
    """A shard entry's path; ``../MMMM/x`` spelled out (gs:// object names are literal)."""
    return names.shard_path(dataset_dir, file, tf.io.gfile.join)


def _read_text(path: str) -> str:
    with tf.io.gfile.GFile(path, "r") as handle:
        return handle.read()


def _read_latest(root: str) -> Optional[str]:
    path = tf.io.gfile.join(root, names.LATEST_NAME)
    return names.parse_version(_read_text(path)) if tf.io.gfile.exists(path) else None


def resolve(dataset_dir: str, version=None) -> str:
    """The directory holding the dataset.json to read (see ``dataset.versions.locate_dataset``)."""
    return locate_dataset(dataset_dir, version, tf.io.gfile.exists, _read_latest, tf.io.gfile.join, _read_text)


def info(dataset_dir: str, version=None) -> DatasetInfo:
    """The parsed dataset.json of ``dataset_dir`` (local or gs://).

    A root written with ``convert --incremental`` is read at the version its
    LATEST names, or at ``version`` (a number) when given.
    """
    dataset_dir = resolve(dataset_dir, version)
    path = tf.io.gfile.join(dataset_dir, names.MANIFEST_NAME)
    if not tf.io.gfile.exists(path):
        raise missing_manifest(path, dataset_dir)
    with tf.io.gfile.GFile(path, "rb") as handle:     # bytes: text that is not UTF-8 is damage too
        data = parse_json(handle.read(), path)
    return DatasetInfo(data, dataset_dir, Manifest.from_json(data, path))


def info_via_storage(dataset_dir: str, version=None) -> DatasetInfo:
    """``info``, read through ``reader.storage`` (google-cloud-storage for ``gs://``) instead of
    TensorFlow's file system: what ``load(..., local_cache=...)`` reads a bucket's manifest with,
    as it reads the shards (a client that honours ``STORAGE_EMULATOR_HOST``, as RandomAccess)."""
    from dcm2tfrecord.reader import storage

    data, path, dataset_dir = storage.read_dataset_json(dataset_dir, version)
    return DatasetInfo(data, dataset_dir, Manifest.from_json(data, path))
