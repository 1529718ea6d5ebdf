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
