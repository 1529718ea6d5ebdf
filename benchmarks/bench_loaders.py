"""``RandomAccess`` in PyTorch and Grain (issue 36, item 4): the defaults against
``reader.torch_loader`` / ``reader.grain_loader``, in one run.

Two datasets, built once (cached under benchmarks/.cache/reader/): bench_reader's 224x224x3
uint8 images (``--png-mb``) and 512x512 int16 CT slices (``--ct-mb``). Per dataset, each method
reads one shuffled epoch in batches of ``--batch`` (every record once, its ``image`` handed to
Python as a tensor or array):

  torch_0w          DataLoader(records, batch_size, shuffle=True): torch's default threads
  torch_0w_1thread  the same after torch.set_num_threads(1) (OMP_NUM_THREADS=1)
  recipe_0w         reader.torch_loader(records, batch_size, seed=0): numpy_collate
  torch_2w          DataLoader(..., num_workers=2)
  recipe_2w         reader.torch_loader(..., num_workers=2): batches stacked into shared
                    memory in the workers
  grain_0w          grain.DataLoader(IndexSampler(seed=0), Batch, worker_count=0), defaults
  recipe_grain_0w   reader.grain_loader(records, batch_size, seed=0)

Reported: CPU ms per record of this process and its children (the loader workers, reaped at
the end of each epoch: os.times()), the steady figure on a shared machine, and records/s;
median of ``--repeats`` round-robin passes; ratios to recipe_0w (torch, 0 workers).

    .venv/bin/python -m benchmarks.bench_loaders --repeats 3
    .venv/bin/python -m benchmarks.bench_loaders --smoke    # 20 images, 3 slices, once (tests/e2e/test_bench_smoke_a.py)

CPU time is counted in clock ticks (os.times): at ``--smoke`` size a pass's CPU per record can
read 0, and a ratio over it then prints as nan.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import ct_archive                                   # noqa: E402
from benchmarks.bench_reader import _own_cpu, _warm_page_cache, converted, machine, png_source  # noqa: E402


def torch_default(dataset, batch, workers, threads=None):
    def make():
        import torch
        from torch.utils.data import DataLoader
        from dcm2tfrecord import reader
        if threads:
            torch.set_num_threads(threads)
        generator = torch.Generator()
        generator.manual_seed(0)
        return DataLoader(reader.RandomAccess(dataset), batch_size=batch, shuffle=True,
                          num_workers=workers, generator=generator)
    return make


def torch_recipe(dataset, batch, workers):
    def make():
        from dcm2tfrecord import reader
        return reader.torch_loader(reader.RandomAccess(dataset), batch, seed=0, num_workers=workers)
    return make


def grain_default(dataset, batch):
    def make():
        import grain.python as grain
        from dcm2tfrecord import reader
        records = reader.RandomAccess(dataset)
        sampler = grain.IndexSampler(len(records), shard_options=grain.NoSharding(), shuffle=True,
                                     num_epochs=1, seed=0)
        return grain.DataLoader(data_source=records, sampler=sampler, worker_count=0,
                                operations=[grain.Batch(batch)])
    return make


def grain_recipe(dataset, batch):
    def make():
        from dcm2tfrecord import reader
        return reader.grain_loader(reader.RandomAccess(dataset), batch, seed=0)
    return make


def one_pass(make, threads_after: int) -> dict:
    import torch
    loader = make()
    cpu, started = _own_cpu(), time.perf_counter()
    records = 0
    for batch in loader:
        records += int(batch["image"].shape[0])
    del loader                 # workers exit and are reaped: their CPU enters os.times()
    wall, cpu = time.perf_counter() - started, _own_cpu() - cpu
    torch.set_num_threads(threads_after)
    return {"records": records, "cpu_ms": 1000 * cpu / records, "per_s": records / wall}


def measure(methods: dict, repeats: int, expected: int) -> dict:
    """Each method's median over ``repeats`` passes; every pass must read ``expected`` records."""
    import torch
    threads = torch.get_num_threads()
    passes: dict = {name: [] for name in methods}
    for round_ in range(repeats):
        for name, make in methods.items():
            result = one_pass(make, threads)
            passes[name].append(result)
            if result["records"] != expected:
                raise SystemExit(f"{name} read {result['records']} records of {expected}")
            print(f"  round {round_ + 1} {name:18s} {result['cpu_ms']:.3f} ms CPU/record "
                  f"{result['per_s']:7.0f} records/s", flush=True)
    return {name: {"cpu_ms": statistics.median(r["cpu_ms"] for r in runs),
                   "per_s": statistics.median(r["per_s"] for r in runs),
                   "cpu_passes": [round(r["cpu_ms"], 3) for r in runs]} for name, runs in passes.items()}


def table(title: str, summary: dict, base: str = "recipe_0w") -> list[str]:
    rows = [f"| {title} | CPU ms/record | x {base} | records/s | CPU per pass |", "|---|---:|---:|---:|---|"]
    for name, s in summary.items():
        ratio = s["cpu_ms"] / summary[base]["cpu_ms"] if summary[base]["cpu_ms"] else float("nan")
        rows.append(f"| {name} | {s['cpu_ms']:.3f} | {ratio:.2f} | "
                    f"{s['per_s']:.0f} | {s['cpu_passes']} |")
    return rows


def methods_for(dataset: str, batch: int) -> dict:
    return {"torch_0w": torch_default(dataset, batch, 0),
            "torch_0w_1thread": torch_default(dataset, batch, 0, threads=1),
            "recipe_0w": torch_recipe(dataset, batch, 0),
            "torch_2w": torch_default(dataset, batch, 2),
            "recipe_2w": torch_recipe(dataset, batch, 2),
            "grain_0w": grain_default(dataset, batch),
            "recipe_grain_0w": grain_recipe(dataset, batch)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--png-mb", type=float, default=718.0, help="224x224x3 images (718: 5,002)")
    parser.add_argument("--ct-mb", type=float, default=150.0, help="512x512 int16 slices (150: 300)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.png_mb, args.ct_mb, args.batch, args.repeats = 2.9, 1.5, 4, 1     # 20 images, 3 slices
    import torch
    datasets = {"224x224x3 uint8": converted(png_source(args.png_mb)),
                "512x512 int16 CT": converted(ct_archive(args.ct_mb))}
    print(f"machine: {machine()}, torch {torch.__version__} ({torch.get_num_threads()} threads); "
          f"load average {os.getloadavg()[0]:.1f}")
    lines: list[str] = []
    for title, dataset in datasets.items():
        from dcm2tfrecord import reader
        records = reader.RandomAccess(dataset)
        _warm_page_cache(records._paths)
        print(f"{title}: {dataset} ({len(records)} records)")
        lines += table(title, measure(methods_for(dataset, args.batch), args.repeats, len(records))) + [""]
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
