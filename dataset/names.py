"""Every name in an output directory, built and parsed here and nowhere else.

A plain dataset directory::

    dataset.json                          the manifest, written last (commit)
    errors.jsonl                          one line per input not written
    unmatched_label_rows.jsonl            one line per labels CSV row that labels nothing
                                          (errors.jsonl holds a bounded sample of them)
    run_failed.json                       instead of dataset.json when a run refused to commit
    dataset_info.json, features.json      TFDS's metadata of the same shards, written just before
    label.labels.txt                      dataset.json where TFDS can read them (dataset/tfds_metadata.py;
                                          the class names, when labels have them)
    {split}-{i:05d}-of-{n:05d}.tfrecord[.gz]      a shard (the suffix after .tfrecord is its
                                          container's: dataset/file_adapters.py)
    {shard}.idx                           its index (DALI tfrecord2idx: "offset size" lines)
    .incomplete/{name}.{uuid}             files being written, renamed into place when whole
    .progress/plan.json, {shard}.done     progress of a running job (removed at commit)
    .progress/{host}-{pid}.worker         an SDK worker process started on the job (removed at commit)
    .lock                                 held by the run writing the directory (dataset/lock.py)

A versioned root (``convert --incremental``)::

    .lock                                 held by the run writing a new version
    LATEST                                the current version's name
    versions/{NNNN}/                      each a dataset directory as above, whose new shards
                                          are {split}-v{NNNN}-{i:05d}-of-{n:05d}.tfrecord[.gz]
                                          with {shard}.records.json beside each, and whose
                                          reused shards are listed as ../{MMMM}/{shard}

The converter and the reader both use this module (the reader through its
own file systems: ``tf.io.gfile``, ``reader.storage``); tests/dataset/test_names.py
checks no other module spells these names. Any name that comes from outside (a split name from --splits or a labels
CSV) goes through :func:`check_component` before it reaches a path; a relative path from outside (a mask's,
from a labels CSV's --mask_column or a --mask_pattern replacement) through :func:`check_relative_path`.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Callable, Optional, Union

from dcm2tfrecord.dataset.errors import FormatError
from dcm2tfrecord.dataset import file_adapters
from dcm2tfrecord.dataset.file_adapters import FileAdapter

MANIFEST_NAME = "dataset.json"
ERRORS_NAME = "errors.jsonl"
UNMATCHED_ROWS_NAME = "unmatched_label_rows.jsonl"    # every labels CSV row that labels nothing
FAILED_RUN_NAME = "run_failed.json"
# TFDS's names (tensorflow_datasets: dataset_info.py, features/feature.py, ClassLabel's names file)
TFDS_INFO_NAME = "dataset_info.json"
TFDS_FEATURES_NAME = "features.json"
TFDS_LABELS_SUFFIX = ".labels.txt"
INCOMPLETE_DIR = ".incomplete"
PROGRESS_DIR = ".progress"
LOCK_NAME = ".lock"
PLAN_NAME = "plan.json"
DONE_SUFFIX = ".done"
WORKER_SUFFIX = ".worker"     # .progress/{host}-{pid}.worker: an SDK worker ran the job's first step
VERSIONS_DIR = "versions"
LATEST_NAME = "LATEST"
PARENT = "../"
SHARD_SUFFIX = ".tfrecord"
INDEX_SUFFIX = ".idx"
RECORDS_SUFFIX = ".records.json"
SHARD_GLOB = "*" + SHARD_SUFFIX + "*"      # shards and every file named after one

_VERSION = re.compile(r"^\d{4,}$")


@functools.cache
def _shard_pattern(suffixes: tuple[str, ...]) -> re.Pattern:
    """Shard names, with any of the registered containers' suffixes."""
    after = "|".join(re.escape(s) for s in suffixes)
    return re.compile(r"^(?P<split>.+?)(-v(?P<version>\d{4,}))?-(?P<index>\d{5})-of-(?P<count>\d{5})"
                      + re.escape(SHARD_SUFFIX) + (r"(?P<suffix>" + after + r")?$" if after else r"$"))


_PARENT_DIR = re.compile(r"^" + re.escape(PARENT) + r"(?P<dir>\d{4,})/(?P<name>[^/]+)$")


# ---------------------------------------------------------------- names from outside


class BadName(FormatError, ValueError):
    """A name that must not become part of a path."""


_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.=+-]*$")
# "{split}-v{NNNN}-{i}-of-{n}" is a versioned shard: a split name ending so would be ambiguous
_VERSION_TAIL = re.compile(r"-v\d{4,}$")


def check_component(name: str, what: str) -> str:
    """``name`` if it is safe as one path component of a shard name, else BadName.

    Refused: empty names, ``.`` and ``..``, separators (``/``, ``\\``), absolute
    paths, control characters and anything outside letters, digits and
    ``_ . = + -`` (a leading ``.`` too: it would hide the file), and names ending
    like a version tag (``fold-v0001``: ``fold-v0001-00000-of-00001.tfrecord``
    would parse as split ``fold`` of version 0001). So every accepted name parses
    back from its shard names. ``what`` names where the value came from, for the
    message.
    """
    text = str(name)
    if not text:
        raise BadName(f"{what}: empty name")
    if not _SAFE.fullmatch(text) or text in (".", ".."):
        raise BadName(f"{what}: {text!r} cannot be part of a file name (use letters, digits "
                      "and _ . = + -, not starting with '.', no '/' or '..')")
    tail = _VERSION_TAIL.search(text)
    if tail:
        raise BadName(f"{what}: {text!r} ends like a version tag ('-v' and 4 or more digits): its "
                      f"shard names would read as split {text[:tail.start()]!r} of version "
                      f"{tail.group()[2:]}; rename it (e.g. {text[:tail.start()] + '_' + tail.group()[1:]!r})")
    return text


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_relative_path(path: str, what: str) -> str:
    """``path`` (a leading ``./`` removed) if it is a relative path that stays below the folder
    it is joined to, else BadName: refused are empty paths, absolute ones (``/x``, ``C:/x``),
    a scheme (``gs://...``), backslashes, control characters, and empty, ``.`` or ``..``
    components (``a//b``, ``a/./b``, ``../x``). ``what`` names where it came from."""
    text = str(path)
    while text.startswith("./"):
        text = text[2:]
    if not text:
        raise BadName(f"{what}: empty path")
    if text.startswith("/") or "://" in text or re.match(r"^[A-Za-z]:", text):
        raise BadName(f"{what}: {text!r} is not a relative path: give it relative to the --input root")
    if "\\" in text or _CONTROL.search(text):
        raise BadName(f"{what}: {text!r} holds a backslash or a control character: write folders with '/'")
    if any(part in ("", ".", "..") for part in text.split("/")):
        raise BadName(f"{what}: {text!r} has an empty, '.' or '..' component: it must name a file below "
                      f"the --input root")
    return text


# ---------------------------------------------------------------- shards


@dataclasses.dataclass(frozen=True)
class ShardName:
    """A shard file name, parsed."""
    split: str
    index: int
    num_shards: int
    version: str = ""        # "0002" for a shard written by version 0002 of a versioned root
    compression: str = file_adapters.DEFAULT    # its container (dataset/file_adapters.py)
    parent: str = ""         # "0001" when listed as ../0001/<file> (reused from that version)

    @property
    def file(self) -> str:
        base = shard_file_name(self.split, self.index, self.num_shards,
                               f"v{self.version}" if self.version else "", self.compression)
        return f"{PARENT}{self.parent}/{base}" if self.parent else base


def shard_file_name(split: str, index: int, num_shards: int, tag: str = "",
                    compression: Union[FileAdapter, str] = file_adapters.DEFAULT) -> str:
    """``{split}[-{tag}]-{index:05d}-of-{num_shards:05d}.tfrecord{suffix}``, the suffix of
    the container ``compression`` (an adapter, or its name: ``.gz`` for gzip, none for none);
    a run's writer names its shards through its ShardTarget (dataset/shard_target.py).

    ``split`` is checked again here (BadName): whatever let an unsafe name
    through upstream, it never becomes a path.
    """
    check_component(split, "split name")
    middle = f"-{tag}" if tag else ""
    return (f"{split}{middle}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}"
            + file_adapters.adapter(compression).suffix)


def parse_shard_name(file: str) -> Optional[ShardName]:
    """A manifest's shard entry (``name`` or ``../NNNN/name``) parsed; None if not a shard name."""
    parent = ""
    match = _PARENT_DIR.match(file)
    if match:
        parent, file = match.group("dir"), match.group("name")
    match = _shard_pattern(file_adapters.suffixes()).match(file)
    if not match or "/" in file:
        return None
    suffix = match.groupdict().get("suffix") or ""
    return ShardName(split=match.group("split"), index=int(match.group("index")),
                     num_shards=int(match.group("count")), version=match.group("version") or "",
                     compression=file_adapters.of_suffix(suffix).name, parent=parent)


def tfds_labels_name(feature: str) -> str:
    """Where TFDS's ClassLabel keeps the class names of feature ``feature``: ``label.labels.txt``."""
    return feature + TFDS_LABELS_SUFFIX


def tfds_shard_template(split: str, tag: str = "",
                        compression: Union[FileAdapter, str] = file_adapters.DEFAULT, parent: str = "") -> str:
    """TFDS's ``filepathTemplate`` (dataset_info.json) naming the shards :func:`shard_file_name`
    gives ``split`` with ``tag``: TFDS formats ``{SPLIT}`` and ``{SHARD_X_OF_Y}``; with ``parent``
    the shards are ``../{parent}/`` beside the version."""
    middle = f"-{tag}" if tag else ""
    folder = f"{PARENT}{parent}/" if parent else ""
    return (folder + "{SPLIT}" + middle + "-{SHARD_X_OF_Y}" + SHARD_SUFFIX
            + file_adapters.adapter(compression).suffix)


def tfds_shard_file(template: str, split: str, index: int, num_shards: int) -> str:
    """The file TFDS reads as shard ``index`` of ``num_shards`` under ``template``, as it formats
    it (tensorflow_datasets naming.ShardedFileTemplate: both numbers padded to the digits of
    ``num_shards``, at least 5)."""
    digits = max(len(str(num_shards)), 5)
    return template.replace("{SPLIT}", split).replace(
        "{SHARD_X_OF_Y}", f"{index:0{digits}d}-of-{num_shards:0{digits}d}")


def index_file_name(shard_file: str) -> str:
    return shard_file + INDEX_SUFFIX


def records_file_name(shard_file: str) -> str:
    return shard_file + RECORDS_SUFFIX


def done_file_name(shard_file: str) -> str:
    return shard_file + DONE_SUFFIX


def files_of_shard(shard_file: str) -> tuple[str, str, str]:
    """The shard and the files named after it: index and (--incremental) records file."""
    return shard_file, index_file_name(shard_file), records_file_name(shard_file)


def incomplete_name(final_name: str, unique: str) -> str:
    """Where ``final_name`` is written before its rename: under INCOMPLETE_DIR."""
    return f"{INCOMPLETE_DIR}/{final_name}.{unique}"


# ---------------------------------------------------------------- versions


def version_name(number: int) -> str:
    return f"{number:04d}"


def parse_version(text: str) -> str:
    """"3", "0003" -> "0003"; anything else is a ValueError naming the form."""
    text = str(text).strip()
    if not text.isdigit():
        raise ValueError(f"version {text!r} is not a number (e.g. 3 or 0003)")
    return version_name(int(text))


TAGS_DIR = "tags"                   # ROOT/tags/NAME holds the version the tag names
_TAG = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def is_tag(text) -> bool:
    """A version given by name (``"paper-2026"``), not by number."""
    return isinstance(text, str) and not text.strip().isdigit()


def check_tag(text: str) -> str:
    """``text`` as a tag name (it becomes ``ROOT/tags/NAME``), else BadName: a letter, then up
    to 63 letters, digits, ``_``, ``.`` or ``-`` (not a number: numbers are versions)."""
    name = str(text).strip()
    if not _TAG.match(name) or name.endswith("."):
        raise BadName(f"tag {text!r:.80}: a tag is a letter then up to 63 letters, digits, '_', '.' or '-' "
                      f"(e.g. paper-2026)")
    return name


def is_version_name(text: str) -> bool:
    return bool(_VERSION.match(text))


def version_parts(directory: str) -> tuple[str, tuple[str, ...]]:
    """A local ``ROOT/versions/NNNN`` -> (ROOT, ("versions", "NNNN")); any other directory ->
    (itself, ()). The folders after ROOT are the tool's own, which it never reaches through
    a link (dataset.files); ROOT is the user's --output, resolved as given."""
    parent, name = os.path.split(os.path.normpath(directory))
    root, folder = os.path.split(parent)
    if folder == VERSIONS_DIR and is_version_name(name) and root:
        return root, (VERSIONS_DIR, name)
    return directory, ()


def version_tag(name: str) -> str:
    """What a version's new shards carry in their names: "v0002"."""
    return f"v{name}" if name else ""


def reused_file(version: str, file: str) -> str:
    """A shard path of ``version``'s manifest as another version sees it: ``../{version}/file``."""
    return file if file.startswith(PARENT) else f"{PARENT}{version}/{file}"


def strip_parent(file: str) -> str:
    """``../0001/x`` -> ``0001/x`` (relative to the versions directory); ``x`` unchanged."""
    return file[len(PARENT):] if file.startswith(PARENT) else file


# ---------------------------------------------------------------- paths


def join(directory: str, name: str) -> str:
    """``directory/name`` for local paths and URLs alike (gs:// object names are literal)."""
    directory = str(directory)
    return name if not directory else directory.rstrip("/") + "/" + name


def shard_path(dataset_dir: str, file: str, join: Callable[[str, str], str] = join) -> str:
    """Where a manifest's shard entry lives: in ``dataset_dir``, or ``../MMMM/`` beside it,
    spelled out against the version's parent (gs:// object names are literal, so
    ``versions/0002/../0001/x`` would name no object)."""
    if file.startswith(PARENT):
        return join(str(dataset_dir).rstrip("/").rsplit("/", 1)[0], strip_parent(file))
    return join(dataset_dir, file)


def worker_mark_name(host: str, pid: int) -> str:
    """``.progress/{host}-{pid}.worker``: the SDK worker process ``pid`` on ``host`` ran the
    job's first step (pipeline.launch.worker_start); the host is reduced to letters, digits, - and ."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", host)[:64] + f"-{int(pid)}" + WORKER_SUFFIX
