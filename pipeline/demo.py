"""``dcm2tfrecord demo``: the sample archive, converted and read back."""
from __future__ import annotations

import argparse
import os
import time
from typing import Sequence

from pipeline import convert
from pipeline.options import ConvertOptions
from pipeline.sample_archive import build_sample_archive


def read_back(dataset_dir: str) -> dict:
    """Reads every record through reader.load, as a training job would."""
    import reader
    started = time.time()
    records, pixels = 0, 0
    for image, _ in reader.load(dataset_dir, batch_size=1, shuffle=False):
        records += int(image.shape[0])
        pixels += int(image.shape.num_elements())
    return {"records": records, "pixels": pixels, "seconds": time.time() - started}


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="dcm2tfrecord demo")
    parser.add_argument("--output", default="out/sample")
    parser.add_argument("--archive", default="out/sample-archive")
    known, beam_args = parser.parse_known_args(list(argv))
    archive = build_sample_archive(os.path.abspath(known.archive))
    print(f"sample archive: {archive} (pydicom's test DICOM files + generated PNG/JPEG)")
    opts = ConvertOptions(inputs=(archive,), output=known.output, overwrite=True,
                          target_shard_mb=4, min_shard_mb=1, max_shard_mb=16,
                          id_salt=os.environ.get("DCM2TFRECORD_ID_SALT", "sample-archive-demo-salt"))
    summary = convert.run(opts, beam_args)
    back = read_back(os.path.abspath(known.output))
    print(f"read back through reader.load: {back['records']} records, "
          f"{back['pixels']} pixel values in {back['seconds']:.1f} s")
    if back["records"] != summary["records"]:
        print(f"MISMATCH: manifest says {summary['records']} records")
        return 1
    return 0
