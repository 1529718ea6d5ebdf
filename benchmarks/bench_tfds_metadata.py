"""What TFDS's metadata costs a conversion (issue 36, item 5): dataset_info.json, features.json and
label.labels.txt, built from dataset.json and written at commit.

Converts a labelled PNG archive once (in this process, Beam's in-memory runner: the process's CPU
is the conversion's), then times, on its committed manifest, the commit's own writes: dataset.json
(the baseline, encoded and written through a temp file and a rename) and the TFDS files (built and
written the same way), ``--repeats`` times; and the same two on a manifest of ``--shards`` shards
(its TFDS share of a conversion is left out: this archive is not that dataset).

    .venv/bin/python -m benchmarks.bench_tfds_metadata --images 2000 --shards 10000 --repeats 50
    .venv/bin/python -m benchmarks.bench_tfds_metadata --smoke     # 40 images, 200 shards, 3 repeats
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np                                                      # noqa: E402
from PIL import Image                                                   # noqa: E402

from dcm2tfrecord.dataset import tfds_metadata                          # noqa: E402
from dcm2tfrecord.dataset.files import write_atomically                 # noqa: E402
from dcm2tfrecord.dataset.manifest import ShardEntry, encode_manifest, read_manifest  # noqa: E402
from dcm2tfrecord.dataset.names import MANIFEST_NAME, shard_file_name   # noqa: E402
from dcm2tfrecord.pipeline import convert                               # noqa: E402
from dcm2tfrecord.pipeline.options.table import ConvertOptions           # noqa: E402

IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]


def archive(root: str, images: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(images):
        folder = os.path.join(root, f"class_{i % 4}")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(os.path.join(folder, f"{i}.png"))


def timed(fn, repeats: int) -> tuple[float, float]:
    """Median (CPU ms, wall ms) of ``fn()``."""
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        fn()
        cpu.append((time.process_time() - c) * 1e3)
        wall.append((time.perf_counter() - w) * 1e3)
    return statistics.median(cpu), statistics.median(wall)


def commit_writes(out: str, manifest, repeats: int) -> tuple[tuple[float, float], tuple[float, float]]:
    base = timed(lambda: write_atomically(out, MANIFEST_NAME + ".bench", encode_manifest(manifest).encode("utf-8"),
                                          "application/json"), repeats)
    tfds = timed(lambda: tfds_metadata.write_tfds_metadata(out, manifest), repeats)
    return base, tfds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000, help="64x64 RGB PNGs, four classes")
    parser.add_argument("--shards", type=int, default=10000, help="shards of the synthetic manifest")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs "
                             "(40 images, a manifest of 200 shards, 3 repeats)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.images, args.shards, args.repeats = 40, 200, 3
    with tempfile.TemporaryDirectory() as tmp:
        archive(os.path.join(tmp, "in"), args.images)
        out = os.path.join(tmp, "out")
        opts = ConvertOptions(inputs=(os.path.join(tmp, "in"),), output=out, id_salt="bench-tfds",
                              labels_from_dirs=True, target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=2,
                              progress="none")
        cpu, wall = time.process_time(), time.perf_counter()
        summary = convert.run(opts, IN_MEMORY, quiet=True)
        cpu, wall = (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3
        manifest = read_manifest(out)
        shards = sum(len(e.shards) for e in manifest.splits.values())
        rows = [(f"the conversion ({summary['records']} records, {shards} shards)", commit_writes(out, manifest,
                                                                                                   args.repeats))]
        entry = manifest.splits["train"]
        many = tuple(ShardEntry(file=shard_file_name("train", i, args.shards), num_records=10, num_bytes=10 << 20,
                                sha256="0" * 64) for i in range(args.shards))
        big = dataclasses.replace(manifest, splits={"train": dataclasses.replace(
            entry, shards=many, num_shards=args.shards, num_records=10 * args.shards)})
        rows.append((f"a manifest of {args.shards} shards", commit_writes(out, big, max(5, args.repeats // 10))))
        print(f"conversion: {cpu:.0f} ms CPU, {wall:.0f} ms wall ({summary['records']} records)")
        print("| manifest | dataset.json CPU ms | TFDS files CPU ms | x dataset.json | TFDS wall ms "
              "| TFDS CPU / conversion CPU |")
        print("|---|---:|---:|---:|---:|---:|")
        for n, (name, ((base_cpu, _), (tfds_cpu, tfds_wall))) in enumerate(rows):
            share = f"{tfds_cpu / cpu:.5f}" if n == 0 else "-"
            print(f"| {name} | {base_cpu:.2f} | {tfds_cpu:.2f} | {tfds_cpu / max(base_cpu, 1e-6):.2f} | "
                  f"{tfds_wall:.2f} | {share} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
