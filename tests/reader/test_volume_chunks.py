"""``convert --volume_chunks N`` (issue 45 item 1) on real conversions of a small NIfTI task with
label maps: the chunked records read back (``RandomAccess[i]``) equal the plain layout's; a region
read equals the slice of the whole volume at every border (brick boundaries, volume edges, N not
dividing the shape, boxes larger than a brick or the volume) and reads only the bricks it overlaps;
PatchSampler gives the plain layout's patches; both codecs; converting twice gives equal shards;
verify passes and names a damaged brick; a region over gs:// (the GCS emulator)."""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import struct
import warnings

import numpy as np
import pytest

from dcm2tfrecord.dataset import bricks, names, wire
from dcm2tfrecord.dataset.example import decode_example
from dcm2tfrecord.dataset.features import IMAGE_BRICKS, IMAGE_RAW, MASK_BRICKS
from dcm2tfrecord.dataset.manifest import read_manifest
from dcm2tfrecord.dataset.tfrecord import FOOTER_BYTES, HEADER_BYTES, masked_crc
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.pipeline.commands.inspect import format_overview
from dcm2tfrecord.reader.patch_sampler import PatchSampler
from dcm2tfrecord.reader.random_access import RandomAccess
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.patch_datasets import convert, task

LIMIT = 8
# (edge, codec) of each chunked conversion: 4 divides no record's shape on every axis, 5 and 7 neither
CHUNKED = {"none4": (4, "none"), "zstd5": (5, "zstd"), "zstd7": (7, "zstd")}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunks")
    task(root / "Task")
    out = {"plain": str(root / "plain")}
    convert(root / "Task", out["plain"], class_locations=LIMIT)
    for name, (edge, codec) in CHUNKED.items():
        out[name] = str(root / name)
        convert(root / "Task", out[name], class_locations=LIMIT, volume_chunks=edge, volume_codec=codec)
    return out


def _shards(path: str) -> dict:
    return {name: hashlib.sha256(open(os.path.join(path, name), "rb").read()).hexdigest()
            for name in sorted(os.listdir(path)) if names.SHARD_SUFFIX in name}


def test_manifest_declares_the_layout(converted):
    for name, (edge, codec) in CHUNKED.items():
        manifest = json.load(open(os.path.join(converted[name], names.MANIFEST_NAME)))
        assert manifest["volume_chunks"]["edge"] == edge and manifest["volume_chunks"]["codec"] == codec
        assert IMAGE_BRICKS in manifest["features"] and MASK_BRICKS in manifest["features"]
        assert IMAGE_RAW not in manifest["features"]
        tfds = json.load(open(os.path.join(converted[name], names.TFDS_FEATURES_NAME)))
        assert "volume_chunks" in json.dumps(tfds)
        overview = format_overview(read_manifest(converted[name]), converted[name])
        assert any(f"bricks of {edge}^3 voxels, codec {codec}" in line for line in overview), overview
    assert not any("bricks" in line for line in format_overview(read_manifest(converted["plain"]), "plain"))


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_whole_records_equal_the_plain_layout(converted, name):
    plain, chunked = RandomAccess(converted["plain"]), RandomAccess(converted[name])
    assert len(plain) == len(chunked) and chunked.chunks is not None
    for i in range(len(plain)):
        a, b = plain[i], chunked[i]
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
            assert np.asarray(a[key]).dtype == np.asarray(b[key]).dtype, key


def _boxes(shape, edge):
    """Starts and sizes at every border: brick boundaries, volume edges, outside, larger than a brick."""
    starts = set()
    for axis_starts in itertools.product(*[sorted({0, edge - 1, edge, n - 1, n - 2, -2}) for n in shape]):
        starts.add(axis_starts)
    sizes = [(1, 1, 1), (edge, edge, edge), (edge + 1, 2, edge * 2 + 1), tuple(n + 4 for n in shape)]
    return sorted(starts), sizes


def _brick_pages(layout, touched) -> int:
    """Bytes of the 4 KiB pages the image bricks ``touched`` lie on, plus the mask bricks' (each
    page once a volume: the image and the mask are read apart)."""
    total = 0
    for placed in (layout.image, layout.mask):
        pages: set = set()
        for offset, size in (placed[j] for j in touched):
            pages.update(range(offset // bricks.PAGE, (offset + size - 1) // bricks.PAGE + 1))
        total += len(pages)
    return total * bricks.PAGE


@pytest.mark.parametrize("mapped", [True, False])
@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_region_reads_equal_slices_and_touch_only_their_bricks(converted, name, mapped):
    """... through RandomAccess's read-only maps of the local shards (uncompressed bricks copied
    straight from them: bytes_read counts the pages copied from, at most the bricks' pages) and
    through reads (``map_local`` False: at most the bricks' bytes)."""
    plain, chunked = RandomAccess(converted["plain"]), RandomAccess(converted[name])
    chunked.map_local = mapped
    edge = CHUNKED[name][0]
    for i in range(len(plain)):
        whole = plain[i]
        shape = whole["image"].shape[:3]
        chunked.region(i, (0, 0, 0), (1, 1, 1))        # the layout, read once
        starts, sizes = _boxes(shape, edge)
        for start, size in itertools.product(starts[::3], sizes):
            before = chunked.bytes_read
            got = chunked.region(i, start, size, pad_value=-9)
            spent = chunked.bytes_read - before
            for key, pad in (("image", -9), ("mask", 0)):
                want = plain.region(i, start, size, pad_value=pad)[key]
                np.testing.assert_array_equal(got[key], want, err_msg=f"{key} {start} {size}")
                assert got[key].dtype == want.dtype and got[key].shape == tuple(size) + whole[key].shape[3:]
            lo = [max(a, 0) for a in start]
            hi = [min(a + n, m) for a, n, m in zip(start, size, shape)]
            layout = chunked._chunked(i)
            touched = bricks.overlapping(shape, edge, lo, hi) if all(b > a for a, b in zip(lo, hi)) else []
            own = sum(layout.image[j][1] + layout.mask[j][1] + 2 * 11 for j in touched)
            if mapped and CHUNKED[name][1] == "none":
                own = _brick_pages(layout, touched)
            assert spent <= own, (start, size, spent, own)


def test_a_patch_reads_about_its_own_bricks_not_the_volume(converted):
    chunked = RandomAccess(converted["none4"])
    chunked.map_local = False                                  # reads (a map: the test below)
    i = max(range(len(chunked)), key=lambda k: int(np.prod([chunked.info(k)[d] for d in ("depth", "height", "width")])))
    shape = [int(chunked.info(i)[d]) for d in ("depth", "height", "width")]
    layout = chunked._chunked(i)
    before = chunked.bytes_read
    chunked.region(i, (4, 4, 4), (4, 4, 4))                 # exactly one brick
    one = layout.image[bricks.overlapping(shape, 4, (4, 4, 4), (8, 8, 8))[0]]
    assert chunked.bytes_read - before <= one[1] + layout.mask[0][1] + 2 * 11
    whole = sum(n for _, n in layout.image)
    assert chunked.bytes_read - before < whole / 4


def test_a_mapped_region_copies_from_its_bricks_pages_only(converted):
    """Local shards are mapped: one region of one 4³ brick (a few hundred bytes) counts the pages
    that brick and its mask brick lie on; its voxels equal the plain layout's."""
    chunked, plain = RandomAccess(converted["none4"]), RandomAccess(converted["plain"])
    i = max(range(len(chunked)), key=lambda k: int(np.prod([chunked.info(k)[d] for d in ("depth", "height", "width")])))
    shape = [int(chunked.info(i)[d]) for d in ("depth", "height", "width")]
    layout = chunked._chunked(i)
    before, reads = chunked.bytes_read, chunked.reads
    got = chunked.region(i, (4, 4, 4), (4, 4, 4))
    for key in ("image", "mask"):
        np.testing.assert_array_equal(got[key], plain.region(i, (4, 4, 4), (4, 4, 4))[key])
    one = bricks.overlapping(shape, 4, (4, 4, 4), (8, 8, 8))
    assert chunked.bytes_read - before == _brick_pages(layout, one) and chunked.reads - reads == 2
    shard = chunked.locate(i)[0]
    assert chunked._mapped(shard) is chunked._mapped(shard)          # one map a shard, kept


def test_layout_is_found_by_small_reads(converted):
    chunked = RandomAccess(converted["zstd5"])
    before = chunked.bytes_read
    layout = chunked._chunked(0)
    assert chunked.bytes_read - before == layout.table_bytes <= 4 * wire.WINDOW


@pytest.mark.parametrize("name", sorted(CHUNKED))
@pytest.mark.parametrize("options", [dict(), dict(class_probabilities={"background": 1, 1: 2})])
def test_patch_sampler_gives_the_plain_layouts_patches(converted, name, options):
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # no "reads each record whole" warning on a chunked dataset
        chunked = PatchSampler(converted[name], size=(6, 5, 20), per_volume=2, epochs=2, seed=3, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = PatchSampler(converted["plain"], size=(6, 5, 20), per_volume=2, epochs=2, seed=3, **options)
    for i in range(len(plain)):
        a, b = plain[i], chunked[i]
        assert sorted(a) == sorted(b)
        for key in a:
            np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=f"{i} {key}")
            assert np.asarray(a[key]).dtype == np.asarray(b[key]).dtype


def test_converting_twice_gives_identical_shards(converted, tmp_path):
    again = tmp_path / "again"       # the same inputs (their paths are in the records: --keep_source_path)
    convert(os.path.join(os.path.dirname(converted["plain"]), "Task"), again, class_locations=LIMIT,
            volume_chunks=5, volume_codec="zstd")
    assert _shards(str(again)) == _shards(converted["zstd5"])


def test_verify_passes_and_names_a_damaged_brick(converted, tmp_path):
    for name in CHUNKED:
        assert verify_dataset(converted[name]).ok, name
    damaged = tmp_path / "damaged"
    shutil.copytree(converted["zstd5"], damaged)
    ra = RandomAccess(str(damaged), verify=False)
    layout = ra._chunked(0)
    shard_path = ra._paths[ra.locate(0)[0]]
    offset, size = layout.image[1]
    shard, k = ra.locate(0)
    offsets, sizes = ra._index(shard)
    start, end = int(offsets[k]) + HEADER_BYTES, int(offsets[k]) + int(sizes[k]) - FOOTER_BYTES
    with open(shard_path, "r+b") as handle:   # brick 1's zstd magic changed, the CRC made to fit (a writer's bug)
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))
        handle.seek(start)
        data = handle.read(end - start)
        handle.seek(end)
        handle.write(struct.pack("<I", masked_crc(data)))
    report = verify_dataset(str(damaged))
    assert not report.ok
    assert any("image brick 1 " in str(problem) for problem in report.problems), report.problems


@pytest.mark.parametrize("name", ["zstd5", "none4"])
@pytest.mark.parametrize("cached", [False, True])
def test_region_over_gcs(converted, gcs_emulator, name, cached, tmp_path):  # noqa: F811
    """Regions of a gs:// dataset, read by ranged GETs or from local_cache's copies, equal the
    local ones and read as many bytes (uncompressed bricks: only the planes a box spans)."""
    gcs_emulator.upload_tree(converted[name], f"chunks/{name}")
    remote = RandomAccess(gcs_emulator.url(f"chunks/{name}"),
                          local_cache=str(tmp_path / "cache") if cached else None,
                          local_cache_bytes=1 << 30 if cached else None)
    local, mapped = RandomAccess(converted[name]), RandomAccess(converted[name])
    local.map_local = False                   # read like the remote one (a gs:// shard is never mapped)
    for start, size in [((0, 0, 0), (5, 5, 5)), ((3, 2, 4), (7, 9, 6)), ((-1, -1, -1), (40, 40, 40))]:
        got, want = remote.region(0, start, size), local.region(0, start, size)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
            np.testing.assert_array_equal(got[key], mapped.region(0, start, size)[key])
    assert remote.bytes_read == local.bytes_read
    assert all(chunked is None for chunked in [remote._mapped(s) for s in range(len(remote._paths))])


def test_decoding_a_record_by_hand_follows_the_documented_layout(converted):
    """READING.md's recipe, without the reader: sizes, then each value's offset, then the codec."""
    ra = RandomAccess(converted["none4"])
    record = bytes(ra.serialized(0))
    features = decode_example(record)
    shape = [int(features[k][1][0]) for k in ("depth", "height", "width", "channels")]
    walk = wire.walk_example(lambda at, n: record[at:at + n], len(record), bricks.BRICK_FEATURES)
    sizes = decode_example(walk.small)["image_brick_sizes"][1]
    spans = wire.bytes_values(walk.spans[IMAGE_BRICKS].offset, sizes)
    parts = {i: record[at:at + n] for i, (at, n) in enumerate(spans)}
    volume = bricks.assemble(parts, shape, 4, "none", features["dtype"][1][0].decode())
    np.testing.assert_array_equal(volume, ra[0]["image"])


def _equal_records(plain: str, chunked: str) -> tuple[RandomAccess, RandomAccess]:
    a, b = RandomAccess(plain), RandomAccess(chunked)
    assert len(a) == len(b) > 0
    for i in range(len(a)):
        x, y = a[i], b[i]
        assert sorted(x) == sorted(y)
        for key in x:
            np.testing.assert_array_equal(np.asarray(x[key]), np.asarray(y[key]), err_msg=key)
            assert np.asarray(x[key]).dtype == np.asarray(y[key]).dtype, key
    return a, b


def test_a_series_with_a_seg_of_binary_masks(tmp_path):
    """--unit series: a CT series with a two-segment SEG (--mask_layout binary, two mask channels)
    and one without (--missing_mask empty); preview reads the chunked dataset too."""
    from dcm2tfrecord.pipeline import cli
    from tests.support import mask_datasets, run_convert
    from tests.support import series_builders as sb
    a = mask_datasets.series(tmp_path / "in" / "a", 6, 2.5, shape=(24, 40), seed=21)
    sb.regular(str(tmp_path / "in" / "b"), 3, 2.5, shape=(24, 40), seed=22, origin=(0.0, 0.0, 500.0))
    mask_datasets.write_seg(a, mask_datasets.random_masks(a, 2, 5), tmp_path / "in" / "seg.dcm", "chunks")
    options = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64, allow_empty=True, unit="series",
                   missing_mask="empty", mask_layout="binary", class_map=mask_datasets.class_map(tmp_path))
    for name, extra in (("plain", {}), ("chunked", dict(volume_chunks=4, volume_codec="zstd"))):
        summary = run_convert(tmp_path / "in", tmp_path / name, **options, **extra)
        assert summary["records"] == 2 and summary["failed"] == {}, summary
    plain, chunked = _equal_records(str(tmp_path / "plain"), str(tmp_path / "chunked"))
    for i in range(len(plain)):
        assert chunked[i]["mask"].shape[-1] == 2
        for start, size in [((0, 0, 0), (4, 4, 4)), ((1, 3, 5), (5, 30, 9)), ((-1, 20, 36), (3, 9, 9))]:
            got, want = chunked.region(i, start, size), plain.region(i, start, size)
            for key in want:
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} {start} {size}")
    assert verify_dataset(str(tmp_path / "chunked")).ok
    assert cli.main(["preview", str(tmp_path / "chunked"), "-n", "2", "--out", str(tmp_path / "sheet.png")]) == 0


def test_two_dimensional_rgb_records_are_one_brick_deep(tmp_path):
    from tests.support import run_convert, write_png_archive
    write_png_archive(tmp_path / "in", count=3, height=10, width=13, channels=3)
    options = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=64)
    run_convert(tmp_path / "in", tmp_path / "plain", **options)
    run_convert(tmp_path / "in", tmp_path / "chunked", volume_chunks=4, **options)
    plain, chunked = _equal_records(str(tmp_path / "plain"), str(tmp_path / "chunked"))
    assert chunked[0]["image"].shape == (10, 13, 3)
    got = chunked.region(0, (0, 3, 5), (1, 4, 9))["image"]
    np.testing.assert_array_equal(got, plain.region(0, (0, 3, 5), (1, 4, 9))["image"])
    np.testing.assert_array_equal(got[0, :, :8], plain[0]["image"][3:7, 5:13])
    assert verify_dataset(str(tmp_path / "chunked")).ok


def test_tf_data_refuses_a_chunked_dataset_naming_the_readers_that_take_it(converted):
    from dcm2tfrecord import reader
    with pytest.raises(ValueError, match="--volume_chunks.*RandomAccess"):
        reader.load(converted["none4"])
