"""Where the time goes: profiles one `dcm2tfrecord convert` with py-spy, then summarises.

py-spy is not a project dependency; install it into the venv for a measurement
only (``.venv/bin/pip install py-spy``). The run samples the launcher and every
Beam SDK worker subprocess (``--subprocesses``), writes py-spy's raw collapsed
stacks, and prints, per process role, the functions with the most samples:
self (the frame on top of the stack) and inclusive (anywhere in the stack).

    .venv/bin/python -m benchmarks.profile_summary --ct-mb 500
    .venv/bin/python -m benchmarks.profile_summary --raw FILE     # summarise an existing profile
    .venv/bin/python -m benchmarks.profile_summary --smoke        # a 4 MiB archive, seconds

``--smoke`` (tiny sizes, seconds; what tests/e2e/test_bench_smoke_b.py runs) profiles the
conversion of a 4 MiB archive when py-spy is installed; when it is not, it says so and
summarises a small built-in profile (SMOKE_PROFILE) through the same summaries instead.
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import CACHE_DIR, ct_archive    # noqa: E402
from benchmarks.proc_monitor import bench_env            # noqa: E402
from benchmarks import snapshot                          # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*?)(?::(?P<line>\d+))?\)$")


def _role(process_frames: list[str]) -> str:
    last = process_frames[-1] if process_frames else ""
    if "sdk_worker_main" in last:
        return "beam worker"
    if "pipeline" in last:
        return "launcher"
    return last[:40] or "?"


def _short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for marker in ("site-packages/", REPO + os.sep, "<frozen "):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m.group('func')} ({path})"


# Worker time by pipeline step: the first rule whose function is on the stack wins.
STEPS = [
    ("probe: header read (ProbeHeadersFn)", ("ProbeHeadersFn.process",)),
    ("write: open source file", ("open_source",)),
    ("write: native DICOM pixels (numpy, no parse)", ("decode_native",)),
    ("write: native DICOM dicom/* features (unpacked)", ("unpack_metadata",)),
    ("write: dcmread, full parse", ("read_dataset",)),
    ("write: pixel_array", ("Dataset.pixel_array",)),
    ("write: apply_modality_lut (float64)", ("apply_modality_lut",)),
    ("write: to_record_array (round, compare, fit dtype)", ("to_record_array",)),
    ("write: image_spec again", ("image_spec",)),
    ("write: Pillow decode", ("decode_image",)),
    ("write: dicom/* metadata features", ("metadata",)),
    ("write: encode Example", ("encode_example", "serialize_record")),
    ("write: TFRecord framing, CRC, sha256, file write", ("write_record", "_HashingWriter.write")),
    ("write: rest of write_shard", ("write_shard",)),
    ("plan / other DoFns", ("_to_plan", "_shards_of_bucket", "_choose_cut", "_planned_shard_size", "bucket_key", "commit_dataset", "_expand_counted")),
    ("Beam harness: coders, data channel, bundles", ("process_bundle", "DataInputOperation.process_encoded")),
    ("start-up: imports", ("_find_and_load",)),
]


def steps(raw_path: str, rate: int) -> str:
    counts: dict = collections.defaultdict(collections.Counter)
    for line in open(raw_path, errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        role = _role([fr for fr in frames if fr.startswith("process ")])
        funcs = {_short(fr).split(" (")[0] for fr in frames if not fr.startswith(("process ", "thread "))}
        step = next((label for label, names in STEPS if any(n in funcs for n in names)),
                    "waiting threads (gRPC, queues)")
        counts[role][step] += int(count)
    out = []
    for role, c in counts.items():
        total = sum(c.values())
        out.append(f"\n## {role}: samples by step ({total / rate:.1f} s of samples at {rate} Hz)")
        for label, n in sorted(c.items(), key=lambda kv: -kv[1]):
            out.append(f"{100 * n / total:6.1f}%  {n / rate:6.1f} s  {label}")
    return "\n".join(out)


def summarise(raw_path: str, top: int = 15) -> str:
    self_t: dict = collections.defaultdict(collections.Counter)
    incl_t: dict = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    with open(raw_path, errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = stack.split(";")
            procs = [fr for fr in frames if fr.startswith("process ")]
            code = [_short(fr) for fr in frames if not fr.startswith("process ") and not fr.startswith("thread ")]
            role = _role(procs)
            totals[role] += n
            if code:
                self_t[role][code[-1]] += n
                for fr in set(code):
                    incl_t[role][fr] += n
    out = []
    for role, total in totals.most_common():
        out.append(f"\n## {role}: {total} samples")
        out.append(f"{'self %':>7}  function")
        for fr, n in self_t[role].most_common(top):
            out.append(f"{100 * n / total:6.1f}%  {fr}")
        out.append(f"{'incl %':>7}  function")
        for fr, n in incl_t[role].most_common(top + 10):
            out.append(f"{100 * n / total:6.1f}%  {fr}")
    return "\n".join(out)


# py-spy's raw format: one collapsed stack per line (process;thread;outermost ... innermost frame)
# and its sample count; a launcher and a Beam worker, the steps of a write
SMOKE_PROFILE = """\
process 100:"python -m dcm2tfrecord.pipeline convert";thread (0x1);<module> (dcm2tfrecord/pipeline/__main__.py:3);_find_and_load (<frozen importlib._bootstrap>:1360) 30
process 100:"python -m dcm2tfrecord.pipeline convert";thread (0x1);<module> (dcm2tfrecord/pipeline/__main__.py:3);wait_until_finish (apache_beam/runners/runner.py:90) 70
process 101:"python -m apache_beam.runners.worker.sdk_worker_main";thread (0x2);process_bundle (apache_beam/runners/worker/bundle_processor.py:1100);ProbeHeadersFn.process (dcm2tfrecord/transforms/records/steps.py:40) 20
process 101:"python -m apache_beam.runners.worker.sdk_worker_main";thread (0x2);process_bundle (apache_beam/runners/worker/bundle_processor.py:1100);write_shard (dcm2tfrecord/transforms/output/write.py:200);serialize_record (dcm2tfrecord/dataset/features.py:300) 45
process 101:"python -m apache_beam.runners.worker.sdk_worker_main";thread (0x2);process_bundle (apache_beam/runners/worker/bundle_processor.py:1100);write_shard (dcm2tfrecord/transforms/output/write.py:200);write_record (dcm2tfrecord/transforms/output/write.py:120) 25
process 101:"python -m apache_beam.runners.worker.sdk_worker_main";thread (0x3);wait (threading.py:320) 10
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ct-mb", type=float, default=500.0, help="CT archive size, MiB")
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--raw", help="summarise this raw py-spy file instead of running")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--code", default="worktree",
                        help="pipeline code to run: worktree (default) or a commit, e.g. HEAD")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs (a 4 MiB "
                             "archive; without py-spy, a built-in sample profile summarised)")
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    raw = args.raw
    sample = None
    if args.smoke:
        args.ct_mb = 4.0
    if raw is None:
        pyspy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        if not os.path.exists(pyspy) and args.smoke:
            print("py-spy not installed (.venv/bin/pip install py-spy): no conversion profiled; "
                  "summarising the built-in sample profile (SMOKE_PROFILE)", flush=True)
            raw = sample = os.path.join(CACHE_DIR, "results", f"profile_smoke_sample_{os.getpid()}.txt")
            os.makedirs(os.path.dirname(raw), exist_ok=True)
            with open(raw, "w") as f:
                f.write(SMOKE_PROFILE)
    if raw is None:
        if not os.path.exists(pyspy):
            print("py-spy not found: .venv/bin/pip install py-spy", file=sys.stderr)
            return 2
        archive = ct_archive(args.ct_mb)
        out = os.path.join(CACHE_DIR, "out", "profile_ct_smoke" if args.smoke else "profile_ct")
        shutil.rmtree(out, ignore_errors=True)
        raw = os.path.join(CACHE_DIR, "results", f"profile_ct_{args.ct_mb:g}MB.txt")
        os.makedirs(os.path.dirname(raw), exist_ok=True)
        cmd = [pyspy, "record", "--subprocesses", "--rate", str(args.rate), "--format", "raw",
               "-o", raw, "--", sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", archive.path,
               "--output", out, "--overwrite", *extra]
        code_dir, code_label = snapshot.resolve(args.code)
        print(f"pipeline code: {code_label}\n$ " + " ".join(cmd), flush=True)
        env = snapshot.pipeline_env(bench_env(), code_dir)
        env.setdefault("DCM2TFRECORD_ID_SALT", "profile_summary")   # ids play no part in speed
        subprocess.run(cmd, env=env, cwd=code_dir, check=True)
        shutil.rmtree(out, ignore_errors=True)
    print(steps(raw, args.rate))
    print(summarise(raw, args.top))
    if sample:
        os.remove(sample)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
