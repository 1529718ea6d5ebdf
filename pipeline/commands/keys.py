"""``dcm2tfrecord keygen PATH``, ``dcm2tfrecord rekey DIR --new_key KEY_URI`` and
``dcm2tfrecord wrap-salt SALT_FILE OUT --key KEY_URI``.

``keygen`` writes a fresh key-encryption key (KEK) to a local file readable by its owner
only, for ``convert --encrypt keyfile:PATH``. ``rekey`` re-wraps an encrypted dataset's
per-shard data keys under another KEK (key rotation) and replaces dataset.json in one
step; the shards are not rewritten (dataset/encryption.py). ``wrap-salt`` seals an
identifier salt under a KEK, for ``convert --id_salt_file OUT``: the salt file may then sit
beside the data, readable only with the key that reads the records.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

import os

from dcm2tfrecord.dataset.encryption import KEYFILE, EncryptionError, new_key_file, rekey, wrap_secret


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


def wrap_salt_main(argv: Sequence[str]) -> int:
    from dcm2tfrecord.transforms.settings import SaltFileError, read_salt_file
    parser = argparse.ArgumentParser(
        prog="dcm2tfrecord wrap-salt",
        description="Seal the identifier salt SALT_FILE holds under the key-encryption key KEY_URI "
                    "names, into OUT (created readable by its owner only, never over an existing file): "
                    "convert --id_salt_file OUT then unwraps it with that key on every worker; the ids "
                    "are those of the plain salt.")
    parser.add_argument("salt_file", metavar="SALT_FILE", help="the salt, as --id_salt_file reads it")
    parser.add_argument("out", metavar="OUT", help="the wrapped salt file to create (local)")
    parser.add_argument("--key", required=True, metavar="KEY_URI",
                        help="keyfile:PATH or gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K")
    args = parser.parse_args(list(argv))
    try:
        salt = read_salt_file(args.salt_file)
        text = wrap_secret(salt, args.key)
        descriptor = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except (SaltFileError, EncryptionError) as exc:
        print(f"dcm2tfrecord wrap-salt: error: {exc}", file=sys.stderr)
        return 1
    except FileExistsError:
        print(f"dcm2tfrecord wrap-salt: error: {args.out} exists; never overwritten", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"dcm2tfrecord wrap-salt: error: {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(text)
    print(f"wrote {args.out}: convert --id_salt_file {args.out} (unwrapped with {args.key})")
    return 0
