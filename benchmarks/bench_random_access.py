"""Resume cost of ``reader.load(start_step=k)`` and throughput of ``reader.RandomAccess``.

Uses bench_reader's cached dataset: 5,002 224x224x3 uint8 images in 11 shards
(built once under benchmarks/.cache/reader/, page cache warmed before timing).

  resume    - ``reader.load(seed=0, resumable=True, batch_size=10, repeat=True, start_step=k)``:
              seconds from the call to the first batch, for k = 0 and the steps
              at images 10, 2,500 and 4,990 (k = 1, 250, 499), against the wall
              time of one whole epoch read the same way. Target: < 5 % of the epoch.
  load_seq  - ``reader.load(batch_size=32)`` (defaults: unseeded, uint8) over the
              epoch: the sequential reference; ``load_seed`` the same with seed=0
              (a seed alone: the pipeline of releases before ``start_step``);
              ``load_seed_prev`` that pipeline as 37bed93 built it (seeded shard
              shuffle, deterministic interleave, seeded 64 MiB shuffle buffer),
              rebuilt here from reader's parts, for the no-regression check;
              ``load_resumable`` seed=0 with ``resumable=True`` (the order
              ``start_step`` resumes).
  ra_random - ``RandomAccess`` in a random permutation of all indices, one
              process, records handed to Python one by one; target >= 0.5 x load_seq.
  grain_2w  - Grain ``DataLoader`` (IndexSampler, global shuffle, Batch(32)) over
              ``RandomAccess`` with 2 worker processes; target >= 0.8 x load_seq.
              ``grain_2w_tuned`` the same with ``ReadOptions(num_threads=2,
              prefetch_buffer_size=16)`` and ``worker_buffer_size=2`` (Grain's
              default buffer of 500 is scanned on every element); for both, the
              seconds to the first batch (worker start-up) are printed too.

Reported per method: best and median images/s over ``--repeats`` passes, and
CPU ms per 1000 images of this process and its children (the Grain workers).

    .venv/bin/python -m benchmarks.bench_random_access --repeats 3 --json out.json
    .venv/bin/python -m benchmarks.bench_random_access --smoke --json out.json   # 40 images, one round

``--smoke`` (tiny sizes, seconds; what tests/e2e/test_bench_smoke_b.py runs): every method and
the resume costs once, on bench_reader's smoke dataset of 40 images, resuming at images 0, 10,
20 and 30.
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

from benchmarks.bench_reader import (SMOKE_PNG_MB, _own_cpu, _warm_page_cache, converted, machine,  # noqa: E402
                                     png_source)

RESUME_IMAGES = (0, 10, 2500, 4990)
SMOKE_RESUME_IMAGES = (0, 10, 20, 30)
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
    from dcm2tfrecord import reader

    def run():
        return sum(int(images.shape[0]) for images, _ in reader.load(dataset, **kwargs))
    return run


def random_access_pass(dataset, seed):
    import numpy as np
    from dcm2tfrecord import reader

    def run():
        records = reader.RandomAccess(dataset)
        for i in np.random.default_rng(seed).permutation(len(records)):
            records[int(i)]
        return len(records)
    return run


FIRST_BATCH: dict = {}


def grain_pass(dataset, workers, seed, tuned=False, name="grain"):
    import grain.python as grain
    from dcm2tfrecord import reader

    def run():
        records = reader.RandomAccess(dataset)
        sampler = grain.IndexSampler(len(records), shard_options=grain.NoSharding(), shuffle=True,
                                     num_epochs=1, seed=seed)
        extra = dict(read_options=grain.ReadOptions(num_threads=2, prefetch_buffer_size=16),
                     worker_buffer_size=2) if tuned else {}
        started = time.perf_counter()
        loader = grain.DataLoader(data_source=records, sampler=sampler, worker_count=workers,
                                  operations=[grain.Batch(32)], **extra)
        images = 0
        for batch in loader:
            if not images:
                FIRST_BATCH.setdefault(name, []).append(time.perf_counter() - started)
            images += int(batch["image"].shape[0])
        return images
    return run


def previous_seeded_pass(dataset, seed=0, batch_size=32):
    """The seeded ``reader.load`` of 37bed93 (before start_step), from reader's parts."""
    import tensorflow as tf
    from dcm2tfrecord import reader
    from dcm2tfrecord.reader.tfdata import MAX_CYCLE_LENGTH, _read_buffer, _shuffle_buffer
    from dcm2tfrecord.reader.decode import batch_parser

    def run():
        meta = reader.info(dataset)
        # the split's SplitEntry (meta.split is now dataset.json's dict), as load passes it
        entry, plan = meta.entry("train"), meta.read_plan("train", None)
        buffer = _read_buffer(entry, meta.compression, plan.files)
        files = tf.data.Dataset.from_tensor_slices(tf.constant(list(plan.files), tf.string))
        files = files.shuffle(len(plan.files), seed=seed, reshuffle_each_iteration=True)
        records = files.interleave(
            lambda p: tf.data.TFRecordDataset(p, meta.compression, buffer_size=buffer),
            cycle_length=min(MAX_CYCLE_LENGTH, len(plan.files)), block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        records = records.shuffle(_shuffle_buffer(entry), seed=seed + 1, reshuffle_each_iteration=True)
        batches = records.batch(batch_size).map(batch_parser(meta.manifest, meta.layout("train"), "tuple", None, None),
                                                num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        options = tf.data.Options()
        options.deterministic = True
        return sum(int(images.shape[0]) for images, _ in batches.with_options(options).prefetch(tf.data.AUTOTUNE))
    return run


def resume_costs(dataset, repeats, resume_images=RESUME_IMAGES) -> dict:
    from dcm2tfrecord import reader
    steps = {images: images // RESUME_BATCH for images in resume_images}
    out = {}
    for images, k in steps.items():
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            ds = reader.load(dataset, batch_size=RESUME_BATCH, seed=0, resumable=True, repeat=True,
                             start_step=k)
            next(iter(ds))
            times.append(time.perf_counter() - started)
        out[images] = {"step": k, "first_batch_s": min(times), "median_s": statistics.median(times)}
    times = []
    for _ in range(repeats):                       # the same start-up without seed: the floor
        started = time.perf_counter()
        next(iter(reader.load(dataset, batch_size=RESUME_BATCH, repeat=True)))
        times.append(time.perf_counter() - started)
    out["unseeded"] = {"step": 0, "first_batch_s": min(times), "median_s": statistics.median(times)}
    return out


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs (40 images, "
                             "one round)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats = 1
    dataset = converted(png_source(SMOKE_PNG_MB) if args.smoke else png_source())
    from dcm2tfrecord import reader
    meta = reader.info(dataset)
    _warm_page_cache(meta.shard_paths())
    total = meta.num_records()
    steps = meta.steps_per_epoch("train", RESUME_BATCH)
    methods = {
        "load_seq": load_pass(dataset, batch_size=32),
        "load_seed": load_pass(dataset, batch_size=32, seed=0),
        "load_seed_prev": previous_seeded_pass(dataset),
        "load_resumable": load_pass(dataset, batch_size=32, seed=0, resumable=True),
        "load_seed_b10": lambda: sum(
            int(b[0].shape[0]) for b in reader.load(dataset, batch_size=RESUME_BATCH, seed=0,
                                                    resumable=True, repeat=True, start_step=0).take(steps)),
        "ra_random": random_access_pass(dataset, 0),
        "grain_2w": grain_pass(dataset, 2, 0, name="grain_2w"),
        "grain_2w_tuned": grain_pass(dataset, 2, 0, tuned=True, name="grain_2w_tuned"),
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
    resume = resume_costs(dataset, args.repeats, SMOKE_RESUME_IMAGES if args.smoke else RESUME_IMAGES)
    epoch_s = total / summary["load_seed_b10"]["best_images_per_s"]
    print(f"\n{machine()}\n{total} records, {len(meta.shard_paths())} shards\n")
    print("| method | images/s best | median | CPU ms / 1000 images |\n|---|---|---|---|")
    for name, row in summary.items():
        print(f"| {name} | {row['best_images_per_s']:,.0f} | {row['median_images_per_s']:,.0f} | "
              f"{row['cpu_ms_per_1000']:,.0f} |")
    base = summary["load_seq"]
    print("\n| ratio | best | median |\n|---|---|---|")
    for name in ("load_seed", "load_seed_prev", "load_resumable", "ra_random", "grain_2w", "grain_2w_tuned"):
        print(f"| {name} / load_seq | {summary[name]['best_images_per_s'] / base['best_images_per_s']:.2f} | "
              f"{summary[name]['median_images_per_s'] / base['median_images_per_s']:.2f} |")
    for name in ("load_seed", "load_resumable"):
        print(f"\n{name} / load_seed_prev: best {summary[name]['best_images_per_s'] / summary['load_seed_prev']['best_images_per_s']:.2f}, "
              f"CPU per image {summary[name]['cpu_ms_per_1000'] / max(summary['load_seed_prev']['cpu_ms_per_1000'], 1e-9):.2f}x",
              end="")
    print()
    for name, times in FIRST_BATCH.items():
        print(f"{name}: first batch after {min(times):.2f} s (best), {statistics.median(times):.2f} s (median)")
        runs = passes[name]
        steady = [(r["images"] - 32) / (r["wall_s"] - t) for r, t in zip(runs, times)]
        print(f"{name}: after the first batch {max(steady):,.0f} images/s (best) = "
              f"{max(steady) / base['best_images_per_s']:.2f} x load_seq")
    print(f"\nepoch (seed=0, resumable, batch {RESUME_BATCH}, best pass): {epoch_s:.3f} s")
    print("| resume at image | step | first batch s (best) | median | best / epoch | median - k=0 median |\n"
          "|---|---|---|---|---|---|")
    for images, row in resume.items():
        print(f"| {images} | {row['step']} | {row['first_batch_s']:.3f} | {row['median_s']:.3f} | "
              f"{100 * row['first_batch_s'] / epoch_s:.1f} % | "
              f"{row['median_s'] - resume[0]['median_s']:+.3f} s |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"summary": summary, "grain_first_batch_s": FIRST_BATCH, "resume": {str(k): v for k, v in resume.items()},
                       "epoch_s": epoch_s}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
