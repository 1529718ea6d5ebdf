"""The output directory around a run: refusing to replace a dataset, choosing the
version of an --incremental root, and tidying what an earlier run left."""
from __future__ import annotations

import dataclasses
import logging
import os
import uuid

from apache_beam.io.filesystems import FileSystems

from dcm2tfrecord.dataset import versions
from dcm2tfrecord.dataset.manifest import Manifest, NewerFormatError, read_manifest
from dcm2tfrecord.dataset.files import (create_output, delete_tree, matching, remove_empty_incomplete_dir,
                                        remove_incomplete, remove_output_file, remove_own_files)
from dcm2tfrecord.dataset.names import (ERRORS_NAME, FAILED_RUN_NAME, INCOMPLETE_DIR, LATEST_NAME, LOCK_NAME,
                           MANIFEST_NAME, PROGRESS_DIR, SHARD_GLOB, UNMATCHED_ROWS_NAME, VERSIONS_DIR,
                           files_of_shard, incomplete_name)
from dcm2tfrecord.dataset.progress import remove_progress
from dcm2tfrecord.dataset.tfds_metadata import NAMES as TFDS_NAMES, remove_tfds_metadata
from dcm2tfrecord.pipeline.options.table import OPTIONS, PLACEMENT_OPTIONS, ConvertOptions
from dcm2tfrecord.pipeline.options.usage import UsageError


def prepare_output(opts: ConvertOptions) -> None:
    """Refuses to replace a committed dataset unless --overwrite; then uncommits it.
    (An output that is a file or not writable was refused before, by check_writable.)

    A report of an earlier refused run (run_failed.json) is removed first.
    """
    assert opts.output is not None      # convert.run refuses options without one
    remove_output_file(opts.output, FileSystems.join(opts.output, FAILED_RUN_NAME))
    manifest = FileSystems.join(opts.output, MANIFEST_NAME)
    if FileSystems.exists(manifest):
        if not opts.overwrite:
            raise UsageError(f"--output {opts.output} already holds a dataset (dataset.json); "
                             "pass --overwrite to replace it or choose another --output")
        # TFDS's files first: TFDS must not open shards this run is about to replace, and a crash
        # between the two leaves a committed dataset that TFDS cannot open rather than the reverse
        remove_tfds_metadata(opts.output)
        remove_output_file(opts.output, manifest)


# what a run writes or removes in its output, by name (shards are renamed into place,
# which replaces a link rather than writing through it)
_OWN_NAMES = (LOCK_NAME, INCOMPLETE_DIR, PROGRESS_DIR, MANIFEST_NAME, ERRORS_NAME, FAILED_RUN_NAME,
              LATEST_NAME, VERSIONS_DIR, UNMATCHED_ROWS_NAME, *TFDS_NAMES)


def refuse_links(output: str) -> None:
    """A symbolic link where the run writes (``.lock``, ``.incomplete``, ``dataset.json``,
    ``versions/NNNN``...) is a usage error: the run never writes through a link in its output."""
    if "://" in output or not os.path.isdir(output):
        return
    candidates = [os.path.join(output, name) for name in _OWN_NAMES]
    versions_dir = os.path.join(output, VERSIONS_DIR)
    if os.path.isdir(versions_dir) and not os.path.islink(versions_dir):
        candidates += [os.path.join(versions_dir, name) for name in sorted(os.listdir(versions_dir))]
    for path in candidates:
        if os.path.islink(path):
            raise UsageError(f"--output {output}: {path} is a symbolic link; dcm2tfrecord never "
                             "writes through links in its output: remove the link and rerun")


def check_writable(output: str) -> None:
    """Creates ``output`` if needed and writes and removes one small file in it, so that an
    output under a file, without permission or on a full disk fails now, in one line.
    A symbolic link among the names the run writes is refused first (refuse_links)."""
    if "://" not in output and os.path.isfile(output):
        raise UsageError(f"--output {output} is a file; give a directory")
    refuse_links(output)
    probe = FileSystems.join(output, incomplete_name("write-check", uuid.uuid4().hex))
    try:
        if "://" not in output:
            os.makedirs(output, exist_ok=True)
        with create_output(output, probe) as handle:
            handle.write(b"dcm2tfrecord write check\n")
        remove_output_file(output, probe)
    except Exception as exc:  # noqa: BLE001 - any failure here means the run could not write
        cause = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
        raise UsageError(f"--output {output} is not writable: {cause}; choose a directory you can "
                         "write to (with free space)") from None
    remove_empty_incomplete_dir(output)


def remove_stale_files(output_dir: str, manifest: Manifest) -> None:
    """Deletes shards of an earlier run that the new manifest does not list, then the temp
    and progress folders. Only regular files under this tool's names are deleted, never
    through a link (dataset.files.remove_own_files): a link or folder under a shard's
    name stays, named in a warning; ``.incomplete`` or ``.progress`` made a link is
    OutputLinkError, and nothing behind it is touched."""
    keep = {name for split in manifest.splits.values() for s in split.shards
            for name in (s.index,) + files_of_shard(s.file)}
    is_shard = matching(SHARD_GLOB)
    remove_own_files(output_dir, output_dir, lambda name: is_shard(name) and name not in keep,
                     remove_folder=False)
    remove_incomplete(output_dir)
    remove_progress(output_dir)


def with_new_options(manifest: Manifest) -> Manifest:
    """``manifest`` with each option it does not record (an option newer than the version
    that wrote it, such as --label_key_case) at its default, which is what that version
    did: a release adding an option does not make the next version rebuild everything."""
    recorded = dict(manifest.options or {})
    for option in OPTIONS:
        if option.recorded and option.name not in recorded:
            recorded[option.name] = option.plain(option.default_value)   # as dataset.json holds it
    return dataclasses.replace(manifest, options=recorded)


def prepare_version(opts: ConvertOptions, dry_run: bool) -> tuple[str, str, versions.BaseVersion]:
    """--incremental: (new version name, its directory, the version it builds on).

    The base is the version LATEST names when the run starts (after a rollback,
    the rolled-back-to one). A directory left by a killed run under the new
    version's name is emptied first; committed versions are never touched.
    """
    root = opts.output
    assert root is not None      # convert.run refuses options without one
    if FileSystems.exists(FileSystems.join(root, MANIFEST_NAME)):
        raise UsageError(f"--output {root} holds a dataset written without --incremental; give "
                         "--incremental an empty or versioned --output (versions go to OUT/versions/NNNN)")
    if "://" not in root and os.path.isfile(root):
        raise UsageError(f"--output {root} is a file; give a directory")
    name = versions.next_version(root)
    target = versions.version_dir(root, name)
    try:
        latest = versions.read_latest(root)
    except versions.DamagedLatest as exc:
        raise UsageError(f"--incremental cannot tell which version to build on: {exc}") from None
    if latest is None:
        base = versions.BaseVersion("", ())
    else:
        try:
            previous = with_new_options(read_manifest(versions.version_dir(root, latest)))
        except NewerFormatError as exc:
            raise UsageError(f"--incremental cannot build on version {latest}: {exc}") from None
        base = versions.base_version(root, latest, previous, opts.recorded(), PLACEMENT_OPTIONS)
        if base.rebuild_reason:
            logging.getLogger(__name__).warning("%s: no shard of version %s is reused",
                                                base.rebuild_reason, latest)
    if not dry_run:
        delete_tree(root, target)
    return name, target, base
