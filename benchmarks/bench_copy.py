"""``dcm2tfrecord copy`` against a plain copy of the same files, in the same run (issue 46).

A CT dataset (benchmarks/archives.py ``ct_archive``: 512x512 int16 slices, converted) is copied

- local -> local: ``shutil.copytree`` (baseline) against ``copy_dataset``;
- local -> gs:// and gs:// -> local on the GCS emulator (tests/support/gcs_emulator.py, in
  memory on 127.0.0.1): google-cloud-storage's ``upload_from_filename`` /
  ``download_to_filename`` per file (what ``gsutil cp`` does, baseline) and the same files
  through Beam's FileSystems with nothing checked (the floor of the design before, whose reads
  and writes went through that seam), and ``copy_dataset`` as it was (the same checks, each
  file streamed through Beam's FileSystems) against ``copy_dataset``, which moves each file with
  google-cloud-storage (one client, ``upload_from_file`` / ``download_to_file``) and checks
  every shard's sha256 against dataset.json and every file's CRC-32C against the store's.

Each row: MB copied, wall and CPU seconds (this process and its children; the emulator's own
is not counted), MB/s, and the ratio of its wall time to the route's plain copy; with
``--rounds N`` each row is its best of N rounds, the methods alternating within a round.

    .venv/bin/python -m benchmarks.bench_copy --mb 512 --rounds 3 --json /tmp/copy.json
    .venv/bin/python -m benchmarks.bench_copy --smoke        # tiny, seconds (tests/e2e/test_bench_smoke_b.py)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.archives import CACHE_DIR, ct_archive   # noqa: E402
from dcm2tfrecord.dataset.names import MANIFEST_NAME     # noqa: E402


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(function) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), _cpu()
    function()
    return time.perf_counter() - wall, _cpu() - cpu


def _files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names)


def _dataset(total_mb: float) -> str:
    """The converted CT archive (cached beside the archive, built once per size)."""
    from dcm2tfrecord.pipeline import convert
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    archive = ct_archive(total_mb, log=lambda line: print(line, file=sys.stderr))
    out = os.path.join(CACHE_DIR, "copy", os.path.basename(archive.path))
    if not os.path.exists(os.path.join(out, MANIFEST_NAME)):
        tmp = out + ".building"
        shutil.rmtree(tmp, ignore_errors=True)
        options = ConvertOptions(inputs=(archive.path,), output=tmp, id_salt="bench-copy-salt",
                                 target_shard_mb=max(total_mb / 8, 1), min_shard_mb=0.5, max_shard_mb=max(total_mb, 4))
        convert.run(options, ["--runner=DirectRunner", "--direct_num_workers=1"], quiet=True)
        os.replace(tmp, out)
    return out


BEAM = "Beam's FileSystems, nothing checked"     # the floor of the design before: its reads and writes
STREAMED = "copy streamed through Beam's FileSystems (the design before)"


def run(total_mb: float, work: str, rounds: int = 1) -> list[dict]:
    """The rows, each the best (least wall time) of ``rounds`` rounds, the methods of a
    route alternating within each round."""
    from dcm2tfrecord.dataset import transfer
    from dcm2tfrecord.transforms.beam_files import install_beam_storage
    from dcm2tfrecord.dataset import storage
    from dcm2tfrecord.transforms.beam_files import BeamFiles
    from tests.support.gcs_emulator import running_emulator
    install_beam_storage()
    direct = storage.installed()

    class Streamed(BeamFiles):              # gs:// files moved as before: through open / create
        def direct_transfer(self, path: str) -> bool:
            return False

    def streamed(source_path, destination_path):
        storage.install(Streamed())
        try:
            transfer.copy_dataset(source_path, destination_path)
        finally:
            storage.install(direct)
    source = _dataset(total_mb)
    size = sum(os.path.getsize(os.path.join(source, f)) for f in _files(source)) / 1e6
    best: dict[tuple[str, str], tuple[float, float]] = {}

    def timed(route, method, function):
        wall, cpu = _timed(function)
        if (route, method) not in best or wall < best[route, method][0]:
            best[route, method] = (wall, cpu)

    os.makedirs(os.path.join(work, "emulator"))
    with running_emulator(os.path.join(work, "emulator")) as emulator:
        bucket = emulator.client().bucket(emulator.bucket)
        for r in range(rounds):
            here = os.path.join(work, str(r))
            timed("local -> local", "shutil.copytree", lambda: shutil.copytree(source, os.path.join(here, "plain")))
            timed("local -> local", "dcm2tfrecord copy",
                  lambda: transfer.copy_dataset(source, os.path.join(here, "copied")))
            assert _files(os.path.join(here, "copied")) == _files(source)

            def upload():
                for name in _files(source):
                    bucket.blob(f"{r}/plain/{name}").upload_from_filename(os.path.join(source, name))

            def download():
                for blob in emulator.client().list_blobs(emulator.bucket, prefix=f"{r}/plain/"):
                    target = os.path.join(here, "plain_back", blob.name[len(f"{r}/plain/"):])
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    blob.download_to_filename(target)
            def through_beam(source_of, target_of):
                from apache_beam.io.filesystems import FileSystems
                for name in _files(source):
                    target = target_of(name)
                    if "://" not in target:
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                    with FileSystems.open(source_of(name)) as reader, FileSystems.create(target) as writer:
                        while chunk := reader.read(transfer.CHUNK):
                            writer.write(chunk)
            timed("local -> gs://", "google-cloud-storage per file", upload)
            timed("local -> gs://", BEAM, lambda: through_beam(lambda n: os.path.join(source, n),
                                                               lambda n: emulator.url(f"{r}/beam/{n}")))
            timed("local -> gs://", STREAMED, lambda: streamed(source, emulator.url(f"{r}/streamed")))
            timed("local -> gs://", "dcm2tfrecord copy",
                  lambda: transfer.copy_dataset(source, emulator.url(f"{r}/copied")))
            timed("gs:// -> local", "google-cloud-storage per file", download)
            timed("gs:// -> local", BEAM, lambda: through_beam(lambda n: emulator.url(f"{r}/beam/{n}"),
                                                               lambda n: os.path.join(here, "beam_back", n)))
            timed("gs:// -> local", STREAMED,
                  lambda: streamed(emulator.url(f"{r}/copied"), os.path.join(here, "streamed_back")))
            timed("gs:// -> local", "dcm2tfrecord copy",
                  lambda: transfer.copy_dataset(emulator.url(f"{r}/copied"), os.path.join(here, "copied_back")))
            back = os.path.join(here, "copied_back")
            assert _files(back) == _files(source) and all(
                open(os.path.join(back, f), "rb").read() == open(os.path.join(source, f), "rb").read()
                for f in _files(source))
            for name in ("plain", "copied", "plain_back", "copied_back", "beam_back", "streamed_back"):
                shutil.rmtree(os.path.join(here, name))
            for blob in emulator.client().list_blobs(emulator.bucket, prefix=f"{r}/"):
                blob.delete()
    rows = []
    for (route, method), (wall, cpu) in best.items():
        first = next(m for (r, m) in best if r == route)            # the route's first: the plain copy
        plain = best[route, first][0]
        rows.append({"route": route, "method": method, "mb": round(size, 2), "wall_s": round(wall, 3),
                     "cpu_s": round(cpu, 3), "mb_per_s": round(size / wall, 1) if wall > 0 else None,
                     "wall_vs_plain": round(wall / plain, 2) if method != first and plain > 0 else None})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=256, help="MiB of CT slices converted and copied (default 256)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs")
    parser.add_argument("--rounds", type=int, default=1, help="rounds; each row is the best of them (default 1)")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    total = 4.0 if args.smoke else args.mb
    with tempfile.TemporaryDirectory(prefix="bench_copy_") as work:
        rows = run(total, work, 1 if args.smoke else args.rounds)
    print("| route | method | MB | wall s | CPU s | MB/s | wall / plain |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['route']} | {r['method']} | {r['mb']} | {r['wall_s']} | {r['cpu_s']} | {r['mb_per_s']} | "
              f"{r['wall_vs_plain'] if r['wall_vs_plain'] is not None else ''} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
