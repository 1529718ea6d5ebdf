"""verify of a chunked record (``convert --volume_chunks``; dataset/bricks.py): its brick table
walked as a reader walks it (dataset/wire.py), every brick decoded, and the image and mask put
back together as ``image_raw``/``mask_raw``, so the record's other checks (schema, sizes, mask,
class locations) are those of a plain record."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from dcm2tfrecord.dataset import bricks, wire
from dcm2tfrecord.dataset.features import (DTYPE, IMAGE_RAW, MASK_CHANNELS, MASK_DTYPE, MASK_RAW, SHAPE_FEATURES)
from dcm2tfrecord.dataset.manifest import CORE_FEATURES


def plain_schema(schema: Mapping) -> dict:
    """dataset.json's features of a chunked dataset as a plain one's: the bricks and their sizes
    replaced by ``image_raw`` (and ``mask_raw``)."""
    out = {k: dict(v) for k, v in schema.items()
           if k not in (bricks.IMAGE_BRICKS, bricks.IMAGE_BRICK_SIZES, bricks.MASK_BRICKS, bricks.MASK_BRICK_SIZES)}
    out[IMAGE_RAW] = dict(CORE_FEATURES[IMAGE_RAW])
    if bricks.MASK_BRICKS in schema:
        out[MASK_RAW] = {"dtype": "bytes", "shape": []}
    return out


def _one(features: dict, name: str) -> Any:
    kind, values = features.get(name, (None, []))
    if len(values) != 1:
        raise ValueError(f"feature {name!r} is not one value")
    value = values[0]
    return bytes(value).decode() if kind == "bytes" else int(value)


def unbrick(data, features: dict, chunks: bricks.Chunks) -> tuple[dict, list[str]]:
    """``features`` (a decoded chunked record, ``data`` its bytes) with its bricks put back as
    ``image_raw``/``mask_raw``; the problems found (a record with any is not put back)."""
    try:
        dims = [int(_one(features, k)) for k in SHAPE_FEATURES]
        walk = wire.walk_example(lambda at, n: bytes(data[at:at + n]), len(data), bricks.BRICK_FEATURES)
    except (ValueError, wire.WireError) as exc:
        return features, [f"bricks cannot be walked: {exc}"]
    if min(dims) <= 0:
        return features, []          # check_example names the shape
    out = dict(features)
    problems: list = []
    pairs = [(bricks.IMAGE, IMAGE_RAW, "image", dims, DTYPE)]
    if bricks.MASK_BRICKS in features:
        try:
            pairs.append((bricks.MASK, MASK_RAW, "mask", dims[:3] + [int(_one(features, MASK_CHANNELS))], MASK_DTYPE))
        except ValueError as exc:
            return features, [str(exc)]
    for (name, sizes_name), raw_name, what, shape, dtype_name in pairs:
        span = walk.spans.get(name)
        kind, sizes = features.get(sizes_name, (None, []))
        values = features.get(name, (None, []))[1]
        if span is None or kind != "int64":
            problems.append(f"{what} bricks: {name!r} or its sizes {sizes_name!r} is missing")
            continue
        count = len(bricks.boxes(shape, chunks.edge))
        if len(values) != count or len(sizes) != count:
            problems.append(f"{what} bricks: {len(values)} bricks and {len(sizes)} sizes; shape {shape[:3]} in "
                            f"bricks of {chunks.edge} needs {count}")
            continue
        placed = wire.bytes_values(span.offset, sizes)
        if placed[-1][0] + placed[-1][1] != span.offset + span.size:
            problems.append(f"{what} bricks: {sizes_name} does not add up to the {span.size} bytes of {name}")
            continue
        wrong = [i for i, (v, n) in enumerate(zip(values, sizes)) if len(v) != int(n)]
        if wrong:
            problems.append(f"{what} brick {wrong[0]}: {len(values[wrong[0]])} bytes, {sizes_name} says "
                            f"{int(sizes[wrong[0]])}")
            continue
        try:
            dtype = str(_one(features, dtype_name))
            volume = bricks.assemble(dict(enumerate(values)), shape, chunks.edge, chunks.codec, dtype)
        except (ValueError, TypeError) as exc:     # BrickError, or a dtype numpy does not know
            problems.append(f"{what} {exc}")
            continue
        out[raw_name] = ("bytes", [np.ascontiguousarray(volume, dtype=volume.dtype.newbyteorder("<")).tobytes()])
        del out[name], out[sizes_name]
    return out, problems
