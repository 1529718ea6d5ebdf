"""What ``convert --volume_chunks`` costs and saves (issue 45 item 1): bytes on disk, whole-record
reads, and patch reads, per codec; and the codecs alone on one brick.

A CT-like NIfTI volume (smooth int16 anatomy plus noise, a spherical uint8 label map) is
converted with its mask (``--class_map``) plainly and with ``--volume_chunks 64`` under
``--volume_codec none`` and ``zstd``. Per layout:

  shard_bytes   - the shard's size;
  whole_ms      - ``RandomAccess[0]`` (read, decode, reassemble), best of the repeats;
  patch_ms      - one 64^3 ``region`` at a seeded random origin, image and mask, mean over the
                  patches (the record's layout already read); ``patch_kib`` its bytes read.

Then the codecs alone on one 64^3 int16 brick and one uint8 mask brick of that volume: stored
bytes (ratio to raw) and decode MB/s (raw bytes out per second), for none, zstd (level
``bricks.ZSTD_LEVEL``, what the converter writes) and, for comparison only, lz4 and blosc2
(byte-shuffled zstd), which imagecodecs also has.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_bricks --json out.json
    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_bricks --smoke --json out.json   # tiny, seconds
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

from dcm2tfrecord.dataset import bricks
from dcm2tfrecord.dataset.names import SHARD_SUFFIX

CLASS_MAP = "organ: [\"1\"]\n"
CODECS = ("none", "zstd")


def volume(shape, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(image int16, labels uint8) as nibabel holds them, [i, j, k]."""
    rng = np.random.default_rng(seed)
    i, j, k = np.meshgrid(*[np.linspace(-1, 1, n) for n in shape], indexing="ij")
    body = (i ** 2 + j ** 2 < 0.8).astype(np.float64)
    image = -1000 + body * (1040 + 60 * np.sin(6 * i) * np.cos(5 * j) + 30 * k) + rng.normal(0, 12, shape)
    labels = ((i - 0.2) ** 2 + j ** 2 + k ** 2 < 0.1).astype(np.uint8)
    return np.round(image).astype(np.int16), labels


def convert_all(root: str, shape, edge: int) -> dict:
    import nibabel as nib

    from dcm2tfrecord.pipeline import convert
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    image, labels = volume(shape)
    for folder, data in (("imagesTr", image), ("labelsTr", labels)):
        os.makedirs(os.path.join(root, "Task", folder), exist_ok=True)
        name = "case_0000.nii.gz" if folder == "imagesTr" else "case.nii.gz"
        nib.save(nib.Nifti1Image(data, np.eye(4)), os.path.join(root, "Task", folder, name))
    class_map = os.path.join(root, "classes.yaml")
    with open(class_map, "w") as handle:
        handle.write(CLASS_MAP)
    out = {}
    layouts: dict = {"plain": {}, **{codec: {"volume_chunks": edge, "volume_codec": codec} for codec in CODECS}}
    for name, options in layouts.items():
        out[name] = os.path.join(root, name)
        opts = ConvertOptions(inputs=(os.path.join(root, "Task"),), output=out[name], id_salt="bench-bricks",
                              class_map=class_map, mask_pattern=r"imagesTr/(.*)_0000\.nii\.gz=labelsTr/\1.nii.gz",
                              max_shard_mb=4096, target_shard_mb=1024, min_shard_mb=1, **options)
        convert.run(opts, ["--runner=DirectRunner", "--direct_running_mode=in_memory"], quiet=True)
    return out


def layouts(paths: dict, repeats: int, patches: int, edge: int = 64) -> dict:
    from dcm2tfrecord.reader.random_access import RandomAccess
    out = {}
    for name, path in paths.items():
        shard = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(SHARD_SUFFIX))
        ra = RandomAccess(path)
        whole = []
        for _ in range(repeats):
            start = time.perf_counter()
            record = ra[0]
            whole.append(time.perf_counter() - start)
        shape = record["image"].shape[:3]
        size = tuple(min(edge, n) for n in shape)
        rng = np.random.default_rng(1)
        ra.region(0, (0, 0, 0), (1, 1, 1))         # the layout, once
        before, spent = ra.bytes_read, 0.0
        for _ in range(patches):
            origin = [int(rng.integers(0, n - s + 1)) for n, s in zip(shape, size)]
            start = time.perf_counter()
            ra.region(0, origin, size)
            spent += time.perf_counter() - start
        out[name] = {"shard_bytes": shard, "whole_ms": 1000 * min(whole), "patch_ms": 1000 * spent / patches,
                     "patch_kib": (ra.bytes_read - before) / patches / 1024, "patch": list(size)}
    return out


def codecs(shape, repeats: int, edge: int = 64) -> dict:
    import imagecodecs
    image, labels = volume(shape)
    record = np.ascontiguousarray(np.transpose(image, (2, 1, 0)))      # [k, j, i], as a record holds it
    mask = np.ascontiguousarray(np.transpose(labels, (2, 1, 0)))
    e = min(edge, *record.shape)
    cases = {"int16 image": record[:e, :e, :e], "uint8 mask": mask[:e, :e, :e]}
    table = {}
    for what, brick in cases.items():
        raw = np.ascontiguousarray(brick).tobytes()
        methods = {
            "none": (lambda b: b, lambda b: np.frombuffer(b, brick.dtype).copy()),
            "zstd": (lambda b: imagecodecs.zstd_encode(b, level=bricks.ZSTD_LEVEL), imagecodecs.zstd_decode),
            "lz4": (imagecodecs.lz4_encode, imagecodecs.lz4_decode),
            "blosc2": (lambda b: imagecodecs.blosc2_encode(b, typesize=brick.dtype.itemsize), imagecodecs.blosc2_decode),
        }
        for name, (encode, decode) in methods.items():
            stored = bytes(encode(raw))
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                decode(stored)
                best = min(best, time.perf_counter() - start)
            table[f"{what} {name}"] = {"bytes": len(stored), "ratio": len(stored) / len(raw),
                                       "decode_mb_s": len(raw) / max(best, 1e-9) / 1e6}
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="192,192,128", help="the volume, i,j,k voxels")
    parser.add_argument("--edge", type=int, default=64, help="--volume_chunks: the brick edge")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--patches", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help="a 40x36x20 volume, one repeat, seconds")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    shape = (40, 36, 20) if args.smoke else tuple(int(n) for n in args.shape.split(","))
    repeats, patches = (1, 3) if args.smoke else (args.repeats, args.patches)
    edge = 8 if args.smoke else args.edge
    with tempfile.TemporaryDirectory(prefix="bench_bricks.") as root:
        result = {"shape": list(shape), "edge": edge,
                  "layouts": layouts(convert_all(root, shape, edge), repeats, patches, edge),
                  "codecs": codecs(shape, max(repeats, 3), edge)}
    print(f"\nvolume {shape} int16 with a uint8 mask, bricks (and patches) of {edge}\n")
    print("| layout | shard bytes | whole record ms | patch ms | patch KiB read |")
    print("|---|---|---|---|---|")
    for name, row in result["layouts"].items():
        print(f"| {name} | {row['shard_bytes']:,} | {row['whole_ms']:.2f} | {row['patch_ms']:.3f} | "
              f"{row['patch_kib']:.1f} |")
    print("\n| brick codec | bytes | of raw | decode MB/s |")
    print("|---|---|---|---|")
    for name, row in result["codecs"].items():
        print(f"| {name} | {row['bytes']:,} | {row['ratio']:.3f} | {row['decode_mb_s']:.0f} |")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
