"""Reading gzip shards against plain ones (issue 36, item 2): images/s and CPU per image of
``reader.load`` over the same 224x224x3 images converted plain, ``--compression gzip``
(``--gzip_level 1``, the default) and ``--gzip_level 9``, in one run, with the ratios.

Methods (each reads the whole split once per pass, batches of ``--batch``, from the page cache):

  plain         reader.load(plain dataset)
  gzip1         reader.load(gzip shards, level 1): TensorFlow's zlib, shards inflated in
                parallel by the interleave (cycle_length = min(shards, 16))
  gzip1_serial  the same with cycle_length=1: one shard at a time, one inflating thread
  gzip9         reader.load(gzip shards, level 9)
  pyinflate     design B: shards inflated by Python's zlib (the GIL released while it
                inflates) and handed to tf.data by Dataset.from_generator, interleaved the
                same way; records framed in Python, batched as reader.load does

and the floor: ``inflate`` is zlib alone inflating the level-1 shards (CPU per image), so
``cores / (inflate + plain's CPU per image)`` is the most images/s any reader of these
shards reaches on this machine's cores with zlib.

Reported per method: best and median images/s, CPU ms per image (median), and ratios to plain.

    .venv/bin/python -m benchmarks.bench_gzip_read --repeats 3
    .venv/bin/python -m benchmarks.bench_gzip_read --smoke    # 31 images, once (tests/e2e/test_bench_smoke_a.py)

CPU time is counted in clock ticks (os.times): at ``--smoke`` size a method's CPU per image can
read 0, and its ratios then print as nan.
"""
from __future__ import annotations

import argparse
import os
import statistics
import struct
import subprocess
import sys
import time
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import CACHE_DIR                                     # noqa: E402
from benchmarks.bench_reader import PNG_MB, SHARD_ARGS, _own_cpu, _warm_page_cache, converted, machine, png_source  # noqa: E402,E501
from dcm2tfrecord.dataset.names import MANIFEST_NAME                          # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def converted_gzip(source, level: int) -> str:
    """The archive converted as bench_reader's, with ``--compression gzip --gzip_level level``."""
    out = os.path.join(CACHE_DIR, "reader", f"{os.path.basename(source.path)}_gzip{level}")
    if not os.path.exists(os.path.join(out, MANIFEST_NAME)):
        print(f"[bench_gzip_read] converting {source.path} -> {out} ...", flush=True)
        subprocess.run([sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", source.path,
                        "--output", out, "--overwrite", *SHARD_ARGS, "--id_salt", "bench_reader",
                        "--compression", "gzip", "--gzip_level", str(level)],
                       cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return out


def python_inflated(dataset: str, batch: int):
    """Design B: zlib in Python per shard, records into tf.data by from_generator."""
    import tensorflow as tf
    from dcm2tfrecord import reader
    from dcm2tfrecord.reader.decode import batch_parser
    meta = reader.info(dataset)
    files = meta.shard_paths("train")

    def records(path):
        inflater, pending = zlib.decompressobj(31), b""
        with open(path, "rb") as handle:
            while True:
                raw = handle.read(1 << 20)
                pending = pending + inflater.decompress(raw) if raw else pending
                out, position = [], 0
                while len(pending) - position >= 12:
                    length = struct.unpack_from("<Q", pending, position)[0]
                    end = position + 12 + length + 4
                    if end > len(pending):
                        break
                    out.append(pending[position + 12:position + 12 + length])
                    position = end
                pending = pending[position:]
                if out:
                    yield out
                if not raw:
                    return

    def shard(path):
        return tf.data.Dataset.from_generator(records, args=(path,),
                                              output_signature=tf.TensorSpec([None], tf.string)).unbatch()

    parse = batch_parser(meta.manifest, meta.layout("train"), "tuple", None, None, False)
    return (tf.data.Dataset.from_tensor_slices(files)
            .interleave(shard, cycle_length=min(len(files), 16), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch).map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def inflate_ms_per_image(files, images: int) -> float:
    cpu = time.process_time()
    for path in files:
        with open(path, "rb") as handle:
            zlib.decompress(handle.read(), 31)
    return 1000 * (time.process_time() - cpu) / images


def _ratio(a: float, b: float) -> float:
    """a / b, nan where b is 0 (CPU in clock ticks: a short pass can read 0)."""
    return a / b if b else float("nan")


def one_pass(make) -> dict:
    ds = make()
    cpu, started, images = _own_cpu(), time.perf_counter(), 0
    for images_batch, _ in ds:
        images += int(images_batch.shape[0])
    wall = time.perf_counter() - started
    return {"images": images, "per_s": images / wall, "cpu_ms": 1000 * (_own_cpu() - cpu) / max(images, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--png-mb", type=float, default=PNG_MB, help="224x224x3 images (718: 5,002)")
    parser.add_argument("--no-level9", action="store_true", help="skip the --gzip_level 9 shards")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.png_mb, args.batch, args.repeats = 4.4, 8, 1          # 31 images
    source = png_source(args.png_mb)
    plain, gzip1 = converted(source), converted_gzip(source, 1)
    gzip9 = None if args.no_level9 else converted_gzip(source, 9)

    from dcm2tfrecord import reader
    b = args.batch
    methods = {"plain": lambda: reader.load(plain, batch_size=b),
               "gzip1": lambda: reader.load(gzip1, batch_size=b),
               "gzip1_serial": lambda: reader.load(gzip1, batch_size=b, cycle_length=1)}
    if gzip9:
        methods["gzip9"] = lambda: reader.load(gzip9, batch_size=b)
    methods["pyinflate"] = lambda: python_inflated(gzip1, b)
    for dataset in filter(None, (plain, gzip1, gzip9)):
        _warm_page_cache(reader.info(dataset).shard_paths("train"))
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    passes: dict = {name: [] for name in methods}
    for round_ in range(args.repeats):
        for name, make in methods.items():
            result = one_pass(make)
            passes[name].append(result)
            print(f"  round {round_ + 1} {name:13s} {result['per_s']:6.0f} images/s "
                  f"{result['cpu_ms']:.3f} ms CPU/image (load {os.getloadavg()[0]:.1f})", flush=True)
    images = passes["plain"][0]["images"]
    short = {name: [r["images"] for r in runs] for name, runs in passes.items() if any(r["images"] != images for r in runs)}
    if short:
        raise SystemExit(f"not every method read the {images} images of plain: {short}")
    summary = {name: {"best": max(r["per_s"] for r in runs), "median": statistics.median(r["per_s"] for r in runs),
                      "cpu_ms": statistics.median(r["cpu_ms"] for r in runs)} for name, runs in passes.items()}
    inflate = {level: inflate_ms_per_image(reader.info(d).shard_paths("train"), images)
               for level, d in ((1, gzip1), (9, gzip9)) if d}
    base = summary["plain"]
    print(f"load average after: {os.getloadavg()[0]:.1f}; {images} images")
    print("| method | images/s best | median | x plain (best) | CPU ms/image | x plain |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, s in summary.items():
        print(f"| {name} | {s['best']:.0f} | {s['median']:.0f} | {_ratio(s['best'], base['best']):.2f} | "
              f"{s['cpu_ms']:.3f} | {_ratio(s['cpu_ms'], base['cpu_ms']):.2f} |")
    cores = os.cpu_count() or 1
    for level, ms in inflate.items():
        ceiling = _ratio(1000 * cores, ms + base["cpu_ms"])
        print(f"zlib inflate alone, level {level} shards: {ms:.3f} ms CPU/image; a gzip reader's ceiling "
              f"on {cores} cores, all busy: {cores} / ({ms:.3f} + plain's {base['cpu_ms']:.3f} ms) = "
              f"{ceiling:.0f} images/s, {_ratio(ceiling, base['best']):.2f} x plain's best of this run")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
