"""``reader.load(..., masks=True)``: a --class_map dataset's masks, batched with their images.

Real conversions (``--unit series --class_map``) of CT series annotated by highdicom SEGs
(tests/support/mask_datasets.py); each series has a planted corner pixel, which pairs every
image of a batch with the record ``reader.RandomAccess`` reads, whose mask the batch must hold.
"""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support import mask_datasets, run_convert, write_png_archive

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, unit="series")


def _convert(root, depths, **options) -> str:
    archive = root / "in"
    for number, depth in enumerate(depths):
        mask_datasets.annotated_series(archive, number, depth=depth)
    out = root / "out"
    summary = run_convert(archive, out, class_map=mask_datasets.class_map(root), **{**OPTIONS, **options})
    assert summary["records"] == len(depths) and summary["failed"] == {}, summary
    return str(out)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """Four volumes of one shape, label maps: the one-reshape path."""
    return _convert(tmp_path_factory.mktemp("masks_fixed"), [4, 4, 4, 4])


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Volumes of two depths, binary masks (two channels): the record-by-record, padded path."""
    return _convert(tmp_path_factory.mktemp("masks_mixed"), [3, 4, 4], mask_layout="binary")


def _by_corner(path: str) -> dict:
    records = reader.RandomAccess(path, "train")
    out = {mask_datasets.corner(r["image"]): r for r in (records[i] for i in range(len(records)))}
    assert len(out) == len(records)          # the planted pixel tells the records apart
    return out


def _check_pairs(batches, expected: dict, padded_to=None) -> int:
    """Every image of ``batches`` next to its own record's mask (and image); the count."""
    seen = 0
    for images, masks, labels in batches:
        assert images.shape[0] == masks.shape[0] == labels.shape[0]
        assert masks.shape[:-1] == images.shape[:-1]
        for image, mask in zip(images, masks):
            record = expected[mask_datasets.corner(image)]
            want_image, want_mask = record["image"], record["mask"]
            if padded_to is not None:
                pad = [(0, padded_to - want_image.shape[0])] + [(0, 0)] * 3
                want_image, want_mask = np.pad(want_image, pad), np.pad(want_mask, pad)
            np.testing.assert_array_equal(image, want_image)
            np.testing.assert_array_equal(mask, want_mask)
            assert mask.dtype == want_mask.dtype == np.uint8
            seen += 1
    return seen


def test_masks_are_random_access_masks_batched(fixed):
    expected = _by_corner(fixed)
    ds = reader.load(fixed, batch_size=3, shuffle=False, masks=True)
    batches = list(reader.as_numpy(ds))
    assert [b[0].shape[0] for b in batches] == [3, 1]
    images, masks, _ = batches[0]
    assert images.shape == (3, 4, 32, 32, 1) and masks.shape == (3, 4, 32, 32, 1)
    assert set(np.unique(masks).tolist()) == {0, 1, 2}
    assert _check_pairs(batches, expected) == 4
    meta = reader.info(fixed)
    assert meta.has_masks and meta.mask_classes == mask_datasets.CLASSES
    spec = meta.element_spec_of("train", masks=True)
    assert spec[1] == tf.TensorSpec([None, 4, 32, 32, None], tf.uint8)
    assert ds.element_spec[1].dtype == tf.uint8 and ds.element_spec[1].shape[1:4] == [4, 32, 32]


@pytest.mark.parametrize("resumable", [False, True])
def test_shuffled_masks_stay_with_their_images(fixed, resumable):
    expected = _by_corner(fixed)
    ds = reader.load(fixed, batch_size=2, seed=3, repeat=3, masks=True, shuffle_buffer=4, resumable=resumable)
    assert _check_pairs(reader.as_numpy(ds), expected) == 12


def test_dict_output_holds_mask_in_place_of_mask_raw(fixed):
    batch = next(iter(reader.load(fixed, batch_size=4, shuffle=False, masks=True, output="dict")))
    assert "mask_raw" not in batch and "image_raw" not in batch
    assert batch["mask"].shape == (4, 4, 32, 32, 1) and batch["mask"].dtype == tf.uint8
    plain = next(iter(reader.load(fixed, batch_size=4, shuffle=False, output="dict")))
    assert "mask" not in plain and plain["mask_raw"].dtype == tf.string     # unchanged without masks


def test_padded_binary_masks_of_several_depths(mixed):
    expected = _by_corner(mixed)
    assert sorted(r["mask"].shape for r in expected.values()) == [(3, 32, 32, 2), (4, 32, 32, 2), (4, 32, 32, 2)]
    ds = reader.load(mixed, batch_size=3, shuffle=False, masks=True, pad=True)
    batches = list(reader.as_numpy(ds))
    assert batches[0][1].shape == (3, 4, 32, 32, 2)
    assert _check_pairs(batches, expected, padded_to=4) == 3
    single = reader.load(mixed, batch_size=1, seed=1, masks=True)        # no padding: each its own depth
    assert sorted(m.shape[1] for _, m, _ in reader.as_numpy(single)) == [3, 4, 4]


def test_masks_on_a_dataset_without_masks_is_a_one_line_error(tmp_path):
    write_png_archive(tmp_path / "png", 3, 16, 16)
    out = tmp_path / "out"
    run_convert(tmp_path / "png", out, target_shard_mb=1, min_shard_mb=0.01, max_shard_mb=4)
    with pytest.raises(ValueError, match=r"has no masks .*--class_map") as error:
        reader.load(str(out), masks=True)
    assert str(out) in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ValueError, match="has no masks"):
        reader.parse_fn(str(out), masks=True)
    meta = reader.info(str(out))
    assert not meta.has_masks and meta.mask_classes == []
