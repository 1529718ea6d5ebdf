"""docs/READING.md's Hugging Face ``datasets`` recipe, run as written with the real package.

The block under "TFDS and Hugging Face datasets" that imports ``datasets`` is run in a fresh
interpreter (Hugging Face's cache in a temporary folder, offline) on a converted dataset, its
``DATA`` pointed there; both the Arrow dataset and the streamed one must hold every record of the
split with the values ``reader.RandomAccess`` reads.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from tests.support.reader_datasets import archive, plain  # noqa: F401  (fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECTION = "## TFDS and Hugging Face datasets"

CHECKS = textwrap.dedent('''
    import numpy as np
    assert len(hf) == len(records) > 0, (len(hf), len(records))
    assert hf.features["label"].names == class_names == ["cat", "dog"]
    assert hf.features["image"].dtype == records[0]["image"].dtype.name == "uint8"     # as stored
    for i, row in enumerate(hf):
        want = records[i]
        assert row["image"].shape == want["image"].shape        # datasets' NumPy format: integers as int64
        np.testing.assert_array_equal(row["image"], want["image"])
        assert row["label"] == want["label"] and row["id"] == want["id"].decode(), i
    streamed_rows = list(streamed)
    assert len(streamed_rows) == len(records)
    for i, row in enumerate(streamed_rows):
        np.testing.assert_array_equal(np.asarray(row["image"], dtype=records[i]["image"].dtype),
                                      records[i]["image"])
        assert row["label"] == records[i]["label"] and row["id"] == records[i]["id"].decode(), i
    print("RECIPE OK", len(hf))
''')


def _recipe() -> str:
    text = open(os.path.join(REPO, "docs", "READING.md")).read()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    found = [b for b in blocks if "import datasets" in b]
    assert len(found) == 1, f"{SECTION}: one python block imports datasets, found {len(found)}"
    return found[0]


def test_the_documented_hugging_face_recipe_runs_and_reads_every_record(plain, tmp_path):  # noqa: F811
    recipe = _recipe()
    assert 'DATA, SPLIT = "out/sample-uniform", "train"' in recipe
    script = recipe.replace('"out/sample-uniform"', repr(plain)) + CHECKS
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "CUDA_VISIBLE_DEVICES": "-1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RECIPE OK" in done.stdout, done.stdout[-2000:]
    assert os.listdir(tmp_path / "hf")           # the Arrow copy went to the cache it was given
