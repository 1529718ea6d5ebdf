"""Keyed hashes: stable record ids and the global record order.

Keys are fixed per purpose so that the same input gives the same ids and the
same order on every run, runner and worker count. A record id is derived
from the file's path relative to its input root, never from patient data.
"""
from __future__ import annotations

import hashlib
import hmac

_ID_KEY = b"dcm2tfrecord/record-id/v1"
_ORDER_KEY = b"dcm2tfrecord/record-order/v1"
_LOCATION_KEY = b"dcm2tfrecord/location/v1"


def record_id(rel_path: str, salt: str = "") -> str:
    """32 hex chars identifying a source file by its relative path.

    Keyed with the run's --id_salt: paths often hold patient names, and an
    unsalted hash of a guessable path could be confirmed by anyone.
    """
    # surrogateescape: a file name that is not UTF-8 hashes as its own bytes
    digest = hmac.new(_ID_KEY + salt.encode("utf-8"), rel_path.encode("utf-8", "surrogateescape"),
                      hashlib.sha256)
    return digest.hexdigest()[:32]


def location_hash(uri: str, salt: str) -> str:
    """32 hex chars standing for an --input or --labels location in dataset.json.

    Folders are often named after patients; the keyed hash lets whoever holds
    the salt confirm which location a dataset came from, and no one else.
    """
    digest = hmac.new(_LOCATION_KEY + salt.encode("utf-8"), uri.encode("utf-8"), hashlib.sha256)
    return digest.hexdigest()[:32]


def identifier_hash(value: str, salt: str) -> str:
    """HMAC-SHA256(salt, identifier) in hex: linkable within a dataset, not reversible."""
    return hmac.new(salt.encode("utf-8"), value.encode("utf-8"), hashlib.sha256).hexdigest()


def order_key(record_id_: str, seed: int = 0) -> int:
    """A 64-bit position in the global shuffle order, uniform over records.

    Computed once per record, when planning starts
    (transforms.planning.shards.for_planning), and carried with it.
    """
    msg = f"{seed}:{record_id_}".encode("utf-8")
    digest = hmac.new(_ORDER_KEY, msg, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big")


ORDER_KEY_SPACE = 1 << 64
