"""Long fuzz run: mutated DICOM/PNG/JPEG through probe and decode, every distinct failure kept.

    python tools/fuzz_long.py --minutes 60 --jobs 4 --out /tmp/fuzz_out

The mutations and the contract are those of ``tests/transforms/records/test_fuzz.py`` (inputs: tests/support/fuzz.py) (a clean
record, or a ConversionError with a documented reason; no other exception, no
hang). Unlike the bounded test, this run does not stop at the first failure:
it groups failures by (exception type, innermost source line), keeps the first
case of each with its bytes under ``--out``, and survives inputs that crash or
wedge the interpreter, because every worker is a child process the driver
restarts (the case it was running is then reported as a crash or hang).

Replay a finding: ``python tools/fuzz_long.py --replay /tmp/fuzz_out/<id>.case``.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("RUST_BACKTRACE", "0")   # a Rust codec panic is a finding, not a log page

FAMILIES = ("dicom", "png", "jpeg")


def _innermost(exc: BaseException) -> str:
    """Where it was raised; for a hang, the last frame of ours (where it is interrupted varies)."""
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    frames = traceback.extract_tb(cause.__traceback__)
    if type(cause).__name__ == "Hang":
        frames = [f for f in frames if "/transforms/" in f.filename] or frames
    if not frames:
        return "?"
    frame = frames[-1]
    path = frame.filename
    for marker in ("site-packages/", ROOT + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{path}:{frame.lineno} in {frame.name}"


def _signature(exc: BaseException) -> tuple[str, str, str]:
    cause = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return type(cause).__name__, _innermost(exc), str(cause)[:300]


def worker(args) -> int:
    """Runs cases until the deadline; one JSON line per failure in findings-<seed>.jsonl."""
    import faulthandler
    from tests.support import fuzz
    from tests.transforms.records import test_fuzz as fz

    rng = random.Random(args.seed)
    families = FAMILIES if args.family == "all" else (args.family,)
    max_bytes = None if args.all_seeds else fuzz.SEED_MAX_BYTES
    stop = time.time() + args.minutes * 60
    done = 0
    current = os.path.join(args.out, f"current-{args.seed}.case")
    results = open(os.path.join(args.out, f"findings-{args.seed}.jsonl"), "w")
    while time.time() < stop:
        case = fuzz.random_case(rng, rng.choice(families), max_bytes)
        with open(current, "w") as handle:
            handle.write(repr(case))
        faulthandler.dump_traceback_later(fz.DEADLINE_S * 3, exit=True)
        outcome = None
        try:
            outcome = fz.check_case(case)
        except fz.Unclassified as exc:
            kind, where, message = _signature(exc)
            outcome = kind
            results.write(json.dumps({"kind": kind, "where": where, "message": message,
                                      "case": repr(case)}) + "\n")
            results.flush()
        finally:
            faulthandler.cancel_dump_traceback_later()
        done += 1
        if outcome == "decode_timeout":
            # Classified, but a decoder thread is left spinning: note it, and start afresh.
            results.write(json.dumps({"kind": "decode_timeout", "where": "a decoder that never returns",
                                      "message": "classified; its thread keeps running",
                                      "case": repr(case)}) + "\n")
        if outcome in ("decode_timeout", "Hang"):
            break
        if done % 200 == 0:
            results.write(json.dumps({"done": done}) + "\n")
            results.flush()
    os.remove(current)
    results.write(json.dumps({"done": done}) + "\n")
    results.close()
    return 0


def _save(out: str, finding: dict) -> str:
    from tests.support import fuzz

    key = hashlib.sha1(f"{finding['kind']}|{finding['where']}".encode()).hexdigest()[:10]
    with open(os.path.join(out, f"{key}.case"), "w") as handle:
        handle.write(finding["case"])
    try:
        data = eval(finding["case"], {"Case": fuzz.Case}).build()  # noqa: S307 - our own repr
        with open(os.path.join(out, f"{key}.bin"), "wb") as handle:
            handle.write(data)
    except Exception:
        pass
    return key


def drive(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    stop = time.time() + args.minutes * 60
    findings: dict = {}
    total = 0
    seed = args.seed
    running: dict = {}

    def start():
        nonlocal seed
        seed += 1
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed),
               "--family", args.family, "--out", args.out,
               "--minutes", str(max(0.05, (stop - time.time()) / 60))]
        if args.all_seeds:
            cmd.append("--all_seeds")
        running[seed] = subprocess.Popen(cmd)

    for _ in range(args.jobs):
        start()
    while running:
        for wid, proc in list(running.items()):
            if proc.poll() is None:
                continue
            results = os.path.join(args.out, f"findings-{wid}.jsonl")
            lines = open(results).read().splitlines() if os.path.exists(results) else []
            done = 0
            for line in lines:
                item = json.loads(line)
                if "done" in item:
                    done = item["done"]
                    continue
                key = (item["kind"], item["where"])
                if key not in findings:
                    findings[key] = dict(item, count=0, id=_save(args.out, item))
                findings[key]["count"] += 1
            total += done
            del running[wid]
            current = os.path.join(args.out, f"current-{wid}.case")
            if proc.returncode != 0 and os.path.exists(current):
                with open(current) as handle:
                    item = {"kind": "crash or hang", "where": f"exit status {proc.returncode}",
                            "message": "worker died (faulthandler timeout or a signal)",
                            "case": handle.read()}
                key = (item["kind"], item["where"])
                findings.setdefault(key, dict(item, count=0, id=_save(args.out, item)))["count"] += 1
                os.remove(current)
            if time.time() < stop - 3:
                start()
        time.sleep(0.5)
    print(f"{total} mutated inputs, {len(findings)} distinct failure(s)")
    for (kind, where), item in sorted(findings.items(), key=lambda kv: -kv[1]["count"]):
        print(f"- {kind} at {where} x{item['count']}  [{args.out}/{item['id']}.case]\n"
              f"    {item['message']}\n    {item['case']}")
    return 1 if findings else 0


def replay(path: str) -> int:
    from tests.support import fuzz
    from tests.transforms.records import test_fuzz as fz

    with open(path) as handle:
        case = eval(handle.read(), {"Case": fuzz.Case})  # noqa: S307 - our own repr
    print(case)
    print(fz.convert_bytes(case.build(), case.name))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--family", choices=FAMILIES + ("all",), default="all")
    parser.add_argument("--all_seeds", action="store_true",
                        help="also mutate pydicom test files above 64 KB (slower)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "dcm2tfrecord_fuzz"),
                        help="where findings (.case repr, .bin bytes) go")
    parser.add_argument("--replay", metavar="CASE_FILE")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    return worker(args) if args.worker else drive(args)


if __name__ == "__main__":
    sys.exit(main())
