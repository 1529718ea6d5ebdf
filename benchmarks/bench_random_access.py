"""Resume cost of ``reader.load(start_step=k)`` and throughput of ``reader.RandomAccess``.

Uses bench_reader's cached dataset: 5,002 224x224x3 uint8 images in 11 shards
(built once under benchmarks/.cache/reader/, page cache warmed before timing).

  resume    - ``reader.load(seed=0, batch_size=10, repeat=True, start_step=k)``:
              seconds from the call to the first batch, for k = 0 and the steps
              at images 10, 2,500 and 4,990 (k = 1, 250, 499), against the wall
              time of one whole epoch read the same way. Target: < 5 % of the epoch.
  load_seq  - ``reader.load(batch_size=32)`` (defaults: unseeded, uint8) over the
              epoch: the sequential reference; ``load_seed`` the same with seed=0.
  ra_random - ``RandomAccess`` in a random permutation of all indices, one
              process, records handed to Python one by one; target >= 0.5 x load_seq.
  grain_2w  - Grain ``DataLoader`` (IndexSampler, global shuffle, Batch(32)) over
              ``RandomAccess`` with 2 worker processes; target >= 0.8 x load_seq.

Reported per method: best and median images/s over ``--repeats`` passes, and
CPU ms per 1000 images of this process and its children (the Grain workers).

    .venv/bin/python -m benchmarks.bench_random_access --repeats 3 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_reader import _own_cpu, _warm_page_cache, converted, machine, png_source  # noqa: E402

RESUME_IMAGES = (0, 10, 2500, 4990)
RESUME_BATCH = 10


def _children_cpu() -> float:
    return _own_cpu()          # os.times() includes reaped children (Grain's workers)


def timed(run) -> dict:
    cpu, started = _children_cpu(), time.perf_counter()
    images = run()
    wall = time.perf_counter() - started
    return {"images": images, "wall_s": wall, "cpu_s": _children_cpu() - cpu,
            "images_per_s": images / wall}


def load_pass(dataset, **kwargs):
    import reader

    def run():
        return sum(int(images.shape[0]) for images, _ in reader.load(dataset, **kwargs))
    return run


def random_access_pass(dataset, seed):
    import numpy as np
    import reader

    def run():
        records = reader.RandomAccess(dataset)
        for i in np.random.default_rng(seed).permutation(len(records)):
            records[int(i)]
        return len(records)
    return run


def grain_pass(dataset, workers, seed):
    import grain.python as grain
    import reader

    def run():
        records = reader.RandomAccess(dataset)
        sampler = grain.IndexSampler(len(records), shard_options=grain.NoSharding(), shuffle=True,
                                     num_epochs=1, seed=seed)
        loader = grain.DataLoader(data_source=records, sampler=sampler, worker_count=workers,
                                  operations=[grain.Batch(32)])
        return sum(int(batch["image"].shape[0]) for batch in loader)
    return run


def resume_costs(dataset, repeats) -> dict:
    import reader
    steps = {images: images // RESUME_BATCH for images in RESUME_IMAGES}
    out = {}
    for images, k in steps.items():
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            ds = reader.load(dataset, batch_size=RESUME_BATCH, seed=0, repeat=True, start_step=k)
            next(iter(ds))
            times.append(time.perf_counter() - started)
        out[images] = {"step": k, "first_batch_s": min(times), "median_s": statistics.median(times)}
    return out


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    dataset = converted(png_source())
    import reader
    meta = reader.info(dataset)
    _warm_page_cache(meta.shard_paths())
    total = meta.num_records()
    steps = meta.steps_per_epoch("train", RESUME_BATCH)
    methods = {
        "load_seq": load_pass(dataset, batch_size=32),
        "load_seed": load_pass(dataset, batch_size=32, seed=0),
        "load_seed_b10": lambda: sum(
            int(b[0].shape[0]) for b in reader.load(dataset, batch_size=RESUME_BATCH, seed=0,
                                                    repeat=True, start_step=0).take(steps)),
        "ra_random": random_access_pass(dataset, 0),
        "grain_2w": grain_pass(dataset, 2, 0),
    }
    passes = {name: [] for name in methods}
    for round_ in range(args.repeats):
        for name, run in methods.items():
            result = timed(run)
            passes[name].append(result)
            print(f"  round {round_ + 1} {name:14s} {result['images']:5d} images {result['wall_s']:6.2f} s "
                  f"{result['images_per_s']:7.0f} img/s cpu {result['cpu_s']:.2f} s", flush=True)
    summary = {}
    for name, runs in passes.items():
        ranked = sorted(r["images_per_s"] for r in runs)
        summary[name] = {"best_images_per_s": ranked[-1],
                         "median_images_per_s": ranked[len(ranked) // 2],
                         "cpu_ms_per_1000": 1e6 * statistics.median(r["cpu_s"] / r["images"] for r in runs),
                         "passes": [round(r["images_per_s"]) for r in runs]}
    resume = resume_costs(dataset, args.repeats)
    epoch_s = total / summary["load_seed_b10"]["best_images_per_s"]
    print(f"\n{machine()}\n{total} records, {len(meta.shard_paths())} shards\n")
    print("| method | images/s best | median | CPU ms / 1000 images |\n|---|---|---|---|")
    for name, row in summary.items():
        print(f"| {name} | {row['best_images_per_s']:,.0f} | {row['median_images_per_s']:,.0f} | "
              f"{row['cpu_ms_per_1000']:,.0f} |")
    base = summary["load_seq"]
    print("\n| ratio | best | median |\n|---|---|---|")
    for name in ("load_seed", "ra_random", "grain_2w"):
        print(f"| {name} / load_seq | {summary[name]['best_images_per_s'] / base['best_images_per_s']:.2f} | "
              f"{summary[name]['median_images_per_s'] / base['median_images_per_s']:.2f} |")
    print(f"\nepoch (seed=0, batch {RESUME_BATCH}, best pass): {epoch_s:.3f} s")
    print("| resume at image | step | first batch s (best) | median | best / epoch |\n|---|---|---|---|---|")
    for images, row in resume.items():
        print(f"| {images} | {row['step']} | {row['first_batch_s']:.3f} | {row['median_s']:.3f} | "
              f"{100 * row['first_batch_s'] / epoch_s:.1f} % |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"summary": summary, "resume": {str(k): v for k, v in resume.items()},
                       "epoch_s": epoch_s}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
