"""Conversion throughput: classic single loop vs decode-only vs `dcm2tfrecord convert`.

For each archive kind (CT DICOM, JPEG 1024x1024, PNG 224x224 RGB and, on
request, CT slices under a real scanner's header (ct_vendor: every element of
pydicom's CT_small.dcm, varied per slice) and few large files: multi-frame CT volumes of 80 x 512^2 int16, 40 MiB
each, uncompressed (mf) or RLE Lossless (mf_rle); see benchmarks/archives.py),
in one run, three subprocesses are measured (wall
time and peak RSS of the largest process of their tree, /proc VmHWM):

  a. baseline  - the classic converter: one Python loop,
                 ``pydicom.dcmread(path).pixel_array`` (PIL for images) ->
                 ``tf.train.Example`` (image_raw, label, height, width,
                 channels) -> one ``tf.io.TFRecordWriter``. A multi-frame
                 file is one record holding all its frames (plus a depth
                 feature), as ``convert`` writes it by default (--frames stack).
  b. decode    - decode-only on all cores: a multiprocessing Pool over the
                 files, decode to numpy (same decoder calls as a), drop;
                 nothing is written. A reference, not a ceiling: the
                 converter's native DICOM path reads uncompressed pixels
                 without pydicom's decoder and can beat it per file.
  c. pipeline  - ``python -m dcm2tfrecord.pipeline convert`` (Beam FnApiRunner,
                 one worker process per core).

Throughput is MiB of decoded pixels per second of wall time (the same
amount of work for a, b and c: every method decodes every file once), so
c/a and c/b are ratios of wall times; for a and c it is also MiB/s of
TFRecord output (raw pixels plus ~0.1 % framing; the JSON has both). Wall time includes interpreter start-up and imports
(TensorFlow for a, Beam and its worker processes for c): that is what a user
waits for. Because that fixed cost weighs heavily on small archives, each
method is also run on a two-file archive first (column "fixed s"), and a
steady-state rate is derived: decoded MiB / (wall - fixed), with its own
ratios (c/a steady, c/b steady). Skip it with --no-startup. convert runs a
two-file archive in one process but a benchmark archive on worker processes,
so for c the steady rate and CPU per file subtract a second two-file run
forced onto worker processes (JSON "fixed_workers_s"). "CPU ms/file"
is user+system CPU of the whole process tree beyond that fixed cost, per
file: on a shared machine it moves far less than wall time, and divided by
the cores it bounds the best wall time a method can reach. Every archive is
read once before its runs (page cache warmed) so that the first method does
not pay for cold reads the later ones skip.

    .venv/bin/python -m benchmarks.bench_convert                # 2000 MiB (2.1 GB) decoded per kind
    .venv/bin/python -m benchmarks.bench_convert --scale 0.25   # 500 MiB per kind
    .venv/bin/python -m benchmarks.bench_convert --kinds ct --methods baseline,pipeline
    .venv/bin/python -m benchmarks.bench_convert --kinds mf,mf_rle   # 60 volumes of 40 MiB each (2400 MiB)
    .venv/bin/python -m benchmarks.bench_convert --kinds ct,ct_vendor --scale 0.25 --methods baseline,pipeline
    .venv/bin/python -m benchmarks.bench_convert --smoke --kinds ct   # seconds: tests/e2e/test_bench_smoke_a.py

``--smoke``: the same runs on archives of 3 files (the fixed cost's of 2), multi-frame volumes
of 8 frames instead of 80, no wait for a quiet machine and no second measurement; the figures
mean nothing, the point is that every method and every step of the harness still runs.

Arguments after ``--`` go to the convert command (shard bounds, Beam options).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import BUILDERS, CACHE_DIR, MF_FRAMES, MIB, Archive        # noqa: E402
from benchmarks.proc_monitor import (bench_env, machine_description, run_monitored,  # noqa: E402
                                     tfrecord_bytes, wait_until_quiet)
from benchmarks import snapshot                                           # noqa: E402
from dcm2tfrecord.dataset.names import SHARD_SUFFIX  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL_MB = 2000.0          # MiB of decoded pixels per archive at --scale 1 (2.1 GB)
# kinds of few large files: 2400 MiB = 60 multi-frame volumes of 40 MiB at --scale 1
KIND_FULL_MB = {"mf": 2400.0, "mf_rle": 2400.0}
TINY_MB_EACH = {"ct": 0.5, "ct_vendor": 0.5, "jpeg": 1.0, "png": 0.144, "mf": 40.0, "mf_rle": 40.0}
STARTUP_FILES = 2         # the tiny archive that measures fixed (start-up) cost
SMOKE_FRAMES = 8          # --smoke: frames per multi-frame volume (4 MiB)
# --smoke: MiB per archive, 3 files of each kind (mf, mf_rle: volumes of SMOKE_FRAMES frames)
SMOKE_MB = {"ct": 1.5, "ct_vendor": 1.5, "jpeg": 3.0, "png": 0.43, "mf": 12.0, "mf_rle": 12.0}
METHODS = ("baseline", "decode", "pipeline")


# ---------------------------------------------------------------- the measured programs

def _decode_frames(path: str):
    """(pixels, frames): the classic decoder call, pixel_array for DICOM (all frames
    of a multi-frame file, as one (frames, rows, columns) array), Pillow for images."""
    if path.endswith(".dcm"):
        import pydicom
        ds = pydicom.dcmread(path)
        return ds.pixel_array, int(ds.get("NumberOfFrames", 1) or 1)
    import numpy as np
    from PIL import Image
    with Image.open(path) as image:
        return np.asarray(image), 1


def _decode(path: str):
    return _decode_frames(path)[0]


def _files(input_dir: str) -> list[str]:
    return Archive("", input_dir, 0, 0, 0, {}).file_paths()


def run_baseline(input_dir: str, output_file: str) -> None:
    """(a) The classic single-loop converter, as found in countless notebooks."""
    import tensorflow as tf

    def _bytes(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def _int64(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    files = _files(input_dir)
    labels = {d: i for i, d in enumerate(sorted({os.path.dirname(p) for p in files}))}
    with tf.io.TFRecordWriter(output_file) as writer:
        for path in files:
            arr, frames = _decode_frames(path)
            shape = arr.shape[1:] if frames > 1 else arr.shape   # multi-frame: one record, whole volume
            feature = {
                "image_raw": _bytes(arr.tobytes()),
                "label": _int64(labels[os.path.dirname(path)]),
                "height": _int64(shape[0]),
                "width": _int64(shape[1]),
                "channels": _int64(shape[2] if len(shape) == 3 else 1),
            }
            if frames > 1:
                feature["depth"] = _int64(frames)
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
    print(f"baseline: {len(files)} records -> {output_file}")


def _decode_nbytes(path: str) -> int:
    return _decode(path).nbytes


def run_decode_only(input_dir: str, workers: int) -> None:
    """(b) Decode every file on all cores, drop the pixels."""
    import multiprocessing
    files = _files(input_dir)
    # chunks of 8 small files; one file at a time when there are few (multi-frame, startup archive)
    chunksize = max(1, min(8, len(files) // (4 * workers)))
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        total = sum(pool.imap_unordered(_decode_nbytes, files, chunksize=chunksize))
    print(f"decode-only: {len(files)} files, {total / MIB:.1f} MiB of pixels, {workers} processes")


# ---------------------------------------------------------------- the harness

def _build(kind: str, mb: float, smoke: bool) -> Archive:
    if smoke and kind in ("mf", "mf_rle"):
        return BUILDERS[kind](mb, frames=SMOKE_FRAMES)
    return BUILDERS[kind](mb)


def archive_for(kind: str, scale: float, smoke: bool = False) -> Archive:
    if smoke:
        return _build(kind, SMOKE_MB[kind], smoke)
    return _build(kind, round(KIND_FULL_MB.get(kind, FULL_MB) * scale, 1), smoke)


def warm_page_cache(archive: Archive) -> float:
    """Reads every file once so that no method pays for cold reads the others skip."""
    started = time.perf_counter()
    for path in archive.file_paths():
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    return time.perf_counter() - started


def tiny_archive(kind: str, smoke: bool = False) -> Archive:
    """Two files: its wall time is the method's fixed cost (start-up, imports, workers)."""
    each = TINY_MB_EACH[kind] * (SMOKE_FRAMES / MF_FRAMES if smoke and kind in ("mf", "mf_rle") else 1)
    return _build(kind, each * STARTUP_FILES, smoke)


def command(method: str, archive: Archive, out: str, workers: int, extra: list[str]) -> list[str]:
    me = [sys.executable, "-m", "benchmarks.bench_convert"]
    if method == "baseline":
        return me + ["_baseline", archive.path, out]
    if method == "decode":
        return me + ["_decode", archive.path, str(workers)]
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive.path,
            "--output", out, "--overwrite", *extra]


def measure(kind: str, method: str, archive: Archive, args, extra: list[str], tag: str = ""):
    """(RunResult or None on failure, TFRecord bytes written) for one method on one archive.

    Waits for a quiet machine first, and measures again (up to --retries times)
    when other processes took more than 10% of a core during the run.
    """
    name = f"conv_{kind}_{method}{'_' + tag if tag else ''}"
    out = os.path.join(CACHE_DIR, "out", name) + (SHARD_SUFFIX if method == "baseline" else "")
    os.makedirs(os.path.dirname(out), exist_ok=True)   # the baseline's TFRecordWriter does not create it
    cmd = command(method, archive, out, args.workers, extra)
    print(f"$ {' '.join(cmd)}", flush=True)
    cwd, env = REPO, bench_env()
    if method == "pipeline":
        cwd, env = args.code_dir, snapshot.pipeline_env(env, args.code_dir)
        # record ids play no part in speed; code that predates the salt check ignores it
        env.setdefault("DCM2TFRECORD_ID_SALT", "bench_convert")
    for attempt in range(args.retries + 1):
        _remove(out)
        if args.quiet_wait > 0:
            wait_until_quiet(args.quiet_wait)
        r = run_monitored(cmd, env=env, cwd=cwd, interval=args.interval,
                          log_prefix=os.path.join(CACHE_DIR, "logs", name))
        out_bytes = tfrecord_bytes(out) if method != "decode" and os.path.exists(out) else 0
        _remove(out)
        if r.returncode != 0:
            print(f"  {method} FAILED (exit {r.returncode}):\n{r.tail()}", flush=True)
            return None, 0
        noisy = r.foreign_cpu_s > 0.1 * r.wall_s
        print(f"  {r.wall_s:.1f} s wall, {r.cpu_s:.1f} s CPU; other processes used {r.foreign_cpu_s:.1f} s "
              f"CPU meanwhile" + ("  <-- NOISY" if noisy else ""), flush=True)
        if not noisy:
            break
    return r, out_bytes


def _remove(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_baseline":
        run_baseline(argv[1], argv[2])
        return 0
    if argv and argv[0] == "_decode":
        run_decode_only(argv[1], int(argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help=f"fraction of {FULL_MB:g} MiB of decoded pixels per archive (mf, mf_rle: "
                             f"{KIND_FULL_MB['mf']:g}) (default 1)")
    parser.add_argument("--kinds", default="ct,jpeg,png",
                        help=f"archives: {', '.join(BUILDERS)} (default ct,jpeg,png; mf and mf_rle are "
                             f"{KIND_FULL_MB['mf']:g} MiB at --scale 1: 60 volumes of 40 MiB)")
    parser.add_argument("--methods", default=",".join(METHODS), help="baseline, decode, pipeline")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes for decode-only (default: all cores)")
    parser.add_argument("--interval", type=float, default=0.2, help="/proc polling interval, s")
    parser.add_argument("--retries", type=int, default=2,
                        help="measure again when other processes disturbed a run (default 2)")
    parser.add_argument("--quiet-wait", type=float, default=600.0,
                        help="longest wait for a quiet machine before each run, s (default 600; 0: no wait)")
    parser.add_argument("--no-startup", action="store_true",
                        help="do not measure the fixed cost on a two-file archive")
    parser.add_argument("--code", default="worktree",
                        help="pipeline code to run: worktree (default) or a commit, e.g. HEAD")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args, extra = parser.parse_known_args(argv)
    if args.smoke:
        args.retries, args.quiet_wait = 0, 0.0
    extra = [a for a in extra if a != "--"]
    args.code_dir, code_label = snapshot.resolve(args.code)
    if code_label == "worktree":
        code_label = f"worktree ({snapshot.worktree_state()})"
    kinds = [k for k in args.kinds.split(",") if k]
    methods = [m for m in args.methods.split(",") if m]

    print(f"machine: {machine_description()}\npipeline code: {code_label}", flush=True)
    rows = []
    for kind in kinds:
        archive = archive_for(kind, args.scale, args.smoke)
        print(f"\n== {kind}: {archive.files} files, {archive.source_mb:.1f} MiB on disk, "
              f"{archive.pixel_mb:.1f} MiB decoded ({archive.path})", flush=True)
        print(f"  page cache warmed in {warm_page_cache(archive):.1f} s", flush=True)
        fixed, fixed_cpu, steady_fixed = {}, {}, {}
        if not args.no_startup:
            tiny = tiny_archive(kind, args.smoke)
            for method in methods:
                r, _ = measure(kind, method, tiny, args, extra, tag="startup")
                if r is not None:
                    fixed[method] = round(r.wall_s, 2)
                    fixed_cpu[method] = round(r.cpu_s, 2)
            print(f"  fixed cost (2 files): {fixed}", flush=True)
            if "pipeline" in methods and not any(a.startswith("--direct_") for a in extra):
                # convert runs two files in one process, the archive on worker processes: the
                # per-file and steady figures subtract the fixed cost of the archive's own mode
                mode = [f"--direct_num_workers={args.workers}", "--direct_running_mode=multi_processing"]
                r, _ = measure(kind, "pipeline", tiny, args, extra + mode, tag="startup_workers")
                if r is not None:
                    steady_fixed["pipeline"] = round(r.wall_s, 2)
                    fixed_cpu["pipeline"] = round(r.cpu_s, 2)
                    print(f"  fixed cost of convert on {args.workers} worker processes (2 files): "
                          f"{r.wall_s:.2f} s wall, {r.cpu_s:.2f} s CPU", flush=True)
        results = {}
        for method in methods:
            r, out_bytes = measure(kind, method, archive, args, extra)
            if r is None:
                continue
            results[method] = row = {
                "kind": kind, "method": method, "files": archive.files,
                "source_mib": round(archive.source_mb, 1), "pixel_mib": round(archive.pixel_mb, 1),
                "output_mib": round(out_bytes / MIB, 1), "wall_s": round(r.wall_s, 2),
                "pixel_mb_per_s": round(archive.pixel_mb / r.wall_s, 1),
                "output_mb_per_s": round(out_bytes / MIB / r.wall_s, 1) if out_bytes else None,
                "fixed_s": fixed.get(method),
                "fixed_workers_s": steady_fixed.get(method),
                "steady_mb_per_s": (round(archive.pixel_mb / (r.wall_s - base), 1)
                                    if (base := steady_fixed.get(method, fixed.get(method))) is not None
                                    and r.wall_s > base else None),
                "fixed_cpu_s": fixed_cpu.get(method),
                # CPU per file beyond the fixed cost: barely moved by other load on the machine
                "cpu_ms_per_file": (round(1000 * (r.cpu_s - fixed_cpu[method]) / archive.files, 2)
                                    if method in fixed_cpu else None),
                "peak_largest_mib": round(r.peak_largest_mib, 1), "peak_sum_mib": round(r.peak_sum_mib, 1),
                "processes": len(r.processes), "cpu_s": round(r.cpu_s, 1),
                "foreign_cpu_s": round(r.foreign_cpu_s, 1),
            }
            rows.append(row)
            print(f"  {method}: {row['wall_s']} s, {row['pixel_mb_per_s']} MiB/s decoded, "
                  f"peak {row['peak_largest_mib']} MiB (largest), {row['peak_sum_mib']} MiB (tree)",
                  flush=True)
        if "pipeline" in results:
            c = results["pipeline"]["wall_s"]
            cs = results["pipeline"]["steady_mb_per_s"]
            for other, key in (("baseline", "c_over_a"), ("decode", "c_over_b")):
                if other in results:
                    # the same decoded MiB: the ratio of the rates is that of the wall times (the
                    # rates are rounded to 0.1 MiB/s, 0 for an archive of a few small files)
                    results["pipeline"][key] = round(results[other]["wall_s"] / c, 2)
                    if cs and results[other]["steady_mb_per_s"]:
                        results["pipeline"][key + "_steady"] = round(cs / results[other]["steady_mb_per_s"], 2)

    print("\n| archive | method | files | decoded MiB | output MiB | wall s | MiB/s | fixed s "
          "| steady MiB/s | CPU s | CPU ms/file | peak RSS largest MiB | peak RSS tree MiB | c/a | c/b | c/a steady | c/b steady |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    labels = {"baseline": "a. single loop", "decode": "b. decode-only", "pipeline": "c. convert"}

    def cell(v):
        return "" if v is None else v

    for r in rows:
        print(f"| {r['kind']} | {labels[r['method']]} | {r['files']} | {r['pixel_mib']:.0f} "
              f"| {r['output_mib'] if r['output_mib'] else '-'} | {r['wall_s']:.1f} | {r['pixel_mb_per_s']:.1f} "
              f"| {cell(r['fixed_s'])} | {cell(r['steady_mb_per_s'])} | {r['cpu_s']} | {cell(r['cpu_ms_per_file'])} "
              f"| {r['peak_largest_mib']:.0f} | {r['peak_sum_mib']:.0f} | {cell(r.get('c_over_a'))} "
              f"| {cell(r.get('c_over_b'))} | {cell(r.get('c_over_a_steady'))} | {cell(r.get('c_over_b_steady'))} |")
    noisy = [f"{r['kind']}/{r['method']}" for r in rows if r["foreign_cpu_s"] > 0.1 * r["wall_s"]]
    if noisy:
        print(f"\nWARNING: other processes used > 10% of a core during: {', '.join(noisy)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_description(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "scale": args.scale, "smoke": args.smoke, "code": code_label, "extra_args": extra, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
