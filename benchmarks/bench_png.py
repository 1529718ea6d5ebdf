"""Pixels compressed per record (issue 36, item 3): --pixel_encoding png against raw plain
shards and gzip shards, on the same CT slices and photo-like RGB images, in one run.

For each archive and form: the conversion (in this process, Beam's in-memory runner, one
worker: the process's CPU time is the conversion's; median of ``--repeats``), bytes on disk,
and three reads of every record, each decoding to the NumPy/tensor pixels: ``reader.load``
(tf.data, batches of 32; its second pass), ``RandomAccess`` in shard order and in a random order (gzip
shards cannot be read at random: n/a). Ratios are to the raw plain form of the same run.

    .venv/bin/python -m benchmarks.bench_png --ct_mb 50 --photo_mb 50 --repeats 3
    .venv/bin/python -m benchmarks.bench_png --smoke     # 3 slices, 4 photos, one repeat
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from benchmarks.archives import ct_archive, png_archive                 # noqa: E402
from benchmarks.proc_monitor import machine_description, tfrecord_bytes  # noqa: E402
from dcm2tfrecord import reader                                         # noqa: E402
from dcm2tfrecord.pipeline import convert                               # noqa: E402
from dcm2tfrecord.pipeline.options.table import ConvertOptions           # noqa: E402

IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
# name -> convert options: the raw plain form first (the baseline)
FORMS = {
    "raw, plain shards": {},
    "raw, gzip shards (--gzip_level 1)": {"compression": "gzip"},
    "png records, plain shards": {"pixel_encoding": "png"},
}


def write(inputs: str, out: str, options: dict) -> tuple[float, float, int, int]:
    """(CPU s, wall s, records, shard bytes) of one conversion."""
    shutil.rmtree(out, ignore_errors=True)
    opts = ConvertOptions(inputs=(inputs,), output=out, id_salt="bench-png", progress="none", **options)
    cpu, wall = time.process_time(), time.perf_counter()
    summary = convert.run(opts, IN_MEMORY, quiet=True)
    return time.process_time() - cpu, time.perf_counter() - wall, int(summary["records"]), tfrecord_bytes(out)


def _timed(run) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    count = run()
    return (time.process_time() - cpu) / count, count / (time.perf_counter() - wall)


def reads(path: str, seed: int = 0) -> dict:
    """{read: (CPU s per record, records/s)} of each way of reading every record."""
    def load():
        count = 0
        for images, _ in reader.load(path, "train", batch_size=32, pad=True):
            count += int(images.shape[0])
        return count

    load()     # once untimed: TensorFlow's start-up and the pipeline's tracing are no record's
    out = {"reader.load": _timed(load)}
    try:
        access = reader.RandomAccess(path, "train")
    except ValueError:          # gzip shards: no random access
        return out
    order = np.random.default_rng(seed).permutation(len(access))
    out["RandomAccess, in order"] = _timed(lambda: sum(access[i]["image"].shape[0] > 0 for i in range(len(access))))
    out["RandomAccess, random"] = _timed(lambda: sum(access[int(i)]["image"].shape[0] > 0 for i in order))
    return out


def measure(name: str, inputs: str, repeats: int, tmp: str) -> None:
    written: dict = {form: [] for form in FORMS}
    for _ in range(repeats):
        for form, options in FORMS.items():
            written[form].append(write(inputs, os.path.join(tmp, form.split(",")[0] + str(len(form))), options))
    read = {form: reads(os.path.join(tmp, form.split(",")[0] + str(len(form)))) for form in FORMS}
    base = next(iter(FORMS))
    base_cpu = statistics.median(r[0] / r[2] for r in written[base])
    base_bytes = written[base][0][3]
    print(f"\n{name}: {written[base][0][2]} records; write: median of {repeats}")
    print("| form | write CPU ms/record | x raw | bytes on disk | x raw | reader.load CPU ms | records/s | "
          "RandomAccess in order CPU ms | records/s | RandomAccess random CPU ms | records/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for form, results in written.items():
        cpu = statistics.median(r[0] / r[2] for r in results)
        cells = []
        for way in ("reader.load", "RandomAccess, in order", "RandomAccess, random"):
            got = read[form].get(way)
            cells += [f"{1000 * got[0]:.2f}", f"{got[1]:,.0f}"] if got else ["n/a", "n/a"]
        print(f"| {form} | {1000 * cpu:.1f} | {cpu / base_cpu:.2f} | {results[0][3]:,} | "
              f"{results[0][3] / base_bytes:.3f} | " + " | ".join(cells) + " |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ct_mb", type=float, default=50.0, help="512x512 int16 CT slices, MB of pixels")
    parser.add_argument("--photo_mb", type=float, default=50.0, help="224x224 RGB photo-like PNGs, MB of pixels")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs "
                             "(1.5 MB of CT slices, 0.6 MB of photos, one repeat)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.ct_mb, args.photo_mb, args.repeats = 1.5, 0.6, 1
    print(machine_description())
    with tempfile.TemporaryDirectory() as tmp:
        if args.ct_mb > 0:
            measure(f"CT slices ({args.ct_mb:g} MB)", ct_archive(args.ct_mb).path, args.repeats, tmp)
        if args.photo_mb > 0:
            measure(f"photo-like 224x224 RGB ({args.photo_mb:g} MB)", png_archive(args.photo_mb).path,
                    args.repeats, tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
