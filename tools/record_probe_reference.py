"""Records what the probe before the lean one gave, for tests/transforms/records/test_probe_equivalence.py.

The reference is the frozen copy of the old probe that lived in tests/reference_v0/ until
it was replaced by this record (README, changelog: issue "Lean pipeline"; issue 31). It is
run once, here, from git history, over the test's inputs (every pydicom test file, named as
is and as ``.bin``; the generated CT variants; the derandomized fuzz corpus), in each of
the test's modes, each file cold (the reference's conversion memo emptied before it). The
outcomes go to tests/data/probe_v0_outcomes.json, one line per input:

    name: [sha256 of the input (16 hex), "record", sha256 of repr(ProbedRecord) (16 hex)]
    name: [sha256 of the input (16 hex), "error", reason, skipped]

Regenerate (only when the inputs change or a deliberate change of ProbedRecord's repr
moves every record; say why in the commit), from the repository root:

    PYTHONPATH=. .venv/bin/python tools/record_probe_reference.py

The output is deterministic: two runs write the same bytes (the test's own corpus is
derandomized, and nothing recorded depends on time, paths or the salt's randomness).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The last commit holding tests/reference_v0/ (removed by the next one).
REFERENCE_COMMIT = "ef6bf8b4e7aeb75c37f59433aba3240366305243"
OUT = os.path.join(ROOT, "tests", "data", "probe_v0_outcomes.json")


def load_reference(commit: str, into: str):
    """tests/reference_v0 as it was at ``commit``, importable as ``probe_reference_v0``."""
    package = os.path.join(into, "probe_reference_v0")
    os.makedirs(package)
    for name in ("__init__.py", "header.py", "native.py", "probe.py"):
        text = subprocess.run(["git", "show", f"{commit}:tests/reference_v0/{name}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
        with open(os.path.join(package, name), "w") as handle:
            handle.write(text.replace("tests.reference_v0", "probe_reference_v0"))
    sys.path.insert(0, into)
    return (importlib.import_module("probe_reference_v0.header"),
            importlib.import_module("probe_reference_v0.probe"))


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reference-commit", default=REFERENCE_COMMIT)
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    sys.path.insert(0, ROOT)
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
    from tests.support.fuzz import FUZZ_MAX_PIXELS, _fuzz_corpus
    from tests.transforms.records import test_probe_equivalence as eq

    with tempfile.TemporaryDirectory() as tmp:
        reference_header, reference_probe = load_reference(args.reference_commit, os.path.join(tmp, "ref"))
        os.makedirs(os.path.join(tmp, "ct"))
        import pathlib
        groups = {"pydicom": (eq._pydicom_files(), sorted(eq.SETTINGS), 1 << 40),
                  "ct_variants": (eq._ct_variants(pathlib.Path(tmp, "ct")), sorted(eq.SETTINGS), 1 << 40),
                  "fuzz": (_fuzz_corpus(), ["default", "split_keep_tags"], FUZZ_MAX_PIXELS)}
        lines = []
        for group, (inputs, modes, max_pixels) in groups.items():
            for mode in modes:
                entries = []
                for name, data in inputs:
                    reference_header._CONVERTED.clear()
                    outcome = eq._outcome(reference_probe.probe_file, name, data, eq.SETTINGS[mode], max_pixels)
                    entries.append((name, [digest(data), *eq.recorded_form(outcome)]))
                body = ",\n".join(f"  {json.dumps(n)}: {json.dumps(v)}" for n, v in sorted(entries))
                lines.append(f" {json.dumps(f'{group}/{mode}')}: {{\n{body}\n }}")
    with open(args.out, "w") as handle:
        handle.write("{\n\"about\": " + json.dumps(
            "Outcomes of the probe before the lean one (tests/reference_v0 at "
            f"{args.reference_commit[:7]}), per group/mode and input; written by "
            "tools/record_probe_reference.py, read by tests/transforms/records/test_probe_equivalence.py")
            + ",\n\"outcomes\": {\n" + ",\n".join(lines) + "\n}\n}\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
