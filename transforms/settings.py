"""Everything that shapes a conversion, as one frozen value the Beam graph is built from."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import socket
import stat
import unicodedata
from typing import TYPE_CHECKING, Any, Optional, Union

from dcm2tfrecord.dataset.bricks import VolumeCodec
from dcm2tfrecord.dataset.errors import OptionError
from dcm2tfrecord.dataset.features import PixelEncoding, RecordKind
from dcm2tfrecord.dataset.file_adapters import DEFAULT_GZIP_LEVEL, Compression

if TYPE_CHECKING:
    from dcm2tfrecord.transforms.dicom.spec import DicomValues
    from dcm2tfrecord.transforms.dicom.voi import WindowBits
    from dcm2tfrecord.transforms.images.crop import Crop
    from dcm2tfrecord.transforms.images.geometry import Channels, ResizeMode
    from dcm2tfrecord.transforms.images.intensity import Intensity
    from dcm2tfrecord.transforms.labels.join import MissingLabel
    from dcm2tfrecord.transforms.labels.table import LabelKey, LabelKeyCase
    from dcm2tfrecord.transforms.masks.settings import MaskSettings
    from dcm2tfrecord.transforms.records.probe import Frames
    from dcm2tfrecord.transforms.records.steps import Duplicates
    from dcm2tfrecord.transforms.series.volumes import Series4d, SeriesGaps, Unit
    from dcm2tfrecord.transforms.splits.assign import SplitBy

DEFAULT_MAX_PIXELS = 1 << 28
MB = 1 << 20


@dataclasses.dataclass(frozen=True)
class ShardBounds:
    """Shard sizes in bytes: aimed for, smallest (unless the split is smaller), largest."""
    target_bytes: int
    min_bytes: int
    max_bytes: int

    @classmethod
    def from_mb(cls, target_mb: float, min_mb: float, max_mb: float) -> "ShardBounds":
        return cls(int(target_mb * MB), int(min_mb * MB), int(max_mb * MB))


def _choice(value: str | int) -> Any:
    """A choice field's default: the plain value of its enum's member, which equals the member.
    The enums live beside the code that implements them, in packages of transforms/ this module
    does not import (it is what they stand on); ConvertOptions.settings() hands the members."""
    return value


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """What a record's pixels and features look like (see transforms.records.build)."""
    dicom_values: DicomValues = _choice("modality")
    window: Optional[Union[tuple[float, float], str]] = None   # (center, width) or a preset name
    window_bits: WindowBits = _choice(8)
    resize: Optional[tuple[int, int]] = None
    resize_mode: ResizeMode = _choice("stretch")
    # --spacing: the target voxel spacing, mm, (x, y, z) as given (transforms.images.spacing), or
    # "auto" (spacing.AUTO: chosen in the run, spacing.auto_spacing; spacing.with_target puts it here
    # for the steps that resample); None: off
    spacing: Optional[Union[tuple[float, float, float], str]] = None
    # --crop: cut each record (and its mask) to the image's non-zero or the mask's foreground box
    # before --spacing (transforms.images.crop); off: untouched
    crop: Crop = _choice("off")
    # --intensity: zscore each record per channel over its non-zero voxels after --crop, before
    # --spacing, to float32 (transforms.images.intensity); none: untouched
    intensity: Intensity = _choice("none")
    # --intensity ct: the dataset fingerprint's (clip low, clip high, mean, std) per channel, handed
    # to the shard writer by the job (transforms.images.fingerprint.bounds); None until then
    ct_fingerprint: Optional[tuple] = None
    # the fingerprint's draw decodes a record up to --crop only (transforms.records.build)
    fingerprint_pass: bool = False
    channels: Channels = _choice("keep")
    frames: Frames = _choice("stack")
    series_gaps: SeriesGaps = _choice("fail")
    series_4d: Series4d = _choice("split")
    # --class_map and the options that come with it; None, and only None, is "masks off"
    masks: Optional["MaskSettings"] = None
    id_salt: str = ""                   # HMAC key for identifiers; never written
    id_salt_file: str = ""              # where workers read id_salt at setup (--id_salt_file)
    id_salt_check: str = ""             # salt_check of the salt the launcher read from id_salt_file
    keep_tags: tuple[str, ...] = ()
    keep_source_path: bool = False
    allow_burned_in: bool = False
    decode_timeout_s: float = 300.0
    pixel_encoding: PixelEncoding = PixelEncoding.RAW   # image_raw's bytes (dataset/png.py)
    # --volume_chunks N: each record's image and mask as bricks of N^3 voxels (dataset/bricks.py),
    # compressed by --volume_codec; 0: one image_raw value a record
    volume_chunks: int = 0
    volume_codec: VolumeCodec = VolumeCodec.NONE

    @property
    def chunks(self) -> Optional[tuple[int, str]]:
        """(edge, codec) of --volume_chunks, None when off."""
        return (int(self.volume_chunks), str(self.volume_codec)) if self.volume_chunks else None


@dataclasses.dataclass(frozen=True)
class ConversionSettings:
    patterns: tuple[str, ...]
    output_dir: str
    bounds: ShardBounds
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0
    compression: Compression = Compression.NONE   # the container (dataset/file_adapters.py)
    gzip_level: int = DEFAULT_GZIP_LEVEL   # with "gzip": the deflate level, 1-9
    min_shards: int = 1
    labels_csv: Optional[str] = None
    label_key: LabelKey = _choice("path")
    label_key_case: LabelKeyCase = _choice("exact")    # see transforms.labels.table.exact_key
    label_column: str = "label"
    multi_label: bool = False
    labels_from_dirs: bool = False
    missing_label: MissingLabel = _choice("skip")
    splits: tuple[tuple[str, float], ...] = (("train", 1.0),)
    split_by: Optional[SplitBy] = None     # None: patient for DICOM, record otherwise
    split_column: Optional[str] = None
    decode: DecodeSettings = DecodeSettings()
    unit: Unit = _choice("file")
    max_failure_ratio: float = 0.05
    max_failures: Optional[int] = None
    duplicates: Duplicates = _choice("skip")   # files sharing a SOPInstanceUID
    storage_retry_s: float = 60.0      # how long one gs:// request is retried (Beam's default: 120)
    allow_empty: bool = False          # commit a dataset of no records (inputs matched, none written)
    allow_split_leak: bool = False     # commit although --split_column put a group in several splits
    encrypt_key_uri: str = ""          # --encrypt: the KEK's key URI (dataset/encryption.py); "": plain

    @property
    def masks(self) -> Optional["MaskSettings"]:
        """The mask settings (transforms.masks.settings), held by ``decode``: None without --class_map."""
        return self.decode.masks

    def split_by_for(self, kind: str) -> str:
        if self.split_by:
            return self.split_by
        return "patient" if kind == RecordKind.DICOM else "record"


# Inputs in a row that storage does not answer for (each after storage_retry_s of retries)
# before a step stops the run while other requests are still answered (a partial outage);
# storage silent for the budget stops it at the first failure (transforms.sources.read.OutageBreaker).
OUTAGE_INPUTS = 5


# The largest salt file read. A salt is a short secret (32 random bytes as hex are plenty);
# a bigger file is more likely the wrong file than a salt, and is refused, never cut.
MAX_SALT_BYTES = 1 << 16


class SaltFileError(OptionError, ValueError):
    """An --id_salt_file that gives no salt: one line naming the file and what to do."""


def _file_kind(mode: int) -> str:
    return ("a FIFO (a pipe such as <(printf ...), which can be read only once)" if stat.S_ISFIFO(mode)
            else "a directory" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def read_side_file(uri: str, option: str, max_bytes: int, error: type, example: str) -> bytes:
    """The bytes of a side file an option names (a local path or a storage object), at most
    ``max_bytes + 1`` of them (more: the caller refuses it as too large, never cut). A local
    path that is not a regular file (a FIFO, a device, a directory, a socket) is never opened,
    so nothing blocks: ``error`` (an OptionError) in one line naming the option, the file and
    what to give instead (``example``). Read through the format package's storage facade
    (Beam's FileSystems once installed: transforms/beam_files.py), as the dataset is."""
    from dcm2tfrecord.dataset.storage import FileSystems
    if "://" not in uri:
        try:
            mode = os.stat(uri).st_mode
        except FileNotFoundError:
            raise error(f"{option} {uri}: cannot be read (no such file)") from None
        except OSError as exc:
            raise error(f"{option} {uri}: cannot be read ({exc.strerror})") from None
        if not stat.S_ISREG(mode):
            raise error(f"{option} {uri} is {_file_kind(mode)}: give a regular file {example}")
    chunks, size = [], 0
    with FileSystems.open(uri) as handle:
        while size <= max_bytes:
            chunk = handle.read(max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    return b"".join(chunks)


def read_salt_file(uri: str) -> str:
    """The salt held in a regular file or a storage object (local path or gs://...).

    The whole file is read, as UTF-8 text; a leading byte order mark (U+FEFF, which some
    editors write) and surrounding whitespace (spaces, tabs and line ends, such as the
    newline ``echo`` adds) are removed, whitespace inside is kept. SaltFileError when it is
    not a regular file (a FIFO, a device, a directory: never opened, so nothing blocks),
    missing, empty, not UTF-8, larger than MAX_SALT_BYTES, or without a visible character
    (only spaces, byte order marks, zero-width characters: a known constant, no secret).
    A file ``dcm2tfrecord wrap-salt`` wrote holds the salt sealed under a key-encryption key
    (dataset/encryption.py ``wrap_secret``): it is unwrapped with the key URI it names, by
    whoever reads it (each worker, as for ``--encrypt``); a key that cannot be had or does not
    unwrap it is a SaltFileError too. Read through the format package's storage facade
    (Beam's FileSystems once installed: transforms/beam_files.py), as the dataset is.
    """
    data = read_side_file(uri, "--id_salt_file", MAX_SALT_BYTES, SaltFileError,
                          "(e.g. a mounted secret) or a storage object")
    if len(data) > MAX_SALT_BYTES:
        raise SaltFileError(f"--id_salt_file {uri} holds more than {MAX_SALT_BYTES} bytes: a salt is a "
                            "short secret (e.g. 32 random bytes as hex); is it the right file?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SaltFileError(f"--id_salt_file {uri} is not UTF-8 text: write the salt as text "
                            "(e.g. openssl rand -hex 32)") from None
    text = text.removeprefix("\ufeff")
    from dcm2tfrecord.dataset import encryption
    if encryption.is_wrapped_secret(text):       # 'dcm2tfrecord wrap-salt': sealed under a KEK
        try:
            text = encryption.unwrap_secret(text.strip(), f"--id_salt_file {uri}")
        except encryption.EncryptionError as exc:
            raise SaltFileError(str(exc)) from None
    salt = text.removeprefix("\ufeff").strip()
    if not salt:
        raise SaltFileError(f"--id_salt_file {uri} is empty")
    if not any(_visible(c) for c in salt):
        raise SaltFileError(f"--id_salt_file {uri} holds no visible character (only spaces, byte order "
                            "marks or zero-width characters: a constant anyone can guess): write a "
                            "secret salt (e.g. openssl rand -hex 32)")
    return salt


def _visible(char: str) -> bool:
    """Not whitespace, not a format character (zero-width spaces and joiners, U+FEFF), not a control."""
    return not char.isspace() and unicodedata.category(char) not in ("Cf", "Cc", "Zs", "Zl", "Zp")


# The salt the launcher read from each --id_salt_file at the start of the run: the one value
# the run uses. Forked workers and an in-process run inherit it; a worker elsewhere reads the
# file and checks it against the settings' id_salt_check (with_salt).
_READ_AT_START: dict[str, str] = {}


def remember_salt(uri: str, salt: str) -> None:
    """Called by the launcher once it has read ``uri`` (pipeline.options.salt)."""
    _READ_AT_START[uri] = salt


@functools.lru_cache(maxsize=8)
def salt_check(salt: str) -> str:
    """Names a salt without giving it away, for the job graph: a slow keyed digest (PBKDF2,
    as costly to guess from as the record ids a dataset's readers hold, and slower)."""
    return hashlib.pbkdf2_hmac("sha256", salt.encode("utf-8"), b"dcm2tfrecord id_salt_file check",
                               50_000, 16).hex()


def with_salt(settings: DecodeSettings) -> DecodeSettings:
    """``settings`` with ``id_salt`` read from ``id_salt_file`` when the salt was kept out of
    the job graph (DoFns call this in ``setup``, on the worker). A worker that cannot read
    it fails in one line naming its host (a secret not mounted on every node)."""
    if settings.id_salt or not settings.id_salt_file:
        return settings
    salt = _READ_AT_START.get(settings.id_salt_file)
    if salt is None:
        try:
            salt = read_salt_file(settings.id_salt_file)
        except Exception as exc:  # noqa: BLE001 - missing, unreadable, storage errors: one line
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            if not isinstance(exc, SaltFileError):
                reason = f"--id_salt_file {settings.id_salt_file}: cannot be read ({reason})"
            raise SaltFileError(f"on worker host {socket.gethostname()}: {reason}") from None
    if settings.id_salt_check and salt_check(salt) != settings.id_salt_check:
        raise SaltFileError(f"on worker host {socket.gethostname()}: --id_salt_file {settings.id_salt_file} "
                            "holds another salt than at the start of the run (it changed while the run "
                            "went, or differs on this host): keep it the same everywhere and unchanged "
                            "during a run, and rerun")
    return dataclasses.replace(settings, id_salt=salt)
