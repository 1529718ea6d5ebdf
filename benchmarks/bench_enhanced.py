"""CPU per frame of Enhanced multi-frame files, without Beam (docs/BENCHMARKS.md §13, issue 35 item 7).

Builds, with pydicom, one Enhanced MR file of N frames of 4 x 4 (a Shared and a Per-frame
Functional Groups Sequence: position, orientation, pixel measures, rescale, frame content),
or a classic multi-frame file of as many frames, then runs ``probe_file``, ``expand_frames``
and ``build_record`` on every record in one process, as a worker does, and reports the
process CPU time per frame. Cases:

- ``stack``: an Enhanced file, one stack (one record of N frames);
- ``split``: the same file under ``--frames split`` (N records);
- ``plain``: a classic multi-frame file (no functional groups) under ``--frames split``;
- ``temporal``: an Enhanced file of N frames in N / 2 temporal stacks of 2 frames (N / 2 records).

The time per frame of a linear cost is the same at every size: the ratios printed
(per-frame CPU at each size over that at the smallest) stay near 1.

    .venv/bin/python -m benchmarks.bench_enhanced --frames 250,1000,4000
    .venv/bin/python -m benchmarks.bench_enhanced --frames 250,1000 --cases split   # the code before
    .venv/bin/python -m benchmarks.bench_enhanced --smoke    # 8 and 16 frames, seconds (tests/e2e/test_bench_smoke_a.py)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from pydicom.dataset import Dataset, FileMetaDataset  # noqa: E402
from pydicom.sequence import Sequence  # noqa: E402
from pydicom.uid import ExplicitVRLittleEndian, generate_uid  # noqa: E402

from dcm2tfrecord.transforms.records.build import build_record  # noqa: E402
from dcm2tfrecord.transforms.records.probe import expand_frames, probe_file  # noqa: E402
from dcm2tfrecord.transforms.settings import DecodeSettings  # noqa: E402
from dcm2tfrecord.transforms.record_model import SourceFile  # noqa: E402

CASES = ("stack", "split", "plain", "temporal")
SIZE = 4


def _item(**values) -> Dataset:
    out = Dataset()
    for keyword, value in values.items():
        setattr(out, keyword, value)
    return out


def build(frames: int, enhanced: bool = True, phases: int = 1) -> Dataset:
    """An MR of ``frames`` frames of 4 x 4 (Enhanced: ``phases`` temporal stacks, interleaved)."""
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.4.1" if enhanced else "1.2.840.10008.5.1.4.1.1.4"
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID
    ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid(entropy_srcs=["bench", str(frames)])
    ds.StudyInstanceUID = generate_uid(entropy_srcs=["bench-study"])
    ds.SeriesInstanceUID = generate_uid(entropy_srcs=["bench-series", str(frames)])
    ds.PatientID, ds.Modality = "BENCH", "MR"
    ds.SamplesPerPixel, ds.PhotometricInterpretation = 1, "MONOCHROME2"
    ds.Rows = ds.Columns = SIZE
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 16, 15, 0
    ds.NumberOfFrames = frames
    ds.PixelData = (np.arange(frames * SIZE * SIZE, dtype=np.uint32) % 4096).astype(np.uint16).tobytes()
    if not enhanced:
        return ds
    ds.SharedFunctionalGroupsSequence = Sequence([_item(
        PixelMeasuresSequence=Sequence([_item(PixelSpacing=[1.5, 1.5], SliceThickness=3.0)]),
        PlaneOrientationSequence=Sequence([_item(ImageOrientationPatient=[1, 0, 0, 0, 1, 0])]),
        PixelValueTransformationSequence=Sequence([_item(RescaleSlope=1, RescaleIntercept=0,
                                                         RescaleType="US")]))])
    per_phase = frames // phases
    items = []
    for k in range(frames):
        phase, position = k % phases, k // phases
        items.append(_item(
            FrameContentSequence=Sequence([_item(StackID="1", InStackPositionNumber=position + 1,
                                                 TemporalPositionIndex=phase + 1)]),
            PlanePositionSequence=Sequence([_item(ImagePositionPatient=[-6.0, -6.0, 3.0 * position])])))
    assert per_phase * phases == frames
    ds.PerFrameFunctionalGroupsSequence = Sequence(items)
    return ds


def measure(case: str, frames: int, folder: str) -> dict:
    path = os.path.join(folder, f"{case}_{frames}.dcm")
    phases = frames // 2 if case == "temporal" else 1
    build(frames, enhanced=case != "plain", phases=phases).save_as(path)
    st = os.stat(path)
    source = SourceFile(path, os.path.basename(path), st.st_size, st.st_mtime)
    settings = DecodeSettings(id_salt="bench", frames="stack" if case in ("stack", "temporal") else "split")
    started = time.process_time()
    record = probe_file(source, settings=settings)
    records = expand_frames(record, settings)
    probed = time.process_time()
    for one in records:
        build_record(one, settings=settings)
    written = time.process_time()
    return {"case": case, "frames": frames, "records": len(records), "file_bytes": st.st_size,
            "probe_s": round(probed - started, 3), "write_s": round(written - probed, 3),
            "cpu_ms_per_frame": round((written - started) * 1000.0 / frames, 4)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--frames", default="250,1000,4000", help="frame counts, comma-separated")
    parser.add_argument("--cases", default=",".join(CASES), help=f"of {', '.join(CASES)}")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes, seconds: what tests/e2e/test_bench_smoke_a.py runs")
    args = parser.parse_args(argv)
    if args.smoke:
        args.frames = "8,16"
    sizes = [int(n) for n in args.frames.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in args.cases.split(","):
            first = None
            for frames in sizes:
                row = measure(case, frames, folder)
                first = first or row["cpu_ms_per_frame"]
                row["ratio_to_smallest"] = round(row["cpu_ms_per_frame"] / max(first, 1e-9), 2)
                results.append(row)
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
