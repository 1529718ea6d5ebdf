"""No environment value makes a user's run hang, crash or lose records (issue 31, item 6).

The product once read three test-only variables: DCM2TFRECORD_TEST_PAUSE (every
shard writer waited for a file, forever outside tests),
DCM2TFRECORD_TEST_PLANNING_BUCKETS (a non-integer crashed every command importing
the planner) and DCM2TFRECORD_TEST_LOSE_RECORDS (a step dropped records). Tests now
pass the bucket count to PlanShards, swap a step of the graph they build, or load
the pause point from tests/support/hooks (tests.support.hooks.subprocess_env); a run without that
folder on its path reads none of it.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.support import TEST_SALT, rid, write_png_archive
from tests.support.hooks import HOOKS_DIR, PAUSE_ENV

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORMER = ("DCM2TFRECORD_TEST_PAUSE", "DCM2TFRECORD_TEST_PLANNING_BUCKETS", "DCM2TFRECORD_TEST_LOSE_RECORDS")
PROMPTLY_S = 300     # a conversion of four small images (a held writer would wait forever)


def test_no_product_module_reads_a_test_variable_or_holds_a_test_only_branch():
    found = []
    for folder in ("dataset", "reader", "pipeline", "transforms"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for pattern in (r"DCM2TFRECORD_TEST", r"[Tt]est-only", r"TEST_[A-Z_]*ENV", r"HOOK_PAUSE"):
                found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert not found, found


@pytest.mark.parametrize("hostile", ["forever", "1"])
def test_a_conversion_ignores_every_former_test_variable(tmp_path, hostile):
    archive = tmp_path / "in"
    write_png_archive(archive, 4, 16, 16)
    pauses = tmp_path / "pauses"
    pauses.mkdir()
    values = {
        # "forever" / "1": not integers, not POINT:DIR; a POINT:DIR the old code obeyed
        "DCM2TFRECORD_TEST_PAUSE": hostile if hostile == "1" else f"half_written:{pauses}",
        "DCM2TFRECORD_TEST_PLANNING_BUCKETS": hostile if hostile == "1" else "not-a-number",
        "DCM2TFRECORD_TEST_LOSE_RECORDS": ",".join([hostile, rid("img_0001.png")]),
        # the hook's own variable does nothing without tests/support/hooks on the path
        PAUSE_ENV: f"half_written:{pauses}",
    }
    assert set(FORMER) <= set(values)
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != HOOKS_DIR]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *path]), **values}
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", str(archive), "--output", str(out),
         "--id_salt", TEST_SALT, "--target_shard_mb", "1", "--min_shard_mb", "0.5", "--max_shard_mb", "8",
         "--progress", "none"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=PROMPTLY_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not os.listdir(pauses), "a shard writer stopped at a pause point"
    with open(out / "dataset.json") as handle:
        manifest = json.load(handle)
    assert manifest["counts"]["written"] == 4, manifest["counts"]


def test_the_planner_imports_whatever_the_environment_holds():
    code = "from dcm2tfrecord.transforms.planning import shards; print(shards.PLANNING_BUCKETS)"
    env = {**os.environ, "DCM2TFRECORD_TEST_PLANNING_BUCKETS": "not-a-number"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == str(1 << 16), proc.stderr[-2000:]


def test_the_planning_bucket_count_is_a_parameter():
    from dcm2tfrecord.transforms.planning.shards import PLANNING_BUCKETS, bucket_of_order
    from dcm2tfrecord.transforms.planning.steps import PlanShards
    from dcm2tfrecord.transforms.settings import ShardBounds
    from dcm2tfrecord.transforms.hashing import ORDER_KEY_SPACE
    bounds = ShardBounds(1 << 20, 1 << 19, 1 << 23)
    assert PlanShards(bounds).buckets == PLANNING_BUCKETS and PlanShards(bounds, buckets=3).buckets == 3
    assert bucket_of_order(ORDER_KEY_SPACE - 1, 3) == 2 and bucket_of_order(ORDER_KEY_SPACE - 1) == PLANNING_BUCKETS - 1
    for bad in (0, "3", 2.5):
        with pytest.raises(ValueError):
            PlanShards(bounds, buckets=bad)


def test_the_pause_hook_reaches_a_subprocess_only_through_tests_hooks(tmp_path):
    """subprocess_env puts tests/support/hooks first on PYTHONPATH: the interpreter loads its
    sitecustomize, which wraps the shard writer; without it nothing is wrapped."""
    from tests.support.hooks import subprocess_env
    code = ("from dcm2tfrecord.dataset import shard_writer; "
            "print(shard_writer.ShardSink.append.__module__)")
    hooked = subprocess_env(pause="half_written", pause_dir=tmp_path)
    plain = {k: v for k, v in hooked.items() if k != "PYTHONPATH"}
    plain["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    said = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120, cwd=tmp_path) for env in (hooked, plain)]
    assert [p.returncode for p in said] == [0, 0], [p.stderr[-1500:] for p in said]
    assert [p.stdout.strip() for p in said] == ["dcm2tfrecord_shard_pause", "dcm2tfrecord.dataset.shard_writer"]
    with pytest.raises(ValueError):
        subprocess_env(pause="forever", pause_dir=tmp_path)
