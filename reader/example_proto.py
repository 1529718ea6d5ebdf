"""``tf.train.Example`` parsed with the protobuf runtime, without TensorFlow.

The message types are built from a descriptor written out here, field for
field as in ``tensorflow/core/example/{example,feature}.proto`` (same field
numbers and types, hence the same wire format), in a private descriptor pool
under a package of our own, so they never clash with TensorFlow's classes
when both are loaded. ``google.protobuf`` picks its fastest runtime (upb):
~12 µs to parse a 147 KiB record.
"""
from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "dcm2tfrecord.reader"
_F = descriptor_pb2.FieldDescriptorProto


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="dcm2tfrecord/reader/example.proto", package=_PACKAGE, syntax="proto3")
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


def parse_features(serialized) -> dict:
    """``{name: list of values}``: bytes, ints or floats, as the record holds them."""
    example = Example.FromString(serialized)
    out = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        out[name] = getattr(feature, kind).value if kind else []
    return out
