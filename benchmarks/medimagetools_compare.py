#!/usr/bin/env python3
"""Run med-imagetools (imgtools) on one CT + RTSTRUCT and score its masks.

Standalone: stdlib + numpy + nibabel in the interpreter running this file.
med-imagetools itself lives in a separate virtualenv given by --mit_python
(e.g. /tmp/mit-venv/bin/python); it is only ever run as a subprocess.

How med-imagetools is called
----------------------------
1. Input layout: ``<work>/in/data/patient/CT/*.dcm`` (symlinks to --ct files)
   and ``<work>/in/data/patient/RTSTRUCT/<name>`` (symlink to --rtstruct).
   The crawler walks the tree recursively; the folder names do not matter.
2. The timed command is its own pipeline CLI (console script ``imgtools``
   next to --mit_python, i.e. ``imgtools.cli.__main__:cli``)::

       imgtools autopipeline <work>/in/data <work>/out \\
           --crawl-directory <work>/crawl -m CT,RTSTRUCT \\
           -ryaml <classes.yaml> --roi-strategy SEPARATE -j <jobs> \\
           --existing-file-mode overwrite

   ``<work>/out`` and ``<work>/crawl`` are deleted first, so the DICOM crawl
   (index building) is part of every timed run.  ``-j`` only parallelises
   the crawl and *across samples* (joblib/loky); one CT+RTSTRUCT is a single
   sample, so rasterisation is single-process whatever -j is.  Its default
   (no -j) is max(1, cpu_count - 2).
   SEPARATE writes one NIfTI per matched ROI, named ``<Class>__[<ROI>].nii.gz``
   (uint8 0/1, same grid as CT.nii.gz); class unions are computed here.
   ROI matching is med-imagetools' own: re.fullmatch, case-insensitive.
3. Timing: wall = time.perf_counter() around subprocess.run; CPU =
   delta of resource.getrusage(RUSAGE_CHILDREN) user+sys (includes the
   imgtools process and any workers it reaped).

Axis mapping (derived, not assumed)
-----------------------------------
--known NPZ arrays are bool [row, col, file] with the file axis in sorted
filename order of --ct.  The geometry of those files (IPP per file, IOP,
PixelSpacing) is read once with pydicom via --mit_python (untimed).  Each
known voxel (r, c, s) has LPS position IPP_s + c*dc*X + r*dr*Y; flipping
x, y gives RAS, and the inverse NIfTI affine gives the NIfTI index.  The
in-plane permutation/flip comes from slice 0 and every file's slice index
k_s is computed separately, so any slice ordering is handled.  For the
SimpleITK-written NIfTI of an axial series this works out to
``nifti[i, j, k] == known[row=j, col=i, file=s(k)]`` where k increases with
z (GDCM sorts slices by position along the normal), i.e. for files in
descending z: ``known.transpose(1, 0, 2)[:, :, ::-1]``.

Output: one JSON line {"tool", "wall_s", "cpu_s", "dice", "voxels_differing",
"command", ...}; dice/voxels_differing are keyed by class (union of that
class's ROIs); per-ROI values are in "dice_per_roi"/"voxels_differing_per_roi".

Usage::

    python benchmarks/medimagetools_compare.py --ct CT_DIR --rtstruct RS.dcm --classes classes.yaml \\
        --known known.npz --work /tmp/mit-work --mit_python /tmp/mit-venv/bin/python
    python -m benchmarks.medimagetools_compare --smoke

``--smoke`` (tiny sizes, seconds; what tests/e2e/test_bench_smoke_b.py runs): our side alone,
the scoring, on SEPARATE outputs made here for a series of 4 files of 5 x 6 pixels in descending
z (one ROI exact, one with a voxel wrong); med-imagetools is not run (the script says whether it
is installed), as it needs a CT series and an RTSTRUCT of its own.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np

# Run in the med-imagetools venv: YAML -> JSON and the CT geometry per file.
_HELPER = r"""
import json, sys, importlib.metadata as md
import yaml, pydicom
classes = yaml.safe_load(open(sys.argv[1]))
geo = []
for f in sys.argv[2:]:
    d = pydicom.dcmread(f, stop_before_pixels=True)
    geo.append({"ipp": [float(v) for v in d.ImagePositionPatient],
                "iop": [float(v) for v in d.ImageOrientationPatient],
                "ps": [float(v) for v in d.PixelSpacing],
                "rows": int(d.Rows), "cols": int(d.Columns)})
print(json.dumps({"version": md.version("med-imagetools"),
                  "classes": classes, "geometry": geo}))
"""


def layout_input(ct_files: list[Path], rtstruct: Path, root: Path) -> Path:
    data = root / "in" / "data"
    shutil.rmtree(root / "in", ignore_errors=True)
    (data / "patient" / "CT").mkdir(parents=True)
    (data / "patient" / "RTSTRUCT").mkdir(parents=True)
    for f in ct_files:
        os.symlink(f.resolve(), data / "patient" / "CT" / f.name)
    os.symlink(rtstruct.resolve(), data / "patient" / "RTSTRUCT" / rtstruct.name)
    return data


def imgtools_command(mit_python: str, args: list[str]) -> list[str]:
    exe = Path(mit_python).parent / "imgtools"
    if exe.exists():
        return [str(exe), *args]
    return [mit_python, "-c", "from imgtools.cli.__main__ import cli; cli()", *args]


def run_timed(cmd: list[str], log: Path) -> tuple[float, float, int]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log, "wb") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return wall, cpu, rc


def known_to_nifti_index(geo: list[dict], affine: np.ndarray):
    """Return (perm, flips, ks): known[r, c, s] -> nifti index.

    In-plane: nifti axes (a_r, a_c) = perm, index = flips applied; slice s
    lands on nifti axis perm[2] at index ks[s].
    """
    inv = np.linalg.inv(affine)
    lps2ras = np.array([-1.0, -1.0, 1.0])

    def idx(s: int, r: float, c: float) -> np.ndarray:
        g = geo[s]
        x, y = np.array(g["iop"][:3]), np.array(g["iop"][3:])
        p = np.array(g["ipp"]) + c * g["ps"][1] * x + r * g["ps"][0] * y
        return (inv @ np.append(p * lps2ras, 1.0))[:3]

    o = idx(0, 0, 0)
    dr, dc = idx(0, 1, 0) - o, idx(0, 0, 1) - o
    ax_r, ax_c = int(np.argmax(abs(dr))), int(np.argmax(abs(dc)))
    ax_s = 3 - ax_r - ax_c
    for d, a in ((dr, ax_r), (dc, ax_c)):
        assert abs(abs(d[a]) - 1) < 1e-3 and np.allclose(np.delete(d, a), 0, atol=1e-3), \
            f"not an axis-aligned unit step: {d}"
    ks = np.array([idx(s, 0, 0)[ax_s] for s in range(len(geo))])
    assert np.allclose(ks, np.round(ks), atol=1e-3), f"non-integer slice index {ks}"
    assert np.allclose(o[[ax_r, ax_c]], np.round(o[[ax_r, ax_c]]), atol=1e-3)
    return (ax_r, ax_c, ax_s), (int(round(o[ax_r])), int(np.sign(dr[ax_r])),
                                int(round(o[ax_c])), int(np.sign(dc[ax_c]))), np.round(ks).astype(int)


def known_in_nifti_grid(known: np.ndarray, shape, perm, offs, ks) -> np.ndarray:
    ax_r, ax_c, ax_s = perm
    r0, sr, c0, sc = offs
    out = np.zeros(shape, bool)
    rows = r0 + sr * np.arange(known.shape[0])
    cols = c0 + sc * np.arange(known.shape[1])
    ix = [None, None, None]
    ix[ax_r], ix[ax_c], ix[ax_s] = rows[:, None, None], cols[None, :, None], ks[None, None, :]
    out[tuple(ix)] = known
    return out


def read_outputs(out: Path) -> dict[str, tuple[str, Path]]:
    """ROI name -> (class key, nifti path), from med-imagetools' index CSV."""
    found: dict[str, tuple[str, Path]] = {}
    index = out / "out_index.csv"
    if index.exists():
        with open(index, newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("Modality") != "RTSTRUCT":
                    continue
                p = Path(row["filepath"])
                p = p if p.is_absolute() else out / p
                names = re.findall(r"[^\[\]',\s]+", row.get("matched_rois", "")) or \
                    [re.search(r"\[(.*)\]", p.name).group(1)]
                for n in names:
                    found[n] = (row["roi_key"], p)
    if not found:  # fall back to the SEPARATE file naming "<Class>__[<ROI>].nii.gz"
        for p in out.rglob("*__[[]*[]].nii.gz"):
            m = re.fullmatch(r"(.*)__\[(.*)\]\.nii\.gz", p.name)
            found[m.group(2)] = (m.group(1), p)
    return found


def dice(a: np.ndarray, b: np.ndarray) -> float:
    s = int(a.sum()) + int(b.sum())
    return 1.0 if s == 0 else 2.0 * int(np.count_nonzero(a & b)) / s


def score(info: dict, known: dict, out: Path) -> dict:
    """Dice and differing voxels of med-imagetools' masks under ``out`` against ``known``, per class
    (the union of its ROIs) and per ROI, with the axis mapping used."""
    outputs = read_outputs(out)
    first = nib.load(next(iter(outputs.values()))[1])
    perm, offs, ks = known_to_nifti_index(info["geometry"], first.affine)

    # Expected class membership, computed the way imgtools matches (fullmatch, ignore case).
    expected: dict[str, list[str]] = {}
    for cls, pats in info["classes"].items():
        pats = [pats] if isinstance(pats, str) else pats
        expected[cls] = [n for n in known
                         if any(re.fullmatch(p, n, re.IGNORECASE) for p in pats)]

    d_roi, v_roi, d_cls, v_cls, warnings = {}, {}, {}, {}, []
    for cls, rois in expected.items():
        got_u = np.zeros(first.shape, bool)
        ref_u = np.zeros(first.shape, bool)
        for roi in rois:
            ref = known_in_nifti_grid(known[roi], first.shape, perm, offs, ks)
            if roi in outputs and outputs[roi][0] == cls:
                img = nib.load(outputs[roi][1])
                assert np.allclose(img.affine, first.affine)
                got = np.asanyarray(img.dataobj) > 0
            else:
                warnings.append(f"{cls}/{roi}: no med-imagetools output")
                got = np.zeros(first.shape, bool)
            d_roi[f"{cls}/{roi}"] = round(dice(got, ref), 6)
            v_roi[f"{cls}/{roi}"] = int(np.count_nonzero(got ^ ref))
            got_u |= got
            ref_u |= ref
        d_cls[cls] = round(dice(got_u, ref_u), 6)
        v_cls[cls] = int(np.count_nonzero(got_u ^ ref_u))
    return {
        "dice": d_cls,
        "voxels_differing": v_cls,
        "dice_per_roi": d_roi,
        "voxels_differing_per_roi": v_roi,
        "axis_mapping": {"known_row->nifti_axis": perm[0], "known_col->nifti_axis": perm[1],
                         "known_file->nifti_axis": perm[2],
                         "row_index": f"{offs[0]}{offs[1]:+d}*r", "col_index": f"{offs[2]}{offs[3]:+d}*c",
                         "file0_k": int(ks[0]), "fileN_k": int(ks[-1])},
        "warnings": warnings,
    }


# --smoke: a series of 4 axial files (5 rows x 6 columns, files in descending z, as a scanner
# often numbers them) and two ROIs of one class
SMOKE_ROWS, SMOKE_COLS, SMOKE_FILES = 5, 6, 4
SMOKE_SPACING = (0.8, 0.6, 2.5)            # row mm, column mm, slice mm
SMOKE_CLASSES = {"Target": ["gtv", "PTV_.*"]}


def smoke_inputs() -> tuple[dict, dict]:
    """(info as the helper reports it, known masks) of the --smoke series."""
    geometry = [{"ipp": [-12.0, -30.5, 40.0 - SMOKE_SPACING[2] * s], "iop": [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
                 "ps": [SMOKE_SPACING[0], SMOKE_SPACING[1]], "rows": SMOKE_ROWS, "cols": SMOKE_COLS}
                for s in range(SMOKE_FILES)]
    rng = np.random.default_rng(0)
    known = {name: rng.random((SMOKE_ROWS, SMOKE_COLS, SMOKE_FILES)) < 0.4 for name in ("GTV", "ptv_1")}
    return {"version": "none (--smoke)", "classes": SMOKE_CLASSES, "geometry": geometry}, known


def write_smoke_outputs(info: dict, known: dict, out: Path) -> None:
    """What med-imagetools writes for --roi-strategy SEPARATE, made here: one NIfTI per ROI on the
    grid SimpleITK gives an axial series (i = column, j = row, k = slice by increasing z; the affine
    in RAS), ptv_1's with one voxel wrong, so that the scoring has a difference to find."""
    geo = info["geometry"]
    by_z = sorted(range(len(geo)), key=lambda s: geo[s]["ipp"][2])
    origin = np.array(geo[by_z[0]]["ipp"])
    affine = np.eye(4)
    affine[:3, 0] = [-SMOKE_SPACING[1], 0.0, 0.0]          # LPS -> RAS: x and y flipped
    affine[:3, 1] = [0.0, -SMOKE_SPACING[0], 0.0]
    affine[:3, 2] = [0.0, 0.0, SMOKE_SPACING[2]]
    affine[:3, 3] = origin * np.array([-1.0, -1.0, 1.0])
    out.mkdir(parents=True, exist_ok=True)
    for roi, mask in known.items():
        data = mask.transpose(1, 0, 2)[:, :, by_z].astype(np.uint8)
        if roi == "ptv_1":
            data[0, 0, 0] ^= 1
        nib.save(nib.Nifti1Image(data, affine), str(out / f"Target__[{roi}].nii.gz"))


def smoke(mit_python: str) -> int:
    """Our side of the comparison at a tiny size: the scoring of SEPARATE outputs against known
    masks (the axis mapping, read_outputs, dice), on outputs made here. med-imagetools itself needs
    a CT series and an RTSTRUCT of its own (--ct, --rtstruct): the smoke run does not run it."""
    found = Path(mit_python).exists()
    print(f"med-imagetools {'at ' + mit_python if found else 'not installed (no ' + mit_python + ')'}: "
          "not run by --smoke; scoring synthetic SEPARATE outputs instead", file=sys.stderr)
    info, known = smoke_inputs()
    with tempfile.TemporaryDirectory(prefix="mit_smoke_") as work:
        out = Path(work) / "out"
        write_smoke_outputs(info, known, out)
        started, cpu = time.perf_counter(), time.process_time()
        result = score(info, known, out)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(json.dumps({"tool": "synthetic SEPARATE outputs (--smoke)", "wall_s": round(wall, 3),
                      "cpu_s": round(cpu, 3), **result, "command": None}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_b.py runs (the scoring of "
                         "synthetic outputs of a 4-file series; med-imagetools not run)")
    smoke_only = "--smoke" in sys.argv[1:]
    ap.add_argument("--ct", required=not smoke_only, type=Path)
    ap.add_argument("--rtstruct", required=not smoke_only, type=Path)
    ap.add_argument("--classes", required=not smoke_only, type=Path)
    ap.add_argument("--known", required=not smoke_only, type=Path)
    ap.add_argument("--work", required=not smoke_only, type=Path)
    ap.add_argument("--mit_python", default="/tmp/mit-venv/bin/python")
    ap.add_argument("--jobs", type=int, default=1, help="imgtools -j (0 = its default)")
    a = ap.parse_args()
    if a.smoke:
        return smoke(a.mit_python)

    ct_files = sorted(p for p in a.ct.iterdir() if p.is_file())
    helper = subprocess.run([a.mit_python, "-c", _HELPER, str(a.classes), *map(str, ct_files)],
                            check=True, capture_output=True, text=True)
    info = json.loads(helper.stdout)

    a.work.mkdir(parents=True, exist_ok=True)
    data = layout_input(ct_files, a.rtstruct, a.work)
    out, crawl = a.work / "out", a.work / "crawl"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(crawl, ignore_errors=True)
    args = ["autopipeline", str(data), str(out), "--crawl-directory", str(crawl),
            "-m", "CT,RTSTRUCT", "-ryaml", str(a.classes), "--roi-strategy", "SEPARATE",
            "--existing-file-mode", "overwrite"]
    if a.jobs > 0:
        args += ["-j", str(a.jobs)]
    cmd = imgtools_command(a.mit_python, args)
    wall, cpu, rc = run_timed(cmd, a.work / "imgtools.log")
    if rc != 0:
        sys.stderr.write((a.work / "imgtools.log").read_text()[-4000:])
        raise SystemExit(f"imgtools exited {rc}")

    result = score(info, dict(np.load(a.known)), out)
    print(json.dumps({
        "tool": f"med-imagetools {info['version']}",
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        **result,
        "command": shlex.join(cmd),
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
