"""Reader throughput: how close ``reader.load`` comes to reading the raw bytes.

Builds once (cached under benchmarks/.cache/reader/) a dataset of 5,002
224x224x3 uint8 images (benchmarks/archives.py ``png_archive(718)``, converted
by ``python -m dcm2tfrecord.pipeline convert``) and, in one process, measures images/s of:

  a. raw      - ``tf.data.TFRecordDataset(shards, num_parallel_reads=...)`` with
                TensorFlow's default read buffer, batched, nothing parsed: the I/O +
                framing (CRC) limit; ``a_unbuf`` the same with ``buffer_size=0``, the
                unbuffered read ``reader.load`` uses for records of 64 KiB and more.
  b. classic  - the textbook per-record reader: ``TFRecordDataset(shards)
                .map(parse_single_example -> decode_raw -> reshape -> cast/255,
                num_parallel_calls=AUTOTUNE).batch().prefetch(AUTOTUNE)``;
                ``b_uint8`` the same without the cast (uint8 out, like d).
  c. png      - the same images as a directory of PNG files:
                ``map(read_file -> tf.io.decode_png, AUTOTUNE).batch().prefetch()``.
  d. reader   - ``reader.load(dataset, batch_size)`` with its defaults (shuffled,
                uint8 as stored); ``d_float`` adds ``dtype="float32", scale=1/255``,
                the same output as b; ``d_unshuffled`` is ``shuffle=False`` (the
                records in their stored order: a and d_unshuffled read the same
                bytes, so d_unshuffled / a is the reader's own cost).

Ratios: d/a, d_float/b and d/b_uint8 (same output), d/c (same uint8 output);
targets d >= 0.9 a, d >= 1.5 b, d >= 5 c. Then the same a vs d for 1,000
512x512 int16 CT slices (``ct_archive(500)``). ``--breakdown`` adds the stages
between a_unbuf and d (``s_parse``: + one ``parse_example`` per batch;
``s_decode``: + ``decode_raw`` and reshape, i.e. d without its shuffle) and a
memcpy reference, to show where d's time goes.

Every method hands batches of ``--batch`` images to Python, which counts
them; each pass reads the whole dataset (c: the first ``--png-images`` files)
from the page cache (every file is read once before timing). Methods run
round-robin ``--repeats`` times, each pass after waiting (up to
``--quiet-wait`` s) for other processes to leave the cores alone. Reported per
method: the best pass (other processes only ever slow a pass down, so the
best is the least disturbed), the median pass, and the CPU time this process
spent per 1000 images (independent of what else runs on the machine), with
the ratios of all three.

    .venv/bin/python -m benchmarks.bench_reader
    .venv/bin/python -m benchmarks.bench_reader --repeats 3 --png-images 2000 --json out.json
    .venv/bin/python -m benchmarks.bench_reader --breakdown
    .venv/bin/python -m benchmarks.bench_reader --png-mb 430.67 --no-ct --repeats 5   # 3,000 images
    .venv/bin/python -m benchmarks.bench_reader --smoke     # 40 images, 8 slices, one pass, with --breakdown
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import CACHE_DIR, Archive, ct_archive, png_archive   # noqa: E402
from dcm2tfrecord.dataset.names import MANIFEST_NAME  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PNG_MB = 718.0        # 5,002 images of 224x224x3 (147 KiB each)
CT_MB = 500.0         # 1,000 slices of 512x512 int16 (512 KiB each)
SMOKE_PNG_MB = 5.75   # 40 images (bench_random_access --smoke reads the same dataset)
SMOKE_CT_MB = 4.0     # 8 slices
SHARD_ARGS = ["--target_shard_mb", "64", "--min_shard_mb", "32", "--max_shard_mb", "128"]


# ---------------------------------------------------------------- datasets (built once)


def _seed_from_smaller(name: str, archive_params: dict) -> None:
    """Hard-links the files of a cached smaller PNG archive of the same generator.

    archives.py derives every file from (kind, seed, size, index) only and keeps
    files already present, so a smaller archive's files are this one's first files.
    """
    target = os.path.join(CACHE_DIR, name)
    if os.path.exists(target + ".complete"):
        return
    prefix = f"png{archive_params['size']}_"
    suffix = f"_s{archive_params['seed']}_v{archive_params['v']}"
    for other in sorted(os.listdir(CACHE_DIR) if os.path.isdir(CACHE_DIR) else []):
        if not (other.startswith(prefix) and other.endswith(suffix + ".complete")):
            continue
        source = os.path.join(CACHE_DIR, other[: -len(".complete")])
        for folder, _, files in os.walk(source):
            for f in files:
                src = os.path.join(folder, f)
                dst = os.path.join(target, os.path.relpath(src, source))
                if not os.path.exists(dst):
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    os.link(src, dst)


def png_source(mb: float = PNG_MB) -> Archive:
    params = {"size": 224, "seed": 0, "v": 1}
    _seed_from_smaller(f"png224_{mb:g}MB_s0_v1", params)
    return png_archive(mb)


def converted(archive: Archive, log=print) -> str:
    """The archive converted with default options (shards of 32-128 MiB); cached."""
    out = os.path.join(CACHE_DIR, "reader", os.path.basename(archive.path))
    if os.path.exists(os.path.join(out, MANIFEST_NAME)):
        return out
    log(f"[bench_reader] converting {archive.path} -> {out} ...")
    started = time.time()
    # converted beside it and renamed into place: two benchmarks that want the same dataset at
    # once (bench_reader and bench_random_access --smoke, tests/e2e/test_bench_smoke_b.py under
    # pytest-xdist) each convert their own, and the one renamed first is kept
    building = f"{out}.building{os.getpid()}"
    cmd = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive.path, "--output", building,
           "--overwrite", *SHARD_ARGS]
    usage = subprocess.run(cmd[:4] + ["--help"], cwd=REPO, capture_output=True, text=True).stdout
    if "--id_salt" in usage:          # record ids play no part in reading speed
        cmd += ["--id_salt", "bench_reader"]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    if os.path.exists(os.path.join(out, MANIFEST_NAME)):     # another process's came first
        shutil.rmtree(building, ignore_errors=True)
        return out
    shutil.rmtree(out, ignore_errors=True)          # an earlier conversion that did not finish
    try:
        os.rename(building, out)
    except OSError:                                 # another process's came first, just now
        shutil.rmtree(building, ignore_errors=True)
    log(f"[bench_reader] converted in {time.time() - started:.0f} s")
    return out


def _warm_page_cache(paths) -> None:
    for path in paths:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass


# ---------------------------------------------------------------- the measured pipelines


def raw_bytes(tf, files, batch, buffer_size=None):
    """(a) TFRecord framing only: as fast as the shards can be read.

    ``buffer_size=None`` is TensorFlow's default (256 KiB); 0 reads unbuffered.
    """
    ds = tf.data.TFRecordDataset(files, buffer_size=buffer_size,
                                 num_parallel_reads=min(len(files), 16))
    return ds.batch(batch).prefetch(tf.data.AUTOTUNE)


def classic(tf, files, batch, to_float=True):
    """(b) The per-record reader of countless tutorials (``to_float=False``: uint8 out)."""
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "height": tf.io.FixedLenFeature([], tf.int64),
            "width": tf.io.FixedLenFeature([], tf.int64),
            "channels": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):
        ex = tf.io.parse_single_example(serialized, spec)
        image = tf.reshape(tf.io.decode_raw(ex["image_raw"], tf.uint8),
                           [ex["height"], ex["width"], ex["channels"]])
        return (tf.cast(image, tf.float32) / 255.0 if to_float else image), ex["label"]

    ds = tf.data.TFRecordDataset(files).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch).prefetch(tf.data.AUTOTUNE)


def stage(tf, files, batch, shape, dtype, decode):
    """a_unbuf + one ``parse_example`` per batch (+ ``decode_raw`` and reshape with ``decode``):
    d's work step by step, without its shuffle."""
    spec = {"image_raw": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):
        ex = tf.io.parse_example(serialized, spec)
        if not decode:
            return ex["image_raw"], ex["label"]
        return tf.reshape(tf.io.decode_raw(ex["image_raw"], dtype), [-1] + shape), ex["label"]

    ds = raw_bytes(tf, files, batch, buffer_size=0)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)


def memcpy_us(nbytes: int, buffers: int = 256, rounds: int = 5) -> float:
    """Best time (us) to copy ``nbytes`` between buffers that are not in the CPU caches."""
    import numpy as np
    src = [np.full(nbytes, i, np.uint8) for i in range(buffers)]
    dst = [np.empty(nbytes, np.uint8) for _ in range(buffers)]
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for s, d in zip(src, dst):
            np.copyto(d, s)
        best = min(best, (time.perf_counter() - started) / buffers * 1e6)
    return best


def png_files(tf, paths, batch):
    """(c) A directory of PNG files, decoded by TensorFlow."""
    def decode(path):
        return tf.io.decode_png(tf.io.read_file(path), channels=3)

    ds = tf.data.Dataset.from_tensor_slices(paths).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.batch(batch).prefetch(tf.data.AUTOTUNE)


# ---------------------------------------------------------------- timing


def _busy_jiffies() -> int:
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]          # all but idle and iowait


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def one_pass(make) -> dict:
    """Iterates a fresh dataset once: images, seconds, CPU of this process and of others."""
    hz = os.sysconf("SC_CLK_TCK")
    ds = make()
    jiffies, cpu, started = _busy_jiffies(), _own_cpu(), time.perf_counter()
    images = 0
    for element in ds:
        first = element[0] if isinstance(element, tuple) else element
        images += int(first.shape[0])
    wall = time.perf_counter() - started
    own = _own_cpu() - cpu
    foreign = max(0.0, (_busy_jiffies() - jiffies) / hz - own)
    return {"images": images, "wall_s": wall, "cpu_s": own, "foreign_cpu_s": foreign,
            "images_per_s": images / wall}


def wait_until_quiet(max_wait_s: float, busy_cores: float = 0.5, window_s: float = 1.0) -> float:
    """Waits (at most max_wait_s) until other processes use < busy_cores; returns their use."""
    hz = os.sysconf("SC_CLK_TCK")
    deadline = time.time() + max_wait_s
    while True:
        jiffies, cpu = _busy_jiffies(), _own_cpu()
        time.sleep(window_s)
        busy = max(0.0, (_busy_jiffies() - jiffies) / hz - (_own_cpu() - cpu)) / window_s
        if busy < busy_cores or time.time() >= deadline:
            return busy


def measure(methods: dict, repeats: int, quiet_wait_s: float = 0.0, log=print) -> dict:
    """Round-robin passes; per method the best and the median pass by images/s."""
    passes = {name: [] for name in methods}
    for round_ in range(repeats):
        for name, make in methods.items():
            if quiet_wait_s:
                wait_until_quiet(quiet_wait_s)
            result = one_pass(make)
            passes[name].append(result)
            log(f"  round {round_ + 1} {name:8s} {result['images']:6d} images "
                f"{result['wall_s']:6.2f} s {result['images_per_s']:9.0f} img/s "
                f"(cpu {result['cpu_s']:.1f} s, others {result['foreign_cpu_s']:.1f} s)")
    summary = {}
    for name, runs in passes.items():
        ranked = sorted(runs, key=lambda r: r["images_per_s"])
        summary[name] = {
            "best_images_per_s": ranked[-1]["images_per_s"],
            "median_images_per_s": ranked[len(ranked) // 2]["images_per_s"],
            "cpu_ms_per_1000": 1e6 * statistics.median(r["cpu_s"] / r["images"] for r in runs),
            "foreign_cpu_s_best_pass": ranked[-1]["foreign_cpu_s"],
            "passes": [round(r["images_per_s"]) for r in runs],
            "cpu_ms_per_1000_passes": [round(1e6 * r["cpu_s"] / r["images"]) for r in runs]}
    return summary


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    import tensorflow as tf
    return (f"{os.cpu_count()} cores, {mem:.1f} GiB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, TensorFlow {tf.__version__}")


def _method_rows(title: str, summary: dict) -> list[str]:
    rows = [f"| {title} | images/s best | median | CPU ms per 1000 images | others' CPU s, best pass |",
            "|---|---|---|---|---|"]
    rows += [f"| {k} | {v['best_images_per_s']:.0f} | {v['median_images_per_s']:.0f} | "
             f"{v['cpu_ms_per_1000']:.0f} | {v['foreign_cpu_s_best_pass']:.1f} |" for k, v in summary.items()]
    return rows


def _ratio_rows(summary: dict, pairs) -> list[str]:
    rows = ["| ratio | best | median | CPU (inverse) | target | best vs target |",
            "|---|---|---|---|---|---|"]
    for label, top, bottom, target in pairs:
        t, b = summary[top], summary[bottom]
        best = t["best_images_per_s"] / b["best_images_per_s"]
        median = t["median_images_per_s"] / b["median_images_per_s"]
        # os.times() counts 10 ms ticks: a pass of a few images (--smoke) may show none
        cpu = f"{b['cpu_ms_per_1000'] / t['cpu_ms_per_1000']:.2f}" if t["cpu_ms_per_1000"] else "n/a"
        if target is None:
            rows.append(f"| {label} | {best:.2f} | {median:.2f} | {cpu} | - | - |")
            continue
        verdict = "met" if best >= target else "NOT met"
        rows.append(f"| {label} | {best:.2f} | {median:.2f} | {cpu} | >= {target} | {verdict} |")
    return rows


def _breakdown_rows(summary: dict, memcpy: float, record_bytes: int) -> list[str]:
    """CPU per image of each stage from a_unbuf to d_float, and what each step adds."""
    steps = [("a_unbuf", "read + check the records (unbuffered)"),
             ("s_parse", "+ one parse_example per batch (copies image_raw out)"),
             ("s_decode", "+ decode_raw + reshape (copies into the batch tensor)"),
             ("d_reader", "+ shuffle, cardinality check: reader.load"),
             ("d_float", "+ cast and scale to float32 (one XLA kernel)")]
    rows = ["| stage | CPU us / image | step adds (us) |", "|---|---|---|"]
    previous = None
    for name, what in steps:
        cpu = summary[name]["cpu_ms_per_1000"]
        step = "" if previous is None else f"{cpu - previous:+.0f}"
        rows.append(f"| {name}: {what} | {cpu:.0f} | {step} |")
        previous = cpu
    rows.append(f"| reference: one memcpy of {record_bytes / 1024:.0f} KiB, not in cache (numpy) "
                f"| {memcpy:.0f} | |")
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5, help="passes per method")
    parser.add_argument("--quiet-wait", type=float, default=10.0,
                        help="before each pass, wait up to this many seconds for other processes "
                             "to use < 0.5 core (0: do not wait)")
    parser.add_argument("--png-images", type=int, default=2000,
                        help="PNG files decoded per pass of (c) (it is by far the slowest)")
    parser.add_argument("--no-ct", action="store_true", help="skip the 512x512 int16 part")
    parser.add_argument("--png-mb", type=float, default=PNG_MB,
                        help=f"decoded MiB of the 224x224x3 dataset (default {PNG_MB:g}: 5,002 images; "
                             "430.67: 3,000)")
    parser.add_argument("--breakdown", action="store_true",
                        help="also measure the stages between a_unbuf and d, and a memcpy reference")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs (40 images, "
                             "8 CT slices, batches of 8, one pass of every method, --breakdown, no quiet wait)")
    args = parser.parse_args(argv)
    ct_mb = CT_MB
    if args.smoke:
        args.png_mb, ct_mb, args.png_images = SMOKE_PNG_MB, SMOKE_CT_MB, 20
        args.batch, args.repeats, args.quiet_wait, args.breakdown = 8, 1, 0.0, True

    source = png_source(args.png_mb)
    dataset = converted(source)
    ct_dataset = None if args.no_ct else converted(ct_archive(ct_mb))

    import tensorflow as tf
    from dcm2tfrecord import reader

    meta = reader.info(dataset)
    files = meta.shard_paths("train")
    pngs = source.file_paths()[: args.png_images]
    _warm_page_cache(files + pngs)
    b = args.batch
    load_avg = os.getloadavg()
    print(f"machine: {machine()}; load average before: {load_avg[0]:.2f}")
    print(f"224x224x3 uint8: {meta.num_records('train')} records in {len(files)} shards "
          f"({meta.split('train')['num_bytes'] / (1 << 20):.0f} MiB); batch {b}")
    methods = {
        "a_raw": lambda: raw_bytes(tf, files, b),
        "a_unbuf": lambda: raw_bytes(tf, files, b, buffer_size=0),
        "b_classic": lambda: classic(tf, files, b),
        "b_uint8": lambda: classic(tf, files, b, to_float=False),
        "c_png": lambda: png_files(tf, pngs, b),
        "d_reader": lambda: reader.load(dataset, batch_size=b),
        "d_float": lambda: reader.load(dataset, batch_size=b, dtype="float32", scale=1 / 255),
        "d_unshuffled": lambda: reader.load(dataset, batch_size=b, shuffle=False),
    }
    if args.breakdown:
        shape = meta.layout("train").image_shape()
        methods["s_parse"] = lambda: stage(tf, files, b, shape, tf.uint8, decode=False)
        methods["s_decode"] = lambda: stage(tf, files, b, shape, tf.uint8, decode=True)
    results = {"machine": machine(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
               "argv": argv, "load_average_before": load_avg[0],
               "rgb": {"records": meta.num_records("train"), "shards": len(files),
                       "png_images": len(pngs),
                       "methods": measure(methods, args.repeats, args.quiet_wait)}}
    rgb = results["rgb"]["methods"]
    lines = _method_rows("224x224x3 uint8", rgb) + [""]
    lines += _ratio_rows(rgb, [("d / a", "d_reader", "a_raw", 0.9),
                               ("d_unshuffled / a (same bytes, stored order)", "d_unshuffled", "a_raw", 0.9),
                               ("d / a_unbuf", "d_reader", "a_unbuf", None),
                               ("d_float / b (float32 out, like for like)", "d_float", "b_classic", 1.5),
                               ("d / b_uint8 (uint8 out, like for like)", "d_reader", "b_uint8", 1.5),
                               ("d / b (uint8 vs float32 out)", "d_reader", "b_classic", None),
                               ("d / c", "d_reader", "c_png", 5.0)])
    if args.breakdown:
        record_bytes = meta.split("train")["num_bytes"] // meta.num_records("train")
        results["memcpy_us_per_record"] = memcpy_us(record_bytes)
        lines += [""] + _breakdown_rows(rgb, results["memcpy_us_per_record"], record_bytes)
    if ct_dataset:
        ct = reader.info(ct_dataset)
        ct_files = ct.shard_paths("train")
        _warm_page_cache(ct_files)
        print(f"512x512 int16: {ct.num_records('train')} records in {len(ct_files)} shards")
        ct_methods = {"a_raw": lambda: raw_bytes(tf, ct_files, b),
                      "a_unbuf": lambda: raw_bytes(tf, ct_files, b, buffer_size=0),
                      "d_reader": lambda: reader.load(ct_dataset, batch_size=b)}
        results["ct"] = {"records": ct.num_records("train"), "shards": len(ct_files),
                         "methods": measure(ct_methods, args.repeats, args.quiet_wait)}
        cts = results["ct"]["methods"]
        lines += [""] + _method_rows("512x512 int16", cts) + [""]
        lines += _ratio_rows(cts, [("d / a (CT)", "d_reader", "a_raw", 0.9),
                                   ("d / a_unbuf (CT)", "d_reader", "a_unbuf", None)])
    results["load_average_after"] = os.getloadavg()[0]
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
