"""dataset.json records the --input, --labels and --class_map locations as a keyed hash
(docs/CONVERTING.md, "Patient safety"): ``<hmac:…>``, HMAC-SHA256 keyed with the salt, so
whoever holds the salt can confirm where a dataset came from, and no one else.

Issue 35, survivor 6: the expected values here are computed from that formula with hmac and
hashlib directly, not with the code's own function (a test built on location_hash could not
see the locations hashed without the salt): the key is the location key's purpose string
followed by the salt, the message the absolute location, the first 32 hex digits kept.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os

from tests.support import run_convert, write_png_archive
from dcm2tfrecord.pipeline.options.table import ConvertOptions

SALTS = ("first salt", "second salt")


def _expected_hash(location: str, salt: str) -> str:
    absolute = location if "://" in location else os.path.abspath(location)
    key = b"dcm2tfrecord/location/v1" + salt.encode("utf-8")
    return hmac.new(key, absolute.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def _expected(location: str, salt: str) -> str:
    scheme, sep, rest = location.partition("://")
    prefix = f"{scheme}://{rest.split('/', 1)[0]}/" if sep else "file://"
    return f"{prefix}<hmac:{_expected_hash(location, salt)}>"


def test_recorded_locations_are_the_salted_hmac_of_the_absolute_location():
    inputs = ("gs://hospital-archive/Smith_Jane_12345/ct", "/archive/Doe_John_67890", "relative/Roe_Ann")
    labels, class_map = "gs://hospital-archive/Smith_Jane_12345_labels.csv", "maps/Roe_Ann_classes.json"
    recorded = {}
    for salt in SALTS:
        got = ConvertOptions(inputs=inputs, output="/data/out", labels=labels, class_map=class_map,
                             id_salt=salt).recorded()
        assert got["inputs"] == [_expected(p, salt) for p in inputs]
        assert got["labels"] == _expected(labels, salt)
        assert got["class_map"] == _expected(class_map, salt)
        recorded[salt] = [*got["inputs"], got["labels"], got["class_map"]]
    # another salt, another hash for every location; none is the unsalted one
    first, second = recorded.values()
    assert all(a != b for a, b in zip(first, second)), recorded
    unsalted = {_expected(p, "") for p in (*inputs, labels, class_map)}
    assert unsalted.isdisjoint(first + second)


def test_the_written_dataset_json_records_the_locations_salted(tmp_path):
    """The same in the dataset.json a real conversion writes: options.inputs, options.labels
    and labels.source, under two salts."""
    root = tmp_path / "Doe_John_67890"
    write_png_archive(root, 2, 8, 8)
    labels = tmp_path / "Doe_John_labels.csv"
    labels.write_text("path,label\nimg_0000.png,cat\nimg_0001.png,dog\n")
    seen = []
    for n, salt in enumerate(SALTS):
        out = tmp_path / f"out{n}"
        run_convert(root, out, id_salt=salt, labels=str(labels),
                    target_shard_mb=1, min_shard_mb=0.5, max_shard_mb=8)
        manifest = json.loads((out / "dataset.json").read_text())
        assert manifest["options"]["inputs"] == [_expected(str(root), salt)]
        assert manifest["options"]["labels"] == manifest["labels"]["source"] == _expected(str(labels), salt)
        seen.append((manifest["options"]["inputs"][0], manifest["options"]["labels"]))
    assert seen[0][0] != seen[1][0] and seen[0][1] != seen[1][1]
