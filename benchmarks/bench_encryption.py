"""What ``convert --encrypt`` costs: encrypted shards against plain ones, in the same run.

Two archives of benchmarks/archives.py, each converted twice in this run (plain, then
``--encrypt keyfile:KEK``, a KEK ``keygen`` made; shards of 32-128 MiB like bench_reader):
224x224x3 uint8 PNGs (``png_archive``, 2,000 images by default) and CT-like 512x512 int16
slices (``ct_archive``, 400 slices). Measured on each, plain against encrypted:

  write - ``python -m dcm2tfrecord.pipeline convert`` (a subprocess): wall seconds and the
          CPU seconds of it and its children per 1000 records. Target: encrypted CPU
          <= 1.3 x plain.
  load  - ``reader.load(dataset, batch_size=--batch)`` (defaults: shuffled, uint8/int16 as
          stored; the encrypted one with ``key=`` the KEK), batches handed to Python, the
          page cache warm: images/s (best and median of ``--repeats`` passes, round-robin)
          and CPU ms per 1000 images of this process. Target: encrypted >= 0.8 x plain.
          ``encrypted_per_record``: the encrypted shards read as before the batched hand-off
          (reader/tfdata.py ``BATCH_DECRYPTION`` off: each record decrypted alone by a
          ``tf.numpy_function``), the baseline of the same run. ``plain_handoff``: the plain
          shards through that per-record hand-off with no decryption, the record handed back
          as it came: the floor of that design.
  ra    - ``reader.RandomAccess`` in a random permutation of every index, records handed to
          Python one by one: CPU ms per 1000 records (and records/s). Target: encrypted
          CPU <= 1.3 x plain.

and, as the floor of any design, ``aes``: AES-256-GCM decryption alone (the
``cryptography`` package's AESGCM, as dataset/encryption.py calls it) of one record's bytes,
us per record, next to each dataset's plain CPU per record.

    .venv/bin/python -m benchmarks.bench_encryption
    .venv/bin/python -m benchmarks.bench_encryption --png-images 1000 --ct-slices 200 --repeats 3 --json out.json
    .venv/bin/python -m benchmarks.bench_encryption --smoke --json out.json   # 40 images, 8 slices, one pass

``--smoke`` (tiny sizes, seconds; what tests/e2e/test_bench_smoke_b.py runs): the same
conversions and passes on 40 images and 8 slices, batches of 8, one round, no quiet wait.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import CACHE_DIR, Archive, ct_archive  # noqa: E402
from benchmarks.bench_reader import (REPO, SHARD_ARGS, _warm_page_cache, machine, measure,  # noqa: E402
                                     png_source)

PNG_IMAGE_MB = 224 * 224 * 3 / (1 << 20)      # one image's decoded MiB (archives.py counts those)
CT_SLICE_MB = 512 * 512 * 2 / (1 << 20)
PNG_IMAGES, CT_SLICES = 2000, 400
SMOKE_PNG_IMAGES, SMOKE_CT_SLICES = 40, 8
TARGETS = {"load": 0.8, "ra_cpu": 1.3, "write_cpu": 1.3}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def convert(archive: Archive, out: str, key_uri: str | None) -> dict:
    """One conversion, timed: wall seconds and CPU seconds of the convert process tree."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive.path,
           "--output", out, "--overwrite", "--id_salt", "bench_encryption", *SHARD_ARGS]
    if key_uri:
        cmd += ["--encrypt", key_uri]
    cpu, started = _children_cpu(), time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    from dcm2tfrecord import reader
    records = reader.info(out).num_records()
    return {"records": records, "wall_s": wall, "cpu_s": _children_cpu() - cpu}


def random_access(dataset: str, key, seed: int = 0) -> dict:
    import numpy as np
    from dcm2tfrecord import reader
    records = reader.RandomAccess(dataset, key=key)
    order = np.random.default_rng(seed).permutation(len(records))
    records[int(order[0])]                # the KEK reached, the index read: not per record
    cpu, started = time.process_time(), time.perf_counter()     # ns resolution, all threads
    for i in order:
        records[int(i)]
    wall = time.perf_counter() - started
    return {"records": len(order), "wall_s": wall, "cpu_s": time.process_time() - cpu,
            "records_per_s": len(order) / wall}


class _HandOffOnly:
    """reader.load of plain shards through the decryption hand-off, nothing decrypted."""

    def __enter__(self):
        from dcm2tfrecord.reader import tfdata
        self._tfdata, self._decryptor = tfdata, tfdata._decryptor
        tfdata._decryptor = lambda manifest, key, *layout_and_read, **local: (lambda path, index, data: data)

    def __exit__(self, *exc):
        self._tfdata._decryptor = self._decryptor


def per_record(dataset: str, batch: int, key):
    """reader.load of the encrypted shards as before the batched hand-off: each record decrypted
    alone, before the shuffle, into its serialized Example (tfdata.BATCH_DECRYPTION off)."""
    from dcm2tfrecord import reader
    from dcm2tfrecord.reader import tfdata
    tfdata.BATCH_DECRYPTION = False
    try:
        return reader.load(dataset, batch_size=batch, key=key)      # the pipeline is built here
    finally:
        tfdata.BATCH_DECRYPTION = True


def handoff_only(dataset: str, batch: int):
    from dcm2tfrecord import reader
    with _HandOffOnly():
        return reader.load(dataset, batch_size=batch)      # the pipeline is built here


def aes_us_per_record(record_bytes: int, rounds: int) -> float:
    """AES-256-GCM decryption of one record's bytes alone (the floor of any hand-off)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    cipher = AESGCM(os.urandom(32))
    nonce, aad = os.urandom(12), b"shard-00000-of-00001.tfrecord:0"
    sealed = cipher.encrypt(nonce, os.urandom(record_bytes), aad)
    started = time.process_time()
    for _ in range(rounds):
        cipher.decrypt(nonce, sealed, aad)
    return 1e6 * (time.process_time() - started) / rounds


def _ratio(enc: float, plain: float) -> float:
    return enc / plain if plain else float("nan")


def _verdict(value: float, target: float, higher_is_better: bool) -> str:
    if value != value:                     # nan: a pass too short for os.times' 10 ms ticks
        return "n/a"
    ok = value >= target if higher_is_better else value <= target
    return "met" if ok else "NOT met"


def bench_dataset(name: str, archive: Archive, kek_uri: str, args, log=print) -> dict:
    from dcm2tfrecord import reader
    root = os.path.join(CACHE_DIR, "encryption")
    os.makedirs(root, exist_ok=True)
    plain_dir = os.path.join(root, f"{os.path.basename(archive.path)}-plain")
    enc_dir = os.path.join(root, f"{os.path.basename(archive.path)}-encrypted")
    writes: dict = {"plain": [], "encrypted": []}
    for round_ in range(args.write_repeats):
        for label, out, key in (("plain", plain_dir, None), ("encrypted", enc_dir, kek_uri)):
            result = convert(archive, out, key)
            writes[label].append(result)
            log(f"  {name} write round {round_ + 1} {label:9s} {result['records']} records "
                f"{result['wall_s']:6.1f} s cpu {result['cpu_s']:6.1f} s")
    write = {label: {"records": runs[0]["records"],
                     "wall_s": min(r["wall_s"] for r in runs),
                     "cpu_ms_per_1000": 1e6 * statistics.median(r["cpu_s"] / r["records"] for r in runs)}
             for label, runs in writes.items()}

    meta = reader.info(plain_dir)
    files = meta.shard_paths() + reader.info(enc_dir).shard_paths()
    _warm_page_cache(files)
    b = args.batch
    load = measure({"plain": lambda: reader.load(plain_dir, batch_size=b),
                    "encrypted": lambda: reader.load(enc_dir, batch_size=b, key=kek_uri),
                    "encrypted_per_record": lambda: per_record(enc_dir, b, kek_uri),
                    "plain_handoff": lambda: handoff_only(plain_dir, b)},
                   args.repeats, args.quiet_wait, log=lambda line: log(f"  {name} load{line}"))
    ra_runs: dict = {"plain": [], "encrypted": []}
    for round_ in range(args.repeats):
        for label, path, key in (("plain", plain_dir, None), ("encrypted", enc_dir, kek_uri)):
            result = random_access(path, key, seed=round_)
            ra_runs[label].append(result)
            log(f"  {name} ra round {round_ + 1} {label:9s} {result['records_per_s']:8.0f} records/s "
                f"cpu {result['cpu_s']:.2f} s")
    ra = {label: {"best_records_per_s": max(r["records_per_s"] for r in runs),
                  "cpu_ms_per_1000": 1e6 * statistics.median(r["cpu_s"] / r["records"] for r in runs)}
          for label, runs in ra_runs.items()}
    record_bytes = meta.split("train")["num_bytes"] // max(1, meta.num_records("train"))
    return {"records": meta.num_records(), "shards": len(meta.shard_paths()), "record_bytes": record_bytes,
            "aes_us_per_record": aes_us_per_record(record_bytes, 20 if args.smoke else 500),
            "write": write, "load": load, "ra": ra,
            "ratios": {
                "load_best": _ratio(load["encrypted"]["best_images_per_s"], load["plain"]["best_images_per_s"]),
                "load_median": _ratio(load["encrypted"]["median_images_per_s"],
                                      load["plain"]["median_images_per_s"]),
                "load_cpu": _ratio(load["encrypted"]["cpu_ms_per_1000"], load["plain"]["cpu_ms_per_1000"]),
                "per_record_best": _ratio(load["encrypted_per_record"]["best_images_per_s"],
                                          load["plain"]["best_images_per_s"]),
                "per_record_cpu": _ratio(load["encrypted_per_record"]["cpu_ms_per_1000"],
                                         load["plain"]["cpu_ms_per_1000"]),
                "handoff_best": _ratio(load["plain_handoff"]["best_images_per_s"],
                                       load["plain"]["best_images_per_s"]),
                "handoff_cpu": _ratio(load["plain_handoff"]["cpu_ms_per_1000"], load["plain"]["cpu_ms_per_1000"]),
                "ra_cpu": _ratio(ra["encrypted"]["cpu_ms_per_1000"], ra["plain"]["cpu_ms_per_1000"]),
                "ra_speed": _ratio(ra["encrypted"]["best_records_per_s"], ra["plain"]["best_records_per_s"]),
                "write_cpu": _ratio(write["encrypted"]["cpu_ms_per_1000"], write["plain"]["cpu_ms_per_1000"]),
                "write_wall": _ratio(write["encrypted"]["wall_s"], write["plain"]["wall_s"])}}


def table(results: dict) -> list[str]:
    rows = ["| dataset | measure | plain | encrypted | encrypted / plain | target | verdict |",
            "|---|---|---|---|---|---|---|"]
    for name, r in results["datasets"].items():
        load, ra, write, q = r["load"], r["ra"], r["write"], r["ratios"]
        rows += [
            f"| {name} | load images/s (best) | {load['plain']['best_images_per_s']:,.0f} | "
            f"{load['encrypted']['best_images_per_s']:,.0f} | {q['load_best']:.2f} | >= {TARGETS['load']} | "
            f"{_verdict(q['load_best'], TARGETS['load'], True)} |",
            f"| {name} | load images/s (median) | {load['plain']['median_images_per_s']:,.0f} | "
            f"{load['encrypted']['median_images_per_s']:,.0f} | {q['load_median']:.2f} | | |",
            f"| {name} | load CPU ms / 1000 images | {load['plain']['cpu_ms_per_1000']:,.0f} | "
            f"{load['encrypted']['cpu_ms_per_1000']:,.0f} | {q['load_cpu']:.2f} | | |",
            f"| {name} | before: each record decrypted alone, images/s (best) | "
            f"{load['plain']['best_images_per_s']:,.0f} | {load['encrypted_per_record']['best_images_per_s']:,.0f} | "
            f"{q['per_record_best']:.2f} | | |",
            f"| {name} | before: each record decrypted alone, CPU ms / 1000 images | "
            f"{load['plain']['cpu_ms_per_1000']:,.0f} | {load['encrypted_per_record']['cpu_ms_per_1000']:,.0f} | "
            f"{q['per_record_cpu']:.2f} | | |",
            f"| {name} | floor of before: plain through the per-record hand-off, images/s (best) | "
            f"{load['plain']['best_images_per_s']:,.0f} | {load['plain_handoff']['best_images_per_s']:,.0f} | "
            f"{q['handoff_best']:.2f} | | |",
            f"| {name} | floor of before: plain through the per-record hand-off, CPU ms / 1000 images | "
            f"{load['plain']['cpu_ms_per_1000']:,.0f} | {load['plain_handoff']['cpu_ms_per_1000']:,.0f} | "
            f"{q['handoff_cpu']:.2f} | | |",
            f"| {name} | RandomAccess CPU ms / 1000 records | {ra['plain']['cpu_ms_per_1000']:,.0f} | "
            f"{ra['encrypted']['cpu_ms_per_1000']:,.0f} | {q['ra_cpu']:.2f} | <= {TARGETS['ra_cpu']} | "
            f"{_verdict(q['ra_cpu'], TARGETS['ra_cpu'], False)} |",
            f"| {name} | RandomAccess records/s (best) | {ra['plain']['best_records_per_s']:,.0f} | "
            f"{ra['encrypted']['best_records_per_s']:,.0f} | {q['ra_speed']:.2f} | | |",
            f"| {name} | convert CPU ms / 1000 records | {write['plain']['cpu_ms_per_1000']:,.0f} | "
            f"{write['encrypted']['cpu_ms_per_1000']:,.0f} | {q['write_cpu']:.2f} | <= {TARGETS['write_cpu']} | "
            f"{_verdict(q['write_cpu'], TARGETS['write_cpu'], False)} |",
            f"| {name} | convert wall s | {write['plain']['wall_s']:,.1f} | {write['encrypted']['wall_s']:,.1f} | "
            f"{q['write_wall']:.2f} | | |",
            f"| {name} | AES-256-GCM decrypt alone, us / record ({r['record_bytes'] / 1024:.0f} KiB) | | "
            f"{r['aes_us_per_record']:,.0f} | | | |"]
    return rows


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--png-images", type=int, default=PNG_IMAGES, help="224x224x3 images (0: none)")
    parser.add_argument("--ct-slices", type=int, default=CT_SLICES, help="512x512 int16 slices (0: none)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="load and RandomAccess passes per method")
    parser.add_argument("--write-repeats", type=int, default=1, help="conversions of each dataset, each way")
    parser.add_argument("--quiet-wait", type=float, default=10.0,
                        help="before each load pass, wait up to this many seconds for other processes "
                             "to use < 0.5 core (0: do not wait)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs (40 images, "
                             "8 CT slices, batches of 8, one round, no quiet wait)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.png_images, args.ct_slices = SMOKE_PNG_IMAGES, SMOKE_CT_SLICES
        args.batch, args.repeats, args.write_repeats, args.quiet_wait = 8, 1, 1, 0.0

    from dcm2tfrecord.dataset.encryption import KEYFILE, new_key_file
    os.makedirs(CACHE_DIR, exist_ok=True)
    kek_path = os.path.join(CACHE_DIR, f"bench_encryption.kek.{os.getpid()}")
    new_key_file(kek_path)
    kek_uri = KEYFILE + kek_path
    load_avg = os.getloadavg()
    results: dict = {"machine": machine(), "time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": argv,
                     "load_average_before": load_avg[0], "targets": TARGETS, "datasets": {}}
    print(f"machine: {results['machine']}; load average before: {load_avg[0]:.2f}", flush=True)
    try:
        if args.png_images:
            archive = png_source(round(args.png_images * PNG_IMAGE_MB, 4))
            results["datasets"]["224x224x3 uint8"] = bench_dataset("rgb", archive, kek_uri, args)
        if args.ct_slices:
            archive = ct_archive(round(args.ct_slices * CT_SLICE_MB, 4))
            results["datasets"]["512x512 int16 CT"] = bench_dataset("ct", archive, kek_uri, args)
    finally:
        os.remove(kek_path)
    results["load_average_after"] = os.getloadavg()[0]
    print()
    for name, r in results["datasets"].items():
        print(f"{name}: {r['records']} records in {r['shards']} shards, {r['record_bytes'] / 1024:.0f} KiB each; "
              f"batch {args.batch}")
    print("\n".join([""] + table(results)))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
