"""reader.PatchSampler (issue 45, item 3) on real conversions (NIfTI images with label maps,
``--class_locations``): a patch is the region cut from the ``RandomAccess`` volume, padded where it
leaves it; its mask is cut at the same place; the realised label shares match the requested ones
within sampling error; resuming at step k gives the uninterrupted run's tail; shards partition the
stream; torch with workers, tf.data and Grain give the NumPy sampler's patches."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.reader.patch_sampler import cut
from tests.support.patch_datasets import convert, task

LIMIT = 40


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("patches")
    task(root / "Task")
    convert(root / "Task", root / "with", class_locations=LIMIT)
    convert(root / "Task", root / "without")
    return str(root / "with"), str(root / "without")


def _reference(volume: np.ndarray, origin, size, pad) -> np.ndarray:
    """The region cut from a volume padded by 64 voxels on every side (independent of ``cut``)."""
    size = np.asarray(size)
    widths = [(64, 64)] * 3 + [(0, 0)] * (volume.ndim - 3)
    padded = np.pad(volume, widths, constant_values=pad)
    start = np.asarray(origin) + 64
    return padded[start[0]:start[0] + size[0], start[1]:start[1] + size[1], start[2]:start[2] + size[2]]


def _stream(sampler, positions) -> list:
    return [sampler[i] for i in positions]


def _same(a: dict, b: dict) -> None:
    for key in ("image", "mask", "origin", "centre", "label", "record", "index"):
        np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
    assert bytes(a["id"]) == bytes(b["id"])


def test_cut_at_every_border():
    volume = np.arange(4 * 5 * 6 * 2, dtype=np.int16).reshape(4, 5, 6, 2)
    for size in [(2, 2, 2), (4, 5, 6), (7, 9, 3), (10, 10, 10)]:
        for origin in [(0, 0, 0), (-1, -2, -3), (3, 4, 5), (-9, -9, -9), (4, 5, 6), (2, -1, 4), (-3, 0, 1)]:
            got = cut(volume, origin, size, -7)
            assert got.shape == tuple(size) + (2,) and got.flags.c_contiguous
            np.testing.assert_array_equal(got, _reference(volume, origin, size, -7), err_msg=str((size, origin)))


@pytest.mark.parametrize("size", [(4, 4, 4), (3, 30, 5), (40, 40, 40)])
def test_a_patch_is_the_region_of_the_random_access_volume(converted, size):
    """Patches smaller than every volume, larger on one axis, larger than all (centred, padded)."""
    path, _ = converted
    records = reader.RandomAccess(path, "train")
    sampler = reader.PatchSampler(path, "train", size, foreground=0.5, per_volume=3, seed=5, pad_value=-5,
                                  epochs=4)
    corners = 0
    for i in range(len(sampler)):
        patch = sampler[i]
        record = records[int(patch["record"])]
        assert bytes(record["id"]) == patch["id"]
        origin, shape = patch["origin"], np.asarray(record["image"].shape[:3])
        np.testing.assert_array_equal(patch["image"], _reference(record["image"], origin, size, -5))
        np.testing.assert_array_equal(patch["mask"], _reference(record["mask"], origin, size, 0))
        assert patch["image"].shape == tuple(size) + (1,) and patch["mask"].shape == tuple(size) + (1,)
        centre = patch["centre"]
        assert ((centre >= origin) & (centre < origin + size)).all()       # the chosen voxel is inside
        for axis in range(3):
            if size[axis] <= shape[axis]:                                   # fits: no padding on the axis
                assert 0 <= origin[axis] <= shape[axis] - size[axis]
            else:                                                          # nnU-Net: volume centred
                assert origin[axis] == -((size[axis] - shape[axis]) // 2)
        if int(patch["label"]) > 0:
            assert record["mask"][tuple(centre)][0] == patch["label"]
            assert patch["mask"][tuple(centre - origin)][0] == patch["label"]         # aligned
        corners += int(any(origin[a] in (0, shape[a] - size[a]) for a in range(3) if size[a] <= shape[a]))
    assert corners > 0 or min(size) > 20                    # patches against a border, where one fits


def test_foreground_patches_are_centred_on_stored_locations(converted):
    path, _ = converted
    records = reader.RandomAccess(path, "train")
    sampler = reader.PatchSampler(path, "train", (4, 4, 4), foreground=1.0, epochs=3)
    for i in range(len(sampler)):
        patch = sampler[i]
        record = records[int(patch["record"])]
        stored = {tuple(p) for p in record["classes/locations"].reshape(-1, 3)}
        assert tuple(patch["centre"]) in stored and int(patch["label"]) >= 1


def _sigma_ok(hits: int, n: int, p: float) -> bool:
    return abs(hits - n * p) <= 3 * np.sqrt(n * p * (1 - p)) + 1e-9


def test_realised_foreground_ratio_within_three_sigma(converted):
    path, _ = converted
    sampler = reader.PatchSampler(path, "train", (6, 6, 6), foreground=1 / 3, per_volume=5, seed=11, epochs=30)
    patches = _stream(sampler, range(len(sampler)))
    assert len(patches) == 600
    forced = sum(int(p["label"]) > 0 for p in patches)
    assert _sigma_ok(forced, 600, 1 / 3), forced
    on_foreground = sum(bool(p["mask"][tuple(p["centre"] - p["origin"])][0]) for p in patches)
    assert on_foreground >= forced                                      # uniform ones may land on it too


def test_class_probabilities_realised_within_three_sigma(converted):
    path, _ = converted
    wanted = {"background": 0.5, "kidney": 0.3, "tumour": 0.2}
    sampler = reader.PatchSampler(path, "train", (5, 5, 5), class_probabilities=wanted, per_volume=5, seed=3,
                                  epochs=30)
    patches = _stream(sampler, range(len(sampler)))
    labels = [int(p["mask"][tuple(p["centre"] - p["origin"])][0]) for p in patches]
    assert [int(p["label"]) for p in patches] == labels           # centred on the label it drew
    for label, p in zip((0, 1, 2), wanted.values()):
        assert _sigma_ok(labels.count(label), 600, p), (label, labels.count(label))


def test_without_stored_locations_the_mask_is_scanned_with_a_warning(converted):
    _, path = converted
    from dcm2tfrecord.reader import patch_sampler as module
    module._warned.discard("scan")
    with pytest.warns(UserWarning, match="class_locations"):
        sampler = reader.PatchSampler(path, "train", (4, 4, 4), foreground=1.0, epochs=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records = reader.RandomAccess(path, "train")
        for i in range(len(sampler)):
            patch = sampler[i]
            assert records[int(patch["record"])]["mask"][tuple(patch["centre"])][0] == patch["label"] >= 1


def test_resume_at_step_k_equals_the_uninterrupted_run(converted):
    path, _ = converted
    options = dict(foreground=0.4, per_volume=2, seed=9, epochs=3)
    whole = _stream(reader.PatchSampler(path, "train", (5, 6, 7), **options), range(24))
    batch, k = 4, 3
    restarted = reader.PatchSampler(path, "train", (5, 6, 7), **options)      # a fresh process's
    tail = _stream(restarted, restarted.indices(start=k * batch))[:24 - k * batch]
    for a, b in zip(whole[k * batch:], tail):
        _same(a, b)
    assert len({int(p["record"]) for p in whole[:8]}) == 4                  # each record twice in a row
    assert [int(p["record"]) for p in whole[:8:2]] == [int(p["record"]) for p in whole[1:8:2]]
    other_seed = reader.PatchSampler(path, "train", (5, 6, 7), **{**options, "seed": 10})
    assert [tuple(other_seed[i]["origin"]) for i in range(24)] != [tuple(p["origin"]) for p in whole]


def test_shards_partition_the_stream(converted):
    path, _ = converted
    sampler = reader.PatchSampler(path, "train", (4, 4, 4), per_volume=2, epochs=2)
    first, second = sampler.indices(0, 2, 0), sampler.indices(0, 2, 1)
    assert set(first).isdisjoint(second) and sorted([*first, *second]) == list(range(len(sampler)))
    with pytest.raises(ValueError):
        sampler.indices(0, 2, 2)


def test_torch_dataloader_with_two_workers_gives_the_same_patches(converted):
    pytest.importorskip("torch")
    path, _ = converted
    sampler = reader.PatchSampler(path, "train", (4, 5, 6), foreground=0.5, per_volume=2, seed=1, epochs=2)
    expected = _stream(sampler, range(len(sampler)))
    for workers in (0, 2):
        got = []
        for batch in reader.torch_patches(sampler, 3, num_workers=workers):
            for j in range(len(batch["index"])):
                got.append({key: batch[key][j].numpy() for key in ("image", "mask", "origin", "label", "index")})
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    resumed = next(iter(reader.torch_patches(sampler, 3, start=6, num_shards=2, shard=1)))
    assert resumed["index"].tolist() == [7, 9, 11]


def test_tf_data_gives_the_numpy_patches_sharded_by_input_context(converted):
    tf = pytest.importorskip("tensorflow")
    path, _ = converted
    sampler = reader.PatchSampler(path, "train", (4, 5, 6), foreground=0.5, per_volume=2, seed=2, epochs=2)
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    batches = list(reader.patches(sampler, batch_size=2, start_step=1, input_context=context))
    positions = list(sampler.indices(start=4, num_shards=2, shard=1))
    got = [{key: value[j].numpy() for key, value in b.items()} for b in batches for j in range(len(b["index"]))]
    assert [int(g["index"]) for g in got] == positions
    for g, i in zip(got, positions):
        _same(g, sampler[i])
    assert batches[0]["image"].shape == (2, 4, 5, 6, 1) and batches[0]["mask"].dtype == tf.uint8
    direct = next(iter(reader.patches(path, "train", (4, 5, 6), batch_size=2, foreground=0.5, per_volume=2,
                                      seed=2, epochs=2)))
    np.testing.assert_array_equal(direct["image"].numpy()[1], sampler[1]["image"])


def test_grain_source_gives_the_numpy_patches(converted):
    grain = pytest.importorskip("grain.python")
    path, _ = converted
    sampler = reader.PatchSampler(path, "train", (4, 4, 4), per_volume=2, seed=4, epochs=1)
    got = [b for b in reader.grain_patches(sampler, 2)]
    indices = [int(i) for b in got for i in b["index"]]
    assert indices == list(range(len(sampler)))
    np.testing.assert_array_equal(got[1]["image"][0], sampler[2]["image"])
    shards = [reader.grain_patches(sampler, 1, shard_options=grain.ShardOptions(s, 2)) for s in (0, 1)]
    seen = [[int(b["index"][0]) for b in loader] for loader in shards]
    assert set(seen[0]).isdisjoint(seen[1]) and sorted(seen[0] + seen[1]) == list(range(len(sampler)))


def test_bad_arguments_are_refused(converted):
    path, _ = converted
    with pytest.raises(ValueError, match="size"):
        reader.PatchSampler(path, "train", (4, 4))
    with pytest.raises(ValueError, match="class_probabilities key 'liver'"):
        reader.PatchSampler(path, "train", (4, 4, 4), class_probabilities={"liver": 1.0})
    with pytest.raises(ValueError, match="foreground"):
        reader.PatchSampler(path, "train", (4, 4, 4), foreground=1.5)
