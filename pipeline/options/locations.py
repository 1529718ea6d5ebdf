"""An --input, --output or --labels location as the job uses it (absolute) and as
dataset.json records it (nothing that can carry a name: a keyed hash)."""
from __future__ import annotations

import os

from dcm2tfrecord.transforms.hashing import location_hash


def absolute(path: str) -> str:
    """A local path made absolute; a gs:// uri as it is."""
    return path if "://" in path else os.path.abspath(path)


def recorded_location(uri: str, salt: str) -> str:
    """An --input or --labels location as dataset.json records it: nothing that can carry a name.

    ``gs://bucket/<hmac:…>`` or ``file://<hmac:…>``: the scheme and bucket, and a
    keyed hash of the absolute location (see transforms.hashing.location_hash).
    """
    scheme, sep, rest = uri.partition("://")
    prefix = f"{scheme}://{rest.split('/', 1)[0]}/" if sep else "file://"
    return f"{prefix}<hmac:{location_hash(absolute(uri), salt)}>"
