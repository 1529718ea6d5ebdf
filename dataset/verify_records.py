"""verify, record by record: a decoded tf.train.Example against dataset.json's schema, and what
the records of a split add up to (dtypes, shapes, labels, ids).

A problem (:class:`Problem`) names the file and, where there is one, the
record number (0-based, in file order) and the byte offset of the record.
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import math
from collections import Counter
from typing import Optional

import numpy as np

from dcm2tfrecord.dataset.manifest import MAX_SHAPES, Manifest, label_count_keys
from dcm2tfrecord.dataset import png
from dcm2tfrecord.dataset import masks as mask_format
from dcm2tfrecord.dataset.features import (DICOM_PREFIX, DTYPE, ENCODING, ENCODING_PNG, FORMAT, IMAGE_RAW, LABEL,
                                           MASK_CHANNELS, MASK_DTYPE, MASK_RAW, SHAPE_FEATURES, RecordKind)
from dcm2tfrecord.dataset.names import MANIFEST_NAME
from dcm2tfrecord.dataset.verify_locations import check_locations
from dcm2tfrecord.dataset.verify_view import ViewRule, check_view


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with the dataset, located as precisely as the check allows."""
    file: str
    message: str
    record: Optional[int] = None
    offset: Optional[int] = None
    offset_unit: str = "byte"    # what ``offset`` addresses: its container's (FileAdapter.offset_unit)

    def __str__(self) -> str:
        where = self.file
        if self.record is not None:
            where += f": record {self.record}"
        if self.offset is not None:
            where += f" at {self.offset_unit} {self.offset}"
        return f"{where}: {self.message}"


@dataclasses.dataclass(frozen=True)
class MaskRule:
    """What dataset.json says every record's mask is, by the mask format's rule (dataset/masks.py):
    the dtypes ``classes`` classes are stored in, and the channels where the layout is recorded."""
    classes: int
    dtypes: frozenset
    channels: Optional[int]
    locations: int = 0          # --class_locations N as dataset.json's options record it (0: off)

    @classmethod
    def of(cls, manifest: Manifest) -> Optional["MaskRule"]:
        """The rule of a dataset with masks whose classes dataset.json names, else None."""
        if manifest.mask_classes is None:
            return None
        count = len(manifest.mask_classes)
        options = manifest.options if isinstance(manifest.options, dict) else {}
        locations = options.get("class_locations")
        locations = locations if isinstance(locations, int) and not isinstance(locations, bool) \
            and locations > 0 else 0
        return cls(count, frozenset(mask_format.stored_dtypes(count)),
                   mask_format.known_channels(manifest.mask_layout, count), locations)


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


def check_example(features: dict, schema: dict, mask_rule: Optional[MaskRule] = None,
                  view: Optional[ViewRule] = None) -> tuple[list[str], dict]:
    """Problems of one parsed record against dataset.json's ``features``; also its summary.

    Every declared feature must be present with its declared kind and value
    count, except ``dicom/*`` on records whose ``format`` is not dicom and
    features the schema marks ``optional`` (written only by some records, e.g.
    the per-frame geometry of Enhanced multi-frame files; variable-length, so
    readers see an absent one as empty). An undeclared feature is a problem
    too: the schema is the reader's contract. With ``view``, the training view
    dataset.json's options record (dataset/verify_view.py), which names the
    features it needs itself when they are missing.
    """
    problems = check_view(features, view) if view is not None else []
    own = view.required() if view is not None else frozenset()
    is_dicom = _text(features.get(FORMAT, (None, []))[1]) == RecordKind.DICOM
    for name, spec in sorted(schema.items()):
        if name not in features:
            if (name.startswith(DICOM_PREFIX) and not is_dicom) or spec.get("optional") or name in own:
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
    needed = (IMAGE_RAW, *SHAPE_FEATURES, DTYPE, LABEL)
    problems.extend(f"feature {name!r} is missing" for name in needed
                    if name not in features and name not in schema)
    if problems:
        return problems, summary
    scalars = SHAPE_FEATURES
    if any(features[k][0] != "int64" or len(features[k][1]) != 1 for k in scalars) \
            or any(features[k][0] != "bytes" or len(features[k][1]) != 1 for k in (IMAGE_RAW, DTYPE)):
        return ["image_raw, dtype, depth, height, width and channels are not single values of their "
                "standard kinds"], summary
    dims = [features[k][1][0] for k in scalars]
    dtype_name = _text(features[DTYPE][1])
    try:
        itemsize = np.dtype(dtype_name).itemsize
    except Exception:
        return [f"dtype {dtype_name!r} is not a numpy dtype"], summary
    if min(dims) <= 0:
        problems.append(f"non-positive shape {dims}")
    encoding = schema.get(IMAGE_RAW, {}).get("encoding")
    if encoding and ENCODING in features and _text(features[ENCODING][1]) != encoding:
        problems.append(f"encoding {_text(features[ENCODING][1])!r}, the schema says {encoding!r}")
    elif encoding == ENCODING_PNG and min(dims) > 0:
        try:       # the whole image, CRCs included: its pixels fill the record's shape and dtype
            png.decode(features[IMAGE_RAW][1][0], dims, dtype_name)
        except png.ForeignPng:
            pass   # another tool's valid PNG, which an image library decodes: not this module's to check
        except ValueError as exc:
            problems.append(f"image_raw is no PNG image of shape {dims} and {dtype_name}: {exc}")
    else:
        expected = math.prod(dims) * itemsize
        got = len(features[IMAGE_RAW][1][0])
        if got != expected:
            problems.append(f"image_raw holds {got} bytes; shape {dims} of {dtype_name} needs {expected}")
    if MASK_RAW in features:
        mask_problems = _check_mask(features, dims, mask_rule)
        problems.extend(mask_problems)
        if not mask_problems and mask_rule is not None and mask_rule.locations:
            problems.extend(check_locations(features, dims, mask_rule.classes, mask_rule.locations))
    label_spec = schema.get(LABEL, {})
    label_values = features[LABEL][1]
    if label_spec.get("shape"):
        label: object = tuple(label_values)
    elif not label_values:
        label = None
    elif label_spec.get("dtype") == "float":
        label = float(label_values[0])
    else:
        label = label_values[0]
    summary = {"dtype": dtype_name, "shape": dims, "label": label}
    return problems, summary


def _check_mask(features: dict, dims: list, rule: Optional[MaskRule] = None) -> list[str]:
    """A --class_map record's mask: ``mask_raw`` fills [depth, height, width, mask_channels] of
    ``mask_dtype``, an integer dtype; with ``rule``, the dtype and channels the mask format gives
    its classes and layout."""
    kinds = {MASK_RAW: "bytes", MASK_DTYPE: "bytes", MASK_CHANNELS: "int64"}
    if any(features.get(k, (None, []))[0] != kind or len(features[k][1]) != 1 for k, kind in kinds.items()):
        return ["mask_raw, mask_dtype and mask_channels are not single values of their standard kinds"]
    name = _text(features[MASK_DTYPE][1])
    try:
        dtype = np.dtype(name)
    except Exception:
        return [f"mask_dtype {name!r} is not a numpy dtype"]
    if dtype.kind not in "iu":
        return [f"mask_dtype {name!r} is not an integer dtype"]
    channels = int(features[MASK_CHANNELS][1][0])
    if channels <= 0:
        return [f"mask_channels {channels} is not positive"]
    if rule is not None and name not in rule.dtypes:
        return [f"mask_dtype {name!r}: masks of {rule.classes} classes are stored in "
                f"{' or '.join(sorted(rule.dtypes))}"]
    if rule is not None and rule.channels is not None and channels != rule.channels:
        return [f"mask_channels {channels}: masks of {rule.classes} classes in its layout have {rule.channels}"]
    shape = [*dims[:3], channels]
    expected = math.prod(shape) * dtype.itemsize
    got = len(features[MASK_RAW][1][0])
    if got != expected:
        return [f"mask_raw holds {got} bytes; shape {shape} of {name} needs {expected}"]
    return []


@dataclasses.dataclass
class RecordStats:
    """What the records of a shard or split hold, in bounded memory."""
    dtypes: set = dataclasses.field(default_factory=set)
    shapes: set = dataclasses.field(default_factory=set)     # capped at manifest.MAX_SHAPES
    max_depth: int = 0
    labels: Counter = dataclasses.field(default_factory=Counter)
    count: int = 0

    def add(self, summary: dict) -> None:
        self.count += 1
        self.dtypes.add(summary["dtype"])
        if len(self.shapes) < MAX_SHAPES:
            self.shapes.add(tuple(summary["shape"]))
        self.max_depth = max(self.max_depth, summary["shape"][0])
        if summary["label"] is not None and not isinstance(summary["label"], float):
            self.labels.update(label_count_keys(summary["label"]))

    def merge(self, other: "RecordStats") -> None:
        self.count += other.count
        self.dtypes |= other.dtypes
        self.shapes |= set(list(other.shapes)[:max(0, MAX_SHAPES - len(self.shapes))])
        self.max_depth = max(self.max_depth, other.max_depth)
        self.labels.update(other.labels)


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
