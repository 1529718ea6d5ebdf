"""Patches at the speed of the GPU (issue 45): ``reader.PatchSampler`` against MONAI, TorchIO and
nnU-Net v2's data loader, on the same CT volumes, in one run.

CT-like volumes with two-class masks (bench_preprocess's generator: 512 x 512 x Z int16, Z drawn
seeded in 100-300, 0.7 x 0.7 x 2 mm, a body in -1000 HU air, a spine, two organ-like blobs as mask
classes 1 and 2) as an nnU-Net raw dataset (imagesTr/<case>_0000.nii.gz, labelsTr/<case>.nii.gz),
cached under ``DCM2TFRECORD_BENCH_CACHE``. They are converted with ``--class_map ...
--class_locations 10000`` plainly and with ``--volume_chunks E`` under ``--volume_codec none`` and
``zstd`` (``--edge``, default 64), and preprocessed by nnU-Net v2 (fingerprint, plan at the
volumes' own spacing, 3d_fullres: its blosc2 files).

Every loader then delivers the same number of ``S``-cubed patches (default 128), a third centred
on foreground, each materialised as contiguous NumPy arrays (image and mask), in a subprocess of
its own under benchmarks/proc_monitor.py (peak RSS of the process tree: the largest sum of RSS at
one poll). Measured over the loop (setup apart): patches/s (wall), CPU per patch (user+system of
the process and its children, psutil), bytes read per patch (ours: ``RandomAccess.bytes_read``,
summed over loader workers; MONAI and TorchIO: the bytes their ``read()`` calls returned, /proc
``rchar`` of the tree, which counts compressed .nii.gz bytes; nnU-Net: not measurable, it maps its
blosc2 files, "-").

- ours: ``PatchSampler(foreground=1/3, per_volume=K)`` on each layout, through ``patches()``
  (tf.data), ``torch_patches`` with 0 and 2 workers and ``grain_patches``; and, with the PyTorch
  front end and 0 workers, on the GCS emulator (``gs://``; the first ``--gcs-volumes`` volumes,
  converted apart, uploaded) and locally on those same volumes (memory against volume count);
- MONAI: ``LoadImaged`` (the files' own dtypes), ``EnsureChannelFirstd``, ``FgBgToIndicesd``
  (background in the body: image > -500 HU) cached, then ``RandCropByPosNegLabeld(pos=1, neg=2,
  num_samples=K)`` with the cached indices; ``CacheDataset`` through ``ThreadDataLoader`` (what
  MONAI advises for cached data; also on the first ``--gcs-volumes`` volumes: memory against
  volume count) and ``PersistentDataset`` (its cache built before timing) through a
  ``DataLoader`` with 2 workers;
- TorchIO: ``Queue(samples_per_volume=K, num_workers=2)`` with ``LabelSampler(label_probabilities
  {0: 2, 1: 0.5, 2: 0.5})`` (1/3 foreground);
- nnU-Net v2: ``nnUNetDataLoader`` over ``nnUNetDatasetBlosc2``, patch size S, no augmentation,
  ``oversample_foreground_percent=1/3`` (probabilistic), batches generated in this process.

Targets (issue 45): ours >= 3x the patches/s of MONAI's PersistentDataset and of nnU-Net's
loader; >= 0.5x of MONAI's CacheDataset with <= 1/4 of its peak memory, not growing with the
number of volumes; bytes read per patch <= 2x the patch's own bytes with the chunked layout.

    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_patches --volumes 20 --json out.json
    PYTHONPATH=. .venv/bin/python -m benchmarks.bench_patches --smoke --json out.json   # tiny, seconds
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np                                                                       # noqa: E402

from benchmarks.archives import CACHE_DIR, MARKER                                         # noqa: E402
from benchmarks.bench_preprocess import (CLASSES, CLASS_MAP, NNUNET_ID, NNUNET_NAME, PATTERN,  # noqa: E402
                                         generated_task, nnunet_layout)
from benchmarks.proc_monitor import bench_env, machine_description, run_monitored        # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR_VERSION = 1
SPACING = (0.7, 0.7, 2.0)                    # x, y, z mm: one spacing, so nnU-Net resamples nothing
LOCATIONS = 10000                            # --class_locations
FOREGROUND = 1 / 3
BATCH = 2
LAYOUTS = ("plain", "none", "zstd")          # plain; --volume_chunks E under each --volume_codec
FRONTS = ("torch0", "torch2", "tf", "grain")
FRONT_LABELS = {"torch0": "PyTorch, 0 workers", "torch2": "PyTorch, 2 workers", "tf": "tf.data",
                "grain": "Grain"}
PEERS = ("monai_cache", "monai_persistent", "torchio", "nnunet")
PEER_LABELS = {"monai_cache": "MONAI CacheDataset (ThreadDataLoader)",
               "monai_persistent": "MONAI PersistentDataset (DataLoader, 2 workers)",
               "torchio": "TorchIO Queue + LabelSampler (2 workers)",
               "nnunet": "nnU-Net v2 nnUNetDataLoader (blosc2)"}
PEER_MODULES = {"monai_cache": "monai", "monai_persistent": "monai", "torchio": "torchio", "nnunet": "nnunetv2"}


# ---------------------------------------------------------------- the volumes and conversions

def specs(volumes: int, smoke: bool) -> list[dict]:
    rng = np.random.default_rng(45)
    out = []
    for i in range(volumes):
        shape = (40, 64, 64) if smoke else (int(rng.integers(100, 301)), 512, 512)     # z, y, x
        out.append({"case": f"case_{i:03d}", "shape": shape, "spacing": SPACING})
    return out


def task(cases: list[dict], smoke: bool) -> str:
    """The cached raw dataset (imagesTr, labelsTr) of these volumes."""
    tag = f"patches_v{GENERATOR_VERSION}_{'smoke' if smoke else 'full'}_{len(cases)}"
    return generated_task(os.path.join(CACHE_DIR, tag, "task"), cases)


def subset(root: str, count: int) -> str:
    """A task folder of the first ``count`` cases (links), beside ``root``."""
    out = os.path.join(os.path.dirname(root), f"task_first{count}")
    if not os.path.isdir(out):
        for sub in ("imagesTr", "labelsTr"):
            os.makedirs(os.path.join(out, sub))
            for name in sorted(os.listdir(os.path.join(root, sub)))[:count]:
                os.symlink(os.path.join(root, sub, name), os.path.join(out, sub, name))
    return out


def layout_options(layout: str, edge: int) -> list[str]:
    return [] if layout == "plain" else ["--volume_chunks", str(edge), "--volume_codec", layout]


def convert(root: str, output: str, layout: str, edge: int, env: dict) -> str:
    """``dcm2tfrecord convert`` of ``root`` into ``output`` (cached), 2 worker processes."""
    marker = os.path.join(output, MARKER)
    if os.path.exists(marker):
        return output
    class_map = os.path.join(os.path.dirname(output), "classes.yaml")
    with open(class_map, "w") as handle:
        handle.write(CLASS_MAP)
    cmd = [sys.executable, "-m", "dcm2tfrecord.pipeline", "convert", "--input", root, "--output", output,
           "--overwrite", "--unit", "series", "--class_map", class_map, "--mask_pattern", PATTERN,
           "--class_locations", str(LOCATIONS), "--id_salt", "bench", "--splits", "train=1.0",
           "--direct_num_workers=2", "--direct_running_mode=multi_processing", *layout_options(layout, edge)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"convert failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    open(marker, "w").close()
    print(f"  converted {os.path.basename(output)} in {time.perf_counter() - started:.1f} s", flush=True)
    return output


def nnunet_preprocessed(root: str, cases: list[dict], env: dict) -> dict:
    """nnU-Net's fingerprint, plan (at the volumes' own spacing) and 3d_fullres preprocessing of
    ``root`` (cached): its folders."""
    base = os.path.join(os.path.dirname(root), "nnunet")
    folders = {k: os.path.join(base, k) for k in ("nnUNet_raw", "nnUNet_preprocessed", "nnUNet_results")}
    marker = os.path.join(base, MARKER)
    if os.path.exists(marker):
        return folders
    folders = nnunet_layout(root, base, cases)
    code = ("import sys; from nnunetv2.experiment_planning.plan_and_preprocess_api import "
            "extract_fingerprints, plan_experiments, preprocess; "
            f"extract_fingerprints([{NNUNET_ID}], num_processes=2, check_dataset_integrity=False, clean=True, "
            "verbose=False, show_progress_bar=False); "
            f"plans = plan_experiments([{NNUNET_ID}], overwrite_target_spacing={tuple(reversed(SPACING))}); "
            f"preprocess([{NNUNET_ID}], plans, configurations=('3d_fullres',), num_processes=[2], verbose=False)")
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env={**env, **folders}, cwd=REPO, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nnU-Net preprocessing failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    open(marker, "w").close()
    print(f"  nnU-Net preprocessed in {time.perf_counter() - started:.1f} s", flush=True)
    return folders


# ---------------------------------------------------------------- one measured loader (a subprocess)

def _tree_counters() -> tuple[float, int]:
    """(CPU s, rchar bytes) of this process, its reaped children and its live descendants."""
    import psutil
    me = psutil.Process()
    times = me.cpu_times()
    cpu = times.user + times.system + times.children_user + times.children_system
    chars = me.io_counters().read_chars
    for child in me.children(recursive=True):
        try:
            t = child.cpu_times()
            cpu += t.user + t.system
            chars += child.io_counters().read_chars
        except psutil.Error:
            pass
    return cpu, chars


class _Counted:
    """The sampler with each patch's bytes read attached (loader workers hold copies of it)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __len__(self):
        return len(self.sampler)

    def indices(self, *args):
        return self.sampler.indices(*args)

    def __getitem__(self, index):
        before = self.sampler.records.bytes_read
        patch = self.sampler[index]
        patch["bytes_read"] = np.int64(self.sampler.records.bytes_read - before)
        return patch


def _ours(spec: dict):
    from dcm2tfrecord.reader.patch_sampler import PatchSampler, grain_patches, patches, torch_patches
    size = (spec["size"],) * 3
    sampler = PatchSampler(spec["dataset"], "train", size, foreground=FOREGROUND, per_volume=spec["per_volume"],
                           seed=0, epochs=max(1, -(-spec["patches"] // (spec["volumes"] * spec["per_volume"]))))
    front = spec["front"]
    if front in ("torch0", "torch2"):
        keys = ("image", "mask", "bytes_read")
        batches = torch_patches(_Counted(sampler), BATCH, num_workers=2 if front == "torch2" else 0,  # type: ignore[arg-type]
                                keys=keys)
        return batches, lambda b: (b["image"].numpy(), b["mask"].numpy(), int(b["bytes_read"].sum())), None
    if front == "tf":
        batches = patches(sampler, batch_size=BATCH)
        return batches, lambda b: (b["image"].numpy(), b["mask"].numpy(), 0), lambda: sampler.records.bytes_read
    batches = grain_patches(sampler, BATCH)
    return batches, lambda b: (b["image"], b["mask"], 0), lambda: sampler.records.bytes_read


def _monai(spec: dict):
    from monai.data import CacheDataset, DataLoader, PersistentDataset, ThreadDataLoader
    from monai.transforms import Compose, EnsureChannelFirstd, FgBgToIndicesd, LoadImaged, RandCropByPosNegLabeld
    from monai.utils import set_determinism
    set_determinism(seed=0)
    keys = ["image", "label"]
    transforms = Compose([
        LoadImaged(keys, dtype=None, image_only=True),
        EnsureChannelFirstd(keys),
        FgBgToIndicesd("label", image_key="image", image_threshold=-500),
        RandCropByPosNegLabeld(keys, "label", (spec["size"],) * 3, pos=1, neg=2, num_samples=spec["per_volume"],
                               fg_indices_key="label_fg_indices", bg_indices_key="label_bg_indices"),
    ])
    files = [{"image": i, "label": m} for i, m in spec["files"]]
    if spec["peer"] == "monai_cache":
        data = CacheDataset(files, transforms, cache_rate=1.0, num_workers=2, progress=False)
        loader = ThreadDataLoader(data, batch_size=BATCH, shuffle=True, num_workers=0)
    else:
        data = PersistentDataset(files, transforms, cache_dir=spec["cache_dir"])
        for i in range(len(files)):       # the cache built before timing (what a first epoch does)
            data[i]
        loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=2)
    return _forever(loader), lambda b: (b["image"].numpy(), b["label"].numpy(), 0), None


def _torchio(spec: dict):
    import torch
    import torchio as tio
    torch.manual_seed(0)
    subjects = [tio.Subject(image=tio.ScalarImage(i), label=tio.LabelMap(m)) for i, m in spec["files"]]
    sampler = tio.LabelSampler(spec["size"], label_name="label", label_probabilities={0: 2, 1: 0.5, 2: 0.5})
    queue = tio.Queue(tio.SubjectsDataset(subjects), max_length=4 * spec["per_volume"],
                      samples_per_volume=spec["per_volume"], sampler=sampler, num_workers=2)
    loader = torch.utils.data.DataLoader(queue, batch_size=BATCH, num_workers=0)
    return _forever(loader), lambda b: (b["image"]["data"].numpy(), b["label"]["data"].numpy(), 0), None


def _nnunet(spec: dict):
    from nnunetv2.training.dataloading.data_loader import nnUNetDataLoader
    from nnunetv2.training.dataloading.nnunet_dataset import nnUNetDatasetBlosc2
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager
    np.random.seed(0)
    folder = spec["folder"]
    # the labels nnU-Net's dataset description holds (bench_preprocess writes it with these)
    dataset_json = {"labels": {"background": 0, **{name: value for value, name in CLASSES.items()}}}
    labels = PlansManager(os.path.join(folder, os.pardir, "nnUNetPlans.json")).get_label_manager(dataset_json)
    size = (spec["size"],) * 3
    loader = nnUNetDataLoader(nnUNetDatasetBlosc2(folder), BATCH, size, size, labels,
                              oversample_foreground_percent=FOREGROUND, probabilistic_oversampling=True)

    def batches():
        while True:
            yield loader.generate_train_batch()
    return batches(), lambda b: (b["data"].numpy(), b["target"].numpy(), 0), None


def _forever(loader):
    while True:
        yield from loader


def measure_one(spec: dict) -> dict:
    """Runs one loader for ``spec['patches']`` patches; what the loop cost."""
    started = time.perf_counter()
    build = {"ours": _ours, "monai_cache": _monai, "monai_persistent": _monai, "torchio": _torchio,
             "nnunet": _nnunet}[spec.get("peer", "ours")]
    batches, unpack, bytes_after = build(spec)
    iterator = iter(batches)
    setup = time.perf_counter() - started
    cpu0, chars0 = _tree_counters()
    start, done, counted, fg = time.perf_counter(), 0, 0, 0
    while done < spec["patches"]:
        image, mask, read = unpack(next(iterator))
        counted += read
        for k in range(len(image)):
            a, m = np.ascontiguousarray(image[k]), np.ascontiguousarray(mask[k])     # materialised
            fg += bool(m.any())
            done += 1
            assert a.size >= spec["size"] ** 3 and a.flags.c_contiguous
    wall = time.perf_counter() - start
    cpu1, chars1 = _tree_counters()
    if bytes_after is not None:
        counted = bytes_after()
    return {"patches": done, "wall_s": wall, "cpu_s": cpu1 - cpu0, "setup_s": setup,
            "bytes_read": counted if spec.get("peer", "ours") == "ours" else
            (None if spec.get("peer") == "nnunet" else chars1 - chars0), "with_foreground": fg,
            "patch_bytes": int(a.nbytes + m.nbytes)}


# ---------------------------------------------------------------- the run

def warm(paths) -> None:
    """Reads every file under ``paths`` once: each loader starts from the page cache, none pays
    the cold reads another one's run left it (the datasets together outgrow what the cache keeps)."""
    for top in paths:
        for folder, _, names in os.walk(top):
            for name in names:
                with open(os.path.join(folder, name), "rb") as handle:
                    while handle.read(1 << 24):
                        pass


def run_case(name: str, spec: dict, env: dict, log_dir: str) -> dict:
    warm([spec["dataset"]] if "dataset" in spec and "://" not in spec["dataset"] else
         [spec["folder"]] if "folder" in spec else sorted({os.path.dirname(f) for pair in spec.get("files", ())
                                                           for f in pair}))
    path = os.path.join(log_dir, f"{name}.json")
    cmd = [sys.executable, "-m", "benchmarks.bench_patches", "--one", json.dumps(spec), "--out", path]
    result = run_monitored(cmd, env=env, cwd=REPO, interval=0.1, log_prefix=os.path.join(log_dir, name))
    if result.returncode != 0:
        print(f"  {name} FAILED (exit {result.returncode}):\n{result.tail()}", flush=True)
        return {"name": name, "failed": result.tail(12)}
    with open(path) as handle:
        row = json.load(handle)
    row.update(name=name, peak_rss_mb=round(result.peak_sum_mib * (1 << 20) / 1e6, 1),
               peak_largest_mb=round(result.peak_largest_mib * (1 << 20) / 1e6, 1),
               peak_rss_unmapped_mb=round(result.peak_sum_unmapped_mib * (1 << 20) / 1e6, 1),
               foreign_cpu_s=round(result.foreign_cpu_s, 1))
    row["patches_per_s"] = row["patches"] / row["wall_s"]
    row["cpu_ms_per_patch"] = 1000 * row["cpu_s"] / row["patches"]
    row["read_per_patch"] = None if row["bytes_read"] is None else row["bytes_read"] / row["patches"]
    print(f"  {name}: {row['patches_per_s']:.2f} patches/s, {row['cpu_ms_per_patch']:.0f} CPU ms/patch, "
          f"peak RSS {row['peak_rss_mb']:.0f} MB, setup {row['setup_s']:.1f} s", flush=True)
    return row


def available(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--volumes", type=int, default=20)
    parser.add_argument("--size", type=int, default=128, help="patch edge, voxels")
    parser.add_argument("--edge", type=int, default=64, help="--volume_chunks: the brick edge")
    parser.add_argument("--patches", type=int, default=120, help="patches each loader delivers")
    parser.add_argument("--per-volume", type=int, default=4,
                        help="patches per volume visit (ours' per_volume, MONAI's num_samples, TorchIO's "
                             "samples_per_volume)")
    parser.add_argument("--gcs-volumes", type=int, default=4, help="volumes of the gs:// and memory-growth rows")
    parser.add_argument("--only", help="comma-separated row names to run (default all)")
    parser.add_argument("--smoke", action="store_true", help="2 volumes of 64x64x40, 32^3 patches, seconds")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        with open(args.out, "w") as handle:
            json.dump(measure_one(json.loads(args.one)), handle)
        return 0
    if args.smoke:
        args.volumes, args.size, args.edge, args.patches, args.per_volume, args.gcs_volumes = 2, 32, 16, 8, 2, 1
    cases = specs(args.volumes, args.smoke)
    print(f"machine: {machine_description()}; load average {os.getloadavg()}", flush=True)
    print(f"{len(cases)} volumes: " + ", ".join("x".join(str(n) for n in reversed(c["shape"])) for c in cases),
          flush=True)
    env = bench_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
    root = task(cases, args.smoke)
    base = os.path.dirname(root)
    suffix = f"_e{args.edge}"
    datasets = {layout: convert(root, os.path.join(base, f"{layout}{suffix if layout != 'plain' else ''}"),
                                layout, args.edge, env) for layout in LAYOUTS}
    few = subset(root, args.gcs_volumes)
    few_sets = {layout: convert(few, os.path.join(base, f"first{args.gcs_volumes}_{layout}"
                                                  f"{suffix if layout != 'plain' else ''}"), layout, args.edge, env)
                for layout in LAYOUTS}
    files = [(os.path.join(root, "imagesTr", f"{c['case']}_0000.nii.gz"),
              os.path.join(root, "labelsTr", f"{c['case']}.nii.gz")) for c in cases]
    common = {"size": args.size, "patches": args.patches, "per_volume": args.per_volume}
    only = set(args.only.split(",")) if args.only else None
    jobs: list[tuple[str, dict, dict]] = []
    for layout in LAYOUTS:
        for front in FRONTS:
            jobs.append((f"ours_{layout}_{front}", {**common, "dataset": datasets[layout], "front": front,
                                                     "volumes": len(cases)}, {}))
    for layout in LAYOUTS:
        jobs.append((f"ours_{layout}_local_first{args.gcs_volumes}",
                     {**common, "dataset": few_sets[layout], "front": "torch0", "volumes": args.gcs_volumes}, {}))
        jobs.append((f"ours_{layout}_gcs_first{args.gcs_volumes}",
                     {**common, "dataset": f"gs:{layout}", "front": "torch0", "volumes": args.gcs_volumes}, {}))
    skipped = []
    for peer in PEERS:
        if not available(PEER_MODULES[peer]):
            skipped.append(peer)
            print(f"  {peer}: {PEER_MODULES[peer]} is not installed, skipped", flush=True)
            continue
        spec = {**common, "peer": peer, "files": files}
        if peer == "nnunet":
            spec["folder"] = os.path.join(nnunet_preprocessed(root, cases, env)["nnUNet_preprocessed"], NNUNET_NAME,
                                          "nnUNetPlans_3d_fullres")
        jobs.append((peer, spec, {}))
        if peer == "monai_cache":
            jobs.append((f"monai_cache_first{args.gcs_volumes}", {**spec, "files": files[:args.gcs_volumes]}, {}))
    if only:
        jobs = [j for j in jobs if j[0] in only]
    rows: dict = {}
    with tempfile.TemporaryDirectory(prefix="bench_patches.") as work:
        gcs = [j for j in jobs if j[1].get("dataset", "").startswith("gs:")]
        local = [j for j in jobs if j not in gcs]
        for name, spec, _ in local:
            if spec.get("peer") == "monai_persistent":
                spec = {**spec, "cache_dir": os.path.join(work, "persistent")}
            rows[name] = run_case(name, spec, env, work)
        if gcs:
            from dcm2tfrecord.dataset.transfer import copy_dataset
            from dcm2tfrecord.transforms.beam_files import install_beam_storage
            from tests.support.gcs_emulator import running_emulator
            install_beam_storage()
            os.makedirs(os.path.join(work, "emulator"))
            with running_emulator(os.path.join(work, "emulator")) as emulator:
                for name, spec, _ in gcs:
                    layout = spec["dataset"].split(":", 1)[1]
                    url = emulator.url(f"first_{layout}")
                    copy_dataset(few_sets[layout], url)
                    rows[name] = run_case(name, {**spec, "dataset": url}, {**env, **emulator.env}, work)
    return report(args, cases, rows, skipped)


def _fmt(value, spec: str = ",.1f") -> str:
    return "-" if value is None else format(value, spec)


def report(args, cases: list[dict], rows: dict, skipped: list[str]) -> int:
    ok = {k: v for k, v in rows.items() if "failed" not in v}
    patch_bytes = args.size ** 3 * 3          # int16 image + uint8 mask: the patch's own bytes
    print(f"\n{len(cases)} volumes, {args.size}^3 patches ({patch_bytes / 2 ** 20:.2f} MiB as int16 + uint8), "
          f"{args.patches} patches a loader, batches of {BATCH}, per volume visit {args.per_volume}, "
          f"foreground 1/3; bricks {args.edge}^3\n")
    print("| loader | patches/s | CPU ms / patch | MiB read / patch | read / patch bytes | peak RSS MB "
          "| peak RSS less mapped files MB | setup s | foreground patches |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        if "failed" in r:
            print(f"| {name} | FAILED | | | | | | | |")
            continue
        read = r["read_per_patch"]
        print(f"| {name} | {r['patches_per_s']:.2f} | {r['cpu_ms_per_patch']:.2f} | "
              f"{_fmt(None if read is None else read / 2 ** 20, '.2f')} | "
              f"{_fmt(None if read is None else read / patch_bytes, '.2f')} | {r['peak_rss_mb']:.0f} | "
              f"{r['peak_rss_unmapped_mb']:.0f} | {r['setup_s']:.1f} | {r['with_foreground']}/{r['patches']} |")
    peers = [p for p in ("monai_cache", "monai_persistent", "torchio", "nnunet") if p in ok]
    ratios: dict = {}
    if peers:
        print("\n| ours (patches/s ÷ peer's; peak RSS ÷ peer's) | " + " | ".join(peers) + " |")
        print("|---|" + "---:|" * len(peers))
        for name, r in ok.items():
            if not name.startswith("ours_") or "first" in name:
                continue
            ratios[name] = {p: {"patches_per_s": r["patches_per_s"] / ok[p]["patches_per_s"],
                                "peak_rss": r["peak_rss_mb"] / ok[p]["peak_rss_mb"]} for p in peers}
            print(f"| {name} | " + " | ".join(f"{ratios[name][p]['patches_per_s']:.2f} ({ratios[name][p]['peak_rss']:.2f})"
                                           for p in peers) + " |")
    targets = []

    def best(prefix_layouts, fronts):
        found = [ok[f"ours_{lay}_{f}"] for lay in prefix_layouts for f in fronts if f"ours_{lay}_{f}" in ok]
        return max(found, key=lambda r: r["patches_per_s"]) if found else None
    chunked = best(("none", "zstd"), FRONTS)
    for peer, want in (("monai_persistent", 3.0), ("nnunet", 3.0)):
        if peer in ok and chunked:
            ratio = chunked["patches_per_s"] / ok[peer]["patches_per_s"]
            targets.append((f"patches/s >= {want:g}x {PEER_LABELS[peer]}", f"{chunked['name']}: {ratio:.2f}x",
                            ratio >= want))
    if "monai_cache" in ok and chunked:
        cache = ok["monai_cache"]
        ratio = chunked["patches_per_s"] / cache["patches_per_s"]
        memory = chunked["peak_rss_mb"] / cache["peak_rss_mb"]
        unmapped = chunked["peak_rss_unmapped_mb"] / cache["peak_rss_unmapped_mb"]
        targets.append(("patches/s >= 0.5x MONAI CacheDataset", f"{chunked['name']}: {ratio:.2f}x", ratio >= 0.5))
        targets.append(("peak RSS <= 1/4 of MONAI CacheDataset", f"{chunked['name']}: {memory:.2f}x", memory <= 0.25))
        targets.append(("peak RSS less mapped files <= 1/4 of MONAI CacheDataset's",
                        f"{chunked['name']}: {unmapped:.2f}x", unmapped <= 0.25))
    for layout in ("none", "zstd"):
        few, many = ok.get(f"ours_{layout}_local_first{args.gcs_volumes}"), ok.get(f"ours_{layout}_torch0")
        if few and many:
            growth = many["peak_rss_mb"] / few["peak_rss_mb"]
            targets.append((f"memory does not grow with volumes ({layout}, {args.gcs_volumes} -> {len(cases)})",
                            f"{growth:.2f}x", growth <= 1.25))
            growth = many["peak_rss_unmapped_mb"] / few["peak_rss_unmapped_mb"]
            targets.append((f"memory less mapped files does not grow with volumes ({layout}, {args.gcs_volumes} "
                            f"-> {len(cases)})", f"{growth:.2f}x", growth <= 1.25))
        reads = [ok[f"ours_{layout}_{f}"]["read_per_patch"] for f in ("torch0", "torch2", "tf", "grain")
                 if f"ours_{layout}_{f}" in ok]
        if reads:
            worst = max(reads) / patch_bytes
            targets.append((f"bytes read <= 2x the patch ({layout}, bricks {args.edge})", f"{worst:.2f}x",
                            worst <= 2.0))
    print("\n| target | measured | verdict |")
    print("|---|---|---|")
    for what, measured, met in targets:
        print(f"| {what} | {measured} | {'met' if met else 'NOT met'} |")
    if skipped:
        print(f"\nskipped (not installed): {', '.join(skipped)}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"machine": machine_description(), "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                       "volumes": [c["shape"] for c in cases], "size": args.size, "edge": args.edge,
                       "patches": args.patches, "per_volume": args.per_volume, "patch_bytes": patch_bytes,
                       "rows": rows, "skipped": skipped, "ratios": ratios,
                       "targets": [{"target": t, "measured": m, "met": bool(v)} for t, m, v in targets]},
                      handle, indent=1, default=str)
    return 1 if len(ok) < len(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
