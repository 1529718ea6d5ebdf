"""The options of ``convert``, declared once: the :class:`ConvertOptions` value, one field per option.

Each field of :class:`ConvertOptions` is declared with its type and its one
``Option(...)`` row: flag, help, argparse group, whether ``dataset.json``
records it, whether it changes record content (else an --incremental run may
change it and still reuse shards), which settings field it feeds, how its text
is parsed, and its Flex Template parameter. The field's type says the rest:
``bool`` is a switch, ``tuple[str, ...]`` a list, an enum (defined beside the
code that implements it, named in pipeline.options.choices) the fixed choices,
``int``/``float`` the number parsed. ``OPTIONS`` is the table read back off the
fields. From it come the argparse parser and its help, defaults shown by
argparse (pipeline.options.arguments), the settings the graph is built from
(:meth:`ConvertOptions.settings`), the options recorded in dataset.json
(:meth:`ConvertOptions.recorded`) and the Flex Template's ``metadata.json``
(pipeline.options.template_metadata; ``python -m dcm2tfrecord.pipeline.options.template_metadata --metadata``
prints it, and a test keeps the committed file equal to it), whose help texts
are the rows' own (:func:`template_help`), not written a second time.

An option given as text with a structure (``--window``, ``--resize``,
``--splits``) names its parser (``parse``): the text is parsed once, when the
ConvertOptions value is made (a bad one is a UsageError then), and the settings
take the parsed value (:meth:`ConvertOptions.typed`); the text itself is what
dataset.json records.

Adding an option: one typed field below, ``= declare(Option(...))``, plus the
code that uses the value; a rule relating it to other options goes in
pipeline.options.rules. Defaults of options that feed a settings field are those
fields' defaults in transforms/settings.py (one owner), not restated here; help
texts do not restate defaults either (``--help`` shows them).
"""
from __future__ import annotations

import dataclasses
import enum
import re
import typing
from typing import Any, Callable, Optional

from dcm2tfrecord.pipeline.options.locations import absolute, recorded_location
from dcm2tfrecord.pipeline.options.choices import (Channels, Compression, Crop, DicomValues, Duplicates, Frames,
                                                  Intensity,
                                                  LabelKey, LabelKeyCase, MaskLayout, MissingLabel, MissingMask,
                                                  PixelEncoding, Progress, ResizeMode, Series4d, SeriesGaps, SplitBy,
                                                  Unit, VolumeCodec, WindowBits, values)
from dcm2tfrecord.pipeline.options.salt import RANDOM_SALT, SALT_ENV, resolve_salt
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.transforms.dicom.voi import PRESETS, parse_window
from dcm2tfrecord.transforms.images.geometry import parse_resize
from dcm2tfrecord.transforms.images.spacing import parse_spacing
from dcm2tfrecord.transforms.masks.classes import load as load_class_map
from dcm2tfrecord.transforms.masks.pairing import parse_mask_pattern
from dcm2tfrecord.transforms.masks.settings import MaskSettings
from dcm2tfrecord.transforms.settings import (MAX_SALT_BYTES, ConversionSettings, DecodeSettings, ShardBounds,
                                              salt_check)
from dcm2tfrecord.transforms.splits.assign import parse_splits, splits_text

_GCS = r"^gs:\/\/[^\n\r]+$"
_NUMBER = r"^[0-9]+(\.[0-9]+)?$"
_BOOL = r"^(true|false|True|False)$"


_SETTINGS: dict[str, type] = {"decode": DecodeSettings, "conversion": ConversionSettings, "masks": MaskSettings}


def _setting_default(cls: type, name: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    if field.default is not dataclasses.MISSING:
        return field.default
    factory = field.default_factory
    assert callable(factory), f"{cls.__name__}.{name} has no default"
    return factory()


@dataclasses.dataclass(frozen=True)
class Template:
    """An option as a Flex Template parameter (metadata.json): its label and the regexes its
    value must match (an option with fixed choices gets the regex of its choices unless
    ``regexes`` says otherwise). Its help text is the option's own (:func:`template_help`),
    followed by ``note``: what only a template launcher needs to know."""
    label: str
    regexes: tuple[str, ...] = ()
    required: bool = False      # a parameter the launcher must be given (the option itself may not be)
    note: str = ""


def choices_regex(choices: tuple) -> tuple[str, ...]:
    return ("^(" + "|".join(str(c) for c in choices) + ")$",)


@dataclasses.dataclass(frozen=True)
class Option:
    """One ``convert`` option.

    ``setting`` is ``"decode.<field>"``, ``"conversion.<field>"`` or ``"masks.<field>"``
    (transforms.masks.settings.MaskSettings, built only with --class_map): the settings
    field the value feeds (through ``to_setting``, or as parsed by ``parse``), and whose
    default it takes (written back as text by ``text`` for an option that ``parse`` reads).
    ``recorded``: written to dataset.json's ``options``. ``content``: a change
    between two --incremental versions means their records differ.
    ``name`` and ``value_type`` come from the ConvertOptions field the row declares.
    """
    flag: str
    help: str
    group: str
    template: Optional[Template]         # None: not a Flex Template parameter (see not_in_template)
    default: Any = None
    required: bool = False
    metavar: Optional[str] = None
    setting: str = ""
    to_setting: Optional[Callable[[Any], Any]] = None
    parse: Optional[Callable[[str], Any]] = None     # its text -> the typed value (ValueError if bad)
    text: Optional[Callable[[Any], Any]] = None      # the typed default -> its text (None: unset)
    recorded: bool = True
    content: bool = True
    not_in_template: str = ""           # why the option is no Flex Template parameter
    name: str = ""                      # the ConvertOptions field (filled in from it)
    value_type: Any = None              # bool, int, float, str, tuple or an enum (from the field's type)

    @property
    def kind(self) -> str:
        """switch (a bool), list (a tuple of str) or value."""
        return "switch" if self.value_type is bool else "list" if self.value_type is tuple else "value"

    @property
    def choices(self) -> Optional[type[enum.Enum]]:
        """The enum of the option's fixed choices, if it has them."""
        kind = self.value_type
        return kind if isinstance(kind, type) and issubclass(kind, enum.Enum) else None

    @property
    def choice_values(self) -> tuple:
        return values(self.choices) if self.choices else ()

    @property
    def default_value(self) -> Any:
        if self.required:
            return None
        value = self.default
        if self.setting:
            target, name = self.setting.split(".")
            value = _setting_default(_SETTINGS[target], name)
            if self.text is not None:
                value = self.text(value)
        return self.coerce(value)

    def from_text(self, text: Any) -> Any:
        """A value of the option from its text (argparse's ``type``); ValueError naming the
        choices when it is not one of them."""
        choices = self.choices
        if choices is None:
            return self.value_type(text) if self.value_type in (int, float) else text
        if isinstance(text, choices):
            return text
        try:
            return choices(int(text) if issubclass(choices, int) else text)
        except ValueError:
            shown = ", ".join(repr(v) for v in self.choice_values)
            raise ValueError(f"invalid choice: {text!r} (choose from {shown})") from None

    def coerce(self, value: Any) -> Any:
        """``value`` as the field holds it: a list as a tuple, a choice as its enum member."""
        if value is None:
            return None
        if self.kind == "list":
            return tuple(value)
        return self.from_text(value) if self.choices else value

    def plain(self, value: Any) -> Any:
        """``value`` as dataset.json holds it: a choice as its plain value."""
        return value.value if isinstance(value, enum.Enum) else value


_FLAG = re.compile(r"--([a-z0-9_]+)")


def _shown(value: Any) -> str:
    """A default as a Flex Template launcher writes it."""
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def template_help(option: Option) -> str:
    """The Flex Template's help of ``option``: its ``help``, where the launcher's parameter names
    stand for the flags, as a sentence; its default (which argparse shows for the command line);
    then its template's note."""
    flags = {o.flag for o in OPTIONS}
    text = _FLAG.sub(lambda m: m.group(1) if m.group(1) in flags else m.group(0), option.help)
    if option.help.startswith("--"):        # "--class_map, ...": what the option needs
        text = "With " + text
    elif "_" not in text.split(" ", 1)[0]:  # a sentence starts with a capital, a name as it is
        text = text[:1].upper() + text[1:]
    parts = [text + ("" if text.endswith(".") else ".")]
    default = option.default_value
    if not option.required and default is not None and default != ():
        parts.append(f"Default: {_shown(default)}.")
    if option.template is not None and option.template.note:
        parts.append(option.template.note)
    return " ".join(parts)


def declare(row: Option) -> Any:
    """A ConvertOptions field declared by its option row (defaulted by it)."""
    return dataclasses.field(default=row.default_value, metadata={"option": row})


_IO, _SHARDS, _DECODE, _FAIL, _SAFETY, _LABELS, _REPORT = (
    "input and output", "shards", "decoding", "failures", "patient safety", "labels and splits",
    "reporting")


@dataclasses.dataclass(frozen=True)
class ConvertOptions:
    """The values of every convert option: each field declared once, typed, with its row of
    the option table (``OPTIONS`` is read back off these fields). A choice given as its
    plain value (``compression="gzip"``) is held as its enum member; a list as a tuple."""
    inputs: tuple[str, ...] = declare(Option(
        "input", "directory (recursive), file or glob, local or gs://; repeatable", _IO,
        Template("Input archive", (_GCS,)),
        required=True, metavar="PATTERN",
        setting="conversion.patterns", to_setting=lambda v: tuple(absolute(p) for p in v),
        content=False))
    output: Optional[str] = declare(Option(
        "output", "dataset directory, local or gs://", _IO,
        Template("Output dataset directory", (_GCS,),
                 note="Without incremental it must not hold a dataset already (give each run its own "
                      "directory, e.g. gs://bucket/datasets/ct/2024-06-01); with incremental=true it is "
                      "the root that collects the versions."),
        required=True, metavar="DIR", setting="conversion.output_dir", to_setting=absolute,
        recorded=False))
    overwrite: bool = declare(Option(
        "overwrite", "replace a dataset already committed in --output", _IO,
        Template("Overwrite", (_BOOL,)),
        default=False, recorded=False))
    incremental: bool = declare(Option(
        "incremental", "write a new version OUT/versions/NNNN that converts only new and "
        "changed files, reuses unchanged shards, then points OUT/LATEST at it", _IO,
        Template("Incremental, versioned output", (_BOOL,)),
        default=False, recorded=False))
    duplicates: Duplicates = declare(Option(
        "duplicates", "files sharing a SOPInstanceUID: skip (keep the first by sorted uri, skip the "
        "rest) or keep all", _IO,
        Template("Duplicate instances"),
        setting="conversion.duplicates"))
    target_shard_mb: float = declare(Option(
        "target_shard_mb", "aimed-for shard size in MB", _SHARDS,
        Template("Target shard size (MB)", (_NUMBER,)),
        default=256.0, content=False))
    min_shard_mb: float = declare(Option(
        "min_shard_mb", "smallest shard unless a split is smaller", _SHARDS,
        Template("Minimum shard size (MB)", (_NUMBER,)),
        default=100.0, content=False))
    max_shard_mb: float = declare(Option(
        "max_shard_mb", "largest shard; a bigger record fails as record_too_large", _SHARDS,
        Template("Maximum shard size (MB)", (_NUMBER,)),
        default=500.0, content=False))
    min_shards: int = declare(Option(
        "min_shards", "at least this many shards per split while shards stay >= --min_shard_mb",
        _SHARDS,
        Template("Minimum shards per split", (r"^[1-9][0-9]*$",)),
        setting="conversion.min_shards", content=False))
    compression: Compression = declare(Option(
        "compression", "none, or gzip: shards written as .tfrecord.gz", _SHARDS,
        Template("Compression"),
        setting="conversion.compression"))
    gzip_level: int = declare(Option(
        "gzip_level", "with --compression gzip: the deflate level, higher is smaller and slower (up to 9)", _SHARDS,
        Template("Gzip level", (r"^[1-9]$",)),
        setting="conversion.gzip_level", content=False))
    encrypt: Optional[str] = declare(Option(
        "encrypt", "encrypt every record (AES-256-GCM, a fresh data key per shard) under the key-encryption "
        "key this key URI names: keyfile:PATH (made by 'dcm2tfrecord keygen PATH'; local or gs://, read "
        "by each worker) or gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K; dataset.json holds "
        "the URI and the wrapped data keys only", _SHARDS,
        Template("Encryption key URI", (r"^(gcp-kms://projects/[^\n\r]+|keyfile:gs://[^\n\r]+)$",),
                 note="On Dataflow a Cloud KMS key the workers' service account may use to encrypt "
                      "(roles/cloudkms.cryptoKeyEncrypter), or a key file in a restricted bucket."),
        metavar="KEY_URI", setting="conversion.encrypt_key_uri",
        to_setting=lambda v: v or "", text=lambda v: v or None, recorded=False))     # unset: None
    pixel_encoding: PixelEncoding = declare(Option(
        "pixel_encoding", "image_raw's bytes: raw pixels, or png (one PNG image a record, compressed "
        "and still randomly addressable; integers of 8 or 16 bits)", _SHARDS,
        Template("Pixel encoding"),
        setting="decode.pixel_encoding"))
    volume_chunks: int = declare(Option(
        "volume_chunks", "store each record's image (and mask) as bricks of N x N x N voxels, so a patch "
        "is read without the rest of its volume (reader.RandomAccess.region, PatchSampler); a 2-D record is "
        "one brick deep (off unless given: one image_raw value a record)", _SHARDS,
        Template("Volume brick edge (voxels)", (r"^[0-9]+$",)),
        metavar="N", setting="decode.volume_chunks"))
    volume_codec: VolumeCodec = declare(Option(
        "volume_codec", "with --volume_chunks: each brick's bytes as they are (none), or compressed by "
        "zstd (a fixed level: equal input, equal bytes)", _SHARDS,
        Template("Volume brick codec"),
        setting="decode.volume_codec"))
    seed: int = declare(Option(
        "seed", "record order seed", _SHARDS,
        Template("Record order seed", (r"^-?[0-9]+$",)),
        setting="conversion.seed"))
    max_pixels: int = declare(Option(
        "max_pixels", "reject images whose header claims more pixels", _DECODE,
        Template("Maximum pixels per image", (r"^[1-9][0-9]*$",)),
        setting="conversion.max_pixels"))
    dicom_values: DicomValues = declare(Option(
        "dicom_values", "modality: modality LUT (HU for CT), exact dtype; stored: raw stored "
        "values; window: VOI window to uint8/uint16", _DECODE,
        Template("DICOM values"),
        setting="decode.dicom_values"))
    window: Optional[str] = declare(Option(
        "window", f"CENTER,WIDTH or a preset ({', '.join(PRESETS)}); without it: the file's own",
        _DECODE,
        Template("VOI window"),
        setting="decode.window", parse=parse_window))
    window_bits: WindowBits = declare(Option(
        "window_bits", "output bits of --dicom_values window", _DECODE,
        Template("Window output bits"),
        setting="decode.window_bits"))
    resize: Optional[str] = declare(Option(
        "resize", "HEIGHTxWIDTH, e.g. 512x512; without it: each image's own size", _DECODE,
        Template("Resize", (r"^[1-9][0-9]*x[1-9][0-9]*$",)),
        metavar="HxW", setting="decode.resize", parse=parse_resize))
    resize_mode: ResizeMode = declare(Option(
        "resize_mode", "stretch, pad (keep aspect, pad) or crop (keep aspect, centre crop)", _DECODE,
        Template("Resize mode"),
        setting="decode.resize_mode"))
    spacing: Optional[str] = declare(Option(
        "spacing", "X,Y,Z in mm (column spacing, row spacing, slice step), e.g. 1,1,1, or auto (nnU-Net v2's "
        "target: the per-axis median of the volume records' spacings, an anisotropic dataset's coarse axis "
        "at its 10th percentile; recorded in dataset.json): resample volume "
        "records (--unit series, Enhanced stacks, NIfTI) and their masks to this spacing, a slice record "
        "in-plane only (a third-order spline, masks class by class); without it: each record's own", _DECODE,
        Template("Target spacing (mm)", (r"^([0-9.eE+-]+,[0-9.eE+-]+,[0-9.eE+-]+|auto)$",)),
        metavar="X,Y,Z", setting="decode.spacing", parse=parse_spacing))
    crop: Crop = declare(Option(
        "crop", "off, nonzero (the box of the image's non-zero voxels, nnU-Net's crop) or foreground (the "
        "box of the mask's, with --class_map): cut volume records and their masks to it (a slice record "
        "in-plane), before --spacing; the box is kept as dicom/crop_box", _DECODE,
        Template("Crop"),
        setting="decode.crop"))
    intensity: Intensity = declare(Option(
        "intensity", "none, zscore (nnU-Net's per-image z-score: each channel's non-zero voxels to "
        "(x - mean) / std, the rest 0) or ct (nnU-Net's CT scheme: clipped to the 0.5/99.5 percentiles of "
        "the train split's foreground voxels, then z-scored with their mean and std, a fingerprint the job "
        "computes and dataset.json keeps); float32, after --crop and before --spacing; the values used are "
        "kept as intensity/*", _DECODE,
        Template("Intensity"),
        setting="decode.intensity"))
    channels: Channels = declare(Option(
        "channels", "keep, 1 (RGB -> luma) or 3 (gray repeated)", _DECODE,
        Template("Channels"),
        setting="decode.channels"))
    frames: Frames = declare(Option(
        "frames", "multi-frame DICOM: stack (one record with depth=frames) or split (one per frame)",
        _DECODE,
        Template("Multi-frame DICOM"),
        setting="decode.frames"))
    unit: Unit = declare(Option(
        "unit", "file: one record per file; series: one volume per SeriesInstanceUID, slices in "
        "anatomical order", _DECODE,
        Template("Record unit"),
        setting="conversion.unit"))
    series_gaps: SeriesGaps = declare(Option(
        "series_gaps", "--unit series, slices not evenly spaced (a gap, missing slices, a localizer): fail "
        "them with the reason, or split (each evenly spaced run, each orientation, a volume of its own)",
        _DECODE,
        Template("Series gaps"),
        setting="decode.series_gaps"))
    series_4d: Series4d = declare(Option(
        "series_4d", "--unit series, slices repeating positions in time, b-value, gradient or echo: split "
        "(a record per volume) or stack (one record, depth = volumes x slices)", _DECODE,
        Template("4-D series"),
        setting="decode.series_4d"))
    decode_timeout_s: float = declare(Option(
        "decode_timeout_s", "fail a file whose decoding takes longer (0: no limit)", _DECODE,
        Template("Decode timeout (s)", (_NUMBER,)),
        setting="decode.decode_timeout_s", recorded=False))
    max_failure_ratio: float = declare(Option(
        "max_failure_ratio", "refuse to commit when more than this share of inputs failed", _FAIL,
        Template("Maximum failure ratio", (_NUMBER,)),
        setting="conversion.max_failure_ratio", recorded=False))
    max_failures: Optional[int] = declare(Option(
        "max_failures", "refuse to commit when more than this many inputs failed", _FAIL,
        Template("Maximum failures", (r"^[0-9]+$",)),
        setting="conversion.max_failures", recorded=False))
    allow_empty: bool = declare(Option(
        "allow_empty", "commit an empty dataset when inputs matched but none converted (a scheduled "
        "run on a quiet day); otherwise that run fails with exit 1 and the reasons", _FAIL,
        Template("Allow an empty dataset", (_BOOL,)),
        setting="conversion.allow_empty", recorded=False))
    gcs_retry_s: float = declare(Option(
        "gcs_retry_s", "how long one gs:// request is retried before it fails (Beam's own is 120); "
        "storage that answers nothing for that long stops the run within about twice this", _FAIL,
        Template("Storage retry budget (s)", (_NUMBER,)),
        setting="conversion.storage_retry_s", recorded=False))
    id_salt: Optional[str] = declare(Option(
        "id_salt", f"secret key for hashing identifiers (or ${SALT_ENV}); never written; "
        "local runs only (on any other runner it would travel in the job: use --id_salt_file)",
        _SAFETY,
        None, recorded=False,
        not_in_template="launch parameters are visible to whoever can view the job: the template "
                        "takes id_salt_file"))
    id_salt_file: Optional[str] = declare(Option(
        "id_salt_file", "regular file or gs:// object holding the identifier salt (a mounted "
        "secret or a restricted object): read by each worker, so the salt never travels in the "
        f"job; UTF-8 text, surrounding whitespace removed, at most {MAX_SALT_BYTES} bytes", _SAFETY,
        Template("Identifier salt file", (_GCS,), required=True,
                 note="On Dataflow a Cloud Storage object readable by the workers' service account only "
                      "(e.g. gs://secure-bucket/dcm2tfrecord-salt). Keep it the same across runs."),
        metavar="PATH", recorded=False))
    allow_random_salt: bool = declare(Option(
        "allow_random_salt", "run without a salt: a random one, so hashes differ on every run",
        _SAFETY,
        Template("Allow a random salt", (_BOOL,)),
        default=False, recorded=False))
    keep_tags: tuple[str, ...] = declare(Option(
        "keep_tags", "extra DICOM attributes to write under dicom/ (your responsibility)", _SAFETY,
        Template("Extra DICOM attributes", (r"^[A-Za-z0-9]+(,[A-Za-z0-9]+)*$",),
                 note="Separated by commas."),
        metavar="KEYWORD", setting="decode.keep_tags"))
    keep_source_path: bool = declare(Option(
        "keep_source_path", "write each record's source uri as the feature source_path", _SAFETY,
        Template("Keep source paths", (_BOOL,)),
        setting="decode.keep_source_path"))
    allow_burned_in: bool = declare(Option(
        "allow_burned_in", "convert images whose Burned In Annotation is YES", _SAFETY,
        Template("Allow burned-in annotations", (_BOOL,)),
        setting="decode.allow_burned_in"))
    record_input_paths: bool = declare(Option(
        "record_input_paths", "write the --input and --labels paths into dataset.json as given "
        "(otherwise: scheme, bucket and a keyed hash; folder names often name patients)", _SAFETY,
        Template("Record input paths", (_BOOL,)),
        default=False, content=False))
    labels: Optional[str] = declare(Option(
        "labels", "labels CSV, local or gs://", _LABELS,
        Template("Labels CSV", (_GCS,)),
        metavar="CSV", setting="conversion.labels_csv",
        to_setting=lambda v: absolute(v) if v else None, content=False))
    label_key: LabelKey = declare(Option(
        "label_key", "CSV column joined to records (path: relative to the --input root)", _LABELS,
        Template("Label join key"),
        setting="conversion.label_key"))
    label_key_case: LabelKeyCase = declare(Option(
        "label_key_case", "exact: --label_key values match as written (after Unicode NFC and a "
        "leading ./); fold: ignoring case", _LABELS,
        Template("Label key case"),
        setting="conversion.label_key_case"))
    label_column: str = declare(Option(
        "label_column", "CSV column holding the label", _LABELS,
        Template("Label column"),
        setting="conversion.label_column"))
    multi_label: bool = declare(Option(
        "multi_label", "labels like a|b|c -> multi-hot", _LABELS,
        Template("Multi-label", (_BOOL,)),
        setting="conversion.multi_label"))
    class_map: Optional[str] = declare(Option(
        "class_map", "masks from the DICOM SEG and RTSTRUCT files among the inputs, on the records of the "
        "series they reference (a volume with --unit series, each slice or frame with --unit file), and NIfTI "
        "masks (--mask_pattern, --mask_column): a YAML {class: [regex, ...]} or CSV name,class[,match] file "
        "mapping their ROI and segment names, or NIfTI mask values as text, to classes, local or gs://", _LABELS,
        Template("Class map", (_GCS,)),
        metavar="FILE"))     # the switch of the mask settings (mask_settings)
    mask_layout: MaskLayout = declare(Option(
        "mask_layout", "--class_map: label_map (one class index per voxel, the first-listed class winning an "
        "overlap) or binary (one 0/1 channel per class)", _LABELS,
        Template("Mask layout"),
        setting="masks.layout"))
    missing_mask: MissingMask = declare(Option(
        "missing_mask", "--class_map, a series no annotation covers: skip, error, or empty (an all-background "
        "mask)", _LABELS,
        Template("Series without a mask"),
        setting="masks.missing"))
    mask_pattern: Optional[str] = declare(Option(
        "mask_pattern", "--class_map, NIfTI masks paired with NIfTI images by path: IMAGE_REGEX=MASK_PATH, a "
        "regex matching an image's whole path relative to its --input root and the mask's path there, \\1 "
        "standing for its first group, e.g. 'imagesTr/(.*)_0000\\.nii\\.gz=labelsTr/\\1.nii.gz'", _LABELS,
        Template("Mask pattern"),
        metavar="REGEX=PATH", setting="masks.pattern",
        to_setting=lambda v: parse_mask_pattern(v) if v else None))
    mask_column: Optional[str] = declare(Option(
        "mask_column", "--class_map, NIfTI masks paired with NIfTI images by this --labels column: each "
        "image's mask path, relative to the --input root (--label_key path)", _LABELS,
        Template("Mask column"),
        metavar="COLUMN", setting="masks.column"))
    class_locations: int = declare(Option(
        "class_locations", "--class_map: keep with each record, for each class, its voxel count, its box "
        "and up to N of its voxels (k, j, i), drawn deterministically from the mask as written (MONAI's "
        "max_indices_per_class), as classes/*: what a patch sampler picks foreground centres from without "
        "reading the pixels (off unless given)", _LABELS,
        Template("Class locations per class", (r"^[0-9]+$",)),
        metavar="N", setting="masks.locations"))
    labels_from_dirs: bool = declare(Option(
        "labels_from_dirs", "class = parent folder name (ImageNet layout)", _LABELS,
        Template("Labels from folders", (_BOOL,)),
        setting="conversion.labels_from_dirs"))
    missing_label: MissingLabel = declare(Option(
        "missing_label", "records without a label: skip, error, or keep as -1 (unlabeled)", _LABELS,
        Template("Records without a label"),
        setting="conversion.missing_label"))
    splits: str = declare(Option(
        "splits", "split names and fractions summing to 1, e.g. train=0.8,validation=0.1,test=0.1", _LABELS,
        Template("Splits", (r"^[A-Za-z0-9_-]+=[0-9.]+(,[A-Za-z0-9_-]+=[0-9.]+)*$",)),
        setting="conversion.splits", parse=parse_splits, text=splits_text))
    split_by: Optional[SplitBy] = declare(Option(
        "split_by", "group kept in one split (without it: patient for DICOM, record otherwise)",
        _LABELS,
        Template("Split grouping"),
        setting="conversion.split_by"))
    split_column: Optional[str] = declare(Option(
        "split_column", "take each record's split from this labels CSV column instead", _LABELS,
        Template("Split column"),
        setting="conversion.split_column"))
    allow_split_leak: bool = declare(Option(
        "allow_split_leak", "commit although --split_column puts one group (a patient, unless --split_by) "
        "in several splits; otherwise such a run fails with exit 1, naming the count and the splits",
        _LABELS,
        Template("Allow a group in several splits", (_BOOL,)),
        setting="conversion.allow_split_leak", recorded=False))
    summary_json: Optional[str] = declare(Option(
        "summary_json", "also write the end-of-run summary as JSON here (local or gs://)", _REPORT,
        Template("Summary file", (_GCS,)),
        metavar="PATH", recorded=False))
    progress: Progress = declare(Option(
        "progress", "auto: a bar on a terminal, a line every 10 s otherwise; bar, log or none",
        _REPORT,
        Template("Progress display"),
        default="auto", recorded=False))

    def __post_init__(self) -> None:
        # a choice given as text becomes its enum member, a list a tuple (the value stays hashable);
        # a text with a structure is parsed, once: settings() takes the parsed value (typed())
        parsed: dict[str, Any] = {}
        for option in OPTIONS:
            value = getattr(self, option.name)
            try:
                held = option.coerce(value)
            except ValueError as exc:
                raise UsageError(f"--{option.flag}: {exc}") from None
            if held is not value:
                object.__setattr__(self, option.name, held)
            if option.parse is not None:
                try:
                    parsed[option.name] = option.parse(held) if held else None
                except ValueError as exc:     # the parsers' messages name the option
                    raise UsageError(str(exc)) from None
        object.__setattr__(self, "_parsed", parsed)

    def typed(self, name: str) -> Any:
        """The value of option ``name`` as the settings take it: parsed (window, resize, splits)
        when the value was made, else the field itself."""
        parsed: dict[str, Any] = self.__dict__["_parsed"]
        return parsed[name] if name in parsed else getattr(self, name)

    def salt(self) -> str:
        """--id_salt, else the content of --id_salt_file, else $DCM2TFRECORD_ID_SALT, else (with
        --allow_random_salt) a fresh one."""
        return resolve_salt(self.id_salt, self.id_salt_file, self.allow_random_salt)

    @property
    def bounds(self) -> ShardBounds:
        return ShardBounds.from_mb(self.target_shard_mb, self.min_shard_mb, self.max_shard_mb)

    def mask_settings(self) -> Optional[MaskSettings]:
        """The mask settings (transforms.masks.settings), fed by the ``masks.*`` options, the class
        map read and parsed (MappingError naming it when it cannot be); None without --class_map:
        masks off."""
        if not self.class_map:
            return None
        fed: dict[str, Any] = {}
        for option in OPTIONS:
            target, _, name = option.setting.partition(".")
            if target == "masks":
                value = self.typed(option.name)
                fed[name] = option.to_setting(value) if option.to_setting else value
        return MaskSettings(class_map=load_class_map(absolute(self.class_map)), **fed)

    def settings(self, masks: Optional[MaskSettings] = None) -> ConversionSettings:
        """The settings the job graph is built from, fed by each option's ``setting``: the
        typed values (choices as their enum members, parsed texts as parsed), copied.
        ``masks``: the mask settings already read (mask_settings, which the run calls before
        any work), else read here."""
        # With --id_salt_file the salt stays out of the settings (and so out of the job graph):
        # each worker reads the file at setup (transforms.settings.with_salt).
        from_file = bool(self.id_salt_file and not self.id_salt)
        fed: dict[str, dict[str, Any]] = {
            "decode": {"id_salt": "" if from_file else self.salt(),
                       "id_salt_file": absolute(self.id_salt_file) if self.id_salt_file else "",
                       # the salt read at the start, named: a worker whose file says otherwise fails
                       "id_salt_check": salt_check(self.salt()) if from_file else ""},
            "conversion": {}}
        for option in OPTIONS:
            if option.setting and not option.setting.startswith("masks."):
                target, name = option.setting.split(".")
                value = self.typed(option.name)
                fed[target][name] = option.to_setting(value) if option.to_setting else value
        fed["decode"]["masks"] = masks if masks is not None else self.mask_settings()
        return ConversionSettings(bounds=self.bounds, decode=DecodeSettings(**fed["decode"]), **fed["conversion"])

    def recorded(self) -> dict[str, Any]:
        """The options that shape the output, as stored in dataset.json (choices as their
        plain values).

        Locations (--input, --labels) only as :func:`recorded_location` unless
        --record_input_paths.
        """
        out: dict[str, Any] = {}
        for option in OPTIONS:
            if option.recorded:
                value = option.plain(getattr(self, option.name))
                out[option.name] = list(value) if option.kind == "list" else value
        if not self.record_input_paths:
            out["inputs"] = [recorded_location(p, self.salt()) for p in self.inputs]
            out["labels"] = recorded_location(self.labels, self.salt()) if self.labels else None
            out["class_map"] = recorded_location(self.class_map, self.salt()) if self.class_map else None
        out["splits"] = dict(self.typed("splits"))
        out["id_salt"] = ("random (hashes differ every run)" if self.salt() == RANDOM_SALT
                          else "set (not recorded)")
        return out

    def replace(self, **changes: Any) -> "ConvertOptions":
        return dataclasses.replace(self, **changes)


def _table() -> tuple[Option, ...]:
    """The rows of the ConvertOptions fields, each told its field's name and value type."""
    hints = typing.get_type_hints(ConvertOptions)
    rows = []
    for field in dataclasses.fields(ConvertOptions):
        kind = hints[field.name]
        if typing.get_origin(kind) is typing.Union:          # Optional[X]: X
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        rows.append(dataclasses.replace(field.metadata["option"], name=field.name,
                                        value_type=typing.get_origin(kind) or kind))
    return tuple(rows)


OPTIONS: tuple[Option, ...] = _table()
# Options whose change between --incremental versions leaves earlier shards reusable.
PLACEMENT_OPTIONS = frozenset(o.name for o in OPTIONS if o.recorded and not o.content)
