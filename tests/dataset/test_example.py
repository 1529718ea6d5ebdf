"""The direct Example encoder is byte-identical to TensorFlow's own serialization."""
import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord.dataset.example import encode_example


def _tf_example(features: dict) -> bytes:
    example = tf.train.Example()
    for key, (kind, values) in features.items():
        feature = example.features.feature[key]
        getattr(feature, f"{kind}_list").value.extend(values)
    return example.SerializeToString(deterministic=True)


def _ours(features: dict) -> bytes:
    converted = {}
    for key, (kind, values) in features.items():
        if kind == "float":
            converted[key] = np.asarray(values, dtype=np.float32)
        elif kind == "int64":
            converted[key] = np.asarray(values, dtype=np.int64)
        else:
            converted[key] = list(values)
    return encode_example(converted)


@pytest.mark.parametrize("seed", range(5))
def test_random_records_match_tensorflow_bytes(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        features = {}
        for k in range(int(rng.integers(0, 12))):
            kind = ("bytes", "int64", "float")[int(rng.integers(0, 3))]
            n = int(rng.integers(0, 6))
            if kind == "bytes":
                values = [rng.bytes(int(rng.integers(0, 400))) for _ in range(max(n, 1))]
            elif kind == "int64":
                values = [int(v) for v in rng.integers(-2**63, 2**63 - 1, size=n, dtype=np.int64)]
            else:
                values = [float(v) for v in rng.normal(scale=1e6, size=n).astype(np.float32)]
            features[f"f{k}/{rng.integers(0, 1000)}"] = (kind, values)
        assert _ours(features) == _tf_example(features)


def test_scalars_memoryviews_and_large_payload_match():
    pixels = np.arange(512 * 512, dtype="<i2").reshape(512, 512)
    ours = encode_example({"image_raw": memoryview(pixels).cast("B"), "label": -1, "height": 512,
                           "dtype": "int16", "spacing": [0.5, 0.25], "scale": 1.5})
    ref = tf.train.Example(features=tf.train.Features(feature={
        "image_raw": tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[-1])),
        "height": tf.train.Feature(int64_list=tf.train.Int64List(value=[512])),
        "dtype": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"int16"])),
        "spacing": tf.train.Feature(float_list=tf.train.FloatList(value=[0.5, 0.25])),
        "scale": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5])),
    }))
    assert ours == ref.SerializeToString(deterministic=True)
    parsed = tf.train.Example.FromString(ours)
    assert parsed.features.feature["image_raw"].bytes_list.value[0] == pixels.tobytes()


def test_empty_example():
    assert encode_example({}) == tf.train.Example().SerializeToString(deterministic=True)
