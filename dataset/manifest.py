"""dataset.json, the contract between the writer and the reader: built, committed and parsed here.

Every key of dataset.json is spelled in this module: the converter hands
:func:`build_manifest` its shard results, outcomes and the blocks it knows
(labels, groups, shard policy, incremental notes) as plain values, and every
reader (``reader.info``, ``reader.RandomAccess``, ``verify``, the subcommands)
parses the file with :func:`parse_manifest`, whatever file system it read
the bytes through.

Written last, through a temp file and a rename: a directory without
dataset.json is never a finished dataset. Nothing time-dependent goes in,
so the same input gives a byte-identical manifest.
"""
from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any, Iterable, Mapping, Optional, Sequence

from dcm2tfrecord.dataset import bricks, file_adapters, reasons
from dcm2tfrecord.dataset.errors import FormatError, OutputError
from dcm2tfrecord.dataset.features import (CORE_FEATURES, ENCRYPTED_FORMAT_VERSION, FORMAT_VERSION, LABEL,
                                          MASK_BRICKS, MASK_CLASSES, MASK_RAW, READABLE_FORMAT_VERSION)
from dcm2tfrecord.dataset.files import read_json, write_atomically
from dcm2tfrecord.dataset.names import (ERRORS_NAME, FAILED_RUN_NAME, MANIFEST_NAME, PARENT, UNMATCHED_ROWS_NAME,
                                        index_file_name)
from dcm2tfrecord.dataset.results import Outcome, ShardResult
from dcm2tfrecord.dataset.storage import FileSystems

# Distinct [depth, height, width, channels] shapes listed: per shard by the writer, per split in
# dataset.json, per split by verify. Beyond it a split is simply not fixed-shape.
MAX_SHAPES = 16
# --spacing auto: the key of the object that records the target the run chose (Manifest.auto_spacing)
AUTO_SPACING = "auto_spacing"


# ---------------------------------------------------------------- the types


Json = Any      # a value json.loads returns


class _Bad(FormatError):
    """A value of dataset.json of the wrong kind; becomes a ManifestError naming the file."""


def _whole(value: Json, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{what} is {value!r}, not a whole number")
    return value


def _maybe_whole(value: Json, what: str) -> Optional[int]:
    return None if value is None else _whole(value, what)


def _text(value: Json, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} is {value!r}, not a string")
    return value


def _object(value: Json, what: str) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{what} is not a JSON object")
    return value


def _list(value: Json, what: str) -> list:
    if not isinstance(value, list):
        raise _Bad(f"{what} is not a JSON list")
    return value


def _extra(data: Mapping[str, Json], known: tuple[str, ...]) -> dict:
    """The keys this code does not know (an older or newer writer's), kept to be written back."""
    return {k: v for k, v in data.items() if k not in known}


def _mask_classes(value: Json) -> Optional[tuple[str, ...]]:
    """``mask_classes`` as the class names, or None when absent or not a list of strings (then kept
    in ``extra`` as written, for ``verify`` to name)."""
    if isinstance(value, list) and all(isinstance(c, str) for c in value):
        return tuple(value)
    return None


def _present(**fields: Json) -> dict:
    """The fields that are there: an optional one that is None was absent, and stays so."""
    return {k: v for k, v in fields.items() if v is not None}


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """One shard of a split, as dataset.json lists it.

    ``index_file``, ``num_bytes`` and ``sha256`` are None where a manifest
    (written by hand) leaves them out; :attr:`index` is the index file either way.
    """
    file: str
    num_records: int
    index_file: Optional[str] = None
    num_bytes: Optional[int] = None
    sha256: Optional[str] = None
    # --encrypt: the shard's data key wrapped by the dataset's KEK (base64; dataset/encryption.py)
    wrapped_key: Optional[str] = None
    extra: Mapping[str, Json] = dataclasses.field(default_factory=dict)

    KEYS = ("file", "num_records", "index_file", "num_bytes", "sha256", "wrapped_key")

    @property
    def index(self) -> str:
        """The ``.idx`` file of the shard, relative like ``file``."""
        return self.index_file or index_file_name(self.file)

    @classmethod
    def from_json(cls, data: Json, where: str = "a shard") -> ShardEntry:
        data = _object(data, where)
        if "file" not in data or "num_records" not in data:
            raise _Bad(f"{where} has no {'file' if 'file' not in data else 'num_records'!r}")
        return cls(file=_text(data["file"], f"{where}: file"),
                   num_records=_whole(data["num_records"], f"{where}: num_records"),
                   index_file=None if data.get("index_file") is None
                   else _text(data["index_file"], f"{where}: index_file"),
                   num_bytes=_maybe_whole(data.get("num_bytes"), f"{where}: num_bytes"),
                   sha256=None if data.get("sha256") is None else _text(data["sha256"], f"{where}: sha256"),
                   wrapped_key=None if data.get("wrapped_key") is None
                   else _text(data["wrapped_key"], f"{where}: wrapped_key"),
                   extra=_extra(data, cls.KEYS))

    def to_json(self) -> dict:
        return {**self.extra, "file": self.file, "num_records": self.num_records,
                **_present(index_file=self.index_file, num_bytes=self.num_bytes, sha256=self.sha256,
                           wrapped_key=self.wrapped_key)}


@dataclasses.dataclass(frozen=True)
class SplitEntry:
    """One split of dataset.json: its totals, what its records look like, and its shards in order.

    ``num_bytes``, ``num_shards``, ``label_counts`` and ``num_groups`` are None where a
    manifest leaves them out (``verify`` says so); ``shapes`` are
    ``(depth, height, width, channels)``.
    """
    num_records: int
    shards: tuple[ShardEntry, ...] = ()
    num_bytes: Optional[int] = None
    num_shards: Optional[int] = None
    dtypes: tuple[str, ...] = ()
    shapes: tuple[tuple[int, ...], ...] = ()
    fixed_shape: bool = False
    max_depth: int = 1
    label_counts: Optional[Mapping[str, int]] = None
    num_groups: Optional[int] = None
    extra: Mapping[str, Json] = dataclasses.field(default_factory=dict)

    KEYS = ("num_records", "shards", "num_bytes", "num_shards", "dtypes", "shapes", "fixed_shape",
            "max_depth", "label_counts", "num_groups")

    @property
    def shard_records(self) -> list[int]:
        return [s.num_records for s in self.shards]

    @classmethod
    def from_json(cls, data: Json, where: str = "a split") -> SplitEntry:
        data = _object(data, where)
        if "num_records" not in data:
            raise _Bad(f"{where} has no 'num_records'")
        shards = _list(data.get("shards", []), f"{where}: shards")
        shapes = _list(data.get("shapes") or [], f"{where}: shapes")
        label_counts = data.get("label_counts")
        return cls(
            num_records=_whole(data["num_records"], f"{where}: num_records"),
            shards=tuple(ShardEntry.from_json(s, f"{where}: shard {i}") for i, s in enumerate(shards)),
            num_bytes=_maybe_whole(data.get("num_bytes"), f"{where}: num_bytes"),
            num_shards=_maybe_whole(data.get("num_shards"), f"{where}: num_shards"),
            dtypes=tuple(_text(d, f"{where}: a dtype") for d in _list(data.get("dtypes") or [], f"{where}: dtypes")),
            shapes=tuple(tuple(_whole(x, f"{where}: a shape") for x in _list(shape, f"{where}: a shape"))
                         for shape in shapes),
            fixed_shape=bool(data.get("fixed_shape", False)),
            max_depth=_whole(data.get("max_depth", 1), f"{where}: max_depth"),
            label_counts=None if label_counts is None else {
                str(k): _whole(v, f"{where}: label_counts[{k!r}]")
                for k, v in _object(label_counts, f"{where}: label_counts").items()},
            num_groups=_maybe_whole(data.get("num_groups"), f"{where}: num_groups"),
            extra=_extra(data, cls.KEYS))

    def to_json(self) -> dict:
        return {**self.extra, "num_records": self.num_records, "shards": [s.to_json() for s in self.shards],
                "dtypes": list(self.dtypes), "shapes": [list(s) for s in self.shapes],
                "fixed_shape": self.fixed_shape, "max_depth": self.max_depth,
                **_present(num_bytes=self.num_bytes, num_shards=self.num_shards,
                           label_counts=None if self.label_counts is None else dict(self.label_counts),
                           num_groups=self.num_groups)}


@dataclasses.dataclass(frozen=True)
class Manifest:
    """dataset.json, typed: what :func:`build_manifest` writes and :func:`parse_manifest` reads.

    The blocks beyond the splits (``features``: name -> description;
    ``counts``, ``options``, ``labels``, ``groups``, ``min_shards``,
    ``incremental``, ``tool``) are the JSON objects as written; an optional
    one is None when absent. Keys this code does not know stay in ``extra``
    and are written back by :meth:`to_json`.
    """
    splits: Mapping[str, SplitEntry]
    features: Mapping[str, Mapping[str, Json]] = dataclasses.field(default_factory=dict)
    format_version: Optional[int] = None
    tool: Optional[Mapping[str, Json]] = None
    counts: Optional[Mapping[str, Json]] = None
    errors_file: Optional[str] = None
    options: Optional[Mapping[str, Json]] = None
    labels: Optional[Mapping[str, Json]] = None
    groups: Optional[Mapping[str, Json]] = None
    min_shards: Optional[Mapping[str, Json]] = None
    incremental: Optional[Mapping[str, Json]] = None
    # --intensity ct: the dataset's intensity fingerprint and how it was computed
    # (transforms.images.fingerprint); None otherwise
    fingerprint: Optional[Mapping[str, Json]] = None
    mask_classes: Optional[tuple[str, ...]] = None    # with masks: the class names, index 1 first
    # --encrypt: {"scheme", "key_uri"} (dataset/encryption.py); None: plain records
    encryption: Optional[Mapping[str, Json]] = None
    extra: Mapping[str, Json] = dataclasses.field(default_factory=dict)

    KEYS = ("splits", "features", "format_version", "tool", "counts", "errors_file", "options", "labels",
            "groups", "min_shards", "incremental", "fingerprint", "encryption")

    @property
    def key_uri(self) -> Optional[str]:
        """The key URI of an encrypted dataset's KEK, None for plain records."""
        value = (self.encryption or {}).get("key_uri")
        return value if isinstance(value, str) else None

    def keys(self, key=None, **options):
        """An encrypted dataset's shard ciphers (dataset.encryption.DatasetKeys), opened with
        ``key`` (a KEK or key URI; default: ``key_uri``); None for plain records."""
        if self.encryption is None:
            return None
        from dcm2tfrecord.dataset.encryption import SCHEME, DatasetKeys, EncryptionError
        if self.encryption.get("scheme") != SCHEME or not self.key_uri:
            raise EncryptionError(f"encryption scheme {self.encryption.get('scheme')!r} is not one this "
                                  f"dcm2tfrecord reads ({SCHEME}): upgrade dcm2tfrecord")
        wrapped = {s.file: s.wrapped_key for e in self.splits.values() for s in e.shards}
        return DatasetKeys(self.key_uri, wrapped, key, **options)

    @property
    def auto_spacing(self) -> Optional[Mapping[str, Json]]:
        """``--spacing auto``'s ``auto_spacing`` object (the target spacing the run chose, the rule it
        applied, its median, the records it was taken from; transforms.images.spacing.AutoSpacing),
        kept in ``extra`` as written; None when absent or not an object."""
        value = self.extra.get(AUTO_SPACING)
        return value if isinstance(value, Mapping) else None

    @property
    def volume_chunks(self) -> Optional[bricks.Chunks]:
        """``--volume_chunks``' layout (dataset/bricks.py ``Chunks``: edge, codec) from its
        ``volume_chunks`` object; None for records that hold ``image_raw``."""
        return bricks.of_manifest(self.extra)

    @property
    def has_masks(self) -> bool:
        """Whether its records hold masks (``mask_raw``, or ``mask_bricks``)."""
        return MASK_RAW in self.features or MASK_BRICKS in self.features

    @property
    def split_names(self) -> list[str]:
        return sorted(self.splits)

    @property
    def compression(self) -> str:
        """The ``--compression`` it was written with (``options.compression``), else "none"."""
        value = (self.options or {}).get("compression")
        return value if isinstance(value, str) else file_adapters.DEFAULT

    @property
    def adapter(self) -> file_adapters.FileAdapter:
        """The container its shards are in (dataset/file_adapters.py)."""
        return file_adapters.of_dataset(self.options, [s.file for e in self.splits.values() for s in e.shards])

    @property
    def mask_layout(self) -> Optional[str]:
        """The ``--mask_layout`` its masks were written in (``options.mask_layout``; dataset/masks.py),
        None when its records hold no masks (no ``mask_raw`` feature) or it is not recorded."""
        value = (self.options or {}).get("mask_layout") if self.has_masks else None
        return value if isinstance(value, str) else None

    @property
    def class_names(self) -> list[str]:
        """Label index -> class name (empty when labels are numbers or absent)."""
        return list((self.labels or {}).get("class_names") or [])

    @property
    def label_kind(self) -> str:
        return str((self.labels or {}).get("kind") or "none")

    def feature(self, name: str, default: Optional[Mapping[str, Json]] = None) -> Mapping[str, Json]:
        """The description of feature ``name`` (``{}`` or ``default`` when not declared)."""
        return self.features.get(name, default if default is not None else {})

    @classmethod
    def from_json(cls, data: Json, path: str = MANIFEST_NAME) -> Manifest:
        """The parsed JSON of dataset.json, typed; ManifestError naming ``path`` when it is not a
        dcm2tfrecord manifest, is newer than this code reads, or holds a value of the wrong kind."""
        if not isinstance(data, dict):
            raise ManifestError(path, "is not a JSON object")
        check_format_version(data.get("format_version"), path)
        if not isinstance(data.get("splits"), dict):
            raise ManifestError(path, "is not a dcm2tfrecord manifest (no 'splits' object); restore it, "
                                      "or convert again")
        try:
            optional = {key: None if data.get(key) is None else _object(data[key], repr(key))
                        for key in ("tool", "counts", "options", "labels", "groups", "min_shards",
                                    "incremental", "fingerprint", "encryption")}
            classes = _mask_classes(data.get(MASK_CLASSES))
            return cls(
                splits={str(name): SplitEntry.from_json(entry, f"split {name!r}")
                        for name, entry in data["splits"].items()},
                features={str(k): _object(v, f"feature {k!r}")
                          for k, v in _object(data.get("features") or {}, "'features'").items()},
                format_version=data.get("format_version"),
                errors_file=None if data.get("errors_file") is None else _text(data["errors_file"], "errors_file"),
                mask_classes=classes,
                extra=_extra(data, cls.KEYS + (() if classes is None else (MASK_CLASSES,))), **optional)
        except _Bad as exc:
            raise ManifestError(path, f"is not a readable dcm2tfrecord manifest: {exc}; restore it, "
                                      "or convert again") from None

    def to_json(self) -> dict:
        """The object dataset.json holds (:func:`encode_manifest` writes it with sorted keys)."""
        classes = {} if self.mask_classes is None else {MASK_CLASSES: list(self.mask_classes)}
        return {**self.extra, **classes, "splits": {name: entry.to_json() for name, entry in self.splits.items()},
                "features": {k: dict(v) for k, v in self.features.items()},
                **_present(format_version=self.format_version, errors_file=self.errors_file,
                           **{key: None if getattr(self, key) is None else dict(getattr(self, key))
                              for key in ("tool", "counts", "options", "labels", "groups", "min_shards",
                                          "incremental", "fingerprint", "encryption")})}


def label_count_keys(label) -> list[str]:
    """What a record adds to its split's ``label_counts``: its class, or each class of a
    multi-hot; a float label (regression) adds nothing."""
    if isinstance(label, tuple):
        return [str(i) for i, v in enumerate(label) if v == 1] or ["unlabeled" if -1 in label else "none"]
    if isinstance(label, float):
        return []
    return [str(label) if label != -1 else "unlabeled"]


def _split_entry(shards: list[ShardResult], num_groups: int) -> SplitEntry:
    shapes: list = []
    for shard in shards:
        for shape in shard.shapes:
            if list(shape) not in shapes:
                shapes.append(list(shape))
    labels: Counter = Counter()
    for shard in shards:
        labels.update(dict(shard.label_counts))
    return SplitEntry(
        num_records=sum(s.num_records for s in shards),
        num_bytes=sum(s.num_bytes for s in shards),
        num_shards=len(shards),
        dtypes=tuple(sorted({d for s in shards for d in s.dtypes})),
        shapes=tuple(tuple(shape) for shape in sorted(shapes)[:MAX_SHAPES]),
        fixed_shape=len(shapes) == 1,
        max_depth=max((s.max_depth for s in shards), default=1),
        label_counts={str(k): v for k, v in sorted(labels.items())},
        num_groups=num_groups,
        shards=tuple(ShardEntry(file=s.file, index_file=index_file_name(s.file), num_records=s.num_records,
                                num_bytes=s.num_bytes, sha256=s.sha256, wrapped_key=s.wrapped_key)
                     for s in sorted(shards, key=lambda s: (s.file, s.index))))


NO_LABELS_FEATURE = {"dtype": "int64", "shape": [], "description": "-1: unlabeled"}


def labels_block(kind: str = "none", class_names: Sequence[str] = (), feature: Optional[Mapping] = None,
                 source: Optional[str] = None, key: Optional[str] = None, column: Optional[str] = None,
                 missing_label: Optional[str] = None, from_dirs: bool = False) -> dict:
    """dataset.json's ``labels`` block; its ``feature`` becomes the ``label`` feature.

    ``kind="none"``: a dataset without labels. ``source`` is the labels CSV as
    recorded in ``options`` (a keyed hash unless --record_input_paths), never
    the path itself; with ``from_dirs`` the labels are folder names.
    """
    if kind == "none":
        return {"source": None, "kind": "none", "class_names": [], "feature": dict(NO_LABELS_FEATURE)}
    return {"source": "folders" if from_dirs else source, "key": None if from_dirs else key,
            "column": None if from_dirs else column, "kind": kind, "class_names": list(class_names),
            "missing_label": missing_label, "feature": dict(feature or {})}


def unmatched_rows_block(rows: int, in_errors_file: int) -> dict:
    """``labels.unmatched_rows``: how many labels-CSV rows label nothing, the file listing
    them all (UNMATCHED_ROWS_NAME) and how many of them errors.jsonl holds."""
    return {"file": UNMATCHED_ROWS_NAME, "rows": rows, "in_errors_file": in_errors_file}


def build_manifest(results: Iterable[ShardResult], outcomes: Iterable[Outcome], matched: int,
                   options: Mapping, tool_version: str, features: Optional[Mapping] = None, *,
                   labels: Optional[Mapping] = None, split_by: Optional[str] = None,
                   num_groups: Optional[Mapping[str, int]] = None, groups_in_several_splits: int = 0,
                   splits_sharing_groups: Sequence[str] = (),
                   min_shards: Optional[Mapping[str, tuple[int, int]]] = None,
                   base_version: Optional[tuple[str, str]] = None,
                   written_also_failed: int = 0, mask_classes: Optional[Sequence[str]] = None,
                   fingerprint: Optional[Mapping] = None,
                   auto_spacing: Optional[Mapping] = None,
                   encryption: Optional[Mapping] = None,
                   volume_chunks: Optional[tuple[int, str]] = None) -> Manifest:
    """dataset.json content (``.to_json()`` is the object written).

    ``features``: the features beyond CORE_FEATURES (``dicom/*``, ``source_path``);
    ``labels``: a :func:`labels_block`; ``split_by``, ``num_groups`` (per split) and
    ``groups_in_several_splits``, ``splits_sharing_groups`` (the splits those groups are
    in): the ``groups`` block, when given a ``split_by``;
    ``min_shards``: per split, (shards requested, shards honoured); ``base_version``:
    ``(name, rebuild reason)`` of the version an ``--incremental`` run built on;
    ``written_also_failed``: inputs the shards counted written that are also failed
    outcomes (a file some of whose frames were written): each counts once, as failed;
    ``mask_classes``: with masks (``mask_raw``), the class names, index 1 first (0 is background);
    ``fingerprint``: --intensity ct's (transforms.images.fingerprint.statistics);
    ``auto_spacing``: with ``--spacing auto``, the target chosen and the rule (its ``auto_spacing`` object);
    ``encryption``: --encrypt's block (dataset.encryption.encryption_block), which makes the
    manifest's format_version ENCRYPTED_FORMAT_VERSION;
    ``volume_chunks``: ``(edge, codec)`` of --volume_chunks (the ``volume_chunks`` object; its records'
    image and mask as bricks, dataset/bricks.py).
    """
    results, outcomes = list(results), list(outcomes)
    by_split: dict = {}
    for result in results:
        by_split.setdefault(result.split, []).append(result)
    skipped = Counter(o.reason for o in outcomes if o.status == reasons.SKIPPED)
    failed = Counter(o.reason for o in outcomes if o.status == reasons.FAILED)
    rejected_rows = Counter(o.reason for o in outcomes if o.status == reasons.REJECTED)
    written = sum(r.sources_written for r in results) - written_also_failed
    all_features = dict(CORE_FEATURES)
    all_features.update(features or {})
    extra: dict = {}
    top: dict = {} if auto_spacing is None else {AUTO_SPACING: dict(auto_spacing)}
    if volume_chunks is not None:
        all_features = bricks.manifest_features(all_features, *volume_chunks)
        top[bricks.MANIFEST_KEY] = bricks.manifest_entry(*volume_chunks)
    if labels is not None:
        extra["labels"] = dict(labels)
        all_features[LABEL] = extra["labels"].pop("feature")
    if split_by is not None:
        extra["groups"] = {"split_by": split_by, "num_groups": dict(sorted((num_groups or {}).items())),
                           "groups_in_several_splits": groups_in_several_splits}
        if groups_in_several_splits:   # committed only with --allow_split_leak
            extra["groups"]["splits_sharing_groups"] = sorted(splits_sharing_groups)
    if min_shards is not None:
        extra["min_shards"] = {split: {"requested": requested, "honoured": honoured}
                               for split, (requested, honoured) in sorted(min_shards.items())}
    if base_version is not None:
        reused = [r for r in results if r.file.startswith(PARENT)]
        extra["incremental"] = {"base_version": base_version[0] or None, "rebuild_reason": base_version[1],
                                "reused_shards": len(reused), "written_shards": len(results) - len(reused),
                                "reused_records": sum(r.num_records for r in reused)}
    splits = {name: _split_entry(shards, (num_groups or {}).get(name, 0))
              for name, shards in sorted(by_split.items())}
    return Manifest(
        format_version=FORMAT_VERSION if encryption is None else ENCRYPTED_FORMAT_VERSION,
        tool={"name": "dcm2tfrecord", "version": tool_version},
        features=all_features,
        splits=splits,
        counts={
            "matched": matched,
            "written": written,
            "records": sum(r.num_records for r in results),
            "skipped": dict(sorted(skipped.items())),
            "failed": dict(sorted(failed.items())),
            "unaccounted": matched - written - sum(skipped.values()) - sum(failed.values()),
            "label_rows_rejected": dict(sorted(rejected_rows.items())),
        },
        errors_file=ERRORS_NAME,
        options=dict(options),
        labels=extra.get("labels"), groups=extra.get("groups"), min_shards=extra.get("min_shards"),
        incremental=extra.get("incremental"),
        fingerprint=None if fingerprint is None else dict(fingerprint),
        encryption=None if encryption is None else dict(encryption),
        mask_classes=None if mask_classes is None else tuple(mask_classes),
        extra=top)


def encode_manifest(manifest: Manifest | Mapping) -> str:
    """The text of dataset.json: sorted keys, so equal content gives equal bytes."""
    if isinstance(manifest, Manifest):
        manifest = manifest.to_json()
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


def _write_text(output_dir: str, name: str, text: str) -> str:
    return write_atomically(output_dir, name, text.encode("utf-8"), "application/json")


def errors_jsonl(outcomes: Iterable[Outcome]) -> str:
    ordered = sorted(outcomes, key=lambda o: (o.uri, o.stage, o.reason))
    return "".join(json.dumps(o.as_json(), sort_keys=True) + "\n" for o in ordered)


class CommitConflict(OutputError):
    """dataset.json appeared while this run was writing: another run committed here."""


def commit(output_dir: str, manifest: Manifest, outcomes: Iterable[Outcome]) -> str:
    """Writes errors.jsonl, TFDS's metadata of the shards (dataset/tfds_metadata.py: where TFDS
    can read them), then dataset.json last; returns the manifest path.

    Never over a dataset.json that is already there: the launcher removed an
    earlier one (--overwrite) before the run, so one found now was committed
    by another run meanwhile, and both cannot be right.
    """
    # imported here: tfds_metadata reads the Manifest this module defines
    from dcm2tfrecord.dataset.tfds_metadata import write_tfds_metadata
    if FileSystems.exists(FileSystems.join(output_dir, MANIFEST_NAME)):
        raise CommitConflict(f"{FileSystems.join(output_dir, MANIFEST_NAME)} was committed by another "
                             "run while this one ran; this run commits nothing")
    _write_text(output_dir, ERRORS_NAME, errors_jsonl(outcomes))
    write_tfds_metadata(output_dir, manifest)
    return _write_text(output_dir, MANIFEST_NAME, encode_manifest(manifest))


def refuse_commit(output_dir: str, manifest: Manifest, outcomes: Iterable[Outcome], reason: str) -> str:
    """Too many failures: errors.jsonl and run_failed.json, and no dataset.json."""
    _write_text(output_dir, ERRORS_NAME, errors_jsonl(outcomes))
    report = {"reason": reason, "counts": manifest.counts, "errors_file": ERRORS_NAME}
    return _write_text(output_dir, FAILED_RUN_NAME, json.dumps(report, indent=2, sort_keys=True) + "\n")


def read_failed_run(output_dir: str) -> dict | None:
    """run_failed.json of a run that refused to commit, or None."""
    path = FileSystems.join(output_dir, FAILED_RUN_NAME)
    if not FileSystems.exists(path):
        return None
    return read_json(path)


# ---------------------------------------------------------------- parsing


class ManifestError(FormatError, ValueError):
    """A dataset.json that does not parse, or is not a JSON object; ``reason`` says which."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path} {reason}")
        self.path, self.reason = path, reason


class NewerFormatError(ManifestError):
    """A dataset.json of a format_version newer than this code reads."""

    def __init__(self, path: str, found: int):
        super().__init__(path, f"has format_version {found}; this dcm2tfrecord reads up to "
                               f"{READABLE_FORMAT_VERSION}: upgrade dcm2tfrecord (or dcm2tfrecord-reader)")
        self.found = found


def check_format_version(value: Json, path: str = MANIFEST_NAME) -> None:
    """Refuses (NewerFormatError, one line naming both versions) a format_version newer than
    FORMAT_VERSION; absent is accepted (a manifest written by hand), not a whole number is
    a ManifestError."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(path, f"has format_version {value!r}, not a whole number; restore it, "
                                  "or convert again")
    if value > READABLE_FORMAT_VERSION:
        raise NewerFormatError(path, value)


def missing_manifest(path: str, dataset_dir: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} not found: {dataset_dir} is not a finished dcm2tfrecord dataset "
        "(dataset.json is written last, when a conversion commits)")


def parse_json(data: bytes | bytearray | str, path: str = MANIFEST_NAME) -> dict:
    """dataset.json's bytes (or text), however they were read, as a dict, untyped
    (what ``verify`` checks key by key before :meth:`Manifest.from_json`).

    ManifestError naming ``path`` when they are not JSON or not a JSON object.
    """
    try:
        manifest = json.loads(data.decode("utf-8") if isinstance(data, (bytes, bytearray)) else data)
    except ValueError as exc:      # JSONDecodeError, or bytes that are not UTF-8
        raise ManifestError(path, f"does not parse ({exc}): it is incomplete or corrupt (it is "
                                  "written whole at commit, so it was damaged since); restore it, "
                                  "or convert again") from None
    if not isinstance(manifest, dict):
        raise ManifestError(path, "is not a JSON object")
    return manifest


def parse_manifest(data: bytes | bytearray | str, path: str = MANIFEST_NAME) -> Manifest:
    """dataset.json's bytes (or text), however they were read, as a :class:`Manifest`:
    ManifestError naming ``path`` when they do not parse, are not a dcm2tfrecord manifest
    or are of a newer format_version (NewerFormatError)."""
    return Manifest.from_json(parse_json(data, path), path)


def read_manifest(dataset_dir: str) -> Manifest:
    """The dataset.json of ``dataset_dir``, read through the format's file system."""
    path = FileSystems.join(dataset_dir, MANIFEST_NAME)
    if not FileSystems.exists(path):
        raise missing_manifest(path, dataset_dir)
    with FileSystems.open(path) as handle:
        return parse_manifest(handle.read(), path)
