"""reader.torch_loader / numpy_collate and reader.grain_loader / RecordSampler with real torch
and real Grain, over RandomAccess on a real conversion (the two-class archive, 14 small shards).

torch and Grain are in the test extra, so these tests run wherever the suite does (never
skipped: a torch that will not import fails them, as PyPI's CUDA wheel does without its NVIDIA
wheels).
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support.reader_datasets import archive, plain  # noqa: F401  (fixtures)


def _ids(batch) -> list:
    return [bytes(x) for x in batch["id"]]


def test_reader_import_loads_neither_torch_nor_grain():
    code = ("import sys; from dcm2tfrecord import reader; reader.torch_loader; reader.grain_loader; "
            "print(sorted(m for m in ('torch', 'grain') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_torch_loader_gives_default_collate_values_without_torch_threads(plain):  # noqa: F811
    import torch
    from torch.utils.data import DataLoader
    records = reader.RandomAccess(plain)
    every = reader.torch_loader(records, 5, shuffle=False, keys=None)
    default = DataLoader(records, batch_size=5, shuffle=False)
    for got, want in zip(every, default, strict=True):
        assert sorted(got) == sorted(want)
        for key, value in want.items():
            if isinstance(value, torch.Tensor):
                assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
            else:
                assert list(got[key]) == list(value), key
    batch = next(iter(reader.torch_loader(records, 4, seed=0)))
    assert sorted(batch) == ["image", "label"]
    assert batch["image"].shape == (4, 8, 8, 3) and batch["image"].dtype == torch.uint8
    assert batch["label"].dtype == torch.int64


def test_torch_loader_seed_repeats_the_order_and_workers_read_every_record(plain):  # noqa: F811
    import torch  # noqa: F401
    records = reader.RandomAccess(plain)
    keys = ("image", "label", "id")
    first = [i for b in reader.torch_loader(records, 5, seed=3, keys=keys) for i in _ids(b)]
    again = [i for b in reader.torch_loader(records, 5, seed=3, keys=keys) for i in _ids(b)]
    assert first == again and sorted(first) == sorted(records[i]["id"] for i in range(len(records)))
    assert first != [records[i]["id"] for i in range(len(records))]
    workers = reader.torch_loader(records, 5, seed=3, keys=keys, num_workers=2)
    batches = list(workers)
    assert [i for b in batches for i in _ids(b)] == first      # the same batches, built in workers
    by_id = {records[i]["id"]: records[i] for i in range(len(records))}
    for batch in batches:
        for image, label, record_id in zip(batch["image"], batch["label"], batch["id"]):
            np.testing.assert_array_equal(image.numpy(), by_id[record_id]["image"])
            assert int(label) == int(by_id[record_id]["label"])


def test_grain_loader_reads_index_samplers_order_and_resumes(plain):  # noqa: F811
    import grain.python as grain
    records = reader.RandomAccess(plain)
    sampler = grain.IndexSampler(len(records), shard_options=grain.NoSharding(), shuffle=True,
                                 num_epochs=2, seed=7)
    default = grain.DataLoader(data_source=records, sampler=sampler, operations=[grain.Batch(5)])
    want = [_ids(b) for b in default]
    assert [_ids(b) for b in reader.grain_loader(records, 5, seed=7, num_epochs=2, keys=None)] == want
    fast = reader.RecordSampler(len(records), shuffle=True, num_epochs=2, seed=7)
    assert [fast[i].record_key for i in range(2 * len(records))] == \
        [sampler[i].record_key for i in range(2 * len(records))]
    assert fast[0].rng is None

    iterator = iter(reader.grain_loader(records, 5, seed=7, num_epochs=2, keys=("id",)))
    for _ in range(12):                                   # past the first epoch's end
        next(iterator)
    resumed = iter(reader.grain_loader(reader.RandomAccess(plain), 5, seed=7, num_epochs=2, keys=("id",)))
    resumed.set_state(iterator.get_state())
    assert [_ids(b) for b in resumed] == want[12:]


def test_grain_loader_keeps_index_sampler_for_random_maps_and_runs_workers(plain):  # noqa: F811
    import grain.python as grain

    class Flip(grain.RandomMapTransform):
        def random_map(self, element, rng):
            flip = bool(rng.integers(2))
            return {**element, "image": element["image"][:, ::-1] if flip else element["image"]}

    records = reader.RandomAccess(plain)
    batches = list(reader.grain_loader(records, 6, seed=1, operations=[Flip()], worker_count=2,
                                        keys=("image", "id")))
    ids = sorted(i for b in batches for i in _ids(b))
    assert ids == sorted(records[i]["id"] for i in range(len(records)))


def _steps(per_rank) -> list:
    """The global batches the ranks' batches make together (each step's union, sorted)."""
    return [sorted(x for batches in per_rank if s < len(batches) for x in batches[s])
            for s in range(max(len(batches) for batches in per_rank))]


def _sampled(world, global_batch, **kwargs) -> list:
    """Each rank's batches of record indices: ``[rank][step] -> indices``."""
    out = []
    for rank in range(world):
        indices = list(reader.ElasticSampler(RECORDS_N, global_batch, rank=rank, world_size=world, **kwargs))
        size = global_batch // world
        out.append([indices[i:i + size] for i in range(0, len(indices), size)])
    return out


RECORDS_N = 48


@pytest.mark.parametrize("drop_last", [False, True], ids=["partial-last-batch", "drop-last"])
def test_the_elastic_sampler_resumes_on_any_world_size(drop_last):
    """4 ranks to step k, then 2 and 8 from k: the union of their batches is the single
    rank's uninterrupted stream, nothing repeated or skipped (3 epochs of 48 in global
    batches of 8 or of 16, across epoch ends; the last partial batch shared or dropped)."""
    for global_batch in (8, 16):
        single = _sampled(1, global_batch, seed=5, epochs=3, drop_last=drop_last)[0]
        flat = [i for b in single for i in b]
        assert len(flat) == (144 // global_batch * global_batch if drop_last else 144)
        assert all(sorted(flat[e * 48:(e + 1) * 48]) == list(range(48)) for e in range(len(flat) // 48))
        assert flat[:48] != flat[48:96]                                       # a new order each epoch
        k = 5
        four = [batches[:k] for batches in _sampled(4, global_batch, seed=5, epochs=3, drop_last=drop_last)]
        for world in (2, 8):
            later = _sampled(world, global_batch, seed=5, epochs=3, drop_last=drop_last, start_step=k)
            assert _steps(four) + _steps(later) == [sorted(b) for b in single], (global_batch, world)
            if drop_last:
                assert len({len(batches) for batches in later}) == 1                 # as many steps each
        endless = reader.ElasticSampler(RECORDS_N, global_batch, seed=5, epochs=None)
        assert [i for _, i in zip(range(144), endless)] == [i for b in _sampled(1, global_batch, seed=5, epochs=3)[0]
                                                              for i in b]


def test_the_elastic_sampler_refuses_what_it_cannot_share():
    with pytest.raises(ValueError, match="multiple of world_size"):
        reader.ElasticSampler(48, 10, world_size=4)
    with pytest.raises(ValueError, match="rank 4 is not below"):
        reader.ElasticSampler(48, 8, rank=4, world_size=4)
    with pytest.raises(ValueError, match="start_step must be"):
        reader.ElasticSampler(48, 8, start_step=-1)
    with pytest.raises(TypeError, match="no length"):
        len(reader.ElasticSampler(48, 8, epochs=None))


def test_torch_and_grain_loaders_read_the_elastic_share_with_any_workers(plain):  # noqa: F811
    """RandomAccess through torch_loader (0 and 2 workers) and grain_loader: 2 ranks to step 3,
    then 4 ranks from step 3, together the single rank's batches of the same records."""
    records = reader.RandomAccess(plain)
    ids = [records[i]["id"] for i in range(len(records))]

    def torch_batches(world, rank, start_step, workers):
        sampler = reader.ElasticSampler(len(records), 8, rank=rank, world_size=world, seed=9, epochs=2,
                                        start_step=start_step)
        loader = reader.torch_loader(records, 8 // world, sampler=sampler, keys=("id",), num_workers=workers)
        return [_ids(b) for b in loader]

    def grain_batches(world, rank, start_step):
        sampler = reader.ElasticSampler(len(records), 8, rank=rank, world_size=world, seed=9, epochs=2,
                                        start_step=start_step)
        return [_ids(b) for b in reader.grain_loader(records, 8 // world, sampler=sampler, keys=("id",))]

    single = [sorted(bytes(ids[i]) for i in b) for b in _sampled_records(len(records))]
    assert len(single) == 12
    for batches in (lambda w, r, s: torch_batches(w, r, s, 0), lambda w, r, s: torch_batches(w, r, s, 2),
                    grain_batches):
        first = [batches(2, rank, 0)[:3] for rank in range(2)]
        later = [batches(4, rank, 3) for rank in range(4)]
        assert _steps(first) + _steps(later) == single


def _sampled_records(n):
    indices = list(reader.ElasticSampler(n, 8, seed=9, epochs=2))
    return [indices[i:i + 8] for i in range(0, len(indices), 8)]
