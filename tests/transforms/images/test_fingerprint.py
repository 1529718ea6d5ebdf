"""``--intensity ct``'s fingerprint and normalisation (transforms.images.fingerprint) against
nnU-Net v2's own code: its fingerprint extractor's draw per case and pooled statistics, and its
``CTNormalization``; and the pool's bound and independence of order."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dcm2tfrecord.transforms.images import fingerprint

extractor = pytest.importorskip("nnunetv2.experiment_planning.dataset_fingerprint.fingerprint_extractor")
schemes = pytest.importorskip("nnunetv2.preprocessing.normalization.default_normalization_schemes")


def _case(seed: int, channels: int = 1, shape=(6, 9, 8)):
    rng = np.random.default_rng(seed)
    pixels = rng.normal(40, 300, size=shape + (channels,)).astype(np.float32)
    mask = (rng.random(shape) < 0.3).astype(np.uint8)[..., None] * rng.integers(1, 3, size=shape + (1,))
    return pixels, mask.astype(np.uint8)


def _nnunet(pixels, mask, key):
    """nnU-Net's draw of one case, seeded as ours is: images (c, z, y, x), seg (1, z, y, x)."""
    images = np.moveaxis(pixels, -1, 0)
    drawn, _ = extractor.DatasetFingerprintExtractor.collect_foreground_intensities(
        mask[None, ..., 0], images, seed=fingerprint.record_seed(key))
    return drawn


@pytest.mark.parametrize("channels", [1, 2])
def test_a_records_draw_is_nnunets_draw_of_the_case_with_its_seed(channels):
    pixels, mask = _case(3, channels)
    pool = fingerprint.sample(pixels, fingerprint.foreground(pixels, mask), "record-a")
    theirs = _nnunet(pixels, mask, "record-a")
    for c in range(channels):
        assert np.array_equal(np.sort(pool[c][1]), np.sort(np.asarray(theirs[c], np.float32)))
        assert pool[c][1].size == fingerprint.SAMPLES_PER_RECORD


def test_the_pooled_statistics_are_nnunets_and_ct_normalisation_is_nnunets_to_the_bit():
    cases = {f"case-{i}": _case(i) for i in range(5)}
    pools = [fingerprint.sample(p, fingerprint.foreground(p, m), key) for key, (p, m) in cases.items()]
    stats = fingerprint.statistics(fingerprint.merge(pools))
    theirs = np.concatenate([_nnunet(p, m, key)[0] for key, (p, m) in cases.items()])
    low, median, high = np.percentile(theirs, (0.5, 50.0, 99.5))
    assert stats["voxels"] == [theirs.size] == [5 * fingerprint.SAMPLES_PER_RECORD]
    np.testing.assert_allclose([stats["percentile_00_5"][0], stats["median"][0], stats["percentile_99_5"][0]],
                               [low, median, high], rtol=1e-6)
    np.testing.assert_allclose(stats["mean"][0], float(np.mean(theirs)), rtol=1e-5)
    np.testing.assert_allclose(stats["std"][0], float(np.std(theirs)), rtol=1e-5)
    properties = {"mean": stats["mean"][0], "std": stats["std"][0],
                  "percentile_00_5": stats["percentile_00_5"][0], "percentile_99_5": stats["percentile_99_5"][0]}
    image, _ = cases["case-0"]
    expected = schemes.CTNormalization(intensityproperties=properties).run(image[..., 0].copy())
    ours = fingerprint.normalize(image, fingerprint.bounds(stats))
    assert ours.dtype == np.float32 and np.array_equal(ours[..., 0], expected)


def test_the_pool_is_the_same_in_any_order_and_grouping_and_holds_at_most_its_bound():
    cases = [_case(i) for i in range(4)]
    pools = [fingerprint.sample(p, fingerprint.foreground(p, m), f"k{i}") for i, (p, m) in enumerate(cases)]
    cap = 25_000
    reference = fingerprint.merge(pools, cap)
    assert reference[0][1].size == cap
    for order in itertools.permutations(range(4)):
        ordered = [pools[i] for i in order]
        grouped = fingerprint.merge([fingerprint.merge(ordered[:2], cap), fingerprint.merge(ordered[2:], cap)], cap)
        for got in (fingerprint.merge(ordered, cap), grouped):
            assert np.array_equal(got[0][0], reference[0][0]) and np.array_equal(got[0][1], reference[0][1])
    # the kept voxels are a sample of every record's, not the first records'
    kept = set(reference[0][1].tolist())
    assert all(kept & set(p[0][1].tolist()) for p in pools)


def test_no_foreground_draws_nothing_and_no_mask_draws_from_every_voxel():
    pixels, mask = _case(1)
    empty = fingerprint.sample(pixels, fingerprint.foreground(pixels, np.zeros_like(mask)), "k")
    assert empty[0][1].size == 0 and fingerprint.statistics(empty) is None
    assert fingerprint.foreground(pixels, None).all()
    assert fingerprint.dataset_statistics({}) is None


def test_records_of_another_number_of_channels_are_pooled_apart_and_the_commonest_wins():
    one = [fingerprint.sample(*(lambda p, m: (p, fingerprint.foreground(p, m)))(*_case(i)), f"a{i}")
           for i in range(2)]
    two = fingerprint.sample(*(lambda p, m: (p, fingerprint.foreground(p, m)))(*_case(9, 2)), "b")
    by = fingerprint.merge_by_channels([{1: one[0]}, {2: two}, {1: one[1]}])
    assert sorted(by) == [1, 2]
    stats = fingerprint.dataset_statistics(by)
    assert len(stats["mean"]) == 1 and stats["voxels"] == [2 * fingerprint.SAMPLES_PER_RECORD]
    with pytest.raises(ValueError, match="2 channels, the fingerprint 1"):
        fingerprint.normalize(np.zeros((1, 2, 2, 2)), fingerprint.bounds(stats))
