"""A compact, deterministic byte encoding of ProbedRecord for what crosses the planning shuffles.

Beam encodes the planning entries and ShardPlans with ``FastPrimitivesCoder``, whose fallback
for a record is pickle: pickle names the reconstructing function's module in every standalone
record (~50 bytes), tags every value, and writes each field, defaults included. Here a record is

    varint bit mask of the fields that differ from what the reader already knows
    + those fields' values, in field order, each a tagged value (below)

where "what the reader knows" is the field's dataclass default, or a value the context carries
(a planning entry carries the order key and record id in its tuple; a ShardPlan its split), so
those are not sent twice. Values: None, bool, int (a small one is its tag byte), float (8
bytes), str (a fixed table of frequent words is one byte; a 32-character lowercase hex id is
16 bytes), bytes, tuple, a SourceFile (the uri without its relative path tail), and the small
frozen values of the record model by a fixed class code and their fields. Anything else is
pickled, as before. The bytes depend on the record's values only (not on which objects share
identity, as pickle's memo does), so the same record gives the same bytes on every runner; and
``unpack_record(pack_record(r)) == r`` with every field of the same type (tests/transforms/
planning/test_record_codec.py).
"""
from __future__ import annotations

import dataclasses
import importlib
import pickle
import struct

from dcm2tfrecord.dataset.features import RecordKind
from dcm2tfrecord.transforms import record_model as rm

(_NONE, _FALSE, _TRUE, _INT, _NEG, _U64, _FLOAT, _STR, _WORD, _HEX, _BYTES, _TUPLE, _SOURCE,
 _SOURCE_JOINED, _OBJECT, _PICKLE, _EMPTY_STR, _EMPTY_TUPLE, _EMPTY_BYTES) = range(19)
_SMALL = 0x80                      # a tag >= 0x80 is the int (tag - 0x80)
_DOUBLE = struct.Struct("<d")

# Frequent strings, one byte each after their tag: append only (the index is the encoding).
_WORDS = ("train", "validation", "test", "int16", "uint16", "uint8", "int8", "int32", "uint32",
          "float32", "float64", "int64", "uint64", "<u1", "<i1", "<u2", "<i2",
          *(kind.value for kind in RecordKind), "seg", "rtstruct")
_WORD_INDEX = {word: i for i, word in enumerate(dict.fromkeys(_WORDS))}
_WORD_LIST = tuple(_WORD_INDEX)

# The frozen values of the record model sent by class code and fields: append only.
_CLASSES = (
    "dcm2tfrecord.transforms.record_model:SourceFile",
    "dcm2tfrecord.transforms.record_model:ImageSpec",
    "dcm2tfrecord.transforms.record_model:Identifiers",
    "dcm2tfrecord.transforms.record_model:SliceInfo",
    "dcm2tfrecord.transforms.record_model:MaskPart",
    "dcm2tfrecord.transforms.dicom.native:NativePixels",
    "dcm2tfrecord.transforms.dicom.mosaic:Mosaic",
    "dcm2tfrecord.transforms.dicom.functional_groups:Stack",
)
_CLASS_CODES: dict = {}
_CLASS_LIST: list = []


def _classes() -> list:
    if not _CLASS_LIST:
        for i, name in enumerate(_CLASSES):
            module, qualname = name.split(":")
            cls = getattr(importlib.import_module(module), qualname)
            _CLASS_LIST.append(cls)
            _CLASS_CODES[cls] = i
    return _CLASS_LIST


def _varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return n, pos
        shift += 7


def _is_hex_id(value: str) -> bool:
    if len(value) != 32:
        return False
    try:
        return bytes.fromhex(value).hex() == value
    except ValueError:
        return False


def _put(out: bytearray, value) -> None:
    t = type(value)
    if value is None:
        out.append(_NONE)
    elif t is bool:
        out.append(_TRUE if value else _FALSE)
    elif t is int:
        if 0 <= value < 0x80:
            out.append(_SMALL | value)
        elif 0 <= value < (1 << 56):
            out.append(_INT)
            _varint(out, value)
        elif 0 <= value < (1 << 64):
            out.append(_U64)
            out += value.to_bytes(8, "big")
        elif -(1 << 64) <= value < 0:
            out.append(_NEG)
            _varint(out, -value - 1)
        else:
            _pickled(out, value)
    elif t is float:
        out.append(_FLOAT)
        out += _DOUBLE.pack(value)
    elif t is str:
        index = _WORD_INDEX.get(value)
        if index is not None:
            out.append(_WORD)
            out.append(index)
        elif not value:
            out.append(_EMPTY_STR)
        elif _is_hex_id(value):
            out.append(_HEX)
            out += bytes.fromhex(value)
        else:
            data = value.encode("utf-8", "surrogatepass")
            out.append(_STR)
            _varint(out, len(data))
            out += data
    elif t is bytes:
        if not value:
            out.append(_EMPTY_BYTES)
        else:
            out.append(_BYTES)
            _varint(out, len(value))
            out += value
    elif t is tuple:
        if not value:
            out.append(_EMPTY_TUPLE)
        else:
            out.append(_TUPLE)
            _varint(out, len(value))
            for item in value:
                _put(out, item)
    elif t is rm.SourceFile:
        rel = value.rel_path
        if rel and value.uri.endswith(rel):
            out.append(_SOURCE_JOINED)
            _put(out, value.uri[:-len(rel)])
        else:
            out.append(_SOURCE)
            _put(out, value.uri)
        _put(out, rel)
        _put(out, value.size)
        _put(out, value.mtime)
        _put(out, value.fingerprint)
    else:
        _classes()
        code = _CLASS_CODES.get(t)
        if code is None:
            _pickled(out, value)
            return
        out.append(_OBJECT)
        out.append(code)
        state = value.__dict__
        for name in rm.field_names(t):
            _put(out, state[name])


def put_value(out: bytearray, value) -> None:
    """``value`` appended to ``out`` as one tagged value (see the module's docstring)."""
    _put(out, value)


def get_value(data: bytes, pos: int) -> tuple:
    """(value, position after it) of the tagged value at ``pos``."""
    return _get(data, pos)


put_varint, read_varint = _varint, _read_varint


def _pickled(out: bytearray, value) -> None:
    data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    out.append(_PICKLE)
    _varint(out, len(data))
    out += data


def _get(data: bytes, pos: int):
    tag = data[pos]
    pos += 1
    if tag >= _SMALL:
        return tag - _SMALL, pos
    if tag == _NONE:
        return None, pos
    if tag == _FALSE:
        return False, pos
    if tag == _TRUE:
        return True, pos
    if tag == _INT:
        return _read_varint(data, pos)
    if tag == _NEG:
        n, pos = _read_varint(data, pos)
        return -n - 1, pos
    if tag == _U64:
        return int.from_bytes(data[pos:pos + 8], "big"), pos + 8
    if tag == _FLOAT:
        return _DOUBLE.unpack_from(data, pos)[0], pos + 8
    if tag == _WORD:
        return _WORD_LIST[data[pos]], pos + 1
    if tag == _EMPTY_STR:
        return "", pos
    if tag == _HEX:
        return data[pos:pos + 16].hex(), pos + 16
    if tag == _STR:
        n, pos = _read_varint(data, pos)
        return data[pos:pos + n].decode("utf-8", "surrogatepass"), pos + n
    if tag == _EMPTY_BYTES:
        return b"", pos
    if tag == _BYTES:
        n, pos = _read_varint(data, pos)
        return bytes(data[pos:pos + n]), pos + n
    if tag == _EMPTY_TUPLE:
        return (), pos
    if tag == _TUPLE:
        n, pos = _read_varint(data, pos)
        items = []
        for _ in range(n):
            item, pos = _get(data, pos)
            items.append(item)
        return tuple(items), pos
    if tag in (_SOURCE, _SOURCE_JOINED):
        values = []
        for _ in range(5):
            value, pos = _get(data, pos)
            values.append(value)
        if tag == _SOURCE_JOINED:
            values[0] += values[1]
        return rm._built(rm.SourceFile, _SOURCE_FIELDS, values), pos
    if tag == _OBJECT:
        cls = _classes()[data[pos]]
        pos += 1
        names = rm.field_names(cls)
        values = []
        for _ in names:
            value, pos = _get(data, pos)
            values.append(value)
        if hasattr(cls, "__post_init__"):
            return cls(*values), pos
        return rm._built(cls, names, values), pos
    if tag == _PICKLE:
        n, pos = _read_varint(data, pos)
        return pickle.loads(data[pos:pos + n]), pos + n
    raise ValueError(f"not a packed record value: tag {tag} at {pos - 1}")


_SOURCE_FIELDS = rm.field_names(rm.SourceFile)
_FIELDS = rm.field_names(rm.ProbedRecord)
_MISSING = object()
_DEFAULTS = tuple(
    f.default if f.default is not dataclasses.MISSING
    else (f.default_factory() if f.default_factory is not dataclasses.MISSING else _MISSING)
    for f in dataclasses.fields(rm.ProbedRecord))
_KIND = _FIELDS.index("kind")
_KINDS = {kind.value: kind for kind in RecordKind}


def _known(context: dict) -> tuple:
    if not context:
        return _DEFAULTS
    return tuple(context.get(name, default) for name, default in zip(_FIELDS, _DEFAULTS))


def _same(value, known) -> bool:
    return known is not _MISSING and type(value) is type(known) and value == known


def pack_record(record: rm.ProbedRecord, context: dict | None = None) -> bytes:
    """The record's bytes; fields equal (in type and value) to their default or to
    ``context[name]`` are left out, and ``unpack_record`` must be given the same context."""
    state = record.__dict__
    known = _known(context or {})
    mask, present = 0, []
    for i, name in enumerate(_FIELDS):
        value = state[name]
        if i == _KIND:
            value = str(value)      # a RecordKind member as its string; unpack_record gives it back
        if not _same(value, known[i]):
            mask |= 1 << i
            present.append(value)
    out = bytearray()
    _varint(out, mask)
    for value in present:
        _put(out, value)
    return bytes(out)


def unpack_record(data: bytes, context: dict | None = None, start: int = 0) -> rm.ProbedRecord:
    """The record ``pack_record(record, context)`` gave, from ``data[start:]``."""
    known = _known(context or {})
    mask, pos = _read_varint(data, start)
    values = []
    for i in range(len(_FIELDS)):
        if mask >> i & 1:
            value, pos = _get(data, pos)
        else:
            value = known[i]
            if value is _MISSING:
                raise ValueError(f"packed record without its {_FIELDS[i]}")
        values.append(value)
    if pos != len(data):
        raise ValueError(f"packed record: {len(data) - pos} bytes left over")
    values[_KIND] = _KINDS.get(values[_KIND], values[_KIND])
    return rm._built(rm.ProbedRecord, _FIELDS, values)


def pack_records(records, context: dict | None = None) -> bytes:
    """Several records, each length-prefixed (a ShardPlan's)."""
    out = bytearray()
    for record in records:
        data = pack_record(record, context)
        _varint(out, len(data))
        out += data
    return bytes(out)


def unpack_records(data: bytes, context: dict | None = None) -> tuple:
    records, pos = [], 0
    while pos < len(data):
        n, pos = _read_varint(data, pos)
        records.append(unpack_record(data[pos:pos + n], context))
        pos += n
    return tuple(records)
