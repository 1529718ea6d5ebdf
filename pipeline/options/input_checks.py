"""The filesystem probes before any work: every --input matches a file, and --output lies
outside every --input."""
from __future__ import annotations

import os
from typing import Sequence

from dcm2tfrecord.pipeline.options.locations import absolute
from dcm2tfrecord.pipeline.options.usage import UsageError


def check_inputs_exist(patterns: Sequence[str]) -> None:
    """Each --input must match at least one file (gs://: one listing call, first match only)."""
    from apache_beam.io.filesystems import FileSystems
    from dcm2tfrecord.transforms.sources.match import escape_glob, is_glob
    for pattern in patterns:
        path = absolute(pattern).rstrip("/") or "/"
        if "://" not in path:
            found = os.path.lexists(path) and (not os.path.isdir(path) or _any_file(path)) \
                or (is_glob(path) and any(True for _ in _first_local_match(path)))
        else:
            literal = escape_glob(path)
            candidates = [path] if is_glob(path) else [literal + "/**", literal]
            found = False
            for candidate in candidates:
                try:
                    found = bool(FileSystems.match([candidate], limits=[1])[0].metadata_list)
                except Exception:   # noqa: BLE001 - an unreadable prefix matches nothing
                    found = False
                if found:
                    break
        if not found:
            raise UsageError(f"--input {pattern} matches no file; check the path or glob "
                             "(directories are walked recursively)")


def _any_file(folder: str) -> bool:
    for _, _, files in os.walk(folder, followlinks=True):
        if files:
            return True
    return False


def _first_local_match(pattern: str):
    from dcm2tfrecord.transforms.sources.match import expand_pattern
    for source in expand_pattern(pattern):
        yield source
        return


def check_output_outside_inputs(output: str, patterns: Sequence[str]) -> None:
    """A dataset written inside its own archive would be read back as input by the next run."""
    from dcm2tfrecord.transforms.sources.match import is_glob, pattern_root
    out = absolute(output).rstrip("/") + "/"
    for pattern in patterns:
        path = absolute(pattern).rstrip("/")
        root = pattern_root(path) if is_glob(path) else path + "/"
        if "://" not in out and "://" not in root:
            out_real, root_real = os.path.realpath(out) + "/", os.path.realpath(root) + "/"
        else:
            out_real, root_real = out, root
        if out_real.startswith(root_real):
            raise UsageError(f"--output {output} lies inside --input {pattern}: the next run would read "
                             "its own shards as input; choose an --output outside the archive")


def check_distinct_relative_paths(patterns: Sequence[str]) -> None:
    """Two different files found under two --input roots at the same relative path are a
    usage error, in one line naming both, before any work.

    A record is named by its path under its --input root (its id, ``--label_key path``,
    ``--incremental``'s reuse), so that the same archive gives the same ids wherever it is
    mounted; two files at one relative path would get one id, and verify would refuse the
    dataset the run committed. Run only with more than one --input: it lists them once
    here, as MatchInputs will (a file matched by two patterns is one file, under the
    smaller of its relative paths)."""
    from dcm2tfrecord.transforms.sources.match import expand_pattern
    roots = sorted({absolute(p) for p in patterns})
    if len(roots) < 2:
        return
    found: dict = {}        # uri -> (its relative path, the --input it is under)
    for root in roots:
        for source in expand_pattern(root):
            known = found.get(source.uri)
            if known is None or source.rel_path < known[0]:
                found[source.uri] = (source.rel_path, root)
    first: dict = {}        # relative path -> the first uri (sorted) there
    clashes = []
    for uri in sorted(found):
        rel, root = found[uri]
        other = first.setdefault(rel, uri)
        if other != uri:
            clashes.append((rel, other, uri))
    if not clashes:
        return
    rel, one, two = clashes[0]
    more = f"; {len(clashes) - 1} more such path(s)" if len(clashes) > 1 else ""
    raise UsageError(f"--input {found[one][1]} and --input {found[two][1]} both hold {rel!r} ({one} and "
                     f"{two}{more}): a record is named by its path under its --input, so both would "
                     "get one id; give their common parent folder as the one --input, or rename one")
