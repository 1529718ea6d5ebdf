"""Masks whose cost a hostile file declares: a SEG of 10,000 segments, 200,000 contours, a 4,000-slice series (issue 43).

What a writer does for a record's mask, measured per workload under both units: the annotation
parsed once per worker (transforms.masks.annotation_cache, through its mask source's ``parse``),
then, with ``--unit series``, drawn once on the volume's grid; with ``--unit file``, placed once
on the series (the join: rtstruct.assign_contours, seg.check_placement) and drawn on each slice
record's grid from its part (the source's ``draw`` with ``MaskTarget.part``). The Beam pipeline
around it is left out: its cost does not depend on the annotation, and leaving it out shows the
mask work alone. Each (workload, unit) runs in a fresh subprocess, which reports its CPU time,
wall time and peak RSS (VmHWM, the whole process: Python, numpy, pydicom and highdicom
included). The baseline is ``--unit series`` in the same run.

Workloads (``--smoke``: the same shapes, small, in seconds; what tests/e2e/test_bench_masks_hostile.py runs):

  seg_segments    a BINARY SEG (highdicom) of 10,000 segments (smoke: 200) over 3 slices of
                  40 x 40 pixels (4,800 voxels), each segment one frame; the class map maps one:
                  peak RSS under each unit (target: 1 GB);
  rt_contours     an RTSTRUCT of 200,000 closed contours (smoke: 5,000) on 100 slices (smoke: 50)
                  of 32 x 32 pixels: --unit file's time against --unit series' (target: 2x);
  rt_long_series  a 4,000-slice series (smoke: 400) with an RTSTRUCT of one contour per slice:
                  the same ratio.

``--pipeline``: seg_segments through the whole conversion instead (``python -m
dcm2tfrecord.pipeline convert --unit series|file --class_map ...`` on the SEG and its 3 CT
slices), in one process and with 2 worker processes: the peak RSS of the whole process tree
(launcher and workers, each one's VmHWM summed), which the issue's 1 GB is about.

    .venv/bin/python -m benchmarks.bench_masks_hostile
    .venv/bin/python -m benchmarks.bench_masks_hostile --smoke --json /tmp/hostile.json
    .venv/bin/python -m benchmarks.bench_masks_hostile --pipeline --json /tmp/hostile_pipeline.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AXIAL = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)
FRAME_OF_REFERENCE = "1.2.826.0.1.3680043.8.498.43.1"
SERIES = "1.2.826.0.1.3680043.8.498.43.2"
CLASS_MAP = 'Target: ["gtv 7"]\n'
SIZES = {"full": {"seg_segments": (10_000,), "rt_contours": (200_000, 100), "rt_long_series": (4_000,)},
         "smoke": {"seg_segments": (200,), "rt_contours": (5_000, 50), "rt_long_series": (400,)}}


def _uid(k: int) -> str:
    return f"1.2.826.0.1.3680043.8.498.43.3.{k}"


def _grid(depth: int, size: int, in_plane: bool = True):
    from dcm2tfrecord.transforms.masks.grid import Grid
    return Grid(rows=size if in_plane else 0, columns=size if in_plane else 0,
                instance_uids=tuple(_uid(k) for k in range(depth)),
                positions=tuple((0.0, 0.0, 2.0 * k) for k in range(depth)), orientation=AXIAL,
                pixel_spacing=(1.0, 1.0) if in_plane else (), frame_of_reference_uid=FRAME_OF_REFERENCE)


# ---------------------------------------------------------------- inputs


def write_rtstruct(path: str, depth: int, contours: int, size: int = 32) -> str:
    """An RTSTRUCT of ``contours`` small closed squares spread evenly over ``depth`` slices (pydicom)."""
    import pydicom
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.sequence import Sequence
    from pydicom.uid import ExplicitVRLittleEndian

    from dcm2tfrecord.transforms.masks import rtstruct
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = rtstruct.RT_STRUCTURE_SET_STORAGE
    meta.MediaStorageSOPInstanceUID = "1.2.826.0.1.3680043.8.498.43.4"
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = pydicom.FileDataset(path, Dataset(), file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = rtstruct.RT_STRUCTURE_SET_STORAGE
    ds.SOPInstanceUID = meta.MediaStorageSOPInstanceUID
    ds.Modality = "RTSTRUCT"
    series = Dataset()
    series.SeriesInstanceUID = SERIES
    study = Dataset()
    study.RTReferencedSeriesSequence = Sequence([series])
    frame = Dataset()
    frame.FrameOfReferenceUID = FRAME_OF_REFERENCE
    frame.RTReferencedStudySequence = Sequence([study])
    ds.ReferencedFrameOfReferenceSequence = Sequence([frame])
    rois, items = [], []
    for number, name in ((1, "gtv 7"), (2, "body")):
        roi = Dataset()
        roi.ROINumber, roi.ROIName, roi.ReferencedFrameOfReferenceUID = number, name, FRAME_OF_REFERENCE
        rois.append(roi)
        item = Dataset()
        item.ReferencedROINumber = number
        item.ContourSequence = Sequence()
        items.append(item)
    for n in range(contours):
        k = n * depth // contours
        x, y = 2 + (n % 7) * 4, 2 + (n // 7 % 7) * 4
        contour = Dataset()
        contour.ContourGeometricType = "CLOSED_PLANAR"
        square = [(x, y), (x + 3, y), (x + 3, y + 3), (x, y + 3)]
        contour.ContourData = [f"{v:g}" for px, py in square for v in (px, py, 2.0 * k)]
        contour.NumberOfContourPoints = 4
        items[n % 2].ContourSequence.append(contour)
    ds.StructureSetROISequence = Sequence(rois)
    ds.ROIContourSequence = Sequence(items)
    ds.save_as(path)
    return path


def write_seg(path: str, segments: int, series_dir: str | None = None) -> str:
    """A BINARY SEG (highdicom) of ``segments`` segments over 3 slices of 40 x 40, one frame each;
    with ``series_dir``, the 3 CT slices it segments are written there too (``--pipeline``)."""
    import io

    import highdicom as hd
    import pydicom
    from highdicom.sr import CodedConcept
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian
    sources = []
    for k in range(3):
        meta = FileMetaDataset()
        meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
        meta.MediaStorageSOPInstanceUID = _uid(k)
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
        image = pydicom.FileDataset("ct", Dataset(), file_meta=meta, preamble=b"\0" * 128)
        for keyword, value in dict(
                SOPClassUID=meta.MediaStorageSOPClassUID, SOPInstanceUID=_uid(k), Modality="CT",
                StudyInstanceUID="1.2.826.0.1.3680043.8.498.43.5", SeriesInstanceUID=SERIES,
                FrameOfReferenceUID=FRAME_OF_REFERENCE, PatientID="bench", PatientName="Bench^Bench", StudyDate="20260101",
                StudyTime="000000", AccessionNumber="", ReferringPhysicianName="", StudyID="1", SeriesNumber=1,
                InstanceNumber=k + 1, PatientBirthDate="", PatientSex="O", Manufacturer="bench",
                ImagePositionPatient=[0.0, 0.0, 2.0 * k], ImageOrientationPatient=list(AXIAL),
                PixelSpacing=[1.0, 1.0], SliceThickness=2.0, Rows=40, Columns=40, SamplesPerPixel=1,
                PhotometricInterpretation="MONOCHROME2", BitsAllocated=16, BitsStored=16, HighBit=15,
                PixelRepresentation=1).items():
            setattr(image, keyword, value)
        image.PixelData = np.zeros((40, 40), np.int16).tobytes()
        if series_dir is not None:
            image.save_as(os.path.join(series_dir, f"ct{k}.dcm"))
        sources.append(image)
    masks = np.zeros((3, 40, 40, segments), bool)
    for s in range(segments):
        masks[s % 3, (s // 3) % 40, (s // 120) % 40, s] = True
    tissue = CodedConcept("85756007", "SCT", "Tissue")
    descriptions = [hd.seg.SegmentDescription(
        segment_number=s + 1, segment_label=f"gtv {s}", segmented_property_category=tissue,
        segmented_property_type=tissue, algorithm_type="MANUAL") for s in range(segments)]
    seg = hd.seg.Segmentation(
        source_images=sources, pixel_array=masks, segmentation_type="BINARY", segment_descriptions=descriptions,
        series_instance_uid="1.2.826.0.1.3680043.8.498.43.6", series_number=90,
        sop_instance_uid="1.2.826.0.1.3680043.8.498.43.7", instance_number=1, manufacturer="bench",
        manufacturer_model_name="bench", software_versions="0", device_serial_number="0")
    buffer = io.BytesIO()
    seg.save_as(buffer)
    with open(path, "wb") as handle:
        handle.write(buffer.getvalue())
    return path


# ---------------------------------------------------------------- one measured run (a subprocess)


def measure(workload: str, unit: str, path: str, depth: int, size: int) -> dict:
    """The mask work of one (workload, unit) in this process: parse once, then draw (module docstring)."""
    from dcm2tfrecord.transforms.masks import classes, rtstruct, seg, sources
    class_map = classes.parse_mapping(CLASS_MAP, "classes.yaml")
    source = sources.SEG if workload == "seg_segments" else sources.RTSTRUCT
    start_cpu, start_wall = time.process_time(), time.perf_counter()
    with open(path, "rb") as handle:
        parsed = source.parse(handle)
    grid = _grid(depth, size)
    drawn = 0
    if unit == "series":
        canvas = classes.Canvas((depth, size, size), 1, classes.LABEL_MAP)
        source.draw(parsed, sources.MaskTarget(grid=grid), class_map, canvas)
        drawn = int(np.count_nonzero(canvas.array))
    else:
        if source is sources.RTSTRUCT:
            on = rtstruct.assign_contours(parsed, _grid(depth, size, in_plane=False))
            parts = [on.get(k, ()) for k in range(depth)]
        else:
            seg.check_placement(parsed, grid)
            parts = [()] * depth
        for k in range(depth):
            one = dataclasses.replace(grid, instance_uids=(grid.instance_uids[k],), positions=(grid.positions[k],))
            canvas = classes.Canvas((1, size, size), 1, classes.LABEL_MAP)
            source.draw(parsed, sources.MaskTarget(grid=one, part=parts[k]), class_map, canvas)
            drawn += int(np.count_nonzero(canvas.array))
    return {"workload": workload, "unit": unit, "cpu_s": round(time.process_time() - start_cpu, 3),
            "wall_s": round(time.perf_counter() - start_wall, 3),
            "peak_rss_mb": round(_peak_rss_kb() / 1024, 1), "voxels": drawn}


def _peak_rss_kb() -> int:
    """This process's peak RSS since its exec (VmHWM: ru_maxrss would carry its parent's, the
    fork's high-water mark, over the exec)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _run(workload: str, unit: str, path: str, depth: int, size: int) -> dict:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    paths = [p for p in (os.path.join(REPO, ".pkgroot"), REPO) if os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_masks_hostile", "--measure", workload, unit, path,
                           str(depth), str(size)], cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"{workload} --unit {unit} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(size: str, work: str) -> list[dict]:
    sizes = SIZES[size]
    rows = []
    (segments,) = sizes["seg_segments"]
    contours, depth = sizes["rt_contours"]
    (long_depth,) = sizes["rt_long_series"]
    inputs = [("seg_segments", write_seg(os.path.join(work, "seg.dcm"), segments), 3, 40),
              ("rt_contours", write_rtstruct(os.path.join(work, "contours.dcm"), depth, contours), depth, 32),
              ("rt_long_series", write_rtstruct(os.path.join(work, "long.dcm"), long_depth, long_depth), long_depth,
               32)]
    for workload, path, slices, pixels in inputs:
        series = _run(workload, "series", path, slices, pixels)
        file = _run(workload, "file", path, slices, pixels)
        assert series["voxels"] == file["voxels"] > 0, (series, file)     # the same mask, either way
        file["cpu_ratio"] = round(file["cpu_s"] / max(series["cpu_s"], 1e-3), 2)
        file["wall_ratio"] = round(file["wall_s"] / max(series["wall_s"], 1e-3), 2)
        rows += [series, file]
    return rows


# ---------------------------------------------------------------- the whole conversion (--pipeline)


def run_pipeline(size: str, work: str) -> list[dict]:
    """The seg_segments workload through a real conversion under each unit: the CT series and
    its SEG in one --input folder, ``python -m dcm2tfrecord.pipeline convert`` on Beam's local
    runner in one process (what a folder this small gets by default) and with 2 worker processes
    (the records pickled between stages); the peak RSS of the whole process tree (launcher and workers, VmHWM of
    each, summed: benchmarks.proc_monitor), which the issue's 1 GB target is about."""
    from benchmarks import proc_monitor
    (segments,) = SIZES[size]["seg_segments"]
    folder = os.path.join(work, "input")
    os.makedirs(folder, exist_ok=True)
    write_seg(os.path.join(folder, "seg.dcm"), segments, series_dir=folder)
    class_map = os.path.join(work, "classes.yaml")
    with open(class_map, "w") as handle:
        handle.write(CLASS_MAP)
    env = proc_monitor.bench_env()
    env["DCM2TFRECORD_ID_SALT"] = "bench-masks-hostile"
    paths = [p for p in (os.path.join(REPO, ".pkgroot"), REPO) if os.path.isdir(p)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    rows = []
    for unit, workers in (("series", 1), ("file", 1), ("series", 2), ("file", 2)):
        output = os.path.join(work, f"out_{unit}_{workers}")
        cmd = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", folder, "--output", output,
               "--unit", unit, "--class_map", class_map, f"--direct_num_workers={workers}",
               "--summary_json", os.path.join(work, f"summary_{unit}_{workers}.json")]
        result = proc_monitor.run_monitored(cmd, env=env, cwd=REPO,
                                            log_prefix=os.path.join(work, f"log_{unit}_{workers}"))
        if result.returncode:
            raise RuntimeError(f"convert --unit {unit} failed: {result.tail()}")
        with open(os.path.join(work, f"summary_{unit}_{workers}.json")) as handle:
            summary = json.load(handle)
        rows.append({"workload": f"seg_pipeline_w{workers}", "unit": unit, "cpu_s": round(result.cpu_s, 3),
                     "wall_s": round(result.wall_s, 3),
                     "peak_rss_mb": round(sum(p.hwm_kib for p in result.processes) / 1024, 1),
                     "largest_process_mb": round(result.peak_largest_mib, 1),
                     "peak_sum_rss_mb": round(result.peak_sum_mib, 1),
                     "processes": len(result.processes), "execution": summary["execution"],
                     "records": summary["records"], "written": summary["written"], "failed": summary["failed"]})
    return rows


def main(argv: list[str]) -> int:
    if argv[:1] == ["--measure"]:
        workload, unit, path, depth, size = argv[1:6]
        print(json.dumps(measure(workload, unit, path, int(depth), int(size))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small workloads, seconds (the e2e test's)")
    parser.add_argument("--json", help="write the rows here too")
    parser.add_argument("--pipeline", action="store_true",
                        help="the SEG workload through a whole conversion per unit (peak RSS of the process tree)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_masks_hostile_") as work:
        if args.pipeline:
            rows = run_pipeline("smoke" if args.smoke else "full", work)
        else:
            rows = run("smoke" if args.smoke else "full", work)
    print(f"{'workload':16} {'unit':7} {'cpu s':>8} {'wall s':>8} {'peak RSS MB':>12} {'file/series cpu':>16}")
    for row in rows:
        print(f"{row['workload']:16} {row['unit']:7} {row['cpu_s']:8.2f} {row['wall_s']:8.2f} "
              f"{row['peak_rss_mb']:12.0f} {row.get('cpu_ratio', ''):>16}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
