"""``dcm2tfrecord`` / ``python -m dcm2tfrecord.pipeline``: subcommands over the pipeline."""
from __future__ import annotations

import importlib
import logging
import sys
from typing import Optional, Sequence

from dcm2tfrecord.pipeline.options.usage import UsageError, usage_line

USAGE = """usage: dcm2tfrecord COMMAND [options]

commands:
  convert   convert DICOM/image archives into TFRecord shards + dataset.json
  demo      build the bundled sample archive, convert it, read it back, summarize
  verify    re-read a dataset's shards and check them against dataset.json
  inspect   show a dataset's schema, options, splits, shards, class balance; --record N
  preview   write a contact sheet PNG of random records of a split
  versions  list the versions of a root written with convert --incremental
  rollback  point a versioned root's LATEST at another version
  tag       name a version of a versioned root (reader.load(..., version=NAME)); list tags
  prune     remove old versions of a versioned root, never LATEST's or a tagged one
  copy      copy a dataset to another folder or bucket, every byte checked, resumable
  keygen    write a fresh key-encryption key file, for convert --encrypt keyfile:PATH
  rekey     re-wrap an encrypted dataset's data keys under another key (rotation)
  wrap-salt seal an identifier salt under a key-encryption key, for --id_salt_file

run 'dcm2tfrecord COMMAND --help' for a command's options."""


# command -> (module under pipeline/, its entry point); imported on use, so that
# e.g. `inspect` does not pay for Beam's imports
COMMANDS = {"convert": ("convert", "main"), "demo": ("commands.demo", "main"), "verify": ("commands.verify", "main"),
            "inspect": ("commands.inspect", "main"), "preview": ("commands.preview", "main"),
            "versions": ("commands.versions", "versions_main"), "rollback": ("commands.versions", "rollback_main"),
            "tag": ("commands.versions", "tag_main"), "prune": ("commands.versions", "prune_main"),
            "copy": ("commands.copy_dataset", "main"), "keygen": ("commands.keys", "keygen_main"),
            "rekey": ("commands.keys", "rekey_main"), "wrap-salt": ("commands.keys", "wrap_salt_main")}


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Local worker processes relay every SDK warning through the job service (e.g. "No
    # semi_persistent_directory found" once per worker); errors still come through.
    logging.getLogger("apache_beam.runners.portability.local_job_service").setLevel(logging.ERROR)
    # every subcommand reads and writes gs:// (and any scheme Beam knows) through the format
    # package's storage facade: Beam's FileSystems go under it here, before any option is read
    from dcm2tfrecord.transforms.beam_files import install_beam_storage
    install_beam_storage()
    try:
        if command in COMMANDS:
            module, function = COMMANDS[command]
            return getattr(importlib.import_module(f".{module}", __package__), function)(rest)
    except UsageError as exc:
        print(usage_line(command, exc), file=sys.stderr)
        return 2
    print(f"dcm2tfrecord: error: unknown command {command!r}\n{USAGE}", file=sys.stderr)
    return 2
