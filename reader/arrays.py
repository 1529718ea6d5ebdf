"""``as_numpy``: what ``reader.load`` yields, as NumPy values (like ``tfds.as_numpy``).

For code that trains with JAX, NumPy or anything else that wants arrays, not
tensors: every ``tf.Tensor`` in an element becomes a NumPy array (strings stay
``bytes``: a scalar is ``bytes``, a string tensor an object array of
``bytes``), every ``tf.RaggedTensor`` (``output="dict"``'s variable-length
features) becomes what its ``.numpy()`` returns: a 1-D object array holding
one NumPy array per row. Anything else is passed through unchanged.
"""
from __future__ import annotations

from dcm2tfrecord.reader.tfquiet import tf


def _to_numpy(value):
    if isinstance(value, (tf.Tensor, tf.RaggedTensor)):
        return value.numpy()
    return value


class _NumpyIterable:
    """Iterates the dataset afresh on every ``iter``, as a ``tf.data.Dataset`` does."""

    def __init__(self, dataset: tf.data.Dataset):
        self._dataset = dataset

    def __iter__(self):
        for element in self._dataset:
            yield tf.nest.map_structure(_to_numpy, element)

    def __len__(self) -> int:
        return len(self._dataset)          # TypeError for infinite or unknown cardinality


def as_numpy(data):
    """NumPy values of a ``tf.data.Dataset`` (an iterable of its elements), of a tensor, or of a
    nested structure (dict, tuple, list) of tensors; see the module docstring for types::

        for images, labels in reader.as_numpy(reader.load(d, batch_size=64)):
            ...   # np.ndarray [64, h, w, c], np.ndarray [64]
    """
    if isinstance(data, tf.data.Dataset):
        return _NumpyIterable(data)
    return tf.nest.map_structure(_to_numpy, data)
