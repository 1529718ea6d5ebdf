"""Everything that shapes a conversion, as one frozen value the Beam graph is built from."""
from __future__ import annotations

import dataclasses
from typing import Optional

from transforms.planning.shards import ShardBounds


DEFAULT_MAX_PIXELS = 1 << 28


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
    """What a record's pixels and features look like (see transforms.records.build)."""
    dicom_values: str = "modality"      # modality | stored | window
    window: object = None               # None, (center, width) or a preset name
    window_bits: int = 8
    resize: Optional[tuple[int, int]] = None
    resize_mode: str = "stretch"
    channels: str = "keep"              # keep | 1 | 3
    frames: str = "stack"               # stack | split
    id_salt: str = ""                   # HMAC key for identifiers; never written
    id_salt_file: str = ""              # where workers read id_salt at setup (--id_salt_file)
    keep_tags: tuple[str, ...] = ()
    keep_source_path: bool = False
    allow_burned_in: bool = False
    decode_timeout_s: float = 300.0


@dataclasses.dataclass(frozen=True)
class ConversionSettings:
    patterns: tuple[str, ...]
    output_dir: str
    bounds: ShardBounds
    max_pixels: int = DEFAULT_MAX_PIXELS
    seed: int = 0
    compression: str = "none"          # or "gzip"
    min_shards: int = 1
    labels_csv: Optional[str] = None
    label_key: str = "path"
    label_key_case: str = "exact"      # exact | fold (see transforms.labels.table.exact_key)
    label_column: str = "label"
    multi_label: bool = False
    labels_from_dirs: bool = False
    missing_label: str = "skip"        # skip | error | unlabeled
    splits: tuple[tuple[str, float], ...] = (("train", 1.0),)
    split_by: Optional[str] = None     # None: patient for DICOM, record otherwise
    split_column: Optional[str] = None
    decode: DecodeSettings = DecodeSettings()
    unit: str = "file"                 # file | series
    max_failure_ratio: float = 0.05
    max_failures: Optional[int] = None
    duplicates: str = "skip"           # skip | keep: files sharing a SOPInstanceUID
    storage_retry_s: float = 60.0      # how long one gs:// request is retried (Beam's default: 120)
    allow_empty: bool = False          # commit a dataset of no records (inputs matched, none written)

    def split_by_for(self, kind: str) -> str:
        if self.split_by:
            return self.split_by
        return "patient" if kind == "dicom" else "record"


# Inputs in a row that storage does not answer for (each after storage_retry_s of retries)
# before a step stops the run while other requests are still answered (a partial outage);
# storage silent for the budget stops it at the first failure (transforms.sources.read.OutageBreaker).
OUTAGE_INPUTS = 5


def read_salt_file(uri: str) -> str:
    """The salt held in a file or object (local or gs://): its text, surrounding
    whitespace removed. ValueError when it is empty."""
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(uri) as handle:
        salt = handle.read(1 << 16).decode("utf-8").strip()
    if not salt:
        raise ValueError(f"--id_salt_file {uri} is empty")
    return salt


def with_salt(settings: DecodeSettings) -> DecodeSettings:
    """``settings`` with ``id_salt`` read from ``id_salt_file`` when the salt was kept out of
    the job graph (DoFns call this in ``setup``, on the worker)."""
    if settings.id_salt or not settings.id_salt_file:
        return settings
    return dataclasses.replace(settings, id_salt=read_salt_file(settings.id_salt_file))
