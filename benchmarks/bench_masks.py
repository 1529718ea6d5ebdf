"""Masks: a CT series converted with its RTSTRUCT against the same series alone (issue 33).

The input (``mask_archive``, cached under ``benchmarks/.cache/masks_ct<slices>/``): one CT
series of ``--slices`` (default 200) 512x512 int16 slices under a real scanner's header
(archives.ct_vendor_file_bytes: pydicom's CT_small.dcm's 258 elements, 179 private, varied per
slice), and an RTSTRUCT written by rt-utils (an independent writer; it traces each mask with
OpenCV's findContours) from ten known masks of the phantom's anatomy, computed from its
noise-free HU: Body, Lung_L, Lung_R, Bone, Spine, Organ1..Organ4, Fat. For 200 slices that is
4,046 contours, 13.7 MB. The class map (``CLASSES_YAML``) maps them to six classes, two of
them unions (Lung, Organ), the structures inside the body listed before it, so each class
holds its own voxels in the label map and the overlap rule is exercised (Body, last, keeps what
no other class covers; Fat and the organs overlap): the known masks, laid out by the same rule,
must come back voxel for voxel.

Two methods, alternated ``--repeats`` times, each a ``dcm2tfrecord convert`` subprocess on the
local runner with every core (wall, CPU of the whole process tree, peak RSS of its largest
process: benchmarks/proc_monitor.py; a run during which other processes used more than 10 % of
a core is measured again):

  a. images  - ``--unit series``: the 200 slices as one volume record;
  b. masks   - ``--unit series --class_map classes.yaml``: the same record with its mask_raw.

The ratio b/a of medians, wall and CPU, is the issue's target (at most 1.5). Then the masks'
agreement: the record read back through ``dcm2tfrecord.reader.RandomAccess``, its slices matched
to the known masks by their Image Position, each class's Dice and differing voxels against
the known masks laid out by the class map's rule.

With ``--mit_python PYTHON`` (a virtualenv holding med-imagetools), the same CT and RTSTRUCT
also go through med-imagetools' own pipeline (benchmarks/medimagetools_compare.py): its time and
its masks' agreement with the known ones.

    .venv/bin/python -m benchmarks.bench_masks
    .venv/bin/python -m benchmarks.bench_masks --slices 200 --repeats 3 --mit_python /tmp/mit-venv/bin/python
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from benchmarks import archives
from benchmarks.proc_monitor import bench_env, machine_description, run_monitored, wait_until_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE_DIR = os.path.join(REPO, "benchmarks", ".cache")
ROIS = ("Body", "Lung_L", "Lung_R", "Bone", "Spine", "Organ1", "Organ2", "Organ3", "Organ4", "Fat")
CLASSES_YAML = ('Spine: ["spine"]\nBone: ["bone"]\nOrgan: ["organ[0-9]"]\nLung: ["lung_.*"]\n'
                'Fat: ["fat"]\nBody: ["body"]\n')
CLASSES = ("Spine", "Bone", "Organ", "Lung", "Fat", "Body")
SLICE_STEP = 1.25            # mm: archives.ct_vendor_file_bytes puts slice s at z = -1.25 s


def _roi_masks(slice_index: int, slices: int) -> dict[str, np.ndarray]:
    """The ten known masks [rows, columns] of one slice, from the phantom's noise-free HU."""
    z = slice_index / max(1, slices - 1)
    hu = archives._anatomy(0, 0, int(round(z * archives.Z_LEVELS)))
    x, y = archives._grid()
    fov = x * x + y * y <= (archives.CT_SIZE / 2) ** 2
    lungs = (hu < -600) & (hu > -900) & fov
    out = {"Body": (hu > -500) & fov, "Lung_L": lungs & (x > 0), "Lung_R": lungs & (x <= 0),
           "Bone": hu > 600, "Spine": (hu > 200) & (hu < 300)}
    p = archives._series_params(0, 0)
    for i, ((ox, oy), r) in enumerate(zip(p["organs"], p["organ_r"])):
        out[f"Organ{i + 1}"] = ((x - p["dx"] - ox) ** 2 + (y - p["dy"] - oy) ** 2 <= r * r) & (hu > -200)
    out["Fat"] = (hu > -150) & (hu < -50)
    return out


def mask_archive(slices: int) -> str:
    """The cached folder: ct/ (the series), rt/rtstruct.dcm, known.npz (ROI -> bool [rows, columns,
    slices], slice s of file ct_<s>.dcm: medimagetools_compare.py's layout)."""
    root = os.path.join(CACHE_DIR, f"masks_ct{slices}")
    marker = root + ".complete"
    if os.path.exists(marker):
        return root
    from rt_utils import RTStructBuilder
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "ct"))
    os.makedirs(os.path.join(root, "rt"))
    for s in range(slices):
        with open(os.path.join(root, "ct", f"ct_{s:04d}.dcm"), "wb") as handle:
            handle.write(archives.ct_vendor_file_bytes(0, 0, 0, s, slices, s))
    known = {name: np.zeros((slices, archives.CT_SIZE, archives.CT_SIZE), bool) for name in ROIS}
    for s in range(slices):
        for name, mask in _roi_masks(s, slices).items():
            known[name][s] = mask
    builder = RTStructBuilder.create_new(dicom_series_path=os.path.join(root, "ct"))
    for name in ROIS:                  # rt-utils: [rows, columns, slices] in its own slice order
        builder.add_roi(mask=_in_rt_utils_order(known[name], builder), name=name)
    builder.save(os.path.join(root, "rt", "rtstruct.dcm"))
    np.savez_compressed(os.path.join(root, "known.npz"), **{k: np.moveaxis(v, 0, -1) for k, v in known.items()})
    with open(marker, "w") as handle:
        json.dump({"slices": slices}, handle)
    return root


def _in_rt_utils_order(mask: np.ndarray, builder) -> np.ndarray:
    """[slices in file order, rows, columns] -> rt-utils' [rows, columns, its series order]."""
    order = [int(round(-float(ds.ImagePositionPatient[2]) / SLICE_STEP)) for ds in builder.series_data]
    return np.moveaxis(mask[order], 0, -1)


def expected_label_map(known: dict) -> np.ndarray:
    """The known ROI masks laid out as the converter's label map: ROI -> class by CLASSES_YAML,
    the first-listed class winning an overlap (transforms.masks.classes.Canvas)."""
    from dcm2tfrecord.transforms.masks import classes
    class_map = classes.parse_mapping(CLASSES_YAML, "classes.yaml")
    shape = next(iter(known.values())).shape
    canvas = classes.Canvas(shape, len(class_map.classes), classes.LABEL_MAP)
    for name, mask in known.items():
        index = class_map.index_of(name)
        if index:
            canvas.add(index, mask)
    return canvas.array[..., 0]


def agreement(out_dir: str, known: dict) -> dict:
    """Per class: Dice and differing voxels of the converted mask against the known masks."""
    from dcm2tfrecord.reader import RandomAccess
    data = RandomAccess(out_dir, "train")
    assert len(data) == 1, f"expected one volume record, found {len(data)}"
    record = data[0]
    positions = np.asarray(record["dicom/image_position_patient"], float).reshape(-1, 3)
    order = np.rint(-positions[:, 2] / SLICE_STEP).astype(int)          # record slice -> file slice
    ours = np.asarray(record["mask"])[..., 0]
    expected = expected_label_map(known)[order]
    out = {}
    for index, name in enumerate(CLASSES, start=1):
        a, b = ours == index, expected == index
        total = int(a.sum() + b.sum())
        out[name] = {"dice": round(2 * int((a & b).sum()) / total, 6) if total else 1.0,
                     "voxels_differing": int((a ^ b).sum()), "voxels": int(b.sum())}
    return out


def _inputs(root: str, work: str) -> dict[str, str]:
    folders = {"images": os.path.join(work, "in_images"), "masks": os.path.join(work, "in_masks")}
    for folder in folders.values():
        os.makedirs(folder)
        os.symlink(os.path.join(root, "ct"), os.path.join(folder, "ct"))
    os.symlink(os.path.join(root, "rt"), os.path.join(folders["masks"], "rt"))
    return folders


def _command(method: str, input_dir: str, out: str, class_map: str) -> list[str]:
    cmd = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", input_dir, "--output", out,
           "--overwrite", "--unit", "series", "--progress", "none"]
    return cmd + (["--class_map", class_map] if method == "masks" else [])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--retries", type=int, default=2, help="re-measure a noisy run up to this many times")
    parser.add_argument("--quiet_wait", type=float, default=120.0)
    parser.add_argument("--mit_python", help="python of a virtualenv holding med-imagetools")
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args(argv)

    started = time.time()
    root = mask_archive(args.slices)
    print(f"# archive {root} ({time.time() - started:.0f} s to make or find)", flush=True)
    known = {k: np.moveaxis(v, -1, 0) for k, v in np.load(os.path.join(root, "known.npz")).items()}  # [s, j, i]
    work = tempfile.mkdtemp(prefix="bench_masks_")
    env = bench_env()
    env.setdefault("DCM2TFRECORD_ID_SALT", "bench_masks")
    results: dict[str, list] = {"images": [], "masks": []}
    class_map = os.path.join(work, "classes.yaml")
    with open(class_map, "w") as handle:
        handle.write(CLASSES_YAML)
    try:
        folders = _inputs(root, work)
        for repeat in range(args.repeats):
            for method in ("images", "masks"):
                out = os.path.join(work, f"out_{method}")
                cmd = _command(method, folders[method], out, class_map)
                if repeat == 0:
                    print("$ " + " ".join(cmd), flush=True)
                for _ in range(args.retries + 1):
                    wait_until_quiet(args.quiet_wait)
                    r = run_monitored(cmd, env=env, cwd=REPO, log_prefix=os.path.join(work, f"log_{method}"))
                    if r.returncode != 0:
                        print(r.tail(), flush=True)
                        return 1
                    if r.foreign_cpu_s <= 0.1 * r.wall_s:
                        break
                    print(f"  {method}: noisy ({r.foreign_cpu_s:.1f} s foreign CPU), again", flush=True)
                results[method].append(r)
                print(f"  {method:6s} run {repeat + 1}: {r.wall_s:6.2f} s wall {r.cpu_s:6.2f} s CPU "
                      f"peak {r.peak_largest_mib:6.0f} MiB", flush=True)
        agree = agreement(os.path.join(work, "out_masks"), known)
        mit = None
        if args.mit_python:
            mit_cmd = [sys.executable, os.path.join(REPO, "benchmarks", "medimagetools_compare.py"),
                       "--ct", os.path.join(root, "ct"), "--rtstruct", os.path.join(root, "rt", "rtstruct.dcm"),
                       "--classes", class_map, "--known", os.path.join(root, "known.npz"),
                       "--work", os.path.join(work, "mit"), "--mit_python", args.mit_python]
            print("$ " + " ".join(mit_cmd), flush=True)
            wait_until_quiet(args.quiet_wait)
            done = subprocess.run(mit_cmd, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            mit = json.loads(lines[-1]) if done.returncode == 0 and lines else {"error": done.stderr[-2000:]}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def median(method: str, what: str) -> float:
        return statistics.median(getattr(r, what) for r in results[method])

    summary = {
        "machine": machine_description(), "slices": args.slices, "repeats": args.repeats,
        "wall_s": {m: round(median(m, "wall_s"), 2) for m in results},
        "cpu_s": {m: round(median(m, "cpu_s"), 2) for m in results},
        "peak_mib": {m: round(median(m, "peak_largest_mib")) for m in results},
        "ratio_wall": round(median("masks", "wall_s") / median("images", "wall_s"), 3),
        "ratio_cpu": round(median("masks", "cpu_s") / median("images", "cpu_s"), 3),
        "agreement": agree, "med_imagetools": mit,
    }
    print(f"\n# {summary['machine']}; {args.slices} slices, median of {args.repeats}")
    print(f"{'method':8s} {'wall s':>8s} {'CPU s':>8s} {'CPU ms/slice':>13s} {'peak MiB':>9s}")
    for m in results:
        print(f"{m:8s} {summary['wall_s'][m]:8.2f} {summary['cpu_s'][m]:8.2f} "
              f"{1000 * summary['cpu_s'][m] / args.slices:13.2f} {summary['peak_mib'][m]:9d}")
    print(f"masks/images: wall {summary['ratio_wall']:.2f}x, CPU {summary['ratio_cpu']:.2f}x (target <= 1.5)")
    for name, a in agree.items():
        print(f"  {name:6s} Dice {a['dice']:.6f}  {a['voxels_differing']} of {a['voxels']} voxels differ")
    if mit:
        print(f"med-imagetools: {json.dumps(mit)}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(summary, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
