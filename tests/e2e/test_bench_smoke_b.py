"""Benchmarks at their --smoke size, so that they cannot rot (second half of the benchmarks/
scripts; bench_masks_hostile has its own file): each runs as documented, a subprocess of
``python -m benchmarks.<name> --smoke``, through the same code paths as a full run (the same
archive generators of benchmarks/archives.py, the same baselines) on tiny sizes, and its report
is checked for what it must hold: the rows and columns of its tables, figures that are positive
numbers, a --json output with the expected keys. The figures themselves are the benchmarks' to
report (docs/BENCHMARKS.md), at their full sizes: no timed assertion here.

benchmarks/proc_monitor.py and benchmarks/snapshot.py have no entry point of their own: they are
the helpers bench_memory (run_monitored, wait_until_quiet, snapshot.resolve) and profile_summary
run, and are held through those two runs.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUMBER = r"[-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?"


@pytest.fixture(scope="module", autouse=True)
def own_cache(tmp_path_factory):
    """The archive cache of these runs (DCM2TFRECORD_BENCH_CACHE, benchmarks/archives.py): one of
    their own, never benchmarks/.cache, so no run reuses what older code built there (bench_reader
    and bench_random_access share its dataset, converted race-free)."""
    before = os.environ.get("DCM2TFRECORD_BENCH_CACHE")
    os.environ["DCM2TFRECORD_BENCH_CACHE"] = str(tmp_path_factory.mktemp("bench_cache"))
    yield
    if before is None:
        os.environ.pop("DCM2TFRECORD_BENCH_CACHE", None)
    else:
        os.environ["DCM2TFRECORD_BENCH_CACHE"] = before


def run_smoke(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    # the repository first, the caller's PYTHONPATH kept (a checkout's code ahead of an installed one)
    pythonpath = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--smoke", *args], cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=pythonpath), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def table_rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of each markdown table row of ``text`` whose first cell starts with ``first_cell``."""
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith(f"| {first_cell}")]


def positive(cell) -> bool:
    return float(str(cell).replace(",", "")) > 0


def test_bench_planning(tmp_path):
    out = tmp_path / "planning.json"
    proc = run_smoke("bench_planning", "--json", str(out))
    result = json.loads(out.read_text())
    per_record = result["per_record_bytes"]
    assert set(per_record) >= {"source_file", "probed_record", "group_hash_buckets_kv", "group_shards_kv",
                               "probed_record_with_ids", "group_kv_with_ids", "shard_plan_per_record_with_ids"}
    assert all(value > 0 for value in per_record.values()), per_record
    # a DICOM probe's identifiers and slice geometry cost bytes on the wire
    assert per_record["probed_record_with_ids"] > per_record["probed_record"], per_record
    (run,) = result["runs"]
    assert run["records"] == run["planned_records"] == 2000, run
    assert run["num_shards"] >= 1 and run["shards_outside_bounds"] == 0, run
    assert run["reshuffle_bytes_per_record"] > 0 and run["bucket_branch"]["num_buckets"] >= 1, run
    # the printed table: every bytes-per-record figure positive
    section = proc.stdout.split("Bytes per record through each shuffle", 1)[1]
    figures = re.findall(rf"^\s+\S.*?\s({NUMBER}) B$", section, re.M)
    assert len(figures) >= 11 and all(positive(f) for f in figures), section


def test_bench_memory(tmp_path):
    out = tmp_path / "memory.json"
    proc = run_smoke("bench_memory", "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 2 and rows[0]["files"] < rows[1]["files"], rows
    for row in rows:
        assert row["shards"] >= 1 and row["output_mib"] > 0, row
        # no order between the two: the largest is the kernel's VmHWM (a spike between two polls
        # included), the sum is of VmRSS at a poll, so a one-process run's sum can fall just short
        assert row["peak_largest_mib"] > 0 and row["peak_sum_mib"] > 0, row
        assert row["processes"], row                  # proc_monitor saw the tree
    assert rows[0]["ratio_largest"] == rows[0]["ratio_sum"] == 1.0 and rows[1]["ratio_largest"] > 0, rows
    table = [line for line in proc.stdout.splitlines() if re.match(r"\| \d", line)]
    assert len(table) == 2 and all(len(line.strip("|").split("|")) == 10 for line in table), proc.stdout


def test_bench_per_record():
    proc = run_smoke("bench_per_record")
    result = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert result["records"] == 6, result
    for part in ("probe", "probe_after_first", "write", "encode_example"):
        assert result[part]["mean_ms"] > 0 and result[part]["median_ms"] > 0, result


def test_bench_png():
    proc = run_smoke("bench_png")
    assert proc.stdout.count("| form |") == 2, proc.stdout          # CT slices, then photos
    for form, rows in (("raw, plain", 2), ("raw, gzip", 2), ("png records", 2)):
        assert len(table_rows(proc.stdout, form)) == rows, proc.stdout
    for cells in table_rows(proc.stdout, "raw") + table_rows(proc.stdout, "png"):
        assert len(cells) == 11, cells
        assert all(positive(c) for c in cells[1:5]), cells           # write CPU, x raw, bytes, x raw
        gzip = "gzip" in cells[0]
        assert all((c == "n/a") if gzip and i >= 7 else positive(c) for i, c in enumerate(cells[5:], 5)), cells
    for cells in table_rows(proc.stdout, "raw, plain"):
        assert cells[2] == "1.00" and cells[4] == "1.000", cells     # the baseline against itself


def test_bench_reader(tmp_path):
    out = tmp_path / "reader.json"
    proc = run_smoke("bench_reader", "--json", str(out))
    result = json.loads(out.read_text())
    rgb, ct = result["rgb"], result["ct"]
    assert rgb["records"] == 40 and rgb["png_images"] == 20, rgb
    assert set(rgb["methods"]) == {"a_raw", "a_unbuf", "b_classic", "b_uint8", "c_png", "d_reader", "d_float",
                                   "d_unshuffled", "s_parse", "s_decode"}, rgb
    assert set(ct["methods"]) == {"a_raw", "a_unbuf", "d_reader"} and ct["records"] == 8, ct
    for method in list(rgb["methods"].values()) + list(ct["methods"].values()):
        # CPU in 10 ms ticks: a pass of 8 images may count none
        assert method["best_images_per_s"] > 0 and method["cpu_ms_per_1000"] >= 0, method
    assert result["memcpy_us_per_record"] > 0, result
    ratios = [cells for cells in table_rows(proc.stdout, "d") if " / " in cells[0] and len(cells) == 6]
    assert len(ratios) == 9 and all(positive(cells[1]) for cells in ratios), proc.stdout    # 7 RGB, 2 CT
    assert len(table_rows(proc.stdout, "s_decode: + decode_raw")) == 1, proc.stdout          # --breakdown


def test_bench_random_access(tmp_path):
    out = tmp_path / "random_access.json"
    proc = run_smoke("bench_random_access", "--json", str(out))
    result = json.loads(out.read_text())
    methods = {"load_seq", "load_seed", "load_seed_prev", "load_resumable", "load_seed_b10", "ra_random",
               "grain_2w", "grain_2w_tuned"}
    assert set(result["summary"]) == methods, result["summary"]
    for name, row in result["summary"].items():
        assert row["best_images_per_s"] > 0 and row["cpu_ms_per_1000"] >= 0, (name, row)
    assert set(result["resume"]) == {"0", "10", "20", "30", "unseeded"}, result["resume"]
    assert [result["resume"][k]["step"] for k in ("0", "10", "20", "30")] == [0, 1, 2, 3], result["resume"]
    assert all(row["first_batch_s"] > 0 for row in result["resume"].values()), result["resume"]
    assert set(result["grain_first_batch_s"]) == {"grain_2w", "grain_2w_tuned"}, result
    assert result["epoch_s"] > 0
    assert len(table_rows(proc.stdout, "load_seed / load_seq")) == 1, proc.stdout


def test_bench_tfds_metadata():
    proc = run_smoke("bench_tfds_metadata")
    conversion = table_rows(proc.stdout, "the conversion (40 records")
    many = table_rows(proc.stdout, "a manifest of 200 shards")
    assert len(conversion) == len(many) == 1, proc.stdout
    for cells in conversion + many:
        assert len(cells) == 6 and all(positive(c) for c in cells[1:5]), cells
    assert positive(conversion[0][5]) and many[0][5] == "-", proc.stdout


def test_medimagetools_compare():
    proc = run_smoke("medimagetools_compare", timeout=120)
    result = json.loads(proc.stdout)
    assert "med-imagetools" in proc.stderr          # whether it is installed, and that it was not run
    # one ROI exact, one with a voxel wrong: the scoring maps the axes and finds that voxel
    assert result["dice_per_roi"]["Target/GTV"] == 1.0 and result["voxels_differing_per_roi"]["Target/GTV"] == 0
    assert 0 < result["dice_per_roi"]["Target/ptv_1"] < 1, result
    assert result["voxels_differing_per_roi"]["Target/ptv_1"] == 1, result
    assert result["axis_mapping"]["file0_k"] == 3 and result["axis_mapping"]["fileN_k"] == 0, result
    assert result["warnings"] == [], result


def test_profile_summary():
    proc = run_smoke("profile_summary")
    assert "## launcher" in proc.stdout and "## beam worker" in proc.stdout, proc.stdout
    shares = [float(s) for s in re.findall(r"^\s*(\d+\.\d)%", proc.stdout, re.M)]
    assert shares and all(0 < s <= 100 for s in shares), proc.stdout
    assert "write: encode Example" in proc.stdout, proc.stdout



def test_bench_copy(tmp_path):
    """copy against a plain copy of the same files, local and on the GCS emulator: every route
    has both methods (and, for gs://, the same files through Beam's FileSystems unchecked and
    copy as it was, streamed through them), each with MB moved and a positive rate; every row
    but the plain copy has its ratio to it."""
    out = tmp_path / "copy.json"
    proc = run_smoke("bench_copy", "--json", str(out))
    rows = json.loads(out.read_text())["rows"]
    routes = {"local -> local", "local -> gs://", "gs:// -> local"}
    assert {(r["route"], r["method"] == "dcm2tfrecord copy") for r in rows} == {(x, y) for x in routes for y in (0, 1)}
    plain = {"shutil.copytree", "google-cloud-storage per file"}
    assert sorted(r["route"] for r in rows if r["method"] not in plain | {"dcm2tfrecord copy"}) == \
        ["gs:// -> local", "gs:// -> local", "local -> gs://", "local -> gs://"]
    for r in rows:
        assert r["mb"] > 1 and r["wall_s"] > 0 and r["mb_per_s"] > 0, r
        assert (r["wall_vs_plain"] is not None) == (r["method"] not in plain), r
    assert "| local -> gs:// | dcm2tfrecord copy |" in proc.stdout


def test_bench_preprocess_variants(tmp_path):
    """--variants: the same 2 tiny volumes converted plain, with --intensity ct, --spacing, both, and
    all three options; CPU per case and the ratio to plain of each (no nnU-Net)."""
    out = tmp_path / "variants.json"
    proc = run_smoke("bench_preprocess", "--variants", "--json", str(out))
    rows = json.loads(out.read_text())["variants"]
    assert [r["variant"] for r in rows] == ["plain", "intensity", "spacing", "spacing_intensity",
                                            "spacing_crop_intensity"], rows
    for row in rows:
        assert row["cases"] == 2 and row["output_bytes"] > 0, row
        assert all(positive(row[k]) for k in ("cpu_s", "cpu_s_per_case", "cpu_vs_plain")), row
    assert rows[0]["cpu_vs_plain"] == 1.0, rows[0]
    assert len(table_rows(proc.stdout, "spacing_crop_intensity")) == 1, proc.stdout[-2000:]


def test_bench_preprocess(tmp_path):
    """A plain conversion, one with --spacing 1,1,1 --crop nonzero --intensity ct and nnU-Net v2's own
    fingerprint, planning and preprocessing of the same 2 tiny volumes: each measured (CPU, wall, peak
    RSS, output bytes), the ratios, and our records against nnU-Net's arrays case by case."""
    pytest.importorskip("nnunetv2")
    out = tmp_path / "preprocess.json"
    proc = run_smoke("bench_preprocess", "--json", str(out))
    result = json.loads(out.read_text())
    rows = {row["tool"]: row for row in result["rows"]}
    assert set(rows) == {"plain", "preprocess", "nnunet"}, rows
    for row in rows.values():
        assert row["cases"] == 2 and row["output_bytes"] > 0 and row["processes"], row
        assert all(positive(row[k]) for k in ("cpu_s", "cpu_s_per_case", "wall_s", "peak_largest_mb",
                                                "peak_sum_mb")), row
    assert set(result["ratios"]) == {f"preprocess_vs_{other}_{key}" for other in ("plain", "nnunet")
                                     for key in ("cpu", "wall", "peak_largest", "peak_sum", "output_bytes")}, \
        result["ratios"]
    assert all(positive(v) for v in result["ratios"].values()), result["ratios"]
    agreement = result["agreement"]
    assert set(agreement["ours"]) == set(agreement["nnunet"]) == {"mean", "std", "percentile_00_5",
                                                                  "percentile_99_5"}, agreement
    assert [c["case"] for c in agreement["cases"]] == ["case_000", "case_001"], agreement
    for case in agreement["cases"]:
        assert case["ours_shape"] == case["nnunet_shape"], case          # the same target grid's size
        assert all(0 <= case[k] <= 1 for k in ("within_1e-3", "within_1e-3_their_stats", "dice_organ",
                                                 "dice_lesion")), case
        assert case["dice_organ"] > 0.5 and case["dice_lesion"] > 0.5, case
    for label in ("dcm2tfrecord convert", "dcm2tfrecord convert + preprocessing", "nnU-Net v2"):
        assert len(table_rows(proc.stdout, label)) == 1 + (label == "dcm2tfrecord convert"), proc.stdout
    assert len(table_rows(proc.stdout, "case_0")) == 2, proc.stdout


def test_bench_bricks(tmp_path):
    out = tmp_path / "bricks.json"
    proc = run_smoke("bench_bricks", "--json", str(out))
    result = json.loads(out.read_text())
    assert set(result["layouts"]) == {"plain", "none", "zstd"}, result
    for name, row in result["layouts"].items():
        assert row["shard_bytes"] > 0 and row["whole_ms"] > 0 and row["patch_ms"] > 0, (name, row)
    # a patch of one brick's size reads its bricks, not the volume (at smoke size a brick is a
    # few 4 KiB pages, and a mapped read counts the pages it touches: well under half)
    assert result["layouts"]["none"]["patch_kib"] < result["layouts"]["plain"]["patch_kib"] / 2, result
    codecs = {f"{what} {codec}" for what in ("int16 image", "uint8 mask")
              for codec in ("none", "zstd", "lz4", "blosc2")}
    assert set(result["codecs"]) == codecs, result["codecs"]
    assert all(row["bytes"] > 0 and row["decode_mb_s"] > 0 for row in result["codecs"].values()), result
    assert len(table_rows(proc.stdout, "zstd")) == 1, proc.stdout


def test_bench_encryption(tmp_path):
    out = tmp_path / "encryption.json"
    proc = run_smoke("bench_encryption", "--json", str(out))
    result = json.loads(out.read_text())
    assert set(result["datasets"]) == {"224x224x3 uint8", "512x512 int16 CT"}, result
    assert [d["records"] for d in result["datasets"].values()] == [40, 8], result
    for name, data in result["datasets"].items():
        for part in ("write", "ra"):
            assert set(data[part]) == {"plain", "encrypted"}, (name, part, data[part])
        assert set(data["load"]) == {"plain", "encrypted", "encrypted_per_record", "plain_handoff"}, data["load"]
        assert all(data["load"][k]["best_images_per_s"] > 0 for k in ("plain", "encrypted")), data["load"]
        assert all(data["ra"][k]["best_records_per_s"] > 0 for k in ("plain", "encrypted")), data["ra"]
        assert all(data["write"][k]["cpu_ms_per_1000"] > 0 for k in ("plain", "encrypted")), data["write"]
        assert data["aes_us_per_record"] > 0 and data["record_bytes"] > 0, data
        assert set(data["ratios"]) >= {"load_best", "ra_cpu", "write_cpu"}, data["ratios"]
    # the table: every measure of both datasets, the three targets with a verdict each
    for name in result["datasets"]:
        rows = table_rows(proc.stdout, name)
        assert len(rows) == 12, proc.stdout
        verdicts = [cells[6] for cells in rows if cells[5]]
        assert len(verdicts) == 3 and set(verdicts) <= {"met", "NOT met", "n/a"}, rows
        assert positive(rows[0][2]) and positive(rows[0][3]), rows[0]
    # the key-encryption key the run made is gone with it
    assert not [f for f in os.listdir(os.environ["DCM2TFRECORD_BENCH_CACHE"]) if ".kek." in f]


def test_bench_patches(tmp_path):
    """Every loader row (ours on each layout and front end, locally and on the GCS emulator; each
    peer whose package is installed) with positive figures, a skipped peer named, the targets with
    a verdict each."""
    import importlib.util
    out = tmp_path / "patches.json"
    proc = run_smoke("bench_patches", "--json", str(out))
    result = json.loads(out.read_text())
    ours = {f"ours_{layout}_{front}" for layout in ("plain", "none", "zstd")
            for front in ("torch0", "torch2", "tf", "grain", "local_first1", "gcs_first1")}
    peers = {"monai_cache": "monai", "monai_cache_first1": "monai", "monai_persistent": "monai",
             "torchio": "torchio", "nnunet": "nnunetv2"}
    present = {name for name, module in peers.items() if importlib.util.find_spec(module) is not None}
    assert set(result["rows"]) == ours | present, sorted(result["rows"])
    assert set(result["skipped"]) == {p for p in peers if p not in present and "first" not in p}, result["skipped"]
    loaders, _, ratios = proc.stdout.partition("| ours (patches/s")
    for name, row in result["rows"].items():
        assert "failed" not in row, (name, row)
        assert row["patches"] >= 8 and row["patches_per_s"] > 0 and row["peak_rss_mb"] > 0, (name, row)
        assert 0 < row["peak_rss_unmapped_mb"] <= row["peak_rss_mb"], (name, row)    # less file-mapped pages
        assert row["patch_bytes"] >= 32 ** 3 * 3, (name, row)
        if name.startswith("ours_"):
            assert row["bytes_read"] > 0, (name, row)
        rows = table_rows(loaders, f"{name} |")
        assert len(rows) == 1 and len(rows[0]) == 9 and positive(rows[0][1]), (name, proc.stdout)
        if name.startswith("ours_") and "first" not in name and ratios:     # ours ÷ each peer
            (cells,) = table_rows(ratios, f"{name} |")
            assert len(cells) == 1 + len(present - {"monai_cache_first1"}), cells
            assert all(positive(cell.split()[0]) for cell in cells[1:]), cells
    verdicts = [t["met"] for t in result["targets"]]
    assert len(verdicts) == 6 + 3 * ("monai_cache" in present) + ("monai_persistent" in present) \
        + ("nnunet" in present), result["targets"]
    for target in result["targets"]:
        assert len(table_rows(proc.stdout, target["target"])) == 1, (target, proc.stdout)
