"""A committed dataset altered record by record, for the verify tests (tests/dataset/test_verify.py,
test_verify_view.py): a record replaced in its shard, the shard's index, sha256 and sizes in
dataset.json rewritten with it, so that the dataset is consistent but for that record. Records
are framed by the format's own codec (dataset/tfrecord.py ``frame``) and encoded by its Example
codec (dataset/example.py)."""
from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Callable

import numpy as np

from dcm2tfrecord.dataset.example import decode_example, encode_example
from dcm2tfrecord.dataset.names import MANIFEST_NAME
from dcm2tfrecord.dataset.tfrecord import frame, read_records


def manifest(path: str) -> dict:
    with open(os.path.join(path, MANIFEST_NAME)) as handle:
        return json.load(handle)


def stream(*payloads: bytes) -> bytes:
    """``payloads`` framed as a TFRecord file."""
    out = io.BytesIO()
    for payload in payloads:
        head, tail = frame(payload)
        out.write(head + payload + tail)
    return out.getvalue()


def payload(path: str, shard_position: int, record: int, split: str = "train") -> bytes:
    """The serialized Example of record ``record`` of the split's shard ``shard_position``."""
    shard = manifest(path)["splits"][split]["shards"][shard_position]
    with open(os.path.join(path, shard["file"]), "rb") as handle:
        return bytes(list(read_records(handle))[record].data)


def replace_record(path: str, shard_position: int, record: int, data: bytes, split: str = "train") -> None:
    """Rewrites one shard with record ``record`` replaced by ``data``, and its index, sha256 and
    sizes in dataset.json with it: a consistent dataset but for that record."""
    written = manifest(path)
    shard = written["splits"][split]["shards"][shard_position]
    with open(os.path.join(path, shard["file"]), "rb") as handle:
        payloads = [bytes(r.data) for r in read_records(handle)]
    payloads[record] = data
    framed = stream(*payloads)
    with open(os.path.join(path, shard["file"]), "wb") as handle:
        handle.write(framed)
    with open(os.path.join(path, shard["index_file"]), "w") as handle:
        offset = 0
        for p in payloads:
            handle.write(f"{offset} {len(p) + 16}\n")
            offset += len(p) + 16
    grown = len(framed) - shard["num_bytes"]
    shard["num_bytes"], shard["sha256"] = len(framed), hashlib.sha256(framed).hexdigest()
    written["splits"][split]["num_bytes"] += grown
    with open(os.path.join(path, MANIFEST_NAME), "w") as handle:
        json.dump(written, handle)


def edit_record(path: str, record: int, edit: Callable[[dict], None], shard_position: int = 0,
                split: str = "train") -> None:
    """Record ``record`` decoded to ``{name: value}`` (floats float32 arrays, integers int64
    arrays, bytes lists), changed in place by ``edit``, encoded again and written back
    (:func:`replace_record`)."""
    features = {}
    for name, (kind, values) in decode_example(payload(path, shard_position, record, split)).items():
        if kind == "float":
            features[name] = np.asarray(list(values), np.float32)
        elif kind == "int64":
            features[name] = np.asarray(list(values), np.int64)
        else:
            features[name] = [bytes(v) for v in values]
    edit(features)
    replace_record(path, shard_position, record, encode_example(features), split)
