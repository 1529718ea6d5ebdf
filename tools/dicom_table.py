"""Writes docs/DICOM.md: every pydicom test file, its transfer syntax, and what we make of it.

Usage: .venv/bin/python tools/dicom_table.py [--out docs/DICOM.md]
Runs the same probe and decode functions the pipeline runs (default options).
"""
from __future__ import annotations

import argparse
import os
import warnings

import pydicom

from dcm2tfrecord.pipeline.commands.sample_archive import pydicom_test_files
from dcm2tfrecord.transforms.records.build import build_record
from dcm2tfrecord.transforms.errors import ConversionError
from dcm2tfrecord.transforms.records.probe import probe_file
from dcm2tfrecord.transforms.record_model import SourceFile
from dcm2tfrecord.transforms.settings import DecodeSettings

_NOT_DICOM = {".txt", ".json", ".icc", ".dump", ".gz", ".py"}


def _header(path: str) -> tuple[str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ds = pydicom.dcmread(path, force=True, stop_before_pixels=True)
        except Exception:
            return "", ""
    meta = getattr(ds, "file_meta", None)
    syntax = meta.get("TransferSyntaxUID", "") if meta is not None else ""
    name = getattr(syntax, "name", "") or str(syntax)
    return name, str(ds.get("PhotometricInterpretation", "") or "")


def outcome(path: str, rel: str, settings: DecodeSettings) -> str:
    source = SourceFile(path, rel, os.path.getsize(path), 0.0)
    try:
        record = probe_file(source, settings=settings)
        _, dtype, shape = build_record(record, settings=settings)
    except ConversionError as exc:
        status = "skipped" if exc.skipped else "**failed**"
        return f"{status}: `{exc.reason}` — {str(exc).splitlines()[0][:90]}"
    return f"written: {dtype} {list(shape)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="docs/DICOM.md")
    args = parser.parse_args()
    root = pydicom_test_files()
    settings = DecodeSettings(id_salt="table")
    rows = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            if os.path.splitext(name)[1].lower() in _NOT_DICOM or name.upper().startswith("README"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if rel.startswith(os.path.join("dicomdirtests", "TINY_ALPHA", "PT")):
                continue   # 52 identical no-pixel records; TINY_ALPHA/DICOMDIR stands for them
            syntax, photometric = _header(path)
            rows.append((rel, syntax, photometric, outcome(path, rel, settings)))
    rows.sort()
    lines = [
        "# DICOM coverage",
        "",
        f"Every DICOM file shipped in pydicom {pydicom.__version__}'s `data/test_files`, converted with",
        "default options (`--dicom_values modality`): the stored dtype and `[depth, height, width,",
        "channels]` of the record, or the reason it was not written. Regenerate with",
        "`.venv/bin/python tools/dicom_table.py`. `tests/e2e/test_roundtrip.py` checks every written file",
        "against pydicom's own decode with the modality / palette LUT, and every failure's reason.",
        "",
        "| file | transfer syntax | photometric | outcome |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{r}` | {s} | {p} | {o} |" for r, s, p, o in rows]
    written = sum(1 for row in rows if row[3].startswith("written"))
    lines += ["", f"{len(rows)} files: {written} written, {len(rows) - written} skipped or failed."]
    tail = ""     # the sections written by hand after the table (## ...) are kept
    if os.path.exists(args.out):
        with open(args.out) as handle:
            text = handle.read()
        if "\n## " in text:
            tail = "\n" + text[text.index("\n## "):].lstrip("\n")
    with open(args.out, "w") as handle:
        handle.write("\n".join(lines) + "\n" + tail)
    print(f"wrote {args.out}: {len(rows)} files, {written} written")


if __name__ == "__main__":
    main()
