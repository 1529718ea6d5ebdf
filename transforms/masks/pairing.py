"""NIfTI masks paired with their NIfTI images by path (issue 33): ``--mask_pattern`` or ``--mask_column``.

Both name an image's mask by a path relative to the image's ``--input`` root (the root its own
``path`` label key is relative to), and the mask file is one of the inputs:

- ``--mask_pattern 'IMAGE_REGEX=MASK_PATH'``: a Python regular expression that must match the
  image's whole relative path, and the mask's path with ``\\1`` .. ``\\99``, ``\\g<1>`` or
  ``\\g<name>`` for its groups, e.g. ``imagesTr/(.*)_0000\\.nii\\.gz=labelsTr/\\1.nii.gz`` (the
  Medical Segmentation Decathlon's and nnU-Net's layout). The first ``=`` outside a group or a
  character class separates the two (write a literal ``=`` of the regex as ``\\=``). A file the
  replacement's shape matches (literal text as written, each group reference any text) is a
  mask: ``labelsTr/(.*)\\.nii\\.gz`` here, whether or not an image names it;
- ``--mask_column COLUMN``: the labels CSV's column holding each image's mask path (joined to
  the image by ``--label_key path``); a file some row names is a mask.

A mask is no record of its own: the image's record carries it (``ProbedRecord.annotations``,
kind ``nifti``) and the writer reads it (transforms.masks.nifti_mask). What the join decides,
as pure functions of one group: :func:`resolve_mask_file` (the files at one path and the images
naming it) and :func:`attach` (one image's records and the mask offered to it). Mask paths pass
``dataset.names.check_relative_path``, the one check of outside paths, before they reach a uri.
"""
from __future__ import annotations

import dataclasses
import re
import unicodedata
from typing import Iterable, Optional, Sequence, Union

from dcm2tfrecord.dataset import reasons
from dcm2tfrecord.dataset.errors import OptionError
from dcm2tfrecord.dataset.file_adapters import GZIP
from dcm2tfrecord.dataset.names import BadName, check_relative_path
from dcm2tfrecord.dataset.results import Outcome
from dcm2tfrecord.transforms.labels import join, table
from dcm2tfrecord.transforms.masks import annotation, sources
from dcm2tfrecord.transforms.masks.patterns import BoundedPattern, PatternTimeout
from dcm2tfrecord.transforms.masks.settings import MaskSettings, MissingMask
from dcm2tfrecord.transforms.record_model import ProbedRecord, SourceFile, replaced

NIFTI = "nifti"                   # the ProbedRecord.kind of a NIfTI image
STAGE = "masks"                   # the Outcome stage of pairing


class PatternError(OptionError, ValueError):
    """A --mask_pattern that cannot be used: one line saying what and the fix."""


@dataclasses.dataclass(frozen=True)
class MaskPattern:
    """A parsed --mask_pattern: the image regex, the replacement's parts (literal text or a group
    number) and the regex its replacement's shape makes (what a mask path looks like)."""
    text: str
    image: BoundedPattern
    parts: tuple[Union[str, int], ...]
    mask: BoundedPattern

    def mask_of(self, rel_path: str) -> Optional[str]:
        """The mask path the pattern gives an image at ``rel_path`` (None: it matches no image)."""
        found = self.image.fullmatch(rel_path)
        if found is None:
            return None
        return "".join(p if isinstance(p, str) else (found.group(p) or "") for p in self.parts)

    def is_mask(self, rel_path: str) -> bool:
        return self.mask.fullmatch(rel_path) is not None


def _split(text: str) -> tuple[str, str]:
    """(regex, replacement) at the first ``=`` outside a group, a character class and an escape."""
    depth, in_class, i = 0, False, 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if text[i + 1:i + 2] == "]":       # a ']' first in a class is literal
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "=" and depth == 0:
            return text[:i], text[i + 1:]
        i += 1
    if depth or in_class:
        raise PatternError(f"--mask_pattern {text!r}: an unclosed {'(' if depth else '['} before any '=': close it, "
                           f"then write =MASK_PATH")
    gz = GZIP.suffix              # the MSD / nnU-Net example's compressed NIfTI
    raise PatternError(f"--mask_pattern {text!r}: no '=' between the image regex and the mask path; write "
                       f"IMAGE_REGEX=MASK_PATH, e.g. 'imagesTr/(.*)_0000\\.nii{re.escape(gz)}=labelsTr/\\1.nii{gz}'")


_REFERENCE = re.compile(r"\\(?:(\d{1,2})|g<([^>]*)>)")


def _parts(replacement: str, image: BoundedPattern, text: str) -> tuple[Union[str, int], ...]:
    parts: list[Union[str, int]] = []
    i = 0
    while i < len(replacement):
        if replacement[i] != "\\":
            j = replacement.find("\\", i)
            j = len(replacement) if j < 0 else j
            parts.append(replacement[i:j])
            i = j
            continue
        found = _REFERENCE.match(replacement, i)
        if found is None:
            raise PatternError(f"--mask_pattern {text!r}: {replacement[i:i + 2]!r} in the mask path is no group "
                               f"reference (\\1, \\g<1>, \\g<name>); a path needs no other escape")
        number, name = found.groups()
        if name is not None and not name.isdigit():
            if name not in image.groupindex:
                raise PatternError(f"--mask_pattern {text!r}: the image regex has no group named {name!r}")
            group = image.groupindex[name]
        else:
            group = int(number if number is not None else name)
        if not 1 <= group <= image.groups:
            raise PatternError(f"--mask_pattern {text!r}: the mask path refers to group {group}; the image regex "
                               f"has {image.groups} group(s)")
        parts.append(group)
        i = found.end()
    if not any(isinstance(p, int) for p in parts):
        raise PatternError(f"--mask_pattern {text!r}: the mask path refers to no group of the image regex, so "
                           f"every image would name the same mask; use \\1 for the part they share")
    return tuple(parts)


def _mask_regex(parts: Sequence[Union[str, int]]) -> BoundedPattern:
    """The regex of the paths the replacement can give: literals as written, a group any text
    (a group used twice the same text both times)."""
    seen: set = set()
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(re.escape(part))
        elif part in seen:
            out.append(f"(?P=g{part})")
        else:
            seen.add(part)
            out.append(f"(?P<g{part}>.*)")
    return BoundedPattern("".join(out), re.DOTALL)


def parse_mask_pattern(text: str) -> MaskPattern:
    """A MaskPattern from ``IMAGE_REGEX=MASK_PATH`` (module docstring); PatternError naming the mistake."""
    regex, replacement = _split(text)
    if not regex:
        raise PatternError(f"--mask_pattern {text!r}: the image regex before '=' is empty")
    try:
        image = BoundedPattern(regex, re.DOTALL)
    except re.error as exc:
        raise PatternError(f"--mask_pattern {text!r}: {regex!r} is not a regular expression ({exc})") from None
    parts = _parts(replacement, image, text)
    literal = "".join(p if isinstance(p, str) else "x" for p in parts)
    try:
        check_relative_path(literal, f"--mask_pattern {text!r}, its mask path")
    except BadName as exc:
        raise PatternError(str(exc)) from None
    return MaskPattern(text, image, tuple(parts), _mask_regex(parts))


# ---------------------------------------------------------------- paths


def root_of(source: SourceFile) -> str:
    """The --input root ``source`` was matched under (its uri without its relative path)."""
    if source.rel_path and source.uri.endswith(source.rel_path):
        return source.uri[:-len(source.rel_path)]
    return source.uri[:source.uri.rstrip("/").rfind("/") + 1]


def mask_uri(image: SourceFile, mask_path: str, what: str) -> str:
    """The uri of the mask at ``mask_path`` relative to the image's --input root (BadName when
    the path is no relative path below it; ``what`` says where the path came from)."""
    return root_of(image) + check_relative_path(mask_path, what)


def path_key(uri: str) -> bytes:
    """A uri as the join key of pairing: Unicode NFC (a CSV and the file system may spell a name
    differently), as bytes (names need not be UTF-8)."""
    return unicodedata.normalize("NFC", uri).encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------- which mask an image names


@dataclasses.dataclass(frozen=True)
class Named:
    """A NIfTI record and the mask it names: its uri and path as given ("": none);
    ``recognised``: --mask_pattern's mask side matches the record's path (a mask, never an image)."""
    record: ProbedRecord
    mask_uri: str = ""
    mask_path: str = ""
    recognised: bool = False


def _named(record: ProbedRecord, path: str, what: str) -> Union[Named, list[Outcome]]:
    try:
        uri = mask_uri(record.source, path, what)
    except BadName as exc:
        return outcomes([record], reasons.FAILED, reasons.MASK_INVALID, str(exc))
    return Named(record, uri, path)


def named_by_pattern(record: ProbedRecord, pattern: MaskPattern) -> Union[Named, list[Outcome]]:
    """What --mask_pattern says of a NIfTI record: a mask (its mask side matches, whatever the
    image side says), an image naming its mask, or neither."""
    rel = record.source.rel_path
    try:
        if pattern.is_mask(rel):
            return Named(record, recognised=True)
        path = pattern.mask_of(rel)
    except PatternTimeout as exc:
        return outcomes([record], reasons.FAILED, reasons.MASK_INVALID, f"--mask_pattern: {exc}")
    if path is None:
        return Named(record)
    return _named(record, path, f"--mask_pattern's mask path for {rel}")


def named_by_rows(records: Iterable[ProbedRecord], rows: Iterable, settings) -> list[Union[Named, list[Outcome]]]:
    """What --mask_column says of the NIfTI records sharing one loose path key, given the labels
    CSV rows of that key (``LabelRow``, ``value`` the column's cell): the first line of a key
    counts and keys match as --label_key path matches them (transforms.labels.join.match_rows).
    Rows that pair nothing are the labels join's to report, not repeated here. ``settings``: the
    ConversionSettings."""
    fold = settings.label_key_case == "fold"
    by_key: dict = {}
    for row in rows:
        by_key.setdefault(table.exact_key(row.key, fold), []).append(row)
    firsts = [table.first_row(same, settings.labels_csv or "")[0] for same in by_key.values()]
    matches, _ = join.match_rows(firsts, list(records), settings)
    out: list[Union[Named, list[Outcome]]] = []
    for match in matches:
        row = match.row
        if row is None or not row.value:
            out.append(Named(match.record))
        else:
            out.append(_named(match.record, row.value,
                              f"--mask_column {settings.masks.column} on line {row.line} of --labels"))
    return out


# ---------------------------------------------------------------- the join, one group at a time


@dataclasses.dataclass(frozen=True)
class Claim:
    """An image naming its mask: the image's uri and relative path, the mask's uri."""
    image_uri: str
    image_path: str
    mask_uri: str


@dataclasses.dataclass(frozen=True)
class Offer:
    """What the mask side tells an image: its mask file, or (``owner``) that the mask it names
    went to another image."""
    image_uri: str
    mask: Optional[SourceFile] = None
    mask_path: str = ""
    owner: str = ""


def resolve_mask_file(files: Sequence[Named], claims: Iterable[Claim],
                      ) -> tuple[list[Named], list[Offer], list[Outcome]]:
    """One path's group: the NIfTI records of the file there (several for a 4-D file's volumes)
    and the images naming it. Named by an image: the file is a mask (no record of its own),
    offered to the first image by path; the others are told it is taken. Named by none: a mask
    without an image when --mask_pattern recognises it, else an image candidate (returned).
    Returns (image candidates, offers, outcomes)."""
    claims = sorted({c.image_uri: c for c in claims}.values(), key=lambda c: c.image_path)
    if not files:
        return [], [], []           # named, not among the records: the image finds no offer
    source = files[0].record.source
    if not claims:
        if not any(f.recognised for f in files):
            return list(files), [], []
        return [], [], [Outcome(source.uri, reasons.FAILED, STAGE, reasons.MASK_WITHOUT_IMAGE,
                                f"the mask {source.rel_path} pairs with no image: no image among the inputs "
                                f"names it (--mask_pattern); add its image to --input")]
    first, *others = claims
    offers = [Offer(first.image_uri, mask=source, mask_path=source.rel_path)]
    offers += [Offer(c.image_uri, mask_path=source.rel_path, owner=first.image_path) for c in others]
    return [], offers, []


def _with_mask(record: ProbedRecord, masks: MaskSettings, mask: Optional[SourceFile]) -> ProbedRecord:
    """The record with its mask file (None: an all-background mask) and the mask's planned bytes."""
    return replaced(record, annotations=((mask, sources.NIFTI.name),) if mask is not None else (),
                    mask_bytes=annotation.planned_mask_bytes(record.spec, masks))


def outcomes(records: Sequence[ProbedRecord], status: str, reason: str, message: str) -> list[Outcome]:
    """One Outcome per file of ``records`` (a 4-D image's volume records are one file)."""
    return [Outcome(uri, status, STAGE, reason, message) for uri in dict.fromkeys(r.source.uri for r in records)]


def attach(images: Sequence[Named], offers: Sequence[Offer],
           masks: MaskSettings) -> tuple[list[ProbedRecord], list[Outcome]]:
    """One image's group: its records (one per volume, with the mask path they name) and the
    offers made to it. With a mask: the records carry it and its planned bytes. Without:
    --missing_mask (skip, error, or empty: an all-background mask). An offer without records
    (the image is itself another's mask) leaves its mask without an image."""
    offered = [o.mask for o in offers if o.mask is not None]
    if not images:
        return [], [Outcome(mask.uri, reasons.FAILED, STAGE, reasons.MASK_WITHOUT_IMAGE,
                            f"the mask {mask.rel_path} is named for an image that is no image record (it is "
                            f"itself a mask, or did not convert: see its own line)") for mask in offered]
    records = sorted((n.record for n in images), key=lambda r: (r.frame or 0))
    path, named = records[0].source.rel_path, images[0].mask_path
    if offered:
        return [_with_mask(r, masks, offered[0]) for r in records], []
    taken = [o for o in offers if o.owner]
    if taken:
        return [], outcomes(records, reasons.FAILED, reasons.MASK_SHARED,
                            f"the image {path} names the mask {taken[0].mask_path}, which the image "
                            f"{taken[0].owner} names too and takes: give each image its own mask file")
    return missing(records, masks, f"the image {path} names the mask {named}, which is not among the "
                                      f"converted inputs (absent, or it failed: see its own line)"
                   if named else f"no NIfTI mask pairs with the image {path}")


def missing(records: Sequence[ProbedRecord], masks: MaskSettings,
            why: str) -> tuple[list[ProbedRecord], list[Outcome]]:
    """Records without a mask file, as --missing_mask says: an all-background mask (empty), or
    skipped or failed as missing_mask."""
    if masks.missing == MissingMask.EMPTY:
        return [_with_mask(r, masks, None) for r in records], []
    status = reasons.SKIPPED if masks.missing == MissingMask.SKIP else reasons.FAILED
    return [], outcomes(records, status, reasons.MISSING_MASK, f"{why} (--missing_mask {masks.missing})")
