"""``dcm2tfrecord demo``: the sample archive, converted and read back."""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Sequence

from dcm2tfrecord.pipeline import convert
from dcm2tfrecord.pipeline.options.choices import Progress
from dcm2tfrecord.pipeline.options.table import ConvertOptions
from dcm2tfrecord.pipeline.commands.sample_archive import build_sample_archive


def read_back(dataset_dir: str) -> dict:
    """Reads every record through reader.load, as a training job would."""
    from dcm2tfrecord import reader
    started = time.time()
    records, pixels = 0, 0
    exact = reader.info(dataset_dir).layout("train").dtype   # the sample mixes dtypes: say which
    for image, _ in reader.load(dataset_dir, batch_size=1, shuffle=False, dtype=exact):
        records += int(image.shape[0])
        pixels += int(image.shape.num_elements())
    return {"records": records, "pixels": pixels, "seconds": time.time() - started}


# pydicom's test files include damaged ones on purpose: cut short, and 53 header-only stubs
# of image objects (an image SOP class without pixel data), which fail as truncated_file;
# about 30% of the sample's inputs fail, by design of the sample, not of a run.
SAMPLE_FAILURE_RATIO = 0.5

# The second dataset of the demo: what the README's "Reading" example trains on (one size and
# dtype, so batches stack; two splits; a class per folder).
UNIFORM_OPTIONS: dict[str, Any] = dict(
    dicom_values="window", resize="64x64", resize_mode="pad", channels="3", frames="split",
    labels_from_dirs=True, splits="train=0.8,validation=0.2", target_shard_mb=4, min_shard_mb=1,
    max_shard_mb=16)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord demo",
        description="Build the bundled sample archive (pydicom's test DICOM files plus generated "
                    "PNG/JPEG), convert it as stored (--output) and once more windowed to 64x64 RGB, frames split, "
                    "with a class per folder and a train/validation split (--output + '-uniform', "
                    "what the README's reading example uses), then read it back through reader.load. "
                    "Beam options (e.g. --direct_num_workers=1) pass through.")
    parser.add_argument("--output", default="out/sample",
                        help="the dataset of stored values (default out/sample)")
    parser.add_argument("--archive", default="out/sample-archive",
                        help="where the sample archive is built (default out/sample-archive)")
    known, beam_args = parser.parse_known_args(list(argv))
    archive = build_sample_archive(os.path.abspath(known.archive))
    print(f"sample archive: {archive} (pydicom's test DICOM files + generated PNG/JPEG)")
    opts = ConvertOptions(inputs=(archive,), output=known.output, overwrite=True,
                          target_shard_mb=4, min_shard_mb=1, max_shard_mb=16,
                          max_failure_ratio=SAMPLE_FAILURE_RATIO,
                          id_salt=os.environ.get("DCM2TFRECORD_ID_SALT", "sample-archive-demo-salt"))
    summary = convert.run(opts, beam_args)
    back = read_back(os.path.abspath(known.output))
    print(f"read back through reader.load: {back['records']} records, "
          f"{back['pixels']} pixel values in {back['seconds']:.1f} s")
    if back["records"] != summary["records"]:
        print(f"MISMATCH: manifest says {summary['records']} records")
        return 1
    uniform = known.output.rstrip("/") + "-uniform"
    convert.run(ConvertOptions(inputs=(archive,), output=uniform, overwrite=True, id_salt=opts.id_salt,
                               progress=Progress.NONE, max_failure_ratio=SAMPLE_FAILURE_RATIO, **UNIFORM_OPTIONS),
                beam_args, quiet=True)
    print(f"{uniform}: the same archive windowed to 64x64 RGB, a class per folder, split "
          "train/validation: the README's reading example runs on it")
    return 0
