"""The names the reader needs in an output directory, without TensorFlow.

The writer owns the dataset format; this is the reader's own copy of the few
names it reads (``dataset.json``, ``LATEST``, ``versions/NNNN``, shards
reused from a sibling version as ``../MMMM/<file>``, the ``.idx`` next to a
shard), as plain string functions shared by ``reader.manifest`` (through
``tf.io.gfile``) and ``reader.RandomAccess`` (through ``reader.storage``).
"""
from __future__ import annotations

import json
from typing import Callable

MANIFEST_NAME = "dataset.json"
LATEST_NAME = "LATEST"      # a versioned root (convert --incremental): OUT/LATEST, OUT/versions/NNNN
VERSIONS_DIR = "versions"
PARENT = "../"              # a shard reused from a sibling version: ../MMMM/<file>
INDEX_SUFFIX = ".idx"


def join(directory: str, name: str) -> str:
    """``directory/name`` for local paths and URLs alike (gs:// object names are literal)."""
    directory = str(directory)
    return name if not directory else directory.rstrip("/") + "/" + name


def shard_path(dataset_dir: str, file: str, join: Callable[[str, str], str] = join) -> str:
    """A shard entry's path; ``../MMMM/x`` spelled out against the version's parent."""
    if file.startswith(PARENT):
        return join(str(dataset_dir).rstrip("/").rsplit("/", 1)[0], file[len(PARENT):])
    return join(dataset_dir, file)


def version_name(version) -> str:
    text = str(version).strip()
    if not text.isdigit():
        raise ValueError(f"version {version!r} is not a number (e.g. 3 or '0003')")
    return f"{int(text):04d}"


def resolve(dataset_dir: str, version, exists: Callable[[str], bool],
            read_text: Callable[[str], str], join: Callable[[str, str], str] = join) -> str:
    """The directory holding the dataset.json to read.

    ``dataset_dir`` itself for a plain dataset; for a versioned root the
    version ``version`` names, else the one its LATEST file names.
    """
    dataset_dir = str(dataset_dir).rstrip("/") or "/"
    if version is not None:
        return join(join(dataset_dir, VERSIONS_DIR), version_name(version))
    if exists(join(dataset_dir, MANIFEST_NAME)):
        return dataset_dir
    latest = join(dataset_dir, LATEST_NAME)
    if exists(latest):
        return join(join(dataset_dir, VERSIONS_DIR), version_name(read_text(latest)))
    return dataset_dir


def parse_manifest(text: str, path: str) -> dict:
    """dataset.json's content; a file cut short or damaged is one ValueError naming it."""
    try:
        manifest = json.loads(text)
    except ValueError as error:       # JSONDecodeError, or text that is not UTF-8
        raise ValueError(f"{path} is incomplete or corrupt (not valid JSON: {error}); it is "
                         "written whole at commit, so it was damaged afterwards: restore it, or "
                         "convert again") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        raise ValueError(f"{path} is not a dcm2tfrecord manifest (no 'splits' object); restore "
                         "it, or convert again")
    return manifest


def missing_manifest(path: str, dataset_dir: str) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} not found: {dataset_dir} is not a finished dcm2tfrecord dataset "
        "(dataset.json is written last, when a conversion commits)")
