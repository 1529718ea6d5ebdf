"""dataset/wire.py and dataset/bricks.py without a conversion: the walker finds every entry of
records our encoder writes, whatever the read window, reading no skipped payload; bricks cover a
volume once, in C order, and any box of it is put back exactly; verify's brick checks
(dataset/verify_bricks.py) name an inconsistent table and a brick that does not decode."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from dcm2tfrecord.dataset import bricks, wire
from dcm2tfrecord.dataset.example import decode_example, encode_example
from dcm2tfrecord.dataset.features import (IMAGE_BRICK_SIZES, IMAGE_BRICKS, IMAGE_RAW, MASK_BRICK_SIZES,
                                           MASK_BRICKS, MASK_RAW, serialize_record)
from dcm2tfrecord.dataset.verify_bricks import unbrick


def _record(shape=(7, 9, 10, 2), edge=4, codec="zstd", mask=True, extra=None):
    rng = np.random.default_rng(0)
    image = rng.integers(-1000, 3000, size=shape).astype(np.int16)
    metadata = dict(extra or {})
    labels = None
    if mask:
        labels = rng.integers(0, 3, size=shape[:3] + (1,)).astype(np.uint8)
        metadata.update({MASK_RAW: labels.data.cast("B"), "mask_dtype": "uint8", "mask_channels": 1})
    return serialize_record(image, "id", "nifti", metadata=metadata, chunks=(edge, codec)), image, labels


@pytest.mark.parametrize("window", [1, 7, 40, 333, 4096])
def test_the_walker_finds_every_entry_and_reads_no_skipped_payload(window):
    extra = {"a" * 300: b"x" * 1000, "dicom/z": np.arange(500, dtype=np.float32), "zz": 5}
    data, _, _ = _record(extra=extra)
    touched = np.zeros(len(data), bool)

    def read(at, n):
        touched[at:at + n] = True
        return data[at:at + n]
    walk = wire.walk_example(read, len(data), bricks.BRICK_FEATURES, window=window)
    full = decode_example(data)
    small = decode_example(walk.small)
    assert sorted(small) == sorted(set(full) - set(bricks.BRICK_FEATURES))
    for key in small:
        assert list(small[key][1]) == list(full[key][1]), key
    for key in bricks.BRICK_FEATURES:
        span = walk.spans[key]
        sizes = full[IMAGE_BRICK_SIZES if key == IMAGE_BRICKS else MASK_BRICK_SIZES][1]
        placed = wire.bytes_values(span.offset, sizes)
        assert [data[a:a + n] for a, n in placed] == [bytes(v) for v in full[key][1]]
        # of a skipped payload, at most an entry head's read (40 bytes) beyond the window's
        assert touched[span.offset:span.offset + span.size].sum() <= max(window, 40)
    assert walk.bytes_read >= touched.sum()


def test_the_walker_refuses_what_is_no_example():
    data, _, _ = _record()
    with pytest.raises(wire.WireError):
        wire.walk_example(lambda at, n: data[at:at + n], len(data) - 1)
    with pytest.raises(wire.WireError):
        wire.walk_example(lambda at, n: (b"\x12" + data[1:])[at:at + n], len(data))
    assert wire.walk_example(lambda at, n: b"", 0).small == b""


@pytest.mark.parametrize("shape,edge", [((7, 9, 10, 2), 4), ((1, 5, 5, 3), 2), ((8, 8, 8, 1), 8), ((3, 4, 5, 1), 64)])
def test_bricks_cover_the_volume_once_and_any_box_comes_back(shape, edge):
    rng = np.random.default_rng(1)
    volume = rng.integers(0, 60000, size=shape).astype(np.uint16)
    boxes = bricks.boxes(shape, edge)
    covered = np.zeros(shape[:3], int)
    for box in boxes:
        covered[tuple(slice(a, b) for a, b in box)] += 1
    assert (covered == 1).all() and len(boxes) == int(np.prod(bricks.grid(shape, edge)))
    assert boxes == sorted(boxes)          # C order of brick index
    for codec in bricks.VolumeCodec:
        encoded = dict(enumerate(bricks.encode(volume, edge, codec)))
        np.testing.assert_array_equal(bricks.assemble(encoded, shape, edge, codec, "uint16"), volume)
        for start in itertools.product(*[sorted({0, min(edge - 1, n - 1), n - 1}) for n in shape[:3]]):
            stop = [min(s + edge + 1, n) for s, n in zip(start, shape)]
            touched = bricks.overlapping(shape, edge, start, stop)
            part = bricks.assemble({i: encoded[i] for i in touched}, shape, edge, codec, "uint16", start, stop)
            np.testing.assert_array_equal(part, volume[tuple(slice(a, b) for a, b in zip(start, stop))])


@pytest.mark.parametrize("shape,edge", [((7, 9, 10, 2), 4), ((9, 6, 11, 1), 3), ((3, 4, 5, 1), 64)])
def test_read_region_reads_only_the_planes_it_needs_and_agrees_with_assemble(shape, edge):
    """read_region (what RandomAccess.region reads with): equal to the volume's box for each codec,
    through read() and through read_into(); an uncompressed brick read only over the box's planes."""
    rng = np.random.default_rng(2)
    volume = rng.integers(0, 60000, size=shape).astype(np.uint16)
    assert bricks.count(shape, edge) == len(bricks.boxes(shape, edge))
    assert [bricks.box_of(i, shape, edge) for i in range(bricks.count(shape, edge))] == bricks.boxes(shape, edge)
    for codec in bricks.VolumeCodec:
        encoded = bricks.encode(volume, edge, codec)
        blob = b"".join(encoded)
        placed = list(zip(np.cumsum([0] + [len(b) for b in encoded[:-1]]).tolist(), [len(b) for b in encoded]))
        for _ in range(12):
            start = [int(rng.integers(0, n)) for n in shape[:3]]
            stop = [int(rng.integers(a + 1, n + 1)) for a, n in zip(start, shape)]
            want = volume[tuple(slice(a, b) for a, b in zip(start, stop))]
            read_bytes = []

            def read(at, n):
                read_bytes.append(n)
                return blob[at:at + n]

            def read_into(at, buffer):
                data = blob[at:at + len(buffer)]
                memoryview(buffer).cast("B")[:len(data)] = data
                read_bytes.append(len(data))
                return len(data)
            for into in (None, read_into):
                read_bytes.clear()
                got = bricks.read_region(read, placed, shape, edge, codec, "uint16", start, stop, read_into=into)
                np.testing.assert_array_equal(got, want)
                if codec == bricks.VolumeCodec.NONE:
                    touched = bricks.overlapping(shape, edge, start, stop)
                    planes = sum((min(stop[0], bricks.box_of(i, shape, edge)[0][1])
                                  - max(start[0], bricks.box_of(i, shape, edge)[0][0]))
                                 * len(encoded[i]) // (bricks.box_of(i, shape, edge)[0][1]
                                                       - bricks.box_of(i, shape, edge)[0][0]) for i in touched)
                    # read() joins neighbours within read_bricks' 16-byte gap into one read
                    assert planes <= sum(read_bytes) <= planes + (16 * len(touched) if into is None else 0)
    encoded = bricks.encode(volume, edge, "none")
    placed = list(zip(np.cumsum([0] + [len(b) for b in encoded[:-1]]).tolist(), [len(b) for b in encoded]))
    with pytest.raises(bricks.BrickError, match="the shard ends first"):
        bricks.read_region(lambda at, n: b"", placed, shape, edge, "none", "uint16", (0, 0, 0), shape[:3],
                           read_into=lambda at, buffer: 0)


def _pages_brute(placed, shape, edge, itemsize, start, stop, prefix):
    """The 4 KiB pages of the file (the bricks after ``prefix`` bytes) that the rows of each
    spanned plane of each overlapped brick lie on: a set, one voxel row at a time."""
    found = set()
    for i in bricks.overlapping(shape, edge, start, stop):
        (d0, d1), (h0, h1), (w0, w1) = bricks.box_of(i, shape, edge)
        row = (w1 - w0) * shape[3] * itemsize
        for d in range(max(start[0], d0), min(stop[0], d1)):
            for h in range(max(start[1], h0), min(stop[1], h1)):
                at = prefix + placed[i][0] + ((d - d0) * (h1 - h0) + (h - h0)) * row
                found.update(range(at // bricks.PAGE, (at + row - 1) // bricks.PAGE + 1))
    return len(found)


@pytest.mark.parametrize("shape,edge,dtype", [((7, 9, 10, 2), 4, "uint16"), ((1, 5, 5, 3), 2, "int16"),
                                              ((9, 1, 11, 1), 3, "uint8"), ((3, 4, 1, 1), 64, "uint16"),
                                              ((70, 65, 130, 1), 64, "int16"), ((66, 64, 129, 1), 64, "uint8")])
def test_read_region_from_a_map_equals_the_box_and_counts_the_pages_it_touches(shape, edge, dtype):
    """read_region over ``mapped`` (RandomAccess's read-only map of a local shard): each brick's
    overlap copied straight from the file's bytes equals the volume's box, for boxes at every border
    (brick edges, volume edges, one voxel, larger than a brick, the whole volume; 1-voxel-thin
    volumes, shapes no multiple of the edge), at an odd offset in the file (unaligned voxels);
    ``touched`` is told the pages the copied rows lie on, counted one voxel row at a time here."""
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    volume = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    encoded = bricks.encode(volume, edge, "none")
    prefix = 4093                                            # bricks start mid-page, voxels unaligned
    file = np.frombuffer(b"\xee" * prefix + b"".join(encoded) + b"\xee" * 5, np.uint8)
    placed = list(zip((prefix + np.cumsum([0] + [len(b) for b in encoded[:-1]])).tolist(), [len(b) for b in encoded]))
    axis = [sorted({0, min(edge - 1, n - 1), min(edge, n - 1), n - 1, max(n - 2, 0)}) for n in shape[:3]]
    for start in itertools.product(*axis):
        for extent in (1, edge, edge + 1, max(shape)):
            stop = [min(a + extent, n) for a, n in zip(start, shape)]
            told = []
            got = bricks.read_region(lambda at, n: pytest.fail("read() with a map"), placed, shape, edge, "none",
                                     dtype, start, stop, mapped=file, touched=lambda n, k: told.append((n, k)))
            np.testing.assert_array_equal(got, volume[tuple(slice(a, b) for a, b in zip(start, stop))])
            assert got.dtype == np.dtype(dtype) and got.flags.c_contiguous
            touched = bricks.overlapping(shape, edge, start, stop)
            pages = _pages_brute([(a - prefix, n) for a, n in placed], shape, edge, np.dtype(dtype).itemsize,
                                 start, stop, prefix)
            assert told == [(pages * bricks.PAGE, len(touched))], (start, stop)
    with pytest.raises(bricks.BrickError, match="the shard ends first"):
        bricks.read_region(lambda at, n: b"", placed, shape, edge, "none", dtype, (0, 0, 0), shape[:3],
                           mapped=file[:placed[-1][0] + placed[-1][1] - 1])
    with pytest.raises(bricks.BrickError, match="bytes for a"):
        bricks.read_region(lambda at, n: b"", [(a, n + 1) for a, n in placed], shape, edge, "none", dtype,
                           (0, 0, 0), shape[:3], mapped=file)


def test_edges_refused_and_accepted():
    assert bricks.edge_refusal(0) == "" and bricks.edge_refusal(64) == "" and bricks.edge_refusal(2) == ""
    for bad in (1, -3, bricks.MAX_EDGE + 1):
        assert "--volume_chunks" in bricks.edge_refusal(bad)


def test_zstd_bytes_are_deterministic():
    assert _record()[0] == _record()[0]


def _rewritten(data: bytes, **changes) -> bytes:
    features = {k: list(v) for k, (_, v) in decode_example(data).items()}
    features.update(changes)
    typed = {}
    for key, values in features.items():
        typed[key] = values if len(values) != 1 or key in (IMAGE_BRICKS, MASK_BRICKS) else values[0]
        if key.endswith("brick_sizes"):
            typed[key] = np.asarray(values, np.int64)
    return encode_example(typed)


def test_verify_puts_the_bricks_back_and_names_what_is_wrong():
    data, image, labels = _record()
    chunks = bricks.Chunks(4, "zstd")
    out, problems = unbrick(data, decode_example(data), chunks)
    assert problems == []
    assert out[IMAGE_RAW][1][0] == image.astype("<i2").tobytes() and out[MASK_RAW][1][0] == labels.tobytes()
    assert IMAGE_BRICKS not in out and MASK_BRICK_SIZES not in out
    features = decode_example(data)
    sizes = list(features[IMAGE_BRICK_SIZES][1])
    wrong = _rewritten(data, **{IMAGE_BRICK_SIZES: [sizes[0] + 1] + sizes[1:]})
    _, problems = unbrick(wrong, decode_example(wrong), chunks)
    assert problems and "image" in problems[0], problems
    bad = list(features[IMAGE_BRICKS][1])
    bad[2] = b"\x00" * len(bad[2])
    broken = _rewritten(data, **{IMAGE_BRICKS: bad})
    _, problems = unbrick(broken, decode_example(broken), chunks)
    assert problems and problems[0].startswith("image brick 2 "), problems
    fewer = _rewritten(data, **{MASK_BRICKS: list(features[MASK_BRICKS][1])[:-1],
                                MASK_BRICK_SIZES: list(features[MASK_BRICK_SIZES][1])[:-1]})
    _, problems = unbrick(fewer, decode_example(fewer), chunks)
    assert problems and "mask bricks" in problems[0], problems
