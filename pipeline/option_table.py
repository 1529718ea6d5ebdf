"""The options of ``convert``, declared once: the one table and the value it defines.

``OPTIONS`` is the one table: every ``convert`` option with its flag, type,
default, help, argparse group, whether ``dataset.json`` records it, whether
it changes record content (else an --incremental run may change it and still
reuse shards), which settings field it feeds, and its Flex Template parameter.
From it come the argparse parser (pipeline.arguments), the
:class:`ConvertOptions` value, the settings the graph is built from
(:meth:`ConvertOptions.settings`), the options recorded in dataset.json
(:meth:`ConvertOptions.recorded`) and the Flex Template's ``metadata.json``
(pipeline.template_metadata; ``python -m dcm2tfrecord.pipeline.template_metadata --metadata``
prints it, and a test keeps the committed file equal to it).

Adding an option: one ``Option(...)`` row below and its typed field in
:class:`ConvertOptions` (the module refuses to load until both are there), plus
the code that uses the value; a rule relating it to other options goes in
pipeline.option_rules. Defaults of options that feed a settings field are those
fields' defaults in transforms/settings.py (one owner), not restated here.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

from dcm2tfrecord.pipeline.locations import absolute, recorded_location
from dcm2tfrecord.pipeline.salt import RANDOM_SALT, SALT_ENV, resolve_salt
from dcm2tfrecord.transforms.images.geometry import RESIZE_MODES, parse_resize
from dcm2tfrecord.transforms.labels.table import LABEL_KEYS
from dcm2tfrecord.transforms.dicom.voi import PRESETS, parse_window
from dcm2tfrecord.transforms.settings import MAX_SALT_BYTES, ConversionSettings, DecodeSettings, ShardBounds
from dcm2tfrecord.transforms.splits.assign import SPLIT_BY, parse_splits

_GCS = r"^gs:\/\/[^\n\r]+$"
_NUMBER = r"^[0-9]+(\.[0-9]+)?$"
_BOOL = r"^(true|false|True|False)$"


def _setting_default(cls, name: str):
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    # mypy cannot tie the two: a field without a default has a default_factory
    return field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[operator]


@dataclasses.dataclass(frozen=True)
class Template:
    """An option as a Flex Template parameter (metadata.json)."""
    label: str
    help: str
    regexes: tuple[str, ...] = ()
    required: bool = False      # a parameter the launcher must be given (the option itself may not be)


@dataclasses.dataclass(frozen=True)
class Option:
    """One ``convert`` option.

    ``setting`` is ``"decode.<field>"`` or ``"conversion.<field>"``: the settings
    field the value feeds (through ``to_setting``), and whose default it takes.
    ``recorded``: written to dataset.json's ``options``. ``content``: a change
    between two --incremental versions means their records differ.
    """
    flag: str
    help: str
    group: str
    template: Optional[Template]         # None: not a Flex Template parameter (see not_in_template)
    field: str = ""                     # ConvertOptions field, default: the flag
    kind: str = "value"                 # value | switch | list
    type: Optional[Callable] = None
    choices: Optional[tuple] = None
    default: Any = None
    required: bool = False
    metavar: Optional[str] = None
    setting: str = ""
    to_setting: Optional[Callable] = None
    recorded: bool = True
    content: bool = True
    not_in_template: str = ""           # why the option is no Flex Template parameter

    @property
    def name(self) -> str:
        return self.field or self.flag

    @property
    def default_value(self):
        if self.required:
            return None
        if self.setting:
            target, name = self.setting.split(".")
            cls = DecodeSettings if target == "decode" else ConversionSettings
            return _setting_default(cls, name)
        return self.default


def _choices_regex(choices) -> tuple[str, ...]:
    return ("^(" + "|".join(str(c) for c in choices) + ")$",)


_IO, _SHARDS, _DECODE, _FAIL, _SAFETY, _LABELS, _REPORT = (
    "input and output", "shards", "decoding", "failures", "patient safety", "labels and splits",
    "reporting")

OPTIONS: tuple[Option, ...] = (
    Option("input", "directory (recursive), file or glob, local or gs://; repeatable", _IO,
           Template("Input archive", "Directory (walked recursively), file or glob on Cloud Storage, "
                    "e.g. gs://bucket/archive or gs://bucket/archive/*.dcm.", (_GCS,)),
           field="inputs", kind="list", required=True, metavar="PATTERN",
           setting="conversion.patterns", to_setting=lambda v: tuple(absolute(p) for p in v),
           content=False),
    Option("output", "dataset directory, local or gs://", _IO,
           Template("Output dataset directory", "Cloud Storage directory for the dataset. Without "
                    "incremental it must not hold a dataset already (give each run its own directory, "
                    "e.g. gs://bucket/datasets/ct/2024-06-01); with incremental=true it is the root that "
                    "collects the versions.", (_GCS,)),
           required=True, metavar="DIR", setting="conversion.output_dir", to_setting=absolute,
           recorded=False),
    Option("overwrite", "replace a dataset already committed in --output", _IO,
           Template("Overwrite", "true: replace a dataset already committed in output. "
                    "false (default): refuse.", (_BOOL,)),
           kind="switch", default=False, recorded=False),
    Option("incremental", "write a new version OUT/versions/NNNN that converts only new and "
           "changed files, reuses unchanged shards, then points OUT/LATEST at it", _IO,
           Template("Incremental, versioned output", "true: write a new version OUTPUT/versions/NNNN "
                    "that converts only new and changed files and reuses unchanged shards, then point "
                    "OUTPUT/LATEST at it (scheduled runs over a growing archive). false (default): one "
                    "dataset in OUTPUT.", (_BOOL,)),
           kind="switch", default=False, recorded=False),
    Option("duplicates", "files sharing a SOPInstanceUID: keep the first by sorted uri and skip "
           "the rest (default), or keep all", _IO,
           Template("Duplicate instances", "skip (default: keep the first file of a SOPInstanceUID by "
                    "sorted uri) or keep (convert all).", _choices_regex(("skip", "keep"))),
           choices=("skip", "keep"), setting="conversion.duplicates"),
    Option("target_shard_mb", "default 256", _SHARDS,
           Template("Target shard size (MB)", "Aimed-for shard size. Default 256.", (_NUMBER,)),
           type=float, default=256.0, content=False),
    Option("min_shard_mb", "smallest shard unless a split is smaller (default 100)", _SHARDS,
           Template("Minimum shard size (MB)", "Smallest shard unless a split is smaller. Default 100.",
                    (_NUMBER,)),
           type=float, default=100.0, content=False),
    Option("max_shard_mb", "largest shard; a bigger record fails as record_too_large (default 500)",
           _SHARDS,
           Template("Maximum shard size (MB)", "Largest shard; a bigger record fails as "
                    "record_too_large. Default 500.", (_NUMBER,)),
           type=float, default=500.0, content=False),
    Option("min_shards", "at least this many shards per split while shards stay >= --min_shard_mb",
           _SHARDS,
           Template("Minimum shards per split", "At least this many shards per split while shards stay "
                    "above the minimum size. Default 1.", (r"^[1-9][0-9]*$",)),
           type=int, setting="conversion.min_shards", content=False),
    Option("compression", "gzip writes .tfrecord.gz (default none)", _SHARDS,
           Template("Compression", "none (default) or gzip (.tfrecord.gz).",
                    _choices_regex(("none", "gzip"))),
           choices=("none", "gzip"), setting="conversion.compression"),
    Option("seed", "record order seed (default 0)", _SHARDS,
           Template("Record order seed", "Seed of the record order. Default 0.", (r"^-?[0-9]+$",)),
           type=int, setting="conversion.seed"),
    Option("max_pixels", "reject images whose header claims more pixels (default 2^28)", _DECODE,
           Template("Maximum pixels per image", "Reject images whose header claims more pixels, before "
                    "decoding. Default 268435456 (2^28).", (r"^[1-9][0-9]*$",)),
           type=int, setting="conversion.max_pixels"),
    Option("dicom_values", "modality: modality LUT (HU for CT), exact dtype (default); stored: raw "
           "stored values; window: VOI window to uint8/uint16", _DECODE,
           Template("DICOM values", "modality (default: modality LUT, e.g. Hounsfield units), stored (raw "
                    "stored values) or window (VOI window to uint8/uint16).",
                    _choices_regex(("modality", "stored", "window"))),
           choices=("modality", "stored", "window"), setting="decode.dicom_values"),
    Option("window", f"CENTER,WIDTH or a preset ({', '.join(PRESETS)}); default: the file's own",
           _DECODE,
           Template("VOI window", "With dicom_values=window: CENTER,WIDTH or a preset (lung, mediastinum, "
                    "bone, brain, abdomen, liver). Default: each file's own window."),
           setting="decode.window", to_setting=lambda v: parse_window(v) if v else None),
    Option("window_bits", "output bits of --dicom_values window (default 8)", _DECODE,
           Template("Window output bits", "8 (default) or 16.", _choices_regex((8, 16))),
           type=int, choices=(8, 16), setting="decode.window_bits"),
    Option("resize", "e.g. 512x512", _DECODE,
           Template("Resize", "HxW, e.g. 512x512. Default: keep sizes.", (r"^[1-9][0-9]*x[1-9][0-9]*$",)),
           metavar="HxW", setting="decode.resize", to_setting=lambda v: parse_resize(v) if v else None),
    Option("resize_mode", "stretch (default), pad (keep aspect, pad) or crop (keep aspect, centre crop)",
           _DECODE,
           Template("Resize mode", "stretch (default), pad (keep aspect, pad) or crop (keep aspect, "
                    "centre crop).", _choices_regex(RESIZE_MODES)),
           choices=RESIZE_MODES, setting="decode.resize_mode"),
    Option("channels", "keep (default), 1 (RGB -> luma) or 3 (gray repeated)", _DECODE,
           Template("Channels", "keep (default), 1 (RGB to luma) or 3 (gray repeated).",
                    _choices_regex(("keep", "1", "3"))),
           choices=("keep", "1", "3"), setting="decode.channels"),
    Option("frames", "multi-frame DICOM: one record with depth=frames (default) or one per frame",
           _DECODE,
           Template("Multi-frame DICOM", "stack (default: one record with depth = frames) or split (one "
                    "record per frame).", _choices_regex(("stack", "split"))),
           choices=("stack", "split"), setting="decode.frames"),
    Option("unit", "file: one record per file (default); series: one volume per "
           "SeriesInstanceUID, slices in anatomical order", _DECODE,
           Template("Record unit", "file (default: one record per file) or series (one volume per "
                    "SeriesInstanceUID).", _choices_regex(("file", "series"))),
           choices=("file", "series"), setting="conversion.unit"),
    Option("decode_timeout_s", "fail a file whose decoding takes longer (default 300; 0: no limit)",
           _DECODE,
           Template("Decode timeout (s)", "Fail a file whose decoding takes longer. Default 300; 0: no "
                    "limit.", (_NUMBER,)),
           type=float, setting="decode.decode_timeout_s", recorded=False),
    Option("max_failure_ratio", "refuse to commit when more than this share of inputs failed "
           "(default 0.05)", _FAIL,
           Template("Maximum failure ratio", "Refuse to commit dataset.json when more than this share "
                    "of inputs failed. Default 0.05.", (_NUMBER,)),
           type=float, setting="conversion.max_failure_ratio", recorded=False),
    Option("max_failures", "refuse to commit when more than this many inputs failed", _FAIL,
           Template("Maximum failures", "Refuse to commit dataset.json when more than this many inputs "
                    "failed.", (r"^[0-9]+$",)),
           type=int, setting="conversion.max_failures", recorded=False),
    Option("allow_empty", "commit an empty dataset when inputs matched but none converted (a scheduled "
           "run on a quiet day); otherwise that run fails with exit 1 and the reasons", _FAIL,
           Template("Allow an empty dataset", "true: commit an empty dataset when no input converted. "
                    "false (default): such a run fails and says why.", (_BOOL,)),
           kind="switch", setting="conversion.allow_empty", recorded=False),
    Option("gcs_retry_s", "how long one gs:// request is retried before it fails (default 60; Beam's "
           "own is 120); storage that answers nothing for that long stops the run within about "
           "twice this", _FAIL,
           Template("Storage retry budget (s)", "How long one Cloud Storage request is retried before it "
                    "fails. Default 60. Storage that answers nothing for that long stops the run within "
                    "about twice this (exit 1, nothing committed).", (_NUMBER,)),
           type=float, setting="conversion.storage_retry_s", recorded=False),
    Option("id_salt", f"secret key for hashing identifiers (or ${SALT_ENV}); never written; "
           "local runs only (on any other runner it would travel in the job: use --id_salt_file)",
           _SAFETY,
           None, recorded=False,
           not_in_template="launch parameters are visible to whoever can view the job: the template "
                           "takes id_salt_file"),
    Option("id_salt_file", "regular file or gs:// object holding the identifier salt (a mounted "
           "secret or a restricted object): read by each worker, so the salt never travels in the "
           f"job; UTF-8 text, surrounding whitespace removed, at most {MAX_SALT_BYTES} bytes", _SAFETY,
           Template("Identifier salt file", "Cloud Storage object holding the secret key for hashing "
                    "record and patient identifiers (e.g. gs://secure-bucket/dcm2tfrecord-salt, readable "
                    "by the workers' service account only). Workers read it; the salt itself never "
                    "appears in job parameters, logs or the output. Keep it the same across runs.",
                    (_GCS,), required=True),
           metavar="PATH", recorded=False),
    Option("allow_random_salt", "run without a salt: a random one, so hashes differ on every run",
           _SAFETY,
           Template("Allow a random salt", "true: run without a salt (hashes and splits differ on every "
                    "run). false (default).", (_BOOL,)),
           kind="switch", default=False, recorded=False),
    Option("keep_tags", "extra DICOM attributes to write under dicom/ (your responsibility)", _SAFETY,
           Template("Extra DICOM attributes", "DICOM keywords to write under dicom/, separated by "
                    "commas (explicitly your responsibility: they may identify a patient).",
                    (r"^[A-Za-z0-9]+(,[A-Za-z0-9]+)*$",)),
           kind="list", metavar="KEYWORD", setting="decode.keep_tags"),
    Option("keep_source_path", "write each record's source uri as the feature source_path", _SAFETY,
           Template("Keep source paths", "true: write each record's source uri as the feature "
                    "source_path (paths often hold patient names). false (default).", (_BOOL,)),
           kind="switch", setting="decode.keep_source_path"),
    Option("allow_burned_in", "convert images whose Burned In Annotation is YES", _SAFETY,
           Template("Allow burned-in annotations", "true: convert images whose Burned In Annotation is "
                    "YES. false (default): skip them.", (_BOOL,)),
           kind="switch", setting="decode.allow_burned_in"),
    Option("record_input_paths", "write the --input and --labels paths into dataset.json as given "
           "(default: scheme, bucket and a keyed hash; folder names often name patients)", _SAFETY,
           Template("Record input paths", "true: dataset.json records the input and labels paths as "
                    "given. false (default): only their scheme, bucket and a keyed hash, as folder names "
                    "often name patients.", (_BOOL,)),
           kind="switch", default=False, content=False),
    Option("labels", "labels CSV, local or gs://", _LABELS,
           Template("Labels CSV", "Optional labels CSV on Cloud Storage, joined to records by label_key.",
                    (_GCS,)),
           metavar="CSV", setting="conversion.labels_csv",
           to_setting=lambda v: absolute(v) if v else None, content=False),
    Option("label_key", "CSV column joined to records (path: relative to the --input root)", _LABELS,
           Template("Label join key", "CSV column joined to records: path (relative to the input root), "
                    "sop_instance_uid, series_instance_uid, study_instance_uid or patient_id. Default "
                    "path.", _choices_regex(LABEL_KEYS)),
           choices=LABEL_KEYS, setting="conversion.label_key"),
    Option("label_key_case", "exact (default): --label_key values match as written (after Unicode "
           "NFC and a leading ./); fold: ignoring case", _LABELS,
           Template("Label key case", "exact (default): label keys match as written, after Unicode NFC "
                    "and without a leading ./; fold: ignoring upper/lower case.",
                    _choices_regex(("exact", "fold"))),
           choices=("exact", "fold"), setting="conversion.label_key_case"),
    Option("label_column", "CSV column holding the label", _LABELS,
           Template("Label column", "CSV column holding the label. Default label."),
           setting="conversion.label_column"),
    Option("multi_label", "labels like a|b|c -> multi-hot", _LABELS,
           Template("Multi-label", "true: labels like a|b|c become a multi-hot vector. false (default).",
                    (_BOOL,)),
           kind="switch", setting="conversion.multi_label"),
    Option("labels_from_dirs", "class = parent folder name (ImageNet layout)", _LABELS,
           Template("Labels from folders", "true: the class is the parent folder name (ImageNet layout). "
                    "false (default).", (_BOOL,)),
           kind="switch", setting="conversion.labels_from_dirs"),
    Option("missing_label", "records without a label: skip (default), error, or keep as -1", _LABELS,
           Template("Records without a label", "skip (default), error (counted as failed) or unlabeled "
                    "(label -1).", _choices_regex(("skip", "error", "unlabeled"))),
           choices=("skip", "error", "unlabeled"), setting="conversion.missing_label"),
    Option("splits", "e.g. train=0.8,validation=0.1,test=0.1 (default train=1.0)", _LABELS,
           Template("Splits", "Split names and fractions summing to 1, e.g. "
                    "train=0.8,validation=0.1,test=0.1. Default train=1.0.",
                    (r"^[A-Za-z0-9_-]+=[0-9.]+(,[A-Za-z0-9_-]+=[0-9.]+)*$",)),
           default="train=1.0", setting="", to_setting=None),
    Option("split_by", "group kept in one split (default: patient for DICOM, record otherwise)",
           _LABELS,
           Template("Split grouping", "Group kept in one split: patient, study, series or record. Default "
                    "patient for DICOM, record otherwise.", _choices_regex(SPLIT_BY)),
           choices=SPLIT_BY, setting="conversion.split_by"),
    Option("split_column", "take each record's split from this labels CSV column instead", _LABELS,
           Template("Split column", "Take each record's split from this labels CSV column instead of "
                    "hashing."),
           setting="conversion.split_column"),
    Option("allow_split_leak", "commit although --split_column puts one group (patient, by default) "
           "in several splits; otherwise such a run fails with exit 1, naming the count and the splits",
           _LABELS,
           Template("Allow a group in several splits", "true: commit although split_column puts one group "
                    "(a patient, by default) in several splits. false (default): such a run fails and "
                    "says how many groups and which splits.", (_BOOL,)),
           kind="switch", setting="conversion.allow_split_leak", recorded=False),
    Option("summary_json", "also write the end-of-run summary as JSON here (local or gs://)", _REPORT,
           Template("Summary file", "Optional Cloud Storage path where the end-of-run summary is written "
                    "as JSON (for schedulers).", (_GCS,)),
           metavar="PATH", recorded=False),
    Option("progress", "auto (default): a bar on a terminal, a line every 10 s otherwise", _REPORT,
           Template("Progress display", "auto (default), bar, log (a line every 10 s) or none.",
                    _choices_regex(("auto", "bar", "log", "none"))),
           choices=("auto", "bar", "log", "none"), default="auto", recorded=False),
)
# Options whose change between --incremental versions leaves earlier shards reusable.
PLACEMENT_OPTIONS = frozenset(o.name for o in OPTIONS if o.recorded and not o.content)


def _default(name: str):
    """Option ``name``'s default, as its row (or the settings field it feeds) gives it."""
    option = next(o for o in OPTIONS if o.name == name)
    if option.required:
        return None
    return tuple(option.default_value) if option.kind == "list" else option.default_value


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    """The values of every convert option: one field per row of OPTIONS, named and defaulted by it
    (declared here so that type checkers and editors see them; the module refuses to load when
    the two disagree)."""
    inputs: tuple[str, ...] = _default("inputs")
    output: Optional[str] = _default("output")
    overwrite: bool = _default("overwrite")
    incremental: bool = _default("incremental")
    duplicates: str = _default("duplicates")
    target_shard_mb: float = _default("target_shard_mb")
    min_shard_mb: float = _default("min_shard_mb")
    max_shard_mb: float = _default("max_shard_mb")
    min_shards: int = _default("min_shards")
    compression: str = _default("compression")
    seed: int = _default("seed")
    max_pixels: int = _default("max_pixels")
    dicom_values: str = _default("dicom_values")
    window: Optional[str] = _default("window")
    window_bits: int = _default("window_bits")
    resize: Optional[str] = _default("resize")
    resize_mode: str = _default("resize_mode")
    channels: str = _default("channels")
    frames: str = _default("frames")
    unit: str = _default("unit")
    decode_timeout_s: float = _default("decode_timeout_s")
    max_failure_ratio: float = _default("max_failure_ratio")
    max_failures: Optional[int] = _default("max_failures")
    allow_empty: bool = _default("allow_empty")
    gcs_retry_s: float = _default("gcs_retry_s")
    id_salt: Optional[str] = _default("id_salt")
    id_salt_file: Optional[str] = _default("id_salt_file")
    allow_random_salt: bool = _default("allow_random_salt")
    keep_tags: tuple[str, ...] = _default("keep_tags")
    keep_source_path: bool = _default("keep_source_path")
    allow_burned_in: bool = _default("allow_burned_in")
    record_input_paths: bool = _default("record_input_paths")
    labels: Optional[str] = _default("labels")
    label_key: str = _default("label_key")
    label_key_case: str = _default("label_key_case")
    label_column: str = _default("label_column")
    multi_label: bool = _default("multi_label")
    labels_from_dirs: bool = _default("labels_from_dirs")
    missing_label: str = _default("missing_label")
    splits: str = _default("splits")
    split_by: Optional[str] = _default("split_by")
    split_column: Optional[str] = _default("split_column")
    allow_split_leak: bool = _default("allow_split_leak")
    summary_json: Optional[str] = _default("summary_json")
    progress: str = _default("progress")

    def salt(self) -> str:
        """--id_salt, else the content of --id_salt_file, else $DCM2TFRECORD_ID_SALT, else (with
        --allow_random_salt) a fresh one."""
        return resolve_salt(self.id_salt, self.id_salt_file, self.allow_random_salt)

    @property
    def bounds(self) -> ShardBounds:
        return ShardBounds.from_mb(self.target_shard_mb, self.min_shard_mb, self.max_shard_mb)

    def settings(self) -> ConversionSettings:
        """The settings the job graph is built from, fed by each option's ``setting``."""
        # With --id_salt_file the salt stays out of the settings (and so out of the job graph):
        # each worker reads the file at setup (transforms.settings.with_salt).
        fed: dict = {"decode": {"id_salt": "" if self.id_salt_file and not self.id_salt else self.salt(),
                                "id_salt_file": absolute(self.id_salt_file) if self.id_salt_file else ""},
                     "conversion": {}}
        for option in OPTIONS:
            if option.setting:
                target, name = option.setting.split(".")
                value = getattr(self, option.name)
                fed[target][name] = option.to_setting(value) if option.to_setting else (
                    tuple(value) if option.kind == "list" else value)
        return ConversionSettings(bounds=self.bounds, splits=parse_splits(self.splits),
                                  decode=DecodeSettings(**fed["decode"]), **fed["conversion"])

    def recorded(self) -> dict:
        """The options that shape the output, as stored in dataset.json.

        Locations (--input, --labels) only as :func:`recorded_location` unless
        --record_input_paths.
        """
        out = {}
        for option in OPTIONS:
            if option.recorded:
                value = getattr(self, option.name)
                out[option.name] = list(value) if option.kind == "list" else value
        if not self.record_input_paths:
            out["inputs"] = [recorded_location(p, self.salt()) for p in self.inputs]
            out["labels"] = recorded_location(self.labels, self.salt()) if self.labels else None
        out["splits"] = dict(parse_splits(self.splits))
        out["id_salt"] = ("random (hashes differ every run)" if self.salt() == RANDOM_SALT
                          else "set (not recorded)")
        return out

    def replace(self, **changes) -> "ConvertOptions":
        return dataclasses.replace(self, **changes)


_UNDECLARED = {o.name for o in OPTIONS} ^ {f.name for f in dataclasses.fields(ConvertOptions)}
if _UNDECLARED:
    raise TypeError(f"ConvertOptions and OPTIONS disagree on {sorted(_UNDECLARED)}: declare one "
                    "ConvertOptions field per Option row")
