"""Compares this project's decode of every pydicom test file with GDCM's.

Usage: .venv/bin/python tools/compare_gdcm.py [--files DIR]
Needs GDCM's ``gdcmconv`` on PATH (Debian: ``apt-get install libgdcm-tools``); not a
dependency of the project. Each file is decoded here with ``--dicom_values stored`` and
converted by ``gdcmconv --raw`` to an uncompressed file, whose pixels pydicom then reads
(native data: no codec of pydicom's is involved). Prints one line per file that either side
decodes: ``equal``, ``differ`` (largest difference, values differing) or which side fails.
docs/DICOM.md, "Compared with GDCM", gives the result and what each difference is.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import warnings

import numpy as np
import pydicom

from dcm2tfrecord.pipeline.commands.sample_archive import pydicom_test_files
from dcm2tfrecord.transforms.dicom.pixels import decode_dicom
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.settings import DecodeSettings


def _gdcm(path: str, workdir: str):
    out = os.path.join(workdir, "raw.dcm")
    if subprocess.run(["gdcmconv", "--raw", path, out], capture_output=True).returncode != 0:
        return None
    try:
        ds = pydicom.dcmread(out, force=True)
        return ds.pixel_array if "PixelData" in ds else None
    except Exception:
        return None


def _ours(path: str):
    try:
        with open(path, "rb") as handle:
            return decode_dicom(handle, DecodeSettings(id_salt="compare", dicom_values="stored"))[0]
    except ConversionError as exc:
        return exc.reason


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", default=pydicom_test_files())
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(args.files) for name in names)
    with tempfile.TemporaryDirectory() as workdir:
        for path in paths:
            rel = os.path.relpath(path, args.files)
            gdcm, ours = _gdcm(path, workdir), _ours(path)
            if gdcm is None and not isinstance(ours, np.ndarray):
                continue
            if gdcm is None:
                print(f"{rel}: GDCM fails, written here")
            elif not isinstance(ours, np.ndarray):
                print(f"{rel}: GDCM decodes, fails here as {ours}")
            elif ours.size != gdcm.size:
                print(f"{rel}: shapes differ, here {ours.shape}, GDCM {gdcm.shape}")
            else:
                diff = np.abs(ours.reshape(gdcm.shape).astype(np.float64) - gdcm.astype(np.float64))
                print(f"{rel}: equal" if not diff.any() else
                      f"{rel}: differ, at most {diff.max():g}, {int((diff > 0).sum())} of {diff.size} values")


if __name__ == "__main__":
    main()
