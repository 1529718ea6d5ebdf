"""Plants one-line mutants in the modules that carry the documented promises and runs
the tests that should catch each; prints per module how many were killed and which
survived.

    PYTHONPATH=$PWD python tools/mutants.py [--only MODULE_SUBSTRING] [--list]

Each mutant replaces one exact snippet (which must occur exactly once) in one file,
runs its tests with ``pytest -x -q`` (a failing run kills it; a timeout counts as
killed and is marked so), and restores the file, also when interrupted. The tests
named per mutant are the fast ones that should see it; run the whole suite by hand
for a survivor before deciding it is harmless.
"""
from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPLITS = ["tests/transforms/test_rules.py", "tests/transforms/splits/test_split_leak.py::test_a_patient_in_two_splits_is_refused_under_every_runner_mode",
          "tests/dataset/test_split_names.py::test_split_names_ending_like_a_version_tag_are_refused_everywhere"]
HASHING = ["tests/transforms/dicom/test_metadata_identity.py::test_identifier_hashes_and_record_ids_change_with_the_salt",
           "tests/e2e/test_shard_bounds_and_determinism.py::test_seed_reorders_records_without_changing_the_record_set",
           "tests/transforms/labels/test_labels_splits.py::test_string_labels_map_to_sorted_indices_and_missing_are_skipped",
           "tests/reader/test_schedule_resume.py::test_the_order_is_a_function_of_seed_and_epoch_only"]
PLANNING = ["tests/transforms/planning/test_shards.py", "tests/transforms/planning/test_shards_property.py"]
NAMES = ["tests/dataset/test_names.py", "tests/dataset/test_split_names.py", "tests/transforms/test_rules.py",
         "--deselect", "tests/dataset/test_split_names.py::test_convert_and_verify_agree_for_generated_split_names"]
VERIFY = ["tests/dataset/test_verify.py"]
LOCK = ["tests/dataset/test_lock_gcs.py"]
COMMIT = ["tests/transforms/test_rules.py",
          "tests/pipeline/test_convert_reliability.py::test_a_run_whose_counts_do_not_add_up_commits_nothing"]

# (file, original snippet, mutated snippet, tests)
MUTANTS = [
    ("transforms/splits/assign.py", "        if point < edge:", "        if point <= edge - 0.01:", SPLITS),
    ("transforms/splits/assign.py", "                return f\"{field}:{value}\"",
     "                return f\"{value}\"", SPLITS),
    ("transforms/splits/assign.py", "    if abs(total - 1.0) > 1e-6:", "    if abs(total - 1.0) > 0.2:", SPLITS),
    ("transforms/splits/steps.py", "            merged |= accumulator", "            merged = accumulator", SPLITS),
    ("transforms/splits/steps.py", "lambda kv: len(kv[1]) > 1)", "lambda kv: len(kv[1]) > 2)", SPLITS),
    ("transforms/splits/steps.py", "        splits.update(group_splits[1])", "        pass", SPLITS),
    ("transforms/hashing.py",
     "    return hmac.new(salt.encode(\"utf-8\"), value.encode(\"utf-8\"), hashlib.sha256).hexdigest()",
     "    return hashlib.sha256(value.encode(\"utf-8\")).hexdigest()", HASHING),
    ("transforms/hashing.py", "    digest = hmac.new(_ID_KEY + salt.encode(\"utf-8\"),",
     "    digest = hmac.new(_ID_KEY,", HASHING),
    ("transforms/hashing.py", "    msg = f\"{seed}:{record_id_}\".encode(\"utf-8\")",
     "    msg = f\"{record_id_}\".encode(\"utf-8\")", HASHING),
    ("transforms/planning/shards.py", "    room_max = bounds.max_bytes - max_record_bytes",
     "    room_max = bounds.max_bytes", PLANNING),
    ("transforms/planning/shards.py", "    room_min = bounds.min_bytes + max_record_bytes",
     "    room_min = bounds.min_bytes", PLANNING),
    ("transforms/planning/shards.py", "    if total_bytes <= bounds.min_bytes:\n        return 1",
     "    if total_bytes < bounds.min_bytes // 2:\n        return 1", PLANNING),
    ("transforms/planning/shards.py", "        yield min(n - 1, offset * n // total), entry",
     "        yield min(n - 1, (offset + entry[PLANNED_BYTES]) * n // total), entry", PLANNING),
    ("transforms/planning/shards.py", "            offset += size", "            offset += size // 2", PLANNING),
    ("transforms/planning/shards.py",
     "    if total_bytes <= bounds.max_bytes:   # one shard holds the split exactly, within both bounds",
     "    if False:", PLANNING),
    ("dataset/names.py", "    if tail:", "    if False:", NAMES),
    ("dataset/names.py", "    if not _SAFE.fullmatch(text) or text in (\".\", \"..\"):",
     "    if not _SAFE.fullmatch(text):", NAMES),
    ("dataset/names.py", "r\"^(?P<split>.+?)(-v(?P<version>\\d{4,}))?-",
     "r\"^(?P<split>.+)(-v(?P<version>\\d{4,}))?-", NAMES),
    ("dataset/verify_records.py", "        same = np.flatnonzero(ordered[1:] == ordered[:-1])",
     "        same = np.flatnonzero(ordered[1:] != ordered[1:])", VERIFY),
    ("dataset/verify_manifest.py", "            if (name is None or name.version or name.parent or name.split != split",
     "            if (name is None or name.parent or name.split != split", VERIFY + NAMES),
    ("dataset/lock.py", "        if holder and time.time() - float(holder.get(\"heartbeat\", 0)) < STALE_S:",
     "        if holder and time.time() - float(holder.get(\"heartbeat\", 0)) < 0:", LOCK),
    ("dataset/lock.py", "        if not holder or holder.get(\"token\") != self.token:",
     "        if not holder:", LOCK),
    ("dataset/lock.py", "                return   # taken over", "                pass   # taken over", LOCK),
    ("dataset/lock.py", "            if holder and holder.get(\"token\") == self.token:",
     "            if holder:", LOCK),
    ("transforms/output/commit.py", "    if unaccounted == 0:", "    if unaccounted <= 1:", COMMIT),
    ("transforms/output/commit.py", "    too_many = failed > max_failure_ratio * max(matched, 1) or (",
     "    too_many = failed > 1 + max_failure_ratio * max(matched, 1) or (", COMMIT),
    ("transforms/output/commit.py", "    if not groups or allow_split_leak:", "    if True:", COMMIT),
    ("transforms/output/commit.py", "    if counts[\"records\"] or not counts[\"matched\"] or allow_empty:",
     "    if not counts[\"matched\"] or allow_empty:", COMMIT),
]


def run_mutant(path: str, old: str, new: str, tests: list[str], timeout: float) -> str:
    full = os.path.join(ROOT, path)
    with open(full) as handle:
        original = handle.read()
    if original.count(old) != 1:
        return f"not applied ({original.count(old)} matches)"
    try:
        with open(full, "w") as handle:
            handle.write(original.replace(old, new))
        env = {**os.environ, "PYTHONPATH": ROOT, "CUDA_VISIBLE_DEVICES": "-1"}
        try:
            proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                                   *tests], cwd=ROOT, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed (timeout)"
        return "killed" if proc.returncode != 0 else "SURVIVED"
    finally:
        with open(full, "w") as handle:
            handle.write(original)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--start", type=int, default=1, help="first mutant (1-based)")
    parser.add_argument("--pick", default="", help="only these mutants, e.g. 8,9,13 (1-based in MUTANTS)")
    parser.add_argument("--also", action="append", default=[], help="a test to run for every mutant too")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    picked = {int(n) for n in args.pick.split(",") if n}
    chosen = [(path, old, new, tests + args.also) for number, (path, old, new, tests) in enumerate(MUTANTS, 1)
              if args.only in path and number >= args.start and (not picked or number in picked)]
    tally: dict = collections.defaultdict(lambda: [0, 0, []])
    for number, (path, old, new, tests) in enumerate(chosen):
        if args.list:
            print(f"{path}: {old.strip()!r} -> {new.strip()!r}")
            continue
        started = time.time()
        verdict = run_mutant(path, old, new, tests, args.timeout)
        print(f"[{number + 1}/{len(chosen)}] {verdict:<18} {path}: {old.strip()[:60]!r} -> "
              f"{new.strip()[:50]!r} ({time.time() - started:.0f} s)", flush=True)
        entry = tally[path]
        entry[1] += 1
        if verdict.startswith("killed"):
            entry[0] += 1
        else:
            entry[2].append(f"{old.strip()!r} -> {new.strip()!r}: {verdict}")
    for path, (killed, total, survivors) in sorted(tally.items()):
        print(f"{path}: {killed}/{total} killed" + "".join(f"\n    survivor {s}" for s in survivors))
    return 0 if all(k == t for k, t, _ in tally.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
