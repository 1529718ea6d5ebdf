"""Every dtype the converter writes comes back through reader.load, value for value.

One real conversion of an archive of DICOM files written with pydicom (one
kind of file per split, through a labels CSV with a split column), pydicom's
own test files and Pillow images. Each file's label is its row number, so a
record is matched to its source whatever order the reader returns it in.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support.reader_datasets import (DTYPES, FILES_PER_SPLIT, LAYOUTS, REAL_FILES,  # noqa: F401
                                           converted)  # (converted: a fixture)


def _by_label(ds) -> dict:
    out = {}
    for images, labels in ds:
        for image, label in zip(images.numpy(), labels.numpy()):
            out[int(label)] = image
    return out


CASES = [(d, layout) for d in DTYPES for layout in LAYOUTS]


@pytest.mark.parametrize("dtype,layout", CASES, ids=[f"{d}-{lay}" for d, lay in CASES])
def test_generated_dicom_round_trips(converted, dtype, layout):
    dataset, expected = converted
    split = f"{dtype}_{layout}"
    ds = reader.load(dataset, split=split, batch_size=2, shuffle=False)
    frames, rows, cols, samples = LAYOUTS[layout]
    static = [None, frames, rows, cols, samples] if frames > 1 else [None, rows, cols, samples]
    assert ds.element_spec[0].dtype == tf.as_dtype(dtype)
    assert ds.element_spec[0].shape.as_list() == static
    assert reader.info(dataset).element_spec[split][0] == ds.element_spec[0]
    got = _by_label(ds)
    wanted = {label: v for label, v in expected.items() if v[0] == split}
    assert sorted(got) == sorted(wanted) and len(got) == FILES_PER_SPLIT
    for label, (_, _, values) in wanted.items():
        image = got[label]
        assert image.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(image, values.reshape(image.shape))
        assert image.shape == (values.shape if frames > 1 else values.shape[1:])


@pytest.mark.parametrize("split", sorted(REAL_FILES) + ["uint16_png", "uint8_png_rgb"])
def test_pydicom_test_files_and_pillow_images_round_trip(converted, split):
    dataset, expected = converted
    got = _by_label(reader.load(dataset, split=split, batch_size=4, shuffle=False))
    wanted = {label: v for label, v in expected.items() if v[0] == split}
    assert sorted(got) == sorted(wanted)
    for label, (_, dtype, values) in wanted.items():
        assert got[label].dtype == np.dtype(dtype), split
        np.testing.assert_array_equal(got[label], values if values.shape[0] > 1 else values[0])


def test_mixed_dtypes_and_sizes_come_back_padded_in_a_common_dtype(converted):
    dataset, expected = converted
    with pytest.raises(ValueError, match="--resize"):
        reader.load(dataset, split="mixed", batch_size=2)
    wanted = {label: v for label, v in expected.items() if v[0] == "mixed"}
    common = np.result_type(*[np.dtype(d) for _, d, _ in wanted.values()])   # float64 here
    assert common == np.float64
    with pytest.raises(ValueError, match=r"float64, which doubles memory: pass dtype=.*--dicom_values window"):
        reader.load(dataset, split="mixed", batch_size=1)               # never a silent float64
    one_by_one = _by_label(reader.load(dataset, split="mixed", batch_size=1, shuffle=False,
                                       dtype="float64"))
    for label, (_, _, values) in wanted.items():
        assert one_by_one[label].dtype == common
        np.testing.assert_array_equal(one_by_one[label], values[0].astype(common))
    padded = reader.load(dataset, split="mixed", batch_size=len(wanted), pad=True, shuffle=False,
                         dtype="float64")
    images, labels = next(iter(padded))
    assert images.shape[1:] == (6, 7, 1)
    for image, label in zip(images.numpy(), labels.numpy()):
        values = wanted[int(label)][2][0]
        h, w, _ = values.shape
        np.testing.assert_array_equal(image[:h, :w], values.astype(common))
        assert not image[h:].any() and not image[:, w:].any()


def test_float_conversion_after_batching(converted):
    dataset, expected = converted
    ds = reader.load(dataset, split="uint32_2d", batch_size=4, shuffle=False, dtype="float64",
                     scale=0.5)
    assert ds.element_spec[0].dtype == tf.float64
    for images, labels in ds:
        for image, label in zip(images.numpy(), labels.numpy()):
            np.testing.assert_array_equal(image, expected[int(label)][2][0].astype(np.float64) * 0.5)
