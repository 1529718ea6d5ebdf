"""Masks end to end on gs:// (issue 33, item 7), against gcp-storage-emulator: a CT series annotated
by a highdicom-written SEG and a square one by an rt-utils-written RTSTRUCT, and the --class_map
file, all on the bucket; converted with ``--unit series --class_map gs://...`` into gs://, with
Beam's temp location there too.

The masks are read back straight from gs:// by ``reader.RandomAccess`` (google-cloud-storage
honours the emulator) and, after a local copy, by ``reader.load(masks=True)`` (TensorFlow's GCS
client does not): the SEG's equal the known arrays exactly, the RTSTRUCT's rasterised discs match
theirs as tests/transforms/masks/test_masks_e2e.py checks them (Dice >= 0.99, the same slices).
The same archive converted from a local folder gives the same shard bytes. Raw ROI and segment
names (patient-like text) appear in no output file.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support import IN_MEMORY, run_convert
from tests.support import mask_datasets
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)

# rt-utils 1.2.7 saves through pydicom attributes pydicom 3 deprecates
pytestmark = pytest.mark.filterwarnings("ignore:'FileDataset.is_:DeprecationWarning")

OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, unit="series", mask_layout="label_map")
SEG_SHAPE = (32, 40)
RT_SIZE = 96                       # rt-utils reads non-square images transposed: a square series
RAW_NAMES = (b"DOE^JANE", b"Pat Smith")


def _disc(centre, radius) -> np.ndarray:
    jj, ii = np.mgrid[:RT_SIZE, :RT_SIZE]
    return (jj - centre[0]) ** 2 + (ii - centre[1]) ** 2 <= radius ** 2


def _label_map(liver: np.ndarray, tumour: np.ndarray) -> np.ndarray:
    """[k, j, i] of each class -> the stored [k, j, i, 1] label map (Liver, listed first, wins)."""
    return np.where(liver, 1, np.where(tumour, 2, 0)).astype(np.uint8)[..., None]


def _dice(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * float((a & b).sum()) / float(a.sum() + b.sum())


def _build(root: str) -> dict:
    """``root``/in: series ``seg`` (5 slices) + seg.dcm, series ``rt`` (6 slices) + rt.dcm; the class
    map at ``root``/classes.yaml. Returns the known per-class masks of each, in record order."""
    seg_series = mask_datasets.series(os.path.join(root, "in", "seg"), 5, 2.5, shape=SEG_SHAPE, seed=31)
    rng = np.random.default_rng(32)
    seg_known = rng.random((2, 5, *SEG_SHAPE)) < 0.3              # Liver, tumour: overlapping
    seg_known[:, 1] = False
    # segments Liver and "Pat Smith tumour" (mask_datasets.SEGMENTS): the second maps to Tumour
    mask_datasets.write_seg(seg_series, seg_known, os.path.join(root, "in", "seg.dcm"), "test_gcs_masks")
    rt_series = mask_datasets.series(os.path.join(root, "in", "rt"), 6, 2.5, shape=(RT_SIZE, RT_SIZE),
                           pixel_spacing=(0.8, 0.8), origin=(0.0, 0.0, 300.0), seed=33)
    liver, tumour = (np.zeros((6, RT_SIZE, RT_SIZE), bool) for _ in range(2))
    for k in range(1, 5):
        liver[k] = _disc((40 + 2 * k, 56 - k), 14 + 2 * k)
    for k in range(2, 5):
        tumour[k] = _disc((60, 30), 6 + k)                        # partly outside the liver
    mask_datasets.write_rtstruct(rt_series, {"liver": liver, "DOE^JANE GTV tumour": tumour},
                                 os.path.join(root, "in", "rt.dcm"))
    mask_datasets.class_map(root)
    return {5: _label_map(*seg_known), 6: (liver, tumour)}


@pytest.fixture(scope="module")
def converted(gcs_emulator, tmp_path_factory):
    work = str(tmp_path_factory.mktemp("gcs_masks"))
    known = _build(work)
    local_out = os.path.join(work, "local_out")
    local = run_convert(os.path.join(work, "in"), local_out, class_map=os.path.join(work, "classes.yaml"),
                        **OPTIONS)
    gcs_emulator.upload_tree(os.path.join(work, "in"), "masks/archive")
    gs_class_map = gcs_emulator.upload_file(os.path.join(work, "classes.yaml"), "masks/meta/classes.yaml")
    gs_out = gcs_emulator.url("masks/out")
    remote = run_convert(gcs_emulator.url("masks/archive"), gs_out, class_map=gs_class_map,
                         beam_args=IN_MEMORY + [f"--temp_location={gcs_emulator.url('masks/tmp')}"], **OPTIONS)
    copy = os.path.join(work, "gs_copy")
    gcs_emulator.download_tree("masks/out", copy)
    return {"known": known, "local": local, "remote": remote, "local_out": local_out, "gs_out": gs_out,
            "copy": copy}


def _check_masks(records: list[dict], known: dict) -> None:
    """The SEG record's mask is the known label map; the RTSTRUCT record's, the discs."""
    by_depth = {int(r["depth"]): r for r in records}
    assert sorted(by_depth) == [5, 6], sorted(by_depth)
    seg = by_depth[5]["mask"]
    assert seg.dtype == np.uint8 and seg.shape == (5, *SEG_SHAPE, 1)
    np.testing.assert_array_equal(seg, known[5])
    rt = by_depth[6]["mask"][..., 0]
    assert rt.shape == (6, RT_SIZE, RT_SIZE)
    liver, tumour = known[6]
    for index, expected in ((1, liver), (2, tumour & ~liver)):
        assert _dice(rt == index, expected) >= 0.99, index
        assert (rt == index).any(axis=(1, 2)).tolist() == expected.any(axis=(1, 2)).tolist(), index


def test_masks_converted_on_gs_read_back_from_gs_exactly(converted):
    for summary in (converted["remote"], converted["local"]):
        assert summary["records"] == 2 and summary["failed"] == {} and summary["skipped"] == {}, summary
    access = reader.RandomAccess(converted["gs_out"], "train")
    assert reader.info(converted["copy"]).mask_classes == mask_datasets.CLASSES
    _check_masks([access[i] for i in range(len(access))], converted["known"])


def test_reader_load_yields_the_gs_masks_and_the_bytes_match_a_local_run(converted):
    copy, local = converted["copy"], converted["local_out"]
    records = []
    for batch in reader.load(copy, split="train", batch_size=1, shuffle=False, output="dict", masks=True):
        records.append({"depth": int(batch["depth"][0]), "mask": batch["mask"][0].numpy()})
    _check_masks(records, converted["known"])
    shards = sorted(n for n in os.listdir(local) if ".tfrecord" in n)
    assert shards and shards == sorted(n for n in os.listdir(copy) if ".tfrecord" in n)
    for name in shards:
        with open(os.path.join(local, name), "rb") as a, open(os.path.join(copy, name), "rb") as b:
            assert a.read() == b.read(), name
    for folder, _, files in os.walk(copy):
        for name in files:
            with open(os.path.join(folder, name), "rb") as handle:
                data = handle.read()
            assert not [raw for raw in RAW_NAMES if raw in data], os.path.join(folder, name)
