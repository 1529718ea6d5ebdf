"""Versioned datasets: OUT/versions/NNNN/ and the OUT/LATEST pointer (--incremental).

Each version is a complete dataset directory with its own dataset.json. A
version holds the shards it wrote; shards it reuses from an earlier version
are referenced as ``../MMMM/<file>`` (never copied). Next to every shard a
``<shard>.records.json`` lists, per record written, a fingerprint of what
the record was made of (record id, source uris, sizes, mtimes and the
probe's fingerprints of their first bytes, label, split): a later run
reuses a shard only if every one of its fingerprints is still produced by
the current archive. A version written before sources were fingerprinted
(its records files without ``fingerprints_version``, FINGERPRINTS_VERSION)
lists fingerprints no current record produces: nothing of it is reused, and
the summary says why (docs/CONVERTING.md, "Incremental, versioned
conversion"). No raw identifier goes into it.

``LATEST`` holds one version name and is replaced atomically after a
version commits, so readers never see a half-made version.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, Optional

from dcm2tfrecord.dataset import names
from dcm2tfrecord.dataset.errors import FormatError
from dcm2tfrecord.dataset.files import read_json, remove_empty_incomplete_dir, write_atomically
from dcm2tfrecord.dataset.names import (LATEST_NAME, MANIFEST_NAME, VERSIONS_DIR, is_version_name,
                           parse_version, records_file_name, reused_file, strip_parent, version_name)
from dcm2tfrecord.dataset.results import ShardResult
from dcm2tfrecord.dataset.storage import FileSystems

if TYPE_CHECKING:
    from dcm2tfrecord.dataset.manifest import Manifest




def version_dir(root: str, name: str) -> str:
    return FileSystems.join(root, VERSIONS_DIR, name)


def latest_path(root: str) -> str:
    return FileSystems.join(root, LATEST_NAME)


class DamagedLatest(FormatError, ValueError):
    """LATEST names no committed version: nobody can tell which version is current."""


def _repair_hint(root: str) -> str:
    committed = committed_versions(root)
    if not committed:
        return "no version is committed: remove LATEST and convert again"
    return (f"repair it with: dcm2tfrecord rollback {root} {int(committed[-1])} "
            f"(committed: {', '.join(committed)})")


def read_latest(root: str) -> Optional[str]:
    """The version LATEST points to, or None for a root without one.

    DamagedLatest, naming the repair (``rollback``), when LATEST holds anything
    but the name of a committed version (junk, or a version since removed).
    """
    path = latest_path(root)
    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as handle:
        raw = handle.read(256)
    text = raw.decode("utf-8", "replace").strip()
    try:
        name = parse_version(text)
    except ValueError:
        raise DamagedLatest(f"{path} holds {text[:40]!r}, not a version name; "
                            f"{_repair_hint(root)}") from None
    if not FileSystems.exists(FileSystems.join(version_dir(root, name), MANIFEST_NAME)):
        raise DamagedLatest(f"{path} names version {name}, which is not committed; {_repair_hint(root)}")
    return name


def set_latest(root: str, name: str) -> None:
    """Points LATEST at ``name``: a temp file renamed over it (one object write on GCS)."""
    write_atomically(root, LATEST_NAME, (name + "\n").encode("ascii"), "text/plain")
    remove_empty_incomplete_dir(root)


def committed_versions(root: str) -> list[str]:
    """Version names under ``root/versions`` that hold a dataset.json, in order."""
    pattern = FileSystems.join(root, VERSIONS_DIR, "*", MANIFEST_NAME)
    try:
        found = FileSystems.match(pattern)
    except Exception:   # noqa: BLE001 - no versions directory yet
        return []
    names = {path.rstrip("/").split("/")[-2] for path in found}
    return sorted(n for n in names if is_version_name(n))


def next_version(root: str) -> str:
    """One past the highest committed version (an uncommitted leftover is overwritten)."""
    done = committed_versions(root)
    return version_name(int(done[-1]) + 1 if done else 1)


def is_versioned(root: str) -> bool:
    return FileSystems.exists(latest_path(root))


def locate_dataset(path: str, version: Optional[str], exists: Callable[[str], bool],
                   read_latest: Callable[[str], Optional[str]],
                   join: Callable[[str, str], str] = names.join,
                   read_text: Optional[Callable[[str], str]] = None) -> str:
    """A dataset directory: ``path`` itself, or the version of a versioned root.

    With ``version`` the root's ``versions/NNNN``: a number, or a tag's name (``tag``, read
    from ``ROOT/tags/NAME`` by ``read_text``); without, ``path`` when it holds a dataset.json,
    else the version ``read_latest(path)`` names (None: ``path`` unchanged). The file system
    comes in as functions, so the reader locates through its own.
    """
    path = str(path).rstrip("/") or "/"
    if version is not None and names.is_tag(version):
        return join(join(path, VERSIONS_DIR), tagged_version(path, str(version), exists, read_text, join))
    if version is not None:
        return join(join(path, VERSIONS_DIR), parse_version(version))
    if exists(join(path, MANIFEST_NAME)):
        return path
    latest = read_latest(path)
    return join(join(path, VERSIONS_DIR), latest) if latest else path


class UnknownTag(FormatError, ValueError):
    """A version asked for by a name no tag of the root holds."""


def tagged_version(root: str, tag: str, exists: Callable[[str], bool],
                   read_text: Optional[Callable[[str], str]],
                   join: Callable[[str, str], str] = names.join) -> str:
    """The version ``ROOT/tags/TAG`` names; UnknownTag when there is no such tag."""
    name = names.check_tag(tag)
    path = join(join(root, names.TAGS_DIR), name)
    if read_text is None or not exists(path):
        raise UnknownTag(f"{root} has no tag {name!r} (dcm2tfrecord tag {root} lists its tags)")
    text = read_text(path).strip()
    try:
        return parse_version(text)
    except ValueError:
        raise UnknownTag(f"{path} holds {text[:40]!r}, not a version; tag it again with "
                         f"dcm2tfrecord tag {root} {name} N --move") from None


def read_text(path: str) -> str:
    with FileSystems.open(path) as handle:
        return handle.read(256).decode("utf-8", "replace")


def resolve_version(root: str, version: str) -> str:
    """``version``, a number (``3``, ``0003``) or a tag of ``root``, as a version name."""
    if names.is_tag(version):
        return tagged_version(root, str(version), FileSystems.exists, read_text, FileSystems.join)
    return parse_version(version)


def tags(root: str) -> dict[str, str]:
    """Tag name -> the version it names, for every readable tag of ``root``."""
    found = {}
    for path in FileSystems.match(FileSystems.join(root, names.TAGS_DIR, "*")):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        try:
            found[names.check_tag(name)] = tagged_version(root, name, FileSystems.exists, read_text,
                                                          FileSystems.join)
        except (ValueError, OSError):
            continue                    # not a tag of ours (a stray file): listed by nothing
    return dict(sorted(found.items()))


def set_tag(root: str, tag: str, version: str) -> None:
    """``ROOT/tags/TAG`` naming ``version``: a temp file renamed over it."""
    name = names.check_tag(tag)
    folder = FileSystems.join(root, names.TAGS_DIR)
    write_atomically(folder, name, (parse_version(version) + "\n").encode("ascii"), "text/plain")
    remove_empty_incomplete_dir(folder)


def delete_tag(root: str, tag: str) -> None:
    path = FileSystems.join(root, names.TAGS_DIR, names.check_tag(tag))
    if not FileSystems.exists(path):
        raise UnknownTag(f"{root} has no tag {tag!r}")
    FileSystems.delete([path])


def resolve_dataset_dir(path: str, version: Optional[str] = None) -> str:
    """:func:`locate_dataset` through the format's file system; a LATEST naming no committed
    version is DamagedLatest (with the repair)."""
    return locate_dataset(path, version, FileSystems.exists, read_latest, FileSystems.join, read_text)


def shard_uri(dataset_dir: str, file: str) -> str:
    """Where a manifest's shard entry lives (:func:`dataset.names.shard_path`)."""
    return names.shard_path(dataset_dir, file, FileSystems.join)


# ---------------------------------------------------------------- records files


def shard_result_json(result: ShardResult) -> dict:
    return dataclasses.asdict(result)


def shard_result_from_json(data: Mapping, file: str) -> ShardResult:
    """A ShardResult read back from a records file, its ``file`` relative to the new version."""
    fields = dict(data)
    fields["file"] = file
    for name in ("dtypes", "kinds"):
        fields[name] = tuple(fields.get(name, ()))
    fields["shapes"] = tuple(tuple(s) for s in fields.get("shapes", ()))
    fields["label_counts"] = tuple((k, v) for k, v in fields.get("label_counts", ()))
    return ShardResult(**fields)


# What a records file's fingerprints are made of (transforms.output.write.record_fingerprint):
# 2 with the probe's fingerprints of the sources' first bytes (issue 35); 1, before, has no key
FINGERPRINTS_VERSION = 2
_FINGERPRINTS_VERSION_KEY = "fingerprints_version"


def write_records_file(output_dir: str, result: ShardResult, fingerprints: Iterable[str]) -> str:
    """``<shard>.records.json`` next to the shard: the shard's summary and its fingerprints."""
    content = {"shard": shard_result_json(result), "fingerprints": sorted(fingerprints),
               _FINGERPRINTS_VERSION_KEY: FINGERPRINTS_VERSION}
    return write_atomically(output_dir, records_file_name(result.file),
                            json.dumps(content, sort_keys=True).encode("utf-8"), "application/json")


def read_records_file(path: str) -> dict:
    return read_json(path)


def fingerprints_version(content: Mapping) -> int:
    """What a records file's fingerprints are made of (FINGERPRINTS_VERSION; 1 for a file
    written before the key)."""
    return int(content.get(_FINGERPRINTS_VERSION_KEY, 1))


# ---------------------------------------------------------------- previous version


@dataclasses.dataclass(frozen=True)
class PreviousShard:
    """A shard of the base version, as the new version would reference it."""
    split: str
    file: str            # relative to the new version's directory: ../MMMM/<name>
    records_uri: str     # absolute uri of its .records.json
    num_records: int
    num_bytes: int


@dataclasses.dataclass(frozen=True)
class BaseVersion:
    """What an incremental run builds on: the version LATEST named when it started."""
    name: str
    shards: tuple[PreviousShard, ...]
    rebuild_reason: str = ""    # non-empty: nothing is reused, and why
    # --intensity ct: the fingerprint its records were written with, reused by the new ones
    fingerprint: Optional[Mapping] = None


def changed_options(old: Mapping, new: Mapping, placement: frozenset = frozenset()) -> list[str]:
    """Options that change record content between two versions' recorded options.

    ``placement``: options that decide where records go, not what they hold
    (pipeline.options.table.PLACEMENT_OPTIONS: shard sizes, the input and labels
    paths); a change of those leaves earlier shards reusable.
    """
    names = (set(old) | set(new)) - placement
    return sorted(n for n in names if old.get(n) != new.get(n))


def base_version(root: str, name: str, manifest: Manifest, options: Mapping,
                 placement: frozenset = frozenset()) -> BaseVersion:
    """The base version's shards, or none (with the reason) when content options changed."""
    changed = changed_options(manifest.options or {}, options, placement)
    if changed:
        return BaseVersion(name, (), "options changed since version {}: {}".format(
            name, ", ".join(f"--{n}" for n in changed)))
    shards = []
    versions = FileSystems.join(root, VERSIONS_DIR)
    for split, entry in sorted(manifest.splits.items()):
        for shard in entry.shards:
            if shard.num_records == 0:
                continue
            file = reused_file(name, shard.file)
            shards.append(PreviousShard(split=split, file=file,
                                        records_uri=FileSystems.join(versions, records_file_name(strip_parent(file))),
                                        num_records=shard.num_records,
                                        num_bytes=int(shard.num_bytes or 0)))
    if shards and FileSystems.exists(shards[0].records_uri):
        made_by = fingerprints_version(read_records_file(shards[0].records_uri))
        if made_by != FINGERPRINTS_VERSION:
            return BaseVersion(name, (), f"version {name} was written by an earlier dcm2tfrecord, whose "
                                         f"records files do not fingerprint the sources' bytes (fingerprints "
                                         f"version {made_by}, now {FINGERPRINTS_VERSION})")
    return BaseVersion(name, tuple(shards), fingerprint=manifest.fingerprint)


def choose_reused(full: Iterable[PreviousShard], delta_bytes: Mapping[str, int],
                  min_bytes: int, target_bytes: int) -> set[str]:
    """Which fully unchanged shards the new version references (by file).

    Shards under the minimum size (small deltas of earlier versions) are
    kept until, together with this version's new records of their split,
    they reach the target size; then they are released and rewritten with
    those records into full-size shards.
    """
    full = list(full)
    reused = {s.file for s in full}
    by_split: dict = {}
    for shard in full:
        if shard.num_bytes < min_bytes:
            by_split.setdefault(shard.split, []).append(shard)
    for split, small in by_split.items():
        if sum(s.num_bytes for s in small) + delta_bytes.get(split, 0) >= target_bytes and \
                (len(small) > 1 or delta_bytes.get(split, 0) > 0):
            reused -= {s.file for s in small}
    return reused


# ---------------------------------------------------------------- pruning


@dataclasses.dataclass(frozen=True)
class PrunePlan:
    """What ``prune`` removes: whole versions, and of their files those no kept version uses."""
    kept: tuple[str, ...]
    removed: tuple[str, ...]
    files: tuple[str, ...]          # under the versions directory, ``NNNN/name``
    held: tuple[str, ...]           # files of removed versions a kept version reuses


def prune_plan(root: str, keep: int) -> PrunePlan:
    """The versions of ``root`` past the ``keep`` newest, less the one LATEST names and every
    tagged one; of their files, those no kept version's manifest reuses (``../NNNN/file``, its
    ``.idx`` and ``.records.json``: a later --incremental run reuses through them)."""
    from dcm2tfrecord.dataset.manifest import read_manifest
    if keep < 1:
        raise ValueError(f"--keep {keep}: at least 1 (the newest version) is kept")
    committed = committed_versions(root)
    latest = read_latest(root)
    kept = set(committed[-keep:]) | set(tags(root).values()) | ({latest} if latest else set())
    kept &= set(committed)
    removed = [v for v in committed if v not in kept]
    used: set[str] = set()
    for name in sorted(kept):
        manifest = read_manifest(version_dir(root, name))
        for split in manifest.splits.values():
            for shard in split.shards:
                for file in (shard.file, shard.index, records_file_name(shard.file)):
                    if file.startswith(names.PARENT):
                        used.add(strip_parent(file))
    # the removed versions' files, and those of versions an earlier prune uncommitted and was
    # stopped before it removed their files (below the newest committed: a run writing the
    # next version, above it, is left alone)
    newest = committed[-1] if committed else ""
    files: list[str] = []
    held: list[str] = []
    for path in FileSystems.match(FileSystems.join(root, VERSIONS_DIR, "*", "*")):
        version, file = path.rstrip("/").rsplit("/", 2)[-2:]
        if not is_version_name(version) or version in kept or version > newest:
            continue
        if "://" not in path and not os.path.isfile(path):
            continue
        relative = f"{version}/{file}"
        (held if relative in used else files).append(relative)
    return PrunePlan(tuple(sorted(kept)), tuple(removed), tuple(sorted(files)), tuple(sorted(held)))


def prune(root: str, plan: PrunePlan) -> None:
    """Carries ``plan`` out: each removed version's dataset.json first (it is no longer
    committed: no reader, rollback or tag reaches it), then its files no kept version uses.
    Killed half way, what is left is files of uncommitted versions, which the next prune removes."""
    for name in plan.removed:
        manifest = FileSystems.join(version_dir(root, name), MANIFEST_NAME)
        if FileSystems.exists(manifest):
            FileSystems.delete([manifest])
    doomed = [FileSystems.join(root, VERSIONS_DIR, relative) for relative in plan.files
              if not relative.endswith("/" + MANIFEST_NAME)]
    if doomed:
        FileSystems.delete(doomed)
    for name in plan.removed:                   # a local folder left empty (gs:// has none)
        folder = version_dir(root, name)
        if "://" not in folder and os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)
