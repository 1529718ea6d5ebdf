"""TFDS's metadata of a dataset, beside its dataset.json: built from the manifest, written at commit,
checked by ``verify``.

``tfds.builder_from_directory(dir).as_dataset(split=...)`` opens a directory that holds
``dataset_info.json`` (the splits: each one's shard lengths, bytes and ``filepathTemplate``, the
template TFDS formats each shard's file name with), ``features.json`` (the feature connectors, which
TFDS's parser and decoders are built from) and, for a ``ClassLabel``, ``label.labels.txt`` (its class
names, one a line). All three are derived from dataset.json alone, with the same bytes for the same
manifest, and the shards stay as they are: their names are ours (dataset/names.py), which a template
``{SPLIT}-{SHARD_X_OF_Y}.tfrecord`` spells exactly, and a record is the Example TFDS parses by
feature name (TFDS flattens a nested feature ``dicom: {modality}`` to the Example key
``dicom/modality``, ours).

What TFDS cannot express, it is not told:

- gzip shards: TFDS opens TFRecord files without a compression type, so no metadata is written
  (the container's ``tfds_refusal``, dataset/file_adapters.py);
- a split whose shards no single template names (an ``--incremental`` version that reuses shards of
  an earlier version and writes new ones beside them; reused shards on an object store, where
  ``../NNNN/`` resolves to no object): no metadata for that version. Shards of one earlier version
  that the template names but the version does not reuse are listed with 0 records, which TFDS
  skips;
- pixels: ``image_raw`` (and ``mask_raw``) are ``Tensor(encoding="bytes")`` of the stored dtype in
  the shape all records share, one dimension of which may vary (``None``); records of several
  dtypes are read as their raw bytes, records of several shapes as a flat array (reshape it with
  ``depth``, ``height``, ``width``, ``channels``);
- features some records lack (``dicom/*`` in a PNG's record) are optional: TFDS gives its default
  for a missing one (``b""``; the int64 minimum where ``RandomAccess`` gives -1; an empty list).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Mapping, Optional

from dcm2tfrecord.dataset import masks
from dcm2tfrecord.dataset.file_adapters import DEFAULT
from dcm2tfrecord.dataset.bricks import MANIFEST_KEY as MANIFEST_VOLUME_CHUNKS
from dcm2tfrecord.dataset.features import (CHANNELS, CORE_FEATURES, DEPTH, ENCODING_RAW, HEIGHT, IMAGE_RAW, LABEL,
                                           MASK_CHANNELS, MASK_DTYPE, MASK_RAW, SOURCE_PATH, WIDTH)
from dcm2tfrecord.dataset.files import remove_output_file, write_atomically
from dcm2tfrecord.dataset.names import (PARENT, TFDS_FEATURES_NAME, TFDS_INFO_NAME, TFDS_LABELS_SUFFIX,
                                        parse_shard_name, tfds_labels_name, tfds_shard_file, tfds_shard_template,
                                        version_parts, version_tag)
from dcm2tfrecord.dataset.storage import FileSystems

if TYPE_CHECKING:
    from dcm2tfrecord.dataset.manifest import Manifest

DATASET_NAME = "dcm2tfrecord"     # dataset_info.json's "name"
DESCRIPTION = ("Written by dcm2tfrecord from its dataset.json, beside it: that file is the full manifest "
               "(options, counts, each feature's meaning).")
NAMES = (TFDS_INFO_NAME, TFDS_FEATURES_NAME, tfds_labels_name(LABEL))

_CLASSES = "tensorflow_datasets.core.features."
_TENSOR = _CLASSES + "tensor_feature.Tensor"
_TEXT = _CLASSES + "text_feature.Text"
_CLASS_LABEL = _CLASSES + "class_label_feature.ClassLabel"
_DICT = _CLASSES + "features_dict.FeaturesDict"
_KINDS = {"bytes": "string", "int64": "int64", "float": "float32"}     # dataset.json's kind -> TFDS dtype
# every record holds these (the reader requires them, dataset/features.py writes them)
_IN_EVERY_RECORD = frozenset(CORE_FEATURES) | {SOURCE_PATH, MASK_RAW, MASK_DTYPE, MASK_CHANNELS}


@dataclasses.dataclass(frozen=True)
class TfdsMetadata:
    """The files TFDS needs to read a dataset (name -> bytes), or why none can say it
    (``refusal``); ``notes``: what the features say less precisely than dataset.json."""
    files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    refusal: str = ""
    notes: tuple[str, ...] = ()


def _tensor(shape: tuple, dtype: str, encoding: str = "none", optional: bool = False,
            description: str = "") -> dict:
    tensor: dict = {"shape": {"dimensions": [str(-1 if d is None else d) for d in shape]} if shape else {},
                    "dtype": dtype, "encoding": encoding}
    if optional:
        tensor["optional"] = True
    return _described({"pythonClassName": _TENSOR, "tensor": tensor}, description)


def _described(feature: dict, description: str) -> dict:
    return {**feature, "description": description} if description else feature


_OWN = -1      # _pixels' channels: the record's own (image_raw's ``channels``)


def _pixels(manifest: Manifest, name: str, what: str, dtypes: set, channels: Optional[int],
            notes: list) -> dict:
    """``image_raw`` or ``mask_raw``: Tensor(bytes) of the one dtype, in the shape every record shares
    (one dimension may vary: None), else flat; the raw bytes when records have several dtypes.
    ``channels``: the last dimension (_OWN: the image's, as dataset.json's shapes list it; None:
    unknown)."""
    from dcm2tfrecord.dataset.manifest import MAX_SHAPES
    description = str(manifest.feature(name).get("description", ""))
    if len(dtypes) != 1:
        notes.append(f"{name}: records of several dtypes ({', '.join(sorted(dtypes))}) read as their raw bytes "
                     f"(decode each with its {what})")
        return _text(description)
    entries = list(manifest.splits.values())
    shapes = {tuple(s) for e in entries for s in e.shapes}
    # each split lists up to MAX_SHAPES - 1 shapes whole; at MAX_SHAPES its list may be cut short
    complete = bool(shapes) and all(e.shapes and len(e.shapes) < MAX_SHAPES for e in entries)
    volume = max((e.max_depth for e in entries), default=1) > 1
    dims: tuple = ()
    if complete:
        rows = [(s[0], s[1], s[2], s[3] if channels == _OWN else channels) for s in shapes]
        axes = [{r[i] for r in rows} for i in range(4)]
        dims = tuple(a.pop() if len(a) == 1 else None for a in axes)
        dims = dims if volume else dims[1:]
    if not dims or dims.count(None) > 1:
        notes.append(f"{name}: records of several shapes read flat ([-1]); reshape each to its "
                     f"[{DEPTH}, {HEIGHT}, {WIDTH}, {MASK_CHANNELS if name == MASK_RAW else CHANNELS}]")
        dims = (None,)
    return _tensor(dims, dtypes.pop(), "bytes", description=description)


def _text(description: str = "") -> dict:
    return _described({"pythonClassName": _TEXT, "text": {}}, description)


def _writable_names(names: list[str]) -> bool:
    """Class names TFDS's labels file gives back as written: one a line, stripped, none empty."""
    return (bool(names) and len(set(names)) == len(names)
            and all(n and n == n.strip() and "\n" not in n and "\r" not in n for n in names))


def _label(manifest: Manifest, files: dict, notes: list) -> dict:
    spec = manifest.feature(LABEL)
    description = str(spec.get("description", ""))
    names = manifest.class_names
    shape = tuple(spec.get("shape") or ())
    if spec.get("dtype") == "int64" and not shape and names:
        if _writable_names(names):
            files[tfds_labels_name(LABEL)] = ("\n".join(names) + "\n").encode("utf-8")
            return _described({"pythonClassName": _CLASS_LABEL, "classLabel": {"numClasses": str(len(names))}},
                              description)
        notes.append(f"{LABEL}: class names that TFDS's labels file cannot hold (empty, repeated, with "
                     "surrounding spaces or line breaks): an int64, names in dataset.json")
    return _generic(LABEL, spec, notes) or _tensor((), "int64", description=description)


def _generic(name: str, spec: Mapping, notes: list) -> Optional[dict]:
    dtype = _KINDS.get(str(spec.get("dtype")))
    shape = tuple(None if d == -1 else d for d in (spec.get("shape") or ()))
    if dtype is None or not all(d is None or (isinstance(d, int) and d > 0) for d in shape) \
            or shape.count(None) > 1:
        notes.append(f"{name}: {spec.get('dtype')} of shape {list(spec.get('shape') or [])} has no TFDS feature; "
                     "left out")
        return None
    description = str(spec.get("description", ""))
    if dtype == "string" and not shape and name in _IN_EVERY_RECORD:
        return _text(description)
    # a feature some records lack (dicom/* in a PNG's record) must be optional in TFDS's parser, unless
    # its first dimension varies (TFDS reads it with allow_missing: an empty list)
    optional = name not in _IN_EVERY_RECORD and (not shape or shape[0] is not None)
    return _tensor(shape, dtype, optional=optional, description=description)


def _nest(flat: Mapping[str, dict], notes: list) -> dict:
    """``{"dicom/modality": f}`` -> ``{"dicom": FeaturesDict({"modality": f})}``: TFDS flattens
    nested features with "/", so the Example keys stay ours."""
    tree: dict = {}
    for name, feature in sorted(flat.items()):
        *folders, leaf = name.split("/")
        node: Optional[dict] = tree
        for folder in folders:
            assert node is not None
            node = node.setdefault(folder, {})
            if not isinstance(node, dict) or "pythonClassName" in node:
                node = None
                break
        if node is None or leaf in node or not leaf or not all(folders):
            notes.append(f"{name}: its name clashes with another feature's under TFDS's '/' nesting; left out")
            continue
        node[leaf] = feature

    def wrap(node: dict) -> dict:
        return {key: value if "pythonClassName" in value
                else {"pythonClassName": _DICT, "featuresDict": {"features": wrap(value)}}
                for key, value in node.items()}
    return wrap(tree)


def _features(manifest: Manifest, files: dict, notes: list) -> dict:
    flat: dict = {}
    encoding = str(manifest.feature(IMAGE_RAW).get("encoding", ENCODING_RAW))
    dtypes = {d for e in manifest.splits.values() for d in e.dtypes}
    if manifest.volume_chunks is not None:
        # --volume_chunks: no image_raw; image_bricks and the sizes as bytes and int64 lists (their
        # descriptions give the layout, dataset.json's volume_chunks object the edge and codec)
        notes.append(f"{MANIFEST_VOLUME_CHUNKS}: the pixels are bricks, read as their bytes")
    elif encoding != ENCODING_RAW:
        notes.append(f"{IMAGE_RAW}: {encoding}-encoded, read as its encoded bytes")
        flat[IMAGE_RAW] = _text(str(manifest.feature(IMAGE_RAW).get("description", "")))
    else:
        flat[IMAGE_RAW] = _pixels(manifest, IMAGE_RAW, "dtype", dtypes, _OWN, notes)
    if MASK_RAW in manifest.features:
        classes = manifest.mask_classes
        count = len(classes) if classes is not None else masks.LABEL_MAP_LIMIT
        # the mask format rule (dataset/masks.py): label maps of 256 classes or more may be uint16
        flat[MASK_RAW] = _pixels(manifest, MASK_RAW, MASK_DTYPE, masks.stored_dtypes(count),
                                 masks.known_channels(manifest.mask_layout, count), notes)
    flat[LABEL] = _label(manifest, files, notes)
    for name, spec in sorted(manifest.features.items()):
        if name not in flat:
            feature = _generic(name, spec, notes)
            if feature is not None:
                flat[name] = feature
    return {"type": _DICT, "content": {"features": _nest(flat, notes)}, "proto_cls": "tensorflow_datasets.FeaturesDict"}


def _splits(manifest: Manifest, local: bool) -> tuple[list, str]:
    """dataset_info.json's splits, or why TFDS cannot name some split's shards."""
    splits = []
    for split, entry in sorted(manifest.splits.items()):
        if not any(c.isalnum() for c in split):
            return [], f"split {split!r} has no letter or digit, which TFDS requires of a split name"
        parsed = [parse_shard_name(s.file) for s in entry.shards]
        if None in parsed:
            return [], f"split {split!r} lists a shard not named as dcm2tfrecord names shards"
        groups = {(p.parent, p.version, p.num_shards, p.compression) for p in parsed if p is not None}
        if len(groups) > 1:
            return [], (f"split {split!r} holds shards of several versions or shard counts ("
                        f"{', '.join(sorted(s.file for s in entry.shards[:4]))}...), and TFDS names all the "
                        "shards of a split with one template")
        parent, version, count, compression = groups.pop() if groups else ("", "", 0, DEFAULT)
        if parent and not local:
            return [], (f"split {split!r} reuses shards of version {parent} as {PARENT}{parent}/..., which an "
                        "object store does not resolve")
        template = tfds_shard_template(split, version_tag(version), compression, parent)
        lengths = [0] * count
        for shard, name in zip(entry.shards, parsed):
            assert name is not None
            if name.index >= count or tfds_shard_file(template, split, name.index, count) != shard.file:
                return [], f"split {split!r}: TFDS would name shard {name.index} otherwise than {shard.file!r}"
            lengths[name.index] = shard.num_records
        splits.append({"name": split, "filepathTemplate": template, "numBytes": str(entry.num_bytes or 0),
                       "shardLengths": [str(n) for n in lengths]})
    return splits, ""


def _version(output_dir: str) -> str:
    """TFDS's x.y.z: N.0.0 for version N of a versioned root, else 1.0.0."""
    _root, parts = version_parts(output_dir)
    return f"{int(parts[1])}.0.0" if parts else "1.0.0"


def _encode(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def tfds_metadata(manifest: Manifest, output_dir: str) -> TfdsMetadata:
    """The TFDS files of ``manifest``'s dataset in ``output_dir`` (its version names TFDS's version;
    an object store's ``gs://`` path refuses ``../`` templates), or the refusal."""
    refusal = manifest.adapter.tfds_refusal
    if manifest.encryption is not None:      # --encrypt: TFDS would parse ciphertext
        refusal = "its records are encrypted (convert --encrypt), which TFDS cannot read"
    splits, why = _splits(manifest, "://" not in output_dir)
    if refusal or why:
        return TfdsMetadata(refusal=refusal or why)
    files: dict = {}
    notes: list = []
    features = _features(manifest, files, notes)
    info: dict = {"name": DATASET_NAME, "version": _version(output_dir), "description": DESCRIPTION,
                  "fileFormat": "tfrecord", "splits": splits}
    content = features["content"]["features"]
    if IMAGE_RAW in content and LABEL in content:
        info["supervisedKeys"] = {"tuple": {"items": [{"featureKey": IMAGE_RAW}, {"featureKey": LABEL}]}}
    files[TFDS_FEATURES_NAME] = _encode(features)
    files[TFDS_INFO_NAME] = _encode(info)
    return TfdsMetadata(files=dict(sorted(files.items())), notes=tuple(notes))


def write_tfds_metadata(output_dir: str, manifest: Manifest) -> TfdsMetadata:
    """Writes the TFDS files (each through a temp file and a rename; dataset_info.json last, the
    file TFDS opens first), or nothing when TFDS cannot read the dataset; a TFDS file it does not
    write is removed (one left by a run that died before its commit describes other shards). The
    commit calls it just before dataset.json."""
    try:
        metadata = tfds_metadata(manifest, output_dir)
    except Exception as exc:  # noqa: BLE001 - optional metadata never costs the commit of a dataset
        logging.warning("TFDS metadata not written: %s", exc)
        metadata = TfdsMetadata(refusal=f"it could not be built ({exc})")
    remove_tfds_metadata(output_dir, keep=tuple(metadata.files))
    for name in sorted(metadata.files, key=lambda n: n == TFDS_INFO_NAME):
        mime = "text/plain" if name.endswith(TFDS_LABELS_SUFFIX) else "application/json"
        write_atomically(output_dir, name, metadata.files[name], mime)
    return metadata


def remove_tfds_metadata(output_dir: str, keep: tuple[str, ...] = ()) -> None:
    """Removes the TFDS files an earlier run wrote but ``keep`` (dataset_info.json first: without it
    TFDS opens nothing): before a run replaces the dataset whose shards they describe, and at the
    commit those this one does not write."""
    for name in (n for n in NAMES if n not in keep):
        path = FileSystems.join(output_dir, name)
        if FileSystems.exists(path):
            remove_output_file(output_dir, path)


def _reading_part(name: str, data: bytes):
    """What TFDS reads the records by: a file's bytes, but dataset_info.json without its splits'
    ``numBytes`` (shown by TFDS, never used to read; the shards' bytes are verify's own check)."""
    if name != TFDS_INFO_NAME:
        return data
    try:
        info = json.loads(data)
        for split in info.get("splits", []):
            split.pop("numBytes", None)
        return info
    except (ValueError, AttributeError, TypeError):
        return data


def check_tfds_metadata(dataset_dir: str, manifest: Manifest) -> tuple[list[tuple[str, str]], list[str]]:
    """``verify``: (problems as (file, message), notes). Each TFDS file present must hold what
    dataset.json makes of it, byte for byte (a stale or edited one would have TFDS read other
    records); absent ones are a note (datasets written before TFDS metadata, gzip shards...)."""
    expected = tfds_metadata(manifest, dataset_dir)
    problems, notes = [], []
    present = {name for name in NAMES if FileSystems.exists(FileSystems.join(dataset_dir, name))}
    for name in sorted(present):
        want = expected.files.get(name)
        path = FileSystems.join(dataset_dir, name)
        with FileSystems.open(path) as handle:
            got = handle.read()
        if want is None:
            problems.append((name, "is not what dataset.json gives TFDS: dcm2tfrecord writes none here"
                             + (f" ({expected.refusal})" if expected.refusal else "")
                             + "; remove it"))
        elif got != want and _reading_part(name, got) != _reading_part(name, want):
            problems.append((name, "does not match dataset.json (TFDS would read other shards or features "
                                   "than dataset.json lists); restore it, or convert again"))
    if expected.files and TFDS_INFO_NAME not in present:
        notes.append(f"no {TFDS_INFO_NAME}: tfds.builder_from_directory cannot open it (an earlier "
                     "dcm2tfrecord wrote none; convert again to have it)")
    elif not expected.files:
        notes.append(f"no TFDS metadata: {expected.refusal}")
    return problems, notes
