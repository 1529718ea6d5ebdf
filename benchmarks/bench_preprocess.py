"""A training view of volumes: `--spacing 1,1,1 --crop nonzero --intensity ct` against a plain
conversion and against nnU-Net v2's own preprocessing, in one run (issue 44, "Speed and memory").

CT volumes with masks are generated (512 x 512, 100-300 slices, int16; a body-like ellipsoid of
soft tissue around -1000 HU air, a spine of bone, two organ-like blobs as mask classes 1 and 2),
half anisotropic (0.7 x 0.7 x 3-5 mm, 100-140 slices), half isotropic (0.8 mm, 300-150 slices),
as an nnU-Net raw dataset: imagesTr/<case>_0000.nii.gz, labelsTr/<case>.nii.gz. Three
subprocesses are measured with benchmarks/proc_monitor.py (user+system CPU of the process tree,
wall time, peak RSS of the largest process and of the tree's sum):

  plain       ``python -m dcm2tfrecord.pipeline convert --unit series --class_map ...
              --mask_pattern 'imagesTr/(.*)_0000\\.nii\\.gz=labelsTr/\\1.nii.gz' --splits train=1.0``
              on 2 worker processes (``--direct_num_workers=2 --direct_running_mode=multi_processing``,
              as bench_convert runs a benchmark archive), the baseline;
  preprocess  the same with ``--spacing 1,1,1 --crop nonzero --intensity ct`` (the fingerprint
              pass over the train split included);
  nnU-Net     nnunetv2's fingerprint extraction, experiment planning (3d_fullres's target spacing
              overwritten to the same 1 x 1 x 1 mm: ``plan_experiment_dataset(...,
              overwrite_target_spacing=...)``, what ``nnUNetv2_plan_experiment -overwrite_target_spacing``
              does) and 3d_fullres preprocessing, 2 processes each (``-np 2``); no dataset integrity
              check (the conversions check nothing beyond what they read either).

Then, for the first ``--compare`` cases, each record of ``preprocess`` against nnU-Net's
preprocessed array (its own dataset class, blosc2): max and mean abs difference and the fraction
of voxels within 1e-3, as written (each tool's own fingerprint) and with our record re-normalised
by nnU-Net's statistics (what the resampling alone makes of it); the mask's Dice per class.

    .venv/bin/python -m benchmarks.bench_preprocess --cases 20 --json /tmp/preprocess.json
    .venv/bin/python -m benchmarks.bench_preprocess --cases 8 --json /tmp/preprocess8.json   # what docs/BENCHMARKS.md §23 ran
    .venv/bin/python -m benchmarks.bench_preprocess --smoke --json /tmp/p.json   # 2 volumes of 32 x 32 x 12, seconds

``--variants``: no nnU-Net; the same cases converted five ways, each measured, CPU per case and
its ratio to plain printed (where the CPU of the training view goes, §23 "Where the CPU goes"):
plain, ``--intensity ct``, ``--spacing 1,1,1``, ``--spacing 1,1,1 --intensity ct`` and
``--spacing 1,1,1 --crop nonzero --intensity ct``:

    .venv/bin/python -m benchmarks.bench_preprocess --variants --cases 4 --json /tmp/variants4.json

``--smoke``: 2 volumes of 32 x 32 x 12 (one anisotropic, one isotropic), no wait for a quiet
machine; nnU-Net runs too (about 30 s: its imports and planning) unless ``--no-nnunet``; the
figures mean nothing, the point is that every step of the harness still runs
(tests/e2e/test_bench_smoke_b.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.archives import CACHE_DIR, MARKER, MIB                                   # noqa: E402
from benchmarks.proc_monitor import (bench_env, machine_description, run_monitored,     # noqa: E402
                                     tfrecord_bytes, wait_until_quiet)
from dcm2tfrecord.dataset.names import MANIFEST_NAME                                      # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR_VERSION = 1
PATTERN = r"imagesTr/(.*)_0000\.nii\.gz=labelsTr/\1.nii.gz"
CLASS_MAP = 'organ: ["1"]\nlesion: ["2"]\n'          # mask values 1 and 2 -> classes 1 and 2
CLASSES = {1: "organ", 2: "lesion"}
PREPROCESS = ["--crop", "nonzero", "--intensity", "ct"]   # with --spacing
NNUNET_ID = 944
NNUNET_NAME = f"Dataset{NNUNET_ID}_BenchCT"
SMOKE_SHAPE = (12, 32, 32)                             # slices, rows, columns
TOOLS = ("plain", "preprocess", "nnunet")
VARIANTS = ("plain", "intensity", "spacing", "spacing_intensity", "spacing_crop_intensity")   # --variants
RATIOS = {"cpu": "cpu_s", "wall": "wall_s", "peak_largest": "peak_largest_mb", "peak_sum": "peak_sum_mb",
          "output_bytes": "output_bytes"}                # ours against plain and nnU-Net: these, ours / theirs
LABELS = {"plain": "dcm2tfrecord convert", "preprocess": "dcm2tfrecord convert + preprocessing",
          "nnunet": "nnU-Net v2 fingerprint + plan + preprocess"}


# ---------------------------------------------------------------- the volumes

def case_specs(cases: int, smoke: bool) -> list[dict]:
    """Half anisotropic (0.7 x 0.7 x 3, 4 or 5 mm, 100-140 slices), half isotropic (0.8 mm,
    300-150 slices); 512 x 512 in-plane (32 x 32 x 12 at --smoke)."""
    specs, half = [], max(1, math.ceil(cases / 2) - 1)
    for i in range(cases):
        j, aniso = i // 2, i % 2 == 0
        if smoke:
            shape = SMOKE_SHAPE
        else:
            depth = 100 + round(40 * j / half) if aniso else 300 - round(150 * j / half)
            shape = (depth, 512, 512)
        spacing = (0.7, 0.7, (3.0, 4.0, 5.0)[j % 3]) if aniso else (0.8, 0.8, 0.8)   # x, y, z mm
        specs.append({"case": f"case_{i:03d}", "shape": shape, "spacing": spacing, "anisotropic": aniso})
    return specs


def _volume(spec: dict, seed: int):
    """(image int16 [z, y, x], labels uint8 [z, y, x]): air, a body, a spine, two organs, noise."""
    import numpy as np
    nz, ny, nx = spec["shape"]
    sx, sy, sz = spec["spacing"]
    rng = np.random.default_rng(seed)
    z = ((np.arange(nz) - nz / 2) * sz)[:, None, None]
    y = ((np.arange(ny) - ny / 2) * sy)[None, :, None]
    x = ((np.arange(nx) - nx / 2) * sx)[None, None, :]
    fov_x, fov_y, fov_z = nx * sx, ny * sy, nz * sz
    body = (x / (0.42 * fov_x)) ** 2 + (y / (0.30 * fov_y)) ** 2 + (z / (0.75 * fov_z)) ** 2 <= 1
    spine = ((x / (0.04 * fov_x)) ** 2 + ((y - 0.18 * fov_y) / (0.04 * fov_y)) ** 2 <= 1) & body
    organ = ((x - 0.12 * fov_x) / (0.12 * fov_x)) ** 2 + ((y + 0.02 * fov_y) / (0.10 * fov_y)) ** 2 \
        + (z / (0.30 * fov_z)) ** 2 <= 1
    lesion = ((x + 0.12 * fov_x) ** 2 + (y + 0.05 * fov_y) ** 2) / (0.05 * fov_x) ** 2 \
        + ((z - 0.1 * fov_z) / (0.15 * fov_z)) ** 2 <= 1
    image = np.full(spec["shape"], -1000.0, np.float32)
    image[np.broadcast_to(body, image.shape)] = 40.0
    image[np.broadcast_to(spine, image.shape)] = 700.0
    image[np.broadcast_to(organ, image.shape)] = 60.0
    image[np.broadcast_to(lesion, image.shape)] = 110.0
    image += rng.normal(0.0, 15.0, size=image.shape).astype(np.float32)
    labels = np.zeros(spec["shape"], np.uint8)
    labels[np.broadcast_to(organ, labels.shape)] = 1
    labels[np.broadcast_to(lesion, labels.shape)] = 2
    return np.clip(np.rint(image), -1024, 3071).astype(np.int16), labels


def _save(path: str, data, spacing) -> None:
    import nibabel as nib
    import numpy as np
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image = nib.Nifti1Image(np.ascontiguousarray(data.transpose(2, 1, 0)), np.diag([*spacing, 1.0]))
    image.header.set_data_dtype(data.dtype)
    nib.save(image, path)


def task_folder(specs: list[dict], smoke: bool) -> str:
    """The cached MSD/nnU-Net-like task folder (imagesTr, labelsTr) of these volumes."""
    tag = "smoke" if smoke else "full"
    return generated_task(os.path.join(CACHE_DIR, f"preprocess_v{GENERATOR_VERSION}_{tag}_{len(specs)}cases",
                                       "task"), specs)


def generated_task(root: str, specs: list[dict]) -> str:
    """``root`` as the task folder of ``specs``' volumes (generated once; a marker beside it: no
    input of its own); also benchmarks/bench_patches.py's."""
    marker = os.path.join(os.path.dirname(root), MARKER)
    if os.path.exists(marker):
        return root
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    for n, spec in enumerate(specs):
        image, labels = _volume(spec, n)
        _save(os.path.join(root, "imagesTr", f"{spec['case']}_0000.nii.gz"), image, spec["spacing"])
        _save(os.path.join(root, "labelsTr", f"{spec['case']}.nii.gz"), labels, spec["spacing"])
        del image, labels
    open(marker, "w").close()
    print(f"  generated {len(specs)} volumes in {time.perf_counter() - started:.1f} s", flush=True)
    return root


# ---------------------------------------------------------------- the measured programs

def convert_command(root: str, output: str, class_map: str, workers: int, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output", output,
            "--overwrite", "--unit", "series", "--class_map", class_map, "--mask_pattern", PATTERN,
            "--id_salt", "bench", "--splits", "train=1.0", "--keep_source_path",
            f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing", *extra]


def nnunet_layout(root: str, base: str, specs: list[dict]) -> dict:
    """nnU-Net's raw layout over the same files (links) and its three folders; the env to run it in."""
    from nnunetv2.dataset_conversion.generate_dataset_json import generate_dataset_json
    raw, pre, results = (os.path.join(base, d) for d in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results"))
    shutil.rmtree(base, ignore_errors=True)
    dataset = os.path.join(raw, NNUNET_NAME)
    for sub in ("imagesTr", "labelsTr"):
        os.makedirs(os.path.join(dataset, sub))
        for name in sorted(os.listdir(os.path.join(root, sub))):
            os.symlink(os.path.join(root, sub, name), os.path.join(dataset, sub, name))
    os.makedirs(pre)
    os.makedirs(results)
    # nnU-Net's own dataset description, written by nnU-Net's own helper
    generate_dataset_json(dataset, channel_names={0: "CT"},
                          labels={"background": 0, **{name: value for value, name in CLASSES.items()}},
                          num_training_cases=len(specs), file_ending=".nii.gz", dataset_name=NNUNET_NAME)
    return {"nnUNet_raw": raw, "nnUNet_preprocessed": pre, "nnUNet_results": results}


def run_nnunet(spacing: tuple, processes: int) -> None:
    """The nnU-Net subprocess: fingerprint, plan (3d_fullres at ``spacing``, z y x), preprocess 3d_fullres."""
    from nnunetv2.experiment_planning.plan_and_preprocess_api import (extract_fingerprints, plan_experiments,
                                                                      preprocess)
    extract_fingerprints([NNUNET_ID], num_processes=processes, check_dataset_integrity=False, clean=True,
                         verbose=False, show_progress_bar=False)
    plans = plan_experiments([NNUNET_ID], overwrite_target_spacing=spacing)
    preprocess([NNUNET_ID], plans, configurations=("3d_fullres",), num_processes=[processes], verbose=False)


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(path) for n in names)


# ---------------------------------------------------------------- agreement

def _our_records(output: str) -> tuple:
    from dcm2tfrecord import reader
    access = reader.RandomAccess(output, "train")
    found = {}
    for i in range(len(access)):
        record = access[i]
        case = os.path.basename(bytes(record["source_path"]).decode()).split("_0000")[0]
        found[case] = i
    return found, access


def agreement(ours: str, nnunet_pre: str, cases: list[str]) -> dict:
    """Our preprocessed records against nnU-Net's preprocessed arrays, case by case."""
    import numpy as np
    from nnunetv2.training.dataloading.nnunet_dataset import infer_dataset_class
    with open(os.path.join(nnunet_pre, NNUNET_NAME, "nnUNetPlans.json")) as f:
        plans = json.load(f)
    back = plans["transpose_backward"]
    theirs_stats = plans["foreground_intensity_properties_per_channel"]["0"]
    with open(os.path.join(ours, MANIFEST_NAME)) as f:
        fp = json.load(f)["fingerprint"]
    ours_stats = {k: fp[k][0] for k in ("mean", "std", "percentile_00_5", "percentile_99_5")}
    folder = os.path.join(nnunet_pre, NNUNET_NAME, "nnUNetPlans_3d_fullres")
    dataset = infer_dataset_class(folder)(folder)
    index, access = _our_records(ours)
    rows = []
    for case in cases:
        data, seg, _, props = dataset.load_case(case)
        theirs = np.asarray(data[0]).transpose(back)
        theirs_seg = np.asarray(seg[0]).transpose(back)
        record = access[index[case]]
        image = np.asarray(record["image"], np.float32)[..., 0]
        mask = np.asarray(record["mask"])[..., 0]
        common = tuple(slice(0, min(a, b)) for a, b in zip(image.shape, theirs.shape))
        a, b = image[common], theirs[common]
        # ours with nnU-Net's statistics: undo our z-score, apply theirs (the clip bounds stay ours)
        renorm = ((a * ours_stats["std"] + ours_stats["mean"]) - theirs_stats["mean"]) / theirs_stats["std"]
        row = {"case": case, "ours_shape": list(image.shape), "nnunet_shape": list(theirs.shape)}
        for tag, x in (("", a), ("_their_stats", renorm)):
            diff = np.abs(x - b)
            row[f"max_abs_diff{tag}"] = float(diff.max())
            row[f"mean_abs_diff{tag}"] = float(diff.mean())
            row[f"within_1e-3{tag}"] = float(np.mean(diff <= 1e-3))
        m, s = mask[common], theirs_seg[common]
        for value, name in CLASSES.items():
            inter, total = np.sum((m == value) & (s == value)), np.sum(m == value) + np.sum(s == value)
            row[f"dice_{name}"] = float(2 * inter / total) if total else 1.0
        rows.append(row)
    return {"ours": ours_stats, "nnunet": {k: theirs_stats[k] for k in ours_stats}, "cases": rows}


# ---------------------------------------------------------------- the run

def measure(name: str, cmd: list[str], env: dict, args, log_dir: str):
    print(f"\n[{name}] $ {' '.join(cmd)}", flush=True)
    wait_until_quiet(args.quiet_wait)
    result = run_monitored(cmd, env=env, cwd=REPO, interval=args.interval,
                           log_prefix=os.path.join(log_dir, name))
    if result.returncode != 0:
        print(f"{name} FAILED (exit {result.returncode}):\n{result.tail()}", flush=True)
        return None
    print(f"    wall {result.wall_s:.1f} s, CPU {result.cpu_s:.1f} s, peak RSS largest "
          f"{result.peak_largest_mib:.0f} MiB ({result.peak_largest_name}), tree sum "
          f"{result.peak_sum_mib:.0f} MiB, other processes {result.foreign_cpu_s:.1f} s CPU"
          + ("  <-- NOISY" if result.foreign_cpu_s > 0.1 * result.wall_s else ""), flush=True)
    return result


def variant_options(name: str, spacing: str) -> list[str]:
    """convert's extra options of one --variants run."""
    return {"plain": [], "intensity": ["--intensity", "ct"], "spacing": ["--spacing", spacing],
            "spacing_intensity": ["--spacing", spacing, "--intensity", "ct"],
            "spacing_crop_intensity": ["--spacing", spacing, *PREPROCESS]}[name]


def run_variants(args, specs: list[dict], root: str, work: str, class_map: str, env: dict) -> dict:
    """--variants: each of VARIANTS over the same cases; CPU per case and the ratio to plain."""
    rows = []
    for name in VARIANTS:
        output = os.path.join(work, name)
        cmd = convert_command(root, output, class_map, args.workers, variant_options(name, args.spacing))
        r = measure(name, cmd, env, args, work)
        if r is None:
            return {}
        rows.append({"variant": name, "options": " ".join(variant_options(name, args.spacing)) or "(none)",
                     "cases": len(specs), "cpu_s": round(r.cpu_s, 2), "cpu_s_per_case": round(r.cpu_s / len(specs), 3),
                     "wall_s": round(r.wall_s, 2), "peak_largest_mb": round(r.peak_largest_mib * MIB / 1e6, 1),
                     "output_bytes": tfrecord_bytes(output), "foreign_cpu_s": round(r.foreign_cpu_s, 1)})
        shutil.rmtree(output, ignore_errors=True)
    plain = rows[0]["cpu_s"]
    for row in rows:
        row["cpu_vs_plain"] = round(row["cpu_s"] / plain, 2)
    print("\n| variant | options | CPU s | CPU s per case | ÷ plain | wall s | peak RSS largest MB "
          "| output bytes | other processes' CPU s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['variant']} | `{r['options']}` | {r['cpu_s']:.1f} | {r['cpu_s_per_case']:.2f} "
              f"| {r['cpu_vs_plain']:.2f} | {r['wall_s']:.1f} | {r['peak_largest_mb']:.0f} "
              f"| {r['output_bytes']:,} | {r['foreign_cpu_s']:.1f} |")
    return {"machine": machine_description(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "spacing": args.spacing, "specs": specs, "variants": rows}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=20, help="CT volumes (default 20)")
    parser.add_argument("--spacing", default="1,1,1", help="target spacing X,Y,Z mm (default 1,1,1)")
    parser.add_argument("--workers", type=int, default=2, help="convert's worker processes and nnU-Net's -np")
    parser.add_argument("--compare", type=int, default=4, help="cases compared voxel by voxel (default 4)")
    parser.add_argument("--no-nnunet", action="store_true", help="skip nnU-Net (and the agreement)")
    parser.add_argument("--interval", type=float, default=0.2, help="/proc polling interval, s")
    parser.add_argument("--quiet-wait", type=float, default=120.0,
                        help="longest wait for a quiet machine before each run, s (default 120)")
    parser.add_argument("--keep-output", action="store_true", help="keep the converted datasets")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--smoke", action="store_true",
                        help="2 volumes of 32 x 32 x 12, seconds: what tests/e2e/test_bench_smoke_b.py runs")
    parser.add_argument("--variants", action="store_true",
                        help="no nnU-Net: plain, --intensity ct, --spacing, --spacing + --intensity ct and all three "
                             "options over the same cases, CPU per case and the ratio to plain")
    parser.add_argument("--nnunet-run", action="store_true", help=argparse.SUPPRESS)   # the nnU-Net subprocess
    args = parser.parse_args(argv)
    spacing = tuple(float(v) for v in args.spacing.split(","))
    if args.nnunet_run:
        run_nnunet(tuple(reversed(spacing)), args.workers)          # nnU-Net's axes: z, y, x
        return 0
    if args.smoke:
        args.cases, args.quiet_wait, args.compare = 2, 0.0, 2
    specs = case_specs(args.cases, args.smoke)
    print(f"machine: {machine_description()}", flush=True)
    print(f"{len(specs)} volumes: " + ", ".join(
        f"{s['shape'][2]}x{s['shape'][1]}x{s['shape'][0]} @ {'x'.join(f'{v:g}' for v in s['spacing'])} mm"
        for s in specs), flush=True)
    root = task_folder(specs, args.smoke)
    base = os.path.dirname(root)
    work = os.path.join(base, "runs")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    class_map = os.path.join(work, "classes.yaml")
    with open(class_map, "w") as f:
        f.write(CLASS_MAP)
    source_bytes = folder_bytes(root)
    # the page cache warmed: the first tool pays no cold reads the others skip
    for folder, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(folder, n), "rb") as f:
                while f.read(1 << 24):
                    pass
    env = bench_env()
    if args.variants:
        result = run_variants(args, specs, root, work, class_map, env)
        if result and args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
        if not args.keep_output:
            shutil.rmtree(work, ignore_errors=True)
        return 0 if result else 1
    outputs = {"plain": os.path.join(work, "plain"), "preprocess": os.path.join(work, "preprocess")}
    runs, out_bytes = {}, {}
    for tool, extra in (("plain", []), ("preprocess", ["--spacing", args.spacing, *PREPROCESS])):
        runs[tool] = measure(tool, convert_command(root, outputs[tool], class_map, args.workers, extra), env,
                             args, work)
        if runs[tool] is None:
            return 1
        out_bytes[tool] = tfrecord_bytes(outputs[tool])
        if tool == "plain" and not args.keep_output:
            shutil.rmtree(outputs[tool], ignore_errors=True)          # disk: a plain copy of every volume
    nnunet_env = None
    if args.no_nnunet:
        print("\nnnU-Net skipped (--no-nnunet)", flush=True)
    else:
        nnunet_env = nnunet_layout(root, os.path.join(base, "nnunet"), specs)
        cmd = [sys.executable, "-m", "benchmarks.bench_preprocess", "--nnunet-run", "--spacing", args.spacing,
               "--workers", str(args.workers)]
        pythonpath = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)     # the caller's kept
        runs["nnunet"] = measure("nnunet", cmd, {**env, **nnunet_env, "PYTHONPATH": pythonpath}, args, work)
        if runs["nnunet"] is None:
            return 1
        outputs["nnunet"] = os.path.join(nnunet_env["nnUNet_preprocessed"], NNUNET_NAME, "nnUNetPlans_3d_fullres")
        out_bytes["nnunet"] = folder_bytes(outputs["nnunet"])

    rows = []
    for tool, r in runs.items():
        rows.append({"tool": tool, "label": LABELS[tool], "cases": len(specs), "cpu_s": round(r.cpu_s, 2),
                     "cpu_s_per_case": round(r.cpu_s / len(specs), 3), "wall_s": round(r.wall_s, 2),
                     "wall_s_per_case": round(r.wall_s / len(specs), 3),
                     "peak_largest_mb": round(r.peak_largest_mib * MIB / 1e6, 1),
                     "peak_largest_proc": r.peak_largest_name,
                     "peak_sum_mb": round(r.peak_sum_mib * MIB / 1e6, 1),
                     "output_bytes": out_bytes[tool],
                     "output_gb": round(out_bytes[tool] / 1e9, 4), "foreign_cpu_s": round(r.foreign_cpu_s, 1),
                     "processes": [(p.name, round(p.hwm_kib * 1024 / 1e6, 1)) for p in r.processes]})
    by = {r["tool"]: r for r in rows}
    ratios = {}
    for other in ("plain", "nnunet"):
        if other not in by:
            continue
        for key, field in RATIOS.items():
            ratios[f"preprocess_vs_{other}_{key}"] = round(by["preprocess"][field] / by[other][field], 2)
    largest = max(specs, key=lambda s: math.prod(s["shape"]))
    src_mb = math.prod(largest["shape"]) * 2 / 1e6
    out_mb = max(math.prod(round(n * v / t) for n, v, t in zip(s["shape"][::-1], s["spacing"], spacing)) * 4 / 1e6
                 for s in specs)

    print(f"\n{len(specs)} volumes, {source_bytes / 1e9:.3f} GB of .nii.gz; the largest volume "
          f"{src_mb:.0f} MB as int16, the largest resampled one {out_mb:.0f} MB as float32")
    print("\n| tool | CPU s | CPU s per case | wall s | peak RSS largest process MB | peak RSS tree sum MB "
          "| output GB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['label']} | {r['cpu_s']:.1f} | {r['cpu_s_per_case']:.2f} | {r['wall_s']:.1f} "
              f"| {r['peak_largest_mb']:.0f} | {r['peak_sum_mb']:.0f} | {r['output_gb']:.3f} |")
    print("\n| ratio | CPU | wall | peak RSS largest process | peak RSS tree sum | output bytes |")
    print("|---|---:|---:|---:|---:|---:|")
    for other in ("plain", "nnunet"):
        if other in by:
            print(f"| preprocessing / {LABELS[other].split()[0]} {'convert' if other == 'plain' else ''}".rstrip()
                  + " | " + " | ".join(f"{ratios[f'preprocess_vs_{other}_{key}']:.2f}" for key in RATIOS) + " |")

    result = {"machine": machine_description(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "spacing": list(spacing), "specs": specs, "source_gb": round(source_bytes / 1e9, 4),
              "largest_volume_mb": round(src_mb, 1), "largest_resampled_mb": round(out_mb, 1),
              "rows": rows, "ratios": ratios}
    if nnunet_env is not None:
        compared = [s["case"] for s in specs][:args.compare]
        agree = agreement(outputs["preprocess"], nnunet_env["nnUNet_preprocessed"], compared)
        result["agreement"] = agree
        print("\nfingerprint (CT foreground): "
              + ", ".join(f"{k} ours {agree['ours'][k]:.3f} / nnU-Net {agree['nnunet'][k]:.3f}"
                          for k in agree["ours"]))
        print("\n| case | shape ours / nnU-Net | max abs diff | mean abs diff | within 1e-3 "
              "| max abs diff, their stats | within 1e-3, their stats | Dice organ | Dice lesion |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for c in agree["cases"]:
            print(f"| {c['case']} | {'x'.join(map(str, c['ours_shape']))} / {'x'.join(map(str, c['nnunet_shape']))} "
                  f"| {c['max_abs_diff']:.4f} | {c['mean_abs_diff']:.5f} | {c['within_1e-3']:.4f} "
                  f"| {c['max_abs_diff_their_stats']:.4f} | {c['within_1e-3_their_stats']:.4f} "
                  f"| {c['dice_organ']:.4f} | {c['dice_lesion']:.4f} |")
    elif args.smoke:
        print("\nnnU-Net skipped in --smoke: no agreement figures", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if not args.keep_output:
        shutil.rmtree(work, ignore_errors=True)
        if nnunet_env is not None:
            shutil.rmtree(os.path.join(base, "nnunet"), ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
