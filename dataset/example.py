"""``tf.train.Example``, both directions, without TensorFlow: the format's one Example codec.

Encoding (:func:`encode_example`) emits the wire format directly. Building a
``tf.train.Example`` copies the pixel buffer into the proto and again into the
serialized string, and needs TensorFlow imported in every Beam worker. The
wire format is small and frozen (tensorflow/core/example/example.proto,
feature.proto), so we emit it directly: one copy of the pixels, no TensorFlow
on the write path. ``tests/dataset/test_example.py`` proves byte equality with
``tf.train.Example.SerializeToString(deterministic=True)``.

Decoding (:func:`decode_example`, used by ``verify`` and ``reader.RandomAccess``)
parses with the protobuf runtime, through message types built from a
descriptor written out here, field for field as in those .proto files (same
field numbers and types, hence the same wire format), in a private descriptor
pool under a package of our own, so they never clash with TensorFlow's classes
when both are loaded. ``google.protobuf`` picks its fastest runtime (upb):
~12 µs to parse a 147 KiB record.

Wire layout::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }   # entry: key = 1, value = 2
    Feature  { BytesList bytes_list = 1; FloatList float_list = 2;
               Int64List int64_list = 3; }            # oneof
    BytesList{ repeated bytes value = 1; }
    FloatList{ repeated float value = 1 [packed]; }
    Int64List{ repeated int64 value = 1 [packed]; }
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from dcm2tfrecord.dataset.errors import CorruptDataError

FeatureValue = Union[bytes, str, int, float, Sequence[bytes], Sequence[str],
                     Sequence[int], Sequence[float], np.ndarray, memoryview]

_LEN = 2  # wire type "length-delimited"
_SMALL = [bytes([i]) for i in range(0x80)]   # one-byte varints


def varint(value: int) -> bytes:
    """Base-128 varint; negative int64 as its 64-bit two's complement."""
    if 0 <= value < 0x80:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload_len: int) -> bytes:
    return _SMALL[(number << 3) | _LEN] + varint(payload_len)


_KEY_PREFIXES: dict = {}


def _key_prefix(key: str) -> bytes:
    """Map entry field 1 (the key), encoded once per key name."""
    prefix = _KEY_PREFIXES.get(key)
    if prefix is None:
        key_bytes = key.encode("utf-8")
        prefix = _field(1, len(key_bytes)) + key_bytes
        if len(_KEY_PREFIXES) < 4096:
            _KEY_PREFIXES[key] = prefix
    return prefix


def _size(part) -> int:
    return part.nbytes if isinstance(part, memoryview) else len(part)


def _bytes_list(values: Sequence) -> list:
    parts = []
    for value in values:
        if isinstance(value, str):
            value = value.encode("utf-8")
        parts.append(_field(1, _size(value)))
        parts.append(value)
    return parts


def _int64_list(values: Sequence[int]) -> list:
    if len(values) == 0:
        return []
    packed = b"".join([varint(int(v)) for v in values])
    return [_field(1, len(packed)), packed]


def _float_list(values: Sequence[float]) -> list:
    if len(values) == 0:
        return []
    packed = np.asarray(values, dtype="<f4").tobytes()
    return [_field(1, len(packed)), packed]


def _parts_len(parts: list) -> int:
    return sum([_size(p) for p in parts])


def _feature(kind: str, values: Sequence) -> list:
    if kind == "bytes":
        inner, number = _bytes_list(values), 1
    elif kind == "float":
        inner, number = _float_list(values), 2
    elif kind == "int64":
        inner, number = _int64_list(values), 3
    else:
        raise ValueError(f"unknown feature kind {kind!r}")
    return [_field(number, _parts_len(inner))] + inner


def _kind_and_values(value: FeatureValue) -> tuple[str, Sequence]:
    """Infers the Feature kind the way a person writing tf.train.Example would."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return "bytes", [value]
    if isinstance(value, (bool, int, np.integer)):
        return "int64", [int(value)]
    if isinstance(value, (float, np.floating)):
        return "float", [float(value)]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iub":
            return "int64", value.ravel().tolist()
        if value.dtype.kind == "f":
            return "float", value.ravel()  # type: ignore[return-value]  # len() and [i]: all its users need
        raise TypeError(f"unsupported array dtype {value.dtype}")
    values: list = list(value)
    if not values:
        return "int64", values
    first = values[0]
    if isinstance(first, (bytes, bytearray, memoryview, str)):
        return "bytes", values
    if isinstance(first, (bool, int, np.integer)):
        return "int64", [int(v) for v in values]
    if isinstance(first, (float, np.floating)):
        return "float", values
    raise TypeError(f"unsupported feature value {type(first).__name__}")


def _feature_parts(kind: str, values: Sequence) -> tuple[list, int]:
    """(parts, total length) of one Feature message; a lone bytes value stays uncopied."""
    if kind == "bytes" and len(values) == 1:
        value = values[0]
        if isinstance(value, str):
            value = value.encode("utf-8")
        size = _size(value)
        inner_head = b"\x0a" + varint(size)          # BytesList.value, field 1
        head = b"\x0a" + varint(len(inner_head) + size) + inner_head   # Feature.bytes_list, field 1
        return [head, value], len(head) + size
    feature = _feature(kind, values)
    return feature, _parts_len(feature)


def encode_example(features: Mapping[str, FeatureValue]) -> bytes:
    """Serializes ``features`` exactly as ``tf.train.Example`` would, keys sorted.

    Scalars become one-element lists; ``bytes``/``str`` become BytesList,
    integers Int64List, floats FloatList. Byte values may be memoryviews, so a
    pixel buffer is copied once, into the returned string.
    """
    return b"".join(encode_example_parts(features))


def encode_example_parts(features: Mapping[str, FeatureValue]) -> list:
    """:func:`encode_example`'s bytes as parts, in order, uncopied: small pieces are joined per
    feature; a large value (a pixel buffer, perhaps a memoryview) stays a part of its own.
    ``[]`` for no features."""
    map_parts: list = []
    total = 0
    for key in sorted(features):
        kind, values = _kind_and_values(features[key])
        feature, feature_len = _feature_parts(kind, values)
        prefix = _key_prefix(key)
        value_field = b"\x12" + varint(feature_len)      # map entry value, field 2
        entry_len = len(prefix) + len(value_field) + feature_len
        head = b"\x0a" + varint(entry_len) + prefix + value_field   # Features.feature, field 1
        if feature_len <= 256:
            map_parts.append(head + b"".join(feature))
        else:
            map_parts.append(head)
            map_parts.extend(feature)
        total += len(head) + feature_len
    if not map_parts:
        return []
    return [b"\x0a" + varint(total)] + map_parts   # Example.features, field 1


# ---------------------------------------------------------------- decoding

_PACKAGE = "dcm2tfrecord.format"
_F = descriptor_pb2.FieldDescriptorProto
KINDS = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="dcm2tfrecord/format/example.proto", package=_PACKAGE, syntax="proto3")
    for name, kind in (("BytesList", _F.TYPE_BYTES), ("FloatList", _F.TYPE_FLOAT),
                       ("Int64List", _F.TYPE_INT64)):
        message = proto.message_type.add(name=name)
        message.field.add(name="value", number=1, label=_F.LABEL_REPEATED, type=kind)
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, kind) in enumerate((("bytes_list", "BytesList"), ("float_list", "FloatList"),
                                           ("int64_list", "Int64List")), 1):
        feature.field.add(name=name, number=number, label=_F.LABEL_OPTIONAL, type=_F.TYPE_MESSAGE,
                          type_name=f".{_PACKAGE}.{kind}", oneof_index=0)
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=_F.LABEL_OPTIONAL, type=_F.TYPE_MESSAGE,
                    type_name=f".{_PACKAGE}.Feature")
    features.field.add(name="feature", number=1, label=_F.LABEL_REPEATED, type=_F.TYPE_MESSAGE,
                       type_name=f".{_PACKAGE}.Features.FeatureEntry")
    example = proto.message_type.add(name="Example")
    example.field.add(name="features", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_MESSAGE,
                      type_name=f".{_PACKAGE}.Features")
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
Example = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.Example"))


class ProtoError(CorruptDataError, ValueError):
    """Bytes that are not a well-formed tf.train.Example."""


def decode_example(serialized) -> dict[str, tuple[Optional[str], Sequence]]:
    """``{name: (kind, values)}``: kind "bytes", "float", "int64" (None for a Feature with no
    list set), values as the record holds them. ProtoError if the bytes do not parse."""
    try:
        example = Example.FromString(serialized)
    except DecodeError as exc:
        raise ProtoError(str(exc) or "does not parse") from None
    out: dict[str, tuple[Optional[str], Sequence]] = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = (KINDS[kind], getattr(feature, kind).value) if kind else (None, [])
    return out
