"""The rules that relate convert options to each other and to their ranges, checked before
any work: each broken one a UsageError naming the option and the fix.

:func:`check_options` is their one owner, run once per conversion: by
``parse_convert`` for the command line (whose ``main`` then calls
``convert.run_checked``), by ``convert.run`` for library callers. A choice
outside its enum never gets this far (argparse's type, or ConvertOptions
itself, turns it into its enum member or refuses it), nor does a --window, --resize, --spacing or
--splits that does not parse (ConvertOptions parses them once, when it is made)."""
from __future__ import annotations

from typing import Any, Sequence

from dcm2tfrecord.dataset.bricks import edge_refusal
from dcm2tfrecord.dataset.features import PixelEncoding
from dcm2tfrecord.dataset.file_adapters import Compression
from dcm2tfrecord.dataset.file_adapters import level_refusal
from dcm2tfrecord.pipeline.options.label_csv_checks import check_label_csv
from dcm2tfrecord.pipeline.options.table import OPTIONS, ConvertOptions
from dcm2tfrecord.pipeline.options.salt import RANDOM_SALT, SALT_ENV, check_salt_stays_out_of_the_job
from dcm2tfrecord.pipeline.options.usage import UsageError
from dcm2tfrecord.transforms.dicom.spec import DicomValues
from dcm2tfrecord.transforms.images.crop import Crop
from dcm2tfrecord.transforms.images.fingerprint import TRAINING_SPLIT
from dcm2tfrecord.transforms.images.intensity import Intensity
from dcm2tfrecord.transforms.labels.table import LabelKey
from dcm2tfrecord.transforms.masks.pairing import PatternError, parse_mask_pattern
from dcm2tfrecord.transforms.records.probe import Frames
from dcm2tfrecord.transforms.series.volumes import Series4d, Unit


def check_options(opts: ConvertOptions, beam_args: Sequence[str]) -> None:
    """Every rule, and that the salt stays out of a job that leaves this process."""
    if opts.output is None:    # the command line requires --output; a library caller may leave it out
        raise UsageError("--output is required: the dataset directory, local or gs://")
    validate(opts)
    check_salt_stays_out_of_the_job(opts, beam_args)


def validate(opts: ConvertOptions) -> None:
    for name in ("min_shard_mb", "target_shard_mb", "max_shard_mb"):
        if not getattr(opts, name) > 0:
            raise UsageError(f"--{name} {getattr(opts, name):g} must be > 0 (megabytes)")
    if not opts.min_shard_mb <= opts.max_shard_mb:
        raise UsageError(f"--min_shard_mb {opts.min_shard_mb:g} must be <= --max_shard_mb "
                         f"{opts.max_shard_mb:g}")
    if not (opts.min_shard_mb <= opts.target_shard_mb <= opts.max_shard_mb):
        raise UsageError(f"--target_shard_mb {opts.target_shard_mb:g} must lie between --min_shard_mb "
                         f"{opts.min_shard_mb:g} and --max_shard_mb {opts.max_shard_mb:g}")
    if opts.max_pixels <= 0:
        raise UsageError("--max_pixels must be positive")
    if not 0 <= opts.max_failure_ratio <= 1:
        raise UsageError(f"--max_failure_ratio {opts.max_failure_ratio} must lie in [0, 1]")
    level_problem = level_refusal(opts.compression, opts.gzip_level)
    if level_problem:
        raise UsageError(level_problem)
    if opts.min_shards < 1:
        raise UsageError("--min_shards must be >= 1")
    if opts.gcs_retry_s <= 0:
        raise UsageError(f"--gcs_retry_s {opts.gcs_retry_s} must be > 0 (seconds)")
    if opts.encrypt:
        _check_encrypt(opts)
    if opts.incremental and opts.overwrite:
        raise UsageError("--incremental and --overwrite exclude each other: --incremental adds a "
                         "version and keeps the earlier ones (roll back with 'dcm2tfrecord rollback')")
    if opts.incremental and opts.salt() == RANDOM_SALT:
        raise UsageError("--incremental needs a fixed --id_salt (or $" + SALT_ENV + "): with "
                         "--allow_random_salt no record id repeats, so nothing could be reused")
    if opts.labels and opts.labels_from_dirs:
        raise UsageError("--labels and --labels_from_dirs exclude each other; choose one")
    if opts.split_column and not opts.labels:
        raise UsageError("--split_column needs --labels (the CSV that holds the column)")
    if opts.multi_label and not (opts.labels or opts.labels_from_dirs):
        raise UsageError("--multi_label needs --labels")
    if opts.labels:
        check_label_csv(opts)
    if opts.unit == Unit.SERIES and opts.frames == Frames.SPLIT:
        raise UsageError("--unit series and --frames split exclude each other")
    check_mask_pairing(opts)
    if opts.class_locations < 0:
        raise UsageError(f"--class_locations {opts.class_locations} must be >= 0 (voxels kept per class; 0: none)")
    for flag in ("mask_layout", "missing_mask", "class_locations"):
        if not opts.class_map and getattr(opts, flag) != _default(flag):
            raise UsageError(f"--{flag} {getattr(opts, flag)} needs --class_map (the mapping that makes masks)")
    for flag in ("series_gaps", "series_4d"):
        if opts.unit != Unit.SERIES and getattr(opts, flag) != _default(flag):
            raise UsageError(f"--{flag} {getattr(opts, flag)} needs --unit series (it says how a series' slices "
                             "become volumes)")
    if opts.spacing and opts.resize:
        raise UsageError("--spacing and --resize exclude each other: --spacing sets each record's size from its "
                         "spacing; give one of them")
    if opts.spacing and str(opts.spacing).strip().lower() == "auto" and opts.incremental:
        raise UsageError("--spacing auto and --incremental exclude each other: the target is chosen from the "
                         "records converted, and the base version's records were resampled to its own; give the "
                         "spacing the base chose (its dataset.json's auto_spacing target_mm) as --spacing X,Y,Z")
    if opts.spacing and opts.series_4d == Series4d.STACK:
        raise UsageError("--spacing needs --series_4d split: a stacked 4-D record's slices are several volumes, "
                         "which resampling along the slices would blend")
    if opts.crop == Crop.FOREGROUND and not opts.class_map:
        raise UsageError("--crop foreground needs --class_map (the masks whose foreground it crops to); "
                         "or use --crop nonzero")
    if opts.crop != Crop.OFF and opts.resize:
        raise UsageError(f"--crop {opts.crop} and --resize exclude each other: a cropped record keeps its "
                         "voxels' size (use --spacing to resample it); give one of them")
    if opts.crop != Crop.OFF and opts.series_4d == Series4d.STACK:
        raise UsageError(f"--crop {opts.crop} needs --series_4d split: a stacked 4-D record's slices are several "
                         "volumes, which one box along the slices would cut apart")
    if opts.intensity != Intensity.NONE and opts.dicom_values == DicomValues.WINDOW:
        raise UsageError(f"--intensity {opts.intensity} needs --dicom_values modality or stored: a window's "
                         "display values are already scaled; z-score the values themselves")
    if opts.intensity != Intensity.NONE and opts.pixel_encoding == PixelEncoding.PNG:
        raise UsageError(f"--intensity {opts.intensity} writes float32, which PNG cannot hold: use "
                         "--pixel_encoding raw")
    if opts.intensity == Intensity.CT and not opts.split_column and \
            TRAINING_SPLIT not in dict(opts.typed("splits")):
        raise UsageError(f"--intensity ct computes its fingerprint over the split named {TRAINING_SPLIT!r}, and "
                         f"--splits {opts.splits} has none; name the training split {TRAINING_SPLIT}")
    check_volume_chunks(opts)
    if opts.window and opts.dicom_values != DicomValues.WINDOW:
        raise UsageError("--window needs --dicom_values window")
    if opts.id_salt and opts.id_salt_file:
        raise UsageError("--id_salt and --id_salt_file exclude each other; give the salt one way")
    if not opts.salt():
        raise UsageError(f"no identifier salt: set --id_salt_file (or --id_salt, or ${SALT_ENV}) to a "
                         "secret kept the same across runs (stable hashes, stable splits), or pass "
                         "--allow_random_salt")


def _check_encrypt(opts: ConvertOptions) -> None:
    """--encrypt: a key URI some key source takes, shards nothing else wraps."""
    from dcm2tfrecord.dataset.encryption import EncryptionError, check_uri
    try:
        check_uri(opts.encrypt or "")
    except EncryptionError as exc:
        raise UsageError(f"--encrypt: {exc}") from None
    try:       # the launcher can use the key: a missing key file fails now, in one line
        from dcm2tfrecord.dataset.encryption import KEY_BYTES, kek
        kek(opts.encrypt or "").wrap(bytes(KEY_BYTES))
    except EncryptionError as exc:
        raise UsageError(f"--encrypt: {exc}") from None
    if opts.compression != Compression.NONE:
        raise UsageError(f"--encrypt and --compression {opts.compression} exclude each other: ciphertext does "
                         "not compress; use --pixel_encoding png for smaller encrypted shards")
    if opts.incremental:
        raise UsageError("--encrypt does not combine with --incremental yet: convert the whole "
                         "dataset into a new directory")


def check_volume_chunks(opts: ConvertOptions) -> None:
    """--volume_chunks N and --volume_codec: bricks of raw pixels, read by byte offset."""
    refusal = edge_refusal(opts.volume_chunks)
    if refusal:
        raise UsageError(refusal)
    if not opts.volume_chunks:
        if opts.volume_codec != _default("volume_codec"):
            raise UsageError(f"--volume_codec {opts.volume_codec} needs --volume_chunks N (the bricks it "
                             "compresses), e.g. --volume_chunks 64")
        return
    if opts.pixel_encoding == PixelEncoding.PNG:
        raise UsageError(f"--volume_chunks {opts.volume_chunks} stores raw pixels as bricks, which "
                         "--pixel_encoding png cannot: use --pixel_encoding raw (with --volume_codec zstd "
                         "to compress the bricks)")
    if opts.compression != Compression.NONE:
        raise UsageError(f"--volume_chunks {opts.volume_chunks}: bricks are read at their byte offsets, which "
                         f"--compression {opts.compression} shards cannot be entered at; use --compression none "
                         "(with --volume_codec zstd to compress the bricks)")
    if opts.encrypt:
        raise UsageError(f"--volume_chunks {opts.volume_chunks} and --encrypt exclude each other: a patch is read "
                         "at its bricks' byte offsets, and an encrypted record is one ciphertext, read and "
                         "authenticated whole; drop one of them")
    if opts.frames == Frames.SPLIT:
        raise UsageError(f"--volume_chunks {opts.volume_chunks} makes bricks of volumes, and --frames split "
                         "makes every record one 2-D frame: drop one of them")


def _default(name: str) -> Any:
    """The default of option ``name``, from the option table (its one owner)."""
    return next(o.default_value for o in OPTIONS if o.name == name)


def check_mask_pairing(opts: ConvertOptions) -> None:
    """--class_map's masks: SEG and RTSTRUCT files joined to series (--unit series), or NIfTI
    masks paired with NIfTI images by --mask_pattern or --mask_column (either unit: a NIfTI is a
    volume record whatever --unit says)."""
    nifti_masks = "--mask_pattern" if opts.mask_pattern else "--mask_column" if opts.mask_column else ""
    if opts.mask_pattern and opts.mask_column:
        raise UsageError("--mask_pattern and --mask_column exclude each other; pair the masks one way")
    if nifti_masks and not opts.class_map:
        raise UsageError(f"{nifti_masks} needs --class_map (the file mapping mask values to classes, e.g. "
                         f"'kidney: [\"1\"]')")
    if opts.mask_column and not opts.labels:
        raise UsageError("--mask_column needs --labels (the CSV that holds the column)")
    if opts.mask_column and opts.label_key != LabelKey.PATH:
        raise UsageError(f"--mask_column needs --label_key path, not {opts.label_key}: a NIfTI image is "
                         f"joined to its row by its path")
    if opts.mask_pattern:
        try:
            parse_mask_pattern(opts.mask_pattern)
        except PatternError as exc:
            raise UsageError(str(exc)) from None
