"""The record model: the small frozen values that cross pipeline stages (SourceFile, ProbedRecord, ShardPlan, ...).

Only metadata travels between stages (a few hundred bytes per record); pixel
payload never crosses a shuffle (docs/ARCHITECTURE.md, "Why plan, then write").

The values that cross a stage boundary once per record (SourceFile, ImageSpec,
ProbedRecord) pickle as one flat tuple of their fields (``__reduce__``): Beam
encodes them with pickle at every boundary, and pickle's default for a
dataclass writes its class and a dict of field names per object, nested five
deep for a record (1.4 KB for a CT slice; see docs/BENCHMARKS.md §3).
"""
from __future__ import annotations

import dataclasses
import pickle
from typing import Optional, TypeVar

import numpy as np

from dcm2tfrecord.dataset.features import RecordKind

_FIELD_NAMES: dict = {}
_T = TypeVar("_T")


def field_names(cls) -> tuple[str, ...]:
    """A dataclass's field names, looked up once per class (``dataclasses.fields`` builds
    its tuple on every call)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _fields_tuple(value) -> tuple:
    return tuple([getattr(value, name) for name in field_names(type(value))])


def replaced(value, **changes):
    """``dataclasses.replace`` for the frozen values below, at a third of its cost: the
    instance's fields copied with ``changes`` applied, without running ``__init__`` again
    (a class with a ``__post_init__`` gets ``dataclasses.replace``). For the steps every
    record passes."""
    cls = type(value)
    if hasattr(cls, "__post_init__"):
        return dataclasses.replace(value, **changes)
    names = field_names(cls)
    unknown = changes.keys() - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    new = object.__new__(cls)
    state = new.__dict__
    state.update(value.__dict__)
    state.update(changes)
    return new


def to_bytes(value) -> bytes:
    """``value`` as opaque bytes, for a shuffle: Beam's local runner then passes the value
    through its GroupByKey buffers as bytes, without unpickling and pickling it again."""
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def from_bytes(data: bytes):
    return pickle.loads(data)


@dataclasses.dataclass(frozen=True)
class SourceFile:
    """One matched input file."""
    uri: str
    rel_path: str        # relative to the --input root it was matched under
    size: int
    mtime: float
    # set by the probe (transforms.sources.read.fingerprint): the length and digest of the
    # file's head, checked when the file is read again; b"" before (not in the repr: a check
    # value, not a description of the file)
    fingerprint: bytes = dataclasses.field(default=b"", repr=False)

    def __reduce__(self):
        # the uri usually ends with rel_path: sent once, not twice
        if self.rel_path and self.uri.endswith(self.rel_path):
            return _source_file, (self.uri[:-len(self.rel_path)], self.rel_path, self.size, self.mtime,
                                  self.fingerprint)
        return SourceFile, (self.uri, self.rel_path, self.size, self.mtime, self.fingerprint)


def _source_file(prefix: str, rel_path: str, size: int, mtime: float, fingerprint: bytes = b"") -> SourceFile:
    return SourceFile(prefix + rel_path, rel_path, size, mtime, fingerprint)


_ITEMSIZE = {"uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "uint32": 4, "int32": 4,
             "float32": 4, "float64": 8, "int64": 8, "uint64": 8}


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    """What a decoded record will look like, known from headers alone."""
    depth: int
    height: int
    width: int
    channels: int
    dtype: str           # numpy dtype name of the stored pixels, e.g. "int16"

    def __reduce__(self):
        return ImageSpec, _fields_tuple(self)

    @property
    def num_pixel_bytes(self) -> int:
        itemsize = _ITEMSIZE.get(self.dtype) or np.dtype(self.dtype).itemsize
        return self.depth * self.height * self.width * self.channels * itemsize

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.depth, self.height, self.width, self.channels)


@dataclasses.dataclass(frozen=True)
class Identifiers:
    """Raw DICOM identifiers: used for label joins and split grouping, never written."""
    patient_id: str = ""
    study_uid: str = ""
    series_uid: str = ""
    sop_uid: str = ""

    def __reduce__(self):
        return Identifiers, _fields_tuple(self)


@dataclasses.dataclass(frozen=True)
class SliceInfo:
    """Where a slice sits in the patient (PS3.3 C.7.6.2): for ordering series volumes."""
    orientation: tuple[float, ...] = ()   # Image Orientation (Patient), 6 direction cosines
    position: tuple[float, ...] = ()      # Image Position (Patient), 3 mm
    instance: Optional[int] = None        # Instance Number, the fallback order
    localizer: bool = False               # Image Type says LOCALIZER (a scout among the slices)
    # what tells the volumes of a 4-D series apart at one position (transforms.series.volumes):
    # (name, value) pairs of temporal position, trigger time, acquisition number, echo,
    # b-value and gradient, those the header has
    volume_key: tuple = ()
    # Pixel Spacing, row and column mm: where an RTSTRUCT's contours fall in a slice's rows and columns
    # (--unit file's join). Left out of the repr, whose digest is the probe's recorded reference
    # (tests/data/probe_v0_outcomes.json): an addition, not a change, to what the probe planned
    pixel_spacing: tuple[float, ...] = dataclasses.field(default=(), repr=False)

    def __reduce__(self):
        return SliceInfo, _fields_tuple(self)


@dataclasses.dataclass(frozen=True)
class MaskPart:
    """--class_map with --unit file (transforms.masks.slices): what a record that is one part
    of an annotated series (a slice, a frame of a split file, a stack) needs beyond its own
    header to be given its part of the series' masks."""
    uid: str = ""                 # its SOP Instance UID, for a single-frame file (raw: never written)
    contours: tuple = ()          # per annotation, the RTSTRUCT contours on it: ((ROI number, index), ...)
    counts_annotations: bool = False   # the one record of the series that accounts for the annotations
    # of a series made into several records (--series_gaps split, --series_4d split): the indices
    # of its annotations it accounts for (each annotation by the first record it covers); None: all
    counted: Optional[tuple[int, ...]] = None
    volume: bool = False          # a record of such a series: its own slices' UIDs place a SEG's frames


@dataclasses.dataclass(frozen=True)
class ProbedRecord:
    """A source file that will become one record, planned from its header."""
    source: SourceFile
    record_id: str       # keyed hash of rel_path: stable, carries no identity
    kind: str            # a RecordKind (dataset/features.py), or an annotation's (--class_map)
    spec: ImageSpec
    split: str = "train"
    label: object = -1   # int, float, or a multi-hot tuple; see transforms.labels.table
    ids: Optional[Identifiers] = None
    frame: Optional[int] = None   # with --frames split: which frame of the source; a 4-D NIfTI's volume
    slice_info: Optional[SliceInfo] = None
    members: tuple[SourceFile, ...] = ()  # with --unit series: the slices, in anatomical order
    slice_spacing: float = 0.0
    # transforms.dicom.native.NativePixels when the writer may read the pixels
    # straight from the file (uncompressed little-endian grayscale DICOM); None otherwise
    native: object = None
    # the planning order key (transforms.hashing.order_key of record_id and --seed), set once
    # by transforms.planning.shards.for_planning; None before
    order: Optional[int] = None
    # Enhanced multi-frame DICOM: the file's stacks (transforms.dicom.functional_groups.Stack),
    # after expand_frames the one stack this record holds, its frames in record order; () otherwise
    stacks: tuple = ()
    # with --frames split: how many frames the source has; a stack of an Enhanced file of
    # several: how many stacks; a 4-D NIfTI: how many volumes (0 otherwise)
    source_frames: int = 0
    # a 4-D series (--unit series): how many volumes, and which this record is
    # (docs/DICOM.md, "4-D series and diffusion")
    volumes: int = 1
    volume_index: int = 0
    # --class_map (transforms.masks.annotation): an annotation's kind (seg, rtstruct) when the
    # record is one; a volume's annotations, (SourceFile, kind) pairs, and its mask's planned bytes
    annotation: str = ""
    annotations: tuple = ()
    mask_bytes: int = 0
    # --class_map with --unit file: the record is one part of its annotated series (MaskPart);
    # None otherwise (a volume holds its whole series)
    mask_part: Optional["MaskPart"] = None

    def __reduce__(self):
        # One flat tuple: the record's fields in order, with its source, spec, identifiers
        # and slice geometry as plain tuples of their fields (the source's uri without its
        # rel_path tail where it ends with it). A record crosses three shuffles: unpickling
        # it is then one Python call (_probed_record) instead of five constructors, and
        # pickling it one __reduce__ instead of five (docs/BENCHMARKS.md §8.3).
        state = self.__dict__
        values = [state[name] for name in _RECORD_FIELDS]
        source = values[0]
        rel = source.rel_path
        joined = bool(rel) and source.uri.endswith(rel)
        values[0] = (source.uri[:-len(rel)] if joined else source.uri, rel, source.size,
                     source.mtime, joined, source.fingerprint)
        values[_SPEC] = _fields_tuple(values[_SPEC])
        if values[_IDS] is not None:
            values[_IDS] = _fields_tuple(values[_IDS])
        if values[_SLICE] is not None:
            values[_SLICE] = _fields_tuple(values[_SLICE])
        # the kind as its plain string: a pickled enum member names its module and class
        # (~60 bytes more per record on every shuffle); _probed_record gives the member back
        values[_KIND] = str(values[_KIND])
        return _probed_record, tuple(values)

    @property
    def sources(self) -> tuple[SourceFile, ...]:
        """The files this record accounts for (a volume's annotations too; of a series' slice
        records one accounts for its annotations, MaskPart.counts_annotations)."""
        own = self.members or (self.source,)
        if self.mask_part is not None and not self.mask_part.counts_annotations:
            return own
        counted = None if self.mask_part is None else self.mask_part.counted
        if counted is not None:
            return own + tuple(self.annotations[n][0] for n in counted)
        return own + tuple(source for source, _ in self.annotations)

    @property
    def inputs(self) -> tuple[SourceFile, ...]:
        """Every file this record is read from: its sources and every annotation it reads."""
        return (self.members or (self.source,)) + tuple(source for source, _ in self.annotations)

    @property
    def counts_sources(self) -> bool:
        """Whether writing this record accounts for its sources (frame 0 of a split file,
        the first stack of an Enhanced file)."""
        return self.frame in (None, 0) and (not self.stacks or self.stacks[0].index == 0)

    @property
    def planned_bytes(self) -> int:
        """Bytes this record adds to its shard, estimated from the header."""
        return self.spec.num_pixel_bytes + self.mask_bytes + RECORD_OVERHEAD_BYTES


def _built(cls: type[_T], names: tuple, values) -> _T:
    """A frozen value of this module from its field values, without ``__init__`` (which sets
    each field through ``object.__setattr__``): for values that were built once already."""
    value = object.__new__(cls)
    value.__dict__.update(zip(names, values))
    return value


_RECORD_FIELDS = tuple(f.name for f in dataclasses.fields(ProbedRecord))
assert _RECORD_FIELDS[0] == "source", _RECORD_FIELDS
_SPEC, _IDS, _SLICE, _KIND = (_RECORD_FIELDS.index(name) for name in ("spec", "ids", "slice_info", "kind"))
_SOURCE_FIELDS, _SPEC_FIELDS, _IDS_FIELDS, _SLICE_FIELDS = (
    tuple(f.name for f in dataclasses.fields(cls)) for cls in (SourceFile, ImageSpec, Identifiers, SliceInfo))


_KINDS = {kind.value: kind for kind in RecordKind}


def _probed_record(source, *values) -> ProbedRecord:
    """ProbedRecord from the flat tuple of its __reduce__."""
    head, rel, size, mtime, joined, fingerprint = source
    fields = list(values)
    fields.insert(0, _built(SourceFile, _SOURCE_FIELDS,
                            (head + rel if joined else head, rel, size, mtime, fingerprint)))
    fields[_SPEC] = _built(ImageSpec, _SPEC_FIELDS, fields[_SPEC])
    if fields[_IDS] is not None:
        fields[_IDS] = _built(Identifiers, _IDS_FIELDS, fields[_IDS])
    if fields[_SLICE] is not None:
        fields[_SLICE] = _built(SliceInfo, _SLICE_FIELDS, fields[_SLICE])
    fields[_KIND] = _KINDS.get(fields[_KIND], fields[_KIND])    # an annotation's kind stays its string
    return _built(ProbedRecord, _RECORD_FIELDS, fields)


# Features, proto framing and TFRecord framing around the pixels; measured on
# the default record format (about 300-400 bytes for DICOM, less for images).
RECORD_OVERHEAD_BYTES = 400


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """The records one shard will hold, in write order."""
    split: str
    index: int
    num_shards: int
    records: tuple[ProbedRecord, ...]

    def __reduce__(self):
        # A plan crosses the Reshuffle in front of the writer: its records packed compactly
        # (transforms.record_codec; each record's split is the plan's, so not sent), where
        # pickle would name each record's module and tag each of its fields
        from dcm2tfrecord.transforms.record_codec import pack_records
        return _shard_plan, (self.split, self.index, self.num_shards,
                             pack_records(self.records, {"split": self.split}))


def _shard_plan(split: str, index: int, num_shards: int, records: bytes) -> ShardPlan:
    from dcm2tfrecord.transforms.record_codec import unpack_records
    return ShardPlan(split, index, num_shards, unpack_records(records, {"split": split}))
