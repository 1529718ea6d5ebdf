"""``dcm2tfrecord keygen PATH`` and ``dcm2tfrecord rekey DIR --new_key KEY_URI``.

``keygen`` writes a fresh key-encryption key (KEK) to a local file readable by its owner
only, for ``convert --encrypt keyfile:PATH``. ``rekey`` re-wraps an encrypted dataset's
per-shard data keys under another KEK (key rotation) and replaces dataset.json in one
step; the shards are not rewritten (dataset/encryption.py).
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from dcm2tfrecord.dataset.encryption import KEYFILE, EncryptionError, new_key_file, rekey


def keygen_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord keygen",
        description="Write a fresh 256-bit key-encryption key to PATH (created readable by its owner "
                    "only, never over an existing file), for convert --encrypt keyfile:PATH.")
    parser.add_argument("path", metavar="PATH", help="the key file to create (local)")
    args = parser.parse_args(list(argv))
    try:
        new_key_file(args.path)
    except FileExistsError:
        print(f"dcm2tfrecord keygen: error: {args.path} exists; a key file is never overwritten "
              "(it may be the only key to a dataset)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"dcm2tfrecord keygen: error: {args.path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.path}: convert --encrypt {KEYFILE}{args.path}")
    return 0


def rekey_main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord rekey",
        description="Re-wrap an encrypted dataset's data keys under another key-encryption key (key "
                    "rotation); dataset.json is replaced whole, no shard is rewritten. The old key "
                    "then no longer opens this dataset.json (copies of the old one it still opens).")
    parser.add_argument("dataset", metavar="DIR", help="the encrypted dataset directory, local or gs://")
    parser.add_argument("--new_key", required=True, metavar="KEY_URI", help="the KEK to wrap the data keys under")
    parser.add_argument("--old_key", default=None, metavar="KEY_URI",
                        help="the KEK they are wrapped under now (default: the one dataset.json names)")
    args = parser.parse_args(list(argv))
    try:
        count = rekey(args.dataset.rstrip("/") or "/", args.new_key, args.old_key)
    except (EncryptionError, FileNotFoundError, ValueError) as exc:
        print(f"dcm2tfrecord rekey: error: {exc}", file=sys.stderr)
        return 1
    print(f"rekeyed {args.dataset}: {count} data keys now wrapped under {args.new_key}")
    return 0
