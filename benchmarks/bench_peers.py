"""dcm2tfrecord against its peers (issue 36, items 3 and 6): the same CT slices and the same
224x224 RGB images written and read by dcm2tfrecord (plain and gzip shards), WebDataset,
Mosaic Streaming MDS and ArrayRecord + Grain, in one run.

Data: ``--ct N`` 512x512 int16 CT slices (benchmarks/archives.py ``ct_archive``: a body-shaped
phantom with air at -1024 HU, fat, soft tissue with organs, lungs, spine and ribs, and quantum
noise) and ``--rgb N`` 224x224 RGB photo-like PNGs (``png_archive``). Every format starts from
the same archive files:

- dcm2tfrecord converts them with its real code path (``convert.run``, Beam's in-memory runner,
  one worker, as benchmarks/bench_gzip.py does), one entry of ``DCM2TFRECORD_VARIANTS`` (a
  ConvertOptions change set) per variant;
- each peer decodes each file as dcm2tfrecord does (pydicom, Rescale Slope/Intercept applied, to
  int16 HU; PIL to uint8 RGB), to the array dcm2tfrecord stores, and writes it in its own format
  (raw pixels, the format's own codec if any: WebDataset ``.npy`` members in tar shards, MDS
  ``ndarray`` columns, ArrayRecord records of the array's bytes).

``sources decoded`` is that decode alone, writing nothing: "write minus decode" subtracts it,
which leaves each format's own cost (for dcm2tfrecord, its own decode differs a little from
this one and Beam's bookkeeping is included).

Every read figure ends in the NumPy array of each record, the same array for every format (a
check after each write finds the CRC32 of its first records among the archive's, decoded as
above, with dtype and shape):
``reader.load`` (tf.data, batches of 32, ``shuffle=False``, each batch turned into NumPy),
``reader.RandomAccess`` (``[i]["image"]``), WebDataset (``.decode()``), Mosaic's
``StreamingDataset`` (iteration; ``[i]`` for random) and Grain's ``ArrayRecordDataSource``
(``[i]`` then ``np.frombuffer``). Sequential reads records in the format's stored order;
random reads every record once in a seeded permutation; 'n/a' where the format has no random
access. Reads come from the page cache (the files are read once before timing): CPU per record
is the steady figure, records/s depends on the machine's load. CPU is this process's and its
reaped children's (``getrusage``), all threads included.

    .venv/bin/python -m benchmarks.bench_peers --ct 500 --rgb 3000
    .venv/bin/python -m benchmarks.bench_peers --ct 4 --rgb 8 --work /tmp/peers --cache /tmp/peers/cache

The peers are optional: a format whose package is missing is listed as not installed
(docs/BENCHMARKS.md gives the pip line).
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Callable, Iterator, Optional

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from benchmarks import archives  # noqa: E402
from benchmarks.proc_monitor import machine_description  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
SHARD_BYTES = 64 << 20          # the peers' shard size (MDS's default size_limit)
CHECKED = 8                     # records whose CRC32 each format's first read is checked against
BATCH = 32                      # reader.load's batch

# ---------------------------------------------------------------- the dcm2tfrecord variants
#
# One entry per variant: a name and the ConvertOptions fields it changes (the converter's
# options, as on the command line without the dashes). A new variant (e.g. the lead engineer's
# per-record compressed, randomly addressable pixel encoding) is one more entry here; it is added
# by itself below when ConvertOptions has the field.
DCM2TFRECORD_VARIANTS: list[tuple[str, dict]] = [
    ("dcm2tfrecord plain", {"compression": "none"}),
    ("dcm2tfrecord gzip (--gzip_level 1)", {"compression": "gzip"}),
]


def _pixel_encoding_variants() -> list[tuple[str, dict]]:
    """``--pixel_encoding png`` (issue 36, item 3) once ConvertOptions has it."""
    from dcm2tfrecord.pipeline.options.table import ConvertOptions
    if "pixel_encoding" not in {f.name for f in dataclasses.fields(ConvertOptions)}:
        return []
    return [("dcm2tfrecord --pixel_encoding png", {"compression": "none", "pixel_encoding": "png"})]


# ---------------------------------------------------------------- the data


@dataclasses.dataclass
class Workload:
    name: str
    archive: archives.Archive
    files: list[str]
    shape: tuple[int, ...]
    dtype: str
    decode: Callable[[str], np.ndarray]      # an archive file -> the array dcm2tfrecord stores

    @property
    def records(self) -> int:
        return len(self.files)


def decode_ct(path: str) -> np.ndarray:
    import pydicom
    ds = pydicom.dcmread(path)
    hu = ds.pixel_array.astype(np.float32) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
    return hu.astype(np.int16)[..., None]


def decode_rgb(path: str) -> np.ndarray:
    from PIL import Image
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def workloads(ct: int, rgb: int) -> list[Workload]:
    out = []
    workers = None if ct + rgb > 100 else 1      # a few files: no pool of processes to start
    if ct:
        archive = archives.ct_archive(ct * archives.CT_SLICE_BYTES / archives.MIB, workers=workers)
        out.append(Workload(f"{archive.files} CT slices, 512x512 int16", archive, archive.file_paths(),
                            (archives.CT_SIZE, archives.CT_SIZE, 1), "int16", decode_ct))
    if rgb:
        size = archives.PNG_SIZE
        archive = archives.png_archive(rgb * size * size * 3 / archives.MIB, workers=workers)
        out.append(Workload(f"{archive.files} RGB images, 224x224 uint8", archive, archive.file_paths(),
                            (size, size, 3), "uint8", decode_rgb))
    return out


def _arrays(work: Workload) -> Iterator[np.ndarray]:
    for path in work.files:
        yield work.decode(path)


def _per_shard(work: Workload) -> int:
    return max(1, SHARD_BYTES // int(np.prod(work.shape) * np.dtype(work.dtype).itemsize))


# ---------------------------------------------------------------- formats


@dataclasses.dataclass
class Reader:
    """A written dataset opened: its records in stored order (None: the reader refuses the
    format), and record i (None: no random access)."""
    how: str
    sequential: Optional[Callable[[], Iterator[np.ndarray]]]
    get: Optional[Callable[[int], np.ndarray]] = None
    refused: str = ""                   # why there is no random access, or no reading at all


@dataclasses.dataclass
class Format:
    name: str
    requires: str                        # the module it needs ("" for dcm2tfrecord)
    write: Callable[[Workload, str], None]
    open: Callable[[Workload, str], list[Reader]]


def dcm2tfrecord_format(name: str, changes: dict) -> Format:
    def write(work: Workload, out: str) -> None:
        from dcm2tfrecord.pipeline import convert
        from dcm2tfrecord.pipeline.options.table import ConvertOptions
        opts = ConvertOptions(inputs=(work.archive.path,), output=out, id_salt="bench-peers",
                              progress="none", **changes)
        summary = convert.run(opts, IN_MEMORY, quiet=True)
        if int(summary["records"]) != work.records:
            raise RuntimeError(f"{name}: {summary['records']} records of {work.records}")

    def open_(work: Workload, out: str) -> list[Reader]:
        from dcm2tfrecord import reader

        def batches():
            for images, _ in reader.load(out, batch_size=BATCH, shuffle=False):
                yield from images.numpy()
        readers = [Reader("reader.load (tf.data)", batches, refused="tf.data reads in order (shuffles by buffer)")]
        try:
            records = reader.RandomAccess(out)
        except Exception as error:          # gzip shards: the adapter's refusal
            readers.append(Reader("reader.RandomAccess", None, refused=str(error).split("\n")[0]))
            return readers

        def in_order():
            for i in range(len(records)):
                yield records[i]["image"]
        readers.append(Reader("reader.RandomAccess", in_order, lambda i: records[i]["image"]))
        return readers

    return Format(name, "", write, open_)


def _webdataset_write(work: Workload, out: str) -> None:
    import webdataset as wds
    os.makedirs(out, exist_ok=True)
    with wds.ShardWriter(os.path.join(out, "shard-%06d.tar"), maxcount=_per_shard(work),
                         maxsize=SHARD_BYTES + (1 << 20), verbose=0) as sink:
        for i, arr in enumerate(_arrays(work)):
            sink.write({"__key__": f"{i:08d}", "image.npy": arr})


def _webdataset_open(work: Workload, out: str) -> list[Reader]:
    import webdataset as wds
    urls = sorted(glob.glob(os.path.join(out, "*.tar")))

    def in_order():
        for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False).decode():
            yield sample["image.npy"]
    return [Reader("webdataset.WebDataset", in_order, refused="tar shards are read as streams")]


def _mds_format(name: str, compression: Optional[str]) -> Format:
    def write(work: Workload, out: str) -> None:
        from streaming import MDSWriter
        shape = ",".join(str(s) for s in work.shape)
        with MDSWriter(out=out, columns={"image": f"ndarray:{work.dtype}:{shape}"}, compression=compression,
                       size_limit=SHARD_BYTES, progress_bar=False) as sink:
            for arr in _arrays(work):
                sink.write({"image": arr})

    def open_(work: Workload, out: str) -> list[Reader]:
        from streaming import StreamingDataset
        from streaming.base.util import clean_stale_shared_memory
        clean_stale_shared_memory()
        dataset = StreamingDataset(local=out, shuffle=False, batch_size=1)

        def in_order():
            for sample in dataset:
                yield sample["image"]
        return [Reader("streaming.StreamingDataset", in_order, lambda i: dataset[i]["image"])]
    return Format(name, "streaming", write, open_)


def _array_record_format(name: str, options: str) -> Format:
    def write(work: Workload, out: str) -> None:
        from array_record.python.array_record_module import ArrayRecordWriter
        os.makedirs(out, exist_ok=True)
        per_shard, writer = _per_shard(work), None
        for i, arr in enumerate(_arrays(work)):
            if i % per_shard == 0:
                if writer is not None:
                    writer.close()
                writer = ArrayRecordWriter(os.path.join(out, f"shard-{i // per_shard:05d}.array_record"), options)
            writer.write(arr.tobytes())
        if writer is not None:
            writer.close()

    def open_(work: Workload, out: str) -> list[Reader]:
        import grain.python as grain
        source = grain.ArrayRecordDataSource(sorted(glob.glob(os.path.join(out, "*.array_record"))))

        def get(i):
            return np.frombuffer(source[i], dtype=work.dtype).reshape(work.shape)

        def in_order():
            for i in range(len(source)):
                yield get(i)
        return [Reader("grain.ArrayRecordDataSource", in_order, get)]
    return Format(name, "array_record", write, open_)


def formats() -> list[Format]:
    return ([dcm2tfrecord_format(name, changes)
             for name, changes in DCM2TFRECORD_VARIANTS + _pixel_encoding_variants()]
            + [Format("WebDataset (tar, .npy)", "webdataset", _webdataset_write, _webdataset_open),
               _mds_format("MDS (Mosaic Streaming)", None),
               _mds_format("MDS, compression zstd", "zstd"),
               _array_record_format("ArrayRecord, default options", ""),
               _array_record_format("ArrayRecord, zstd:1", "zstd:1"),
               _array_record_format("ArrayRecord, uncompressed", "uncompressed")])


# ---------------------------------------------------------------- measuring


def _cpu() -> float:
    """CPU seconds of this process (all its threads) and of its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured(run: Callable[[], int]) -> dict:
    cpu, wall = _cpu(), time.perf_counter()
    records = run()
    return {"records": records, "cpu_s": _cpu() - cpu, "wall_s": time.perf_counter() - wall}


def _dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, n)) for folder, _, names in os.walk(path) for n in names)


def _warm(path: str) -> None:
    for folder, _, names in os.walk(path):
        for n in names:
            with open(os.path.join(folder, n), "rb") as handle:
                while handle.read(1 << 24):
                    pass


def _crc(arr: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(arr).tobytes())


def _count(iterator: Iterator[np.ndarray]) -> int:
    n = 0
    for arr in iterator:
        arr.shape     # the array exists: decoding is done by the reader
        n += 1
    return n


def _reference(work: Workload) -> set[int]:
    """CRC32 of every record's array, decoded from the archive by the peers' decode."""
    return {_crc(arr) for arr in _arrays(work)}


def _check(fmt: Format, reader: Reader, work: Workload, reference: set[int]) -> None:
    for k, arr in enumerate(reader.sequential()):
        if k == CHECKED:
            break
        if arr.shape != work.shape or str(arr.dtype) != work.dtype or _crc(arr) not in reference:
            raise AssertionError(f"{fmt.name} / {reader.how}: record {k} ({arr.dtype} {arr.shape}) "
                                 f"is none of the archive's arrays")


def _installed(module: str) -> bool:
    if not module:
        return True
    try:
        __import__(module)
    except Exception:
        return False
    return True


def run_format(fmt: Format, work: Workload, root: str, reference: set[int], seed: int) -> dict:
    out = os.path.join(root, "out")
    shutil.rmtree(out, ignore_errors=True)
    row: dict = {"format": fmt.name}
    write = measured(lambda: (fmt.write(work, out), work.records)[1])
    row.update(bytes=_dir_bytes(out), write=write, reads=[])
    _warm(out)
    order = [int(i) for i in np.random.default_rng(seed).permutation(work.records)]
    for reader in fmt.open(work, out):
        if reader.sequential is None:
            row["reads"].append({"how": reader.how, "sequential": None, "random": None, "refused": reader.refused})
            continue
        _check(fmt, reader, work, reference)
        read = {"how": reader.how, "sequential": measured(lambda: _count(reader.sequential()))}
        if read["sequential"]["records"] != work.records:
            raise AssertionError(f"{fmt.name} / {reader.how}: {read['sequential']['records']} records read")
        if reader.get is not None:
            get = reader.get
            read["random"] = measured(lambda: _count(get(i) for i in order))
        else:
            read["random"] = None
            read["refused"] = reader.refused
        row["reads"].append(read)
    row["bytes_after_reads"] = _dir_bytes(out)       # MDS decompresses its shards beside them
    shutil.rmtree(out, ignore_errors=True)
    return row


# ---------------------------------------------------------------- the tables


def _ms(m: dict) -> str:
    return f"{1000 * m['cpu_s'] / m['records']:.2f}"


def _rate(m: dict) -> str:
    return f"{m['records'] / m['wall_s']:,.0f}"


def tables(work: Workload, decode: dict, rows: list[dict]) -> str:
    decode_ms = 1000 * decode["cpu_s"] / decode["records"]
    plain = next((r for r in rows if r["format"] == DCM2TFRECORD_VARIANTS[0][0]), rows[0])
    lines = [f"### {work.name}", "",
             f"sources decoded (pydicom / PIL, nothing written): {decode_ms:.2f} ms CPU per record, "
             f"{_rate(decode)} records/s", "",
             "| format | bytes on disk | x plain | write CPU ms/record | write minus decode | "
             "write records/s |", "|---|---:|---:|---:|---:|---:|"]
    for row in rows:
        if "missing" in row:
            lines.append(f"| {row['format']} | not installed ({row['missing']}) | | | | |")
            continue
        w = row["write"]
        extra = "" if row["bytes_after_reads"] == row["bytes"] else \
            f" ({row['bytes_after_reads']:,} after reading)"
        lines.append(f"| {row['format']} | {row['bytes']:,}{extra} | {row['bytes'] / plain['bytes']:.3f} | "
                     f"{_ms(w)} | {1000 * w['cpu_s'] / w['records'] - decode_ms:.2f} | {_rate(w)} |")
    lines += ["", "| format | read by | sequential records/s | sequential CPU ms/record | "
              "random records/s | random CPU ms/record |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        for read in row.get("reads", []):
            seq, rnd = read["sequential"], read["random"]
            seq_cells = f"{_rate(seq)} | {_ms(seq)}" if seq else "n/a | n/a"
            random_cells = f"{_rate(rnd)} | {_ms(rnd)}" if rnd else "n/a | n/a"
            lines.append(f"| {row['format']} | {read['how']} | {seq_cells} | {random_cells} |")
    notes = sorted({f"{r['format']} / {read['how']}: {'no random access' if read['sequential'] else 'refused'}: "
                    f"{read['refused']}"
                    for r in rows for read in r.get("reads", []) if read["random"] is None})
    return "\n".join(lines + [""] + [f"- {n}" for n in notes])


def _family(fmt: Format) -> str:
    return fmt.requires or "dcm2tfrecord"


def run_family(args, family: str) -> list[dict]:
    """The child's work: every chosen format of one family, on every workload."""
    with open(os.path.join(args.work, "reference.json")) as handle:
        references = json.load(handle)
    results = []
    for work in workloads(args.ct, args.rgb):
        reference = set(references[work.name])
        rows = []
        for fmt in _chosen(args.only):
            if _family(fmt) != family:
                continue
            if not _installed(fmt.requires):
                rows.append({"format": fmt.name, "missing": fmt.requires})
                continue
            print(f"[bench_peers] {work.name}: {fmt.name} ...", file=sys.stderr, flush=True)
            rows.append(run_format(fmt, work, os.path.join(args.work, family), reference, args.seed))
        results.append({"workload": work.name, "rows": rows})
    return results


def _chosen(only: str) -> list[Format]:
    return [f for f in formats() if not only or any(s in f.name for s in only.split(","))]


def _child_argv(args, family: str, out: str) -> list[str]:
    argv = ["--ct", str(args.ct), "--rgb", str(args.rgb), "--seed", str(args.seed), "--work", args.work,
            "--child", family, "--child_out", out]
    if args.only:
        argv += ["--only", args.only]
    if args.cache:
        argv += ["--cache", args.cache]
    return argv


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ct", type=int, default=500, help="CT slices (0: none)")
    parser.add_argument("--rgb", type=int, default=3000, help="224x224 RGB images (0: none)")
    parser.add_argument("--only", default="", help="comma-separated substrings of format names to run")
    parser.add_argument("--seed", type=int, default=0, help="the random read order")
    parser.add_argument("--work", help="folder for the outputs (default: a temporary one)")
    parser.add_argument("--cache", help="folder of the generated archives (default: benchmarks/.cache)")
    parser.add_argument("--json", help="also write the measurements here")
    parser.add_argument("--child", help=argparse.SUPPRESS)        # one family, in its own process
    parser.add_argument("--child_out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cache:
        args.cache = os.path.abspath(args.cache)
        archives.CACHE_DIR = args.cache
    if args.child:
        with open(args.child_out, "w") as handle:
            json.dump(run_family(args, args.child), handle)
        return 0
    temporary = not args.work
    args.work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="bench_peers_"))
    os.makedirs(args.work, exist_ok=True)
    report = [machine_description(), ""]
    try:
        works = workloads(args.ct, args.rgb)
        decodes = {w.name: measured(lambda: _count(_arrays(w))) for w in works}
        with open(os.path.join(args.work, "reference.json"), "w") as handle:
            json.dump({w.name: sorted(_reference(w)) for w in works}, handle)
        families = list(dict.fromkeys(_family(f) for f in _chosen(args.only)))
        by_family = {}
        for family in families:
            # each family in a process of its own: TensorFlow's and torch's LLVM (WebDataset and
            # Mosaic import torch) abort a process that holds both, and no format pays another's imports
            out = os.path.join(args.work, f"{family}.json")
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "benchmarks.bench_peers", *_child_argv(args, family, out)],
                           cwd=REPO, check=True)
            print(f"[bench_peers] {family}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
            with open(out) as handle:
                by_family[family] = json.load(handle)
        results = []
        for k, work in enumerate(works):
            rows = [row for family in families for row in by_family[family][k]["rows"]]
            report += [tables(work, decodes[work.name], rows), ""]
            results.append({"workload": work.name, "decode": decodes[work.name], "rows": rows})
    finally:
        if temporary:
            shutil.rmtree(args.work, ignore_errors=True)
    print("\n".join(report))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
