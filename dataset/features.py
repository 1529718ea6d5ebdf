"""The default record layout (docs/ARCHITECTURE.md, "Record format").

``image_raw``/``label``/``height``/``width``/``channels`` keep the classic
layout, so a textbook ``parse_single_example`` reader works on 8-bit output;
``depth``, ``dtype``, ``encoding``, ``id`` and ``dicom/*`` extend it.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from dcm2tfrecord.dataset import png
from dcm2tfrecord.dataset.choices import StrEnum
from dcm2tfrecord.dataset.example import encode_example_parts

FORMAT_VERSION = 1        # dataset.json's; a reader refuses a newer one (dataset/manifest.py)
# an encrypted dataset's (convert --encrypt, dataset/encryption.py): readers from before
# encryption refuse it in one line rather than parse ciphertext; plain datasets keep FORMAT_VERSION
ENCRYPTED_FORMAT_VERSION = 2
READABLE_FORMAT_VERSION = ENCRYPTED_FORMAT_VERSION     # the newest this code reads


class PixelEncoding(StrEnum):
    """``--pixel_encoding``: image_raw's bytes, raw pixels or one PNG image (dataset/png.py)."""
    RAW = "raw"
    PNG = "png"


ENCODING_RAW: str = PixelEncoding.RAW.value
ENCODING_PNG: str = PixelEncoding.PNG.value

# Feature names: every module spells them through these.
IMAGE_RAW = "image_raw"
LABEL = "label"
HEIGHT = "height"
WIDTH = "width"
CHANNELS = "channels"
DEPTH = "depth"
DTYPE = "dtype"
ENCODING = "encoding"
ID = "id"
FORMAT = "format"
SOURCE_PATH = "source_path"
DICOM_PREFIX = "dicom/"       # dicom/<keyword> metadata features
SHAPE_FEATURES = (DEPTH, HEIGHT, WIDTH, CHANNELS)     # the order of a record's [d, h, w, c]
# --class_map (issue 33): the mask, [depth, height, width, MASK_CHANNELS] of MASK_DTYPE, aligned
# voxel for voxel with IMAGE_RAW; dataset.json's "mask_classes" names its classes
MASK_RAW = "mask_raw"
MASK_DTYPE = "mask_dtype"
MASK_CHANNELS = "mask_channels"
MASK_CLASSES = "mask_classes"
# --class_locations N (issue 45): per class c = 1..K of the mask as written, its voxel count, its
# box [k0, k1, j0, j1, i0, i1] (half-open; zeros for an absent class), and up to N of its voxels
# (k, j, i), chosen deterministically (transforms/masks/locations.py), flat, class after class,
# with how many each class has: what a patch sampler (reader/patch_sampler.py) reads without the pixels
CLASS_VOXELS = "classes/voxels"
CLASS_BOX = "classes/box"
CLASS_LOCATIONS = "classes/locations"
CLASS_LOCATION_COUNTS = "classes/location_counts"
CLASS_LOCATION_FEATURES = (CLASS_VOXELS, CLASS_BOX, CLASS_LOCATIONS, CLASS_LOCATION_COUNTS)
# --volume_chunks N (issue 45): image_raw (and mask_raw) as bricks of N^3 voxels, C order of brick
# index, each value one brick (compressed by --volume_codec), with each value's size in bytes;
# dataset/bricks.py. The sizes sort before the bricks, so a reader reads them first.
IMAGE_BRICKS = "image_bricks"
IMAGE_BRICK_SIZES = "image_brick_sizes"
MASK_BRICKS = "mask_bricks"
MASK_BRICK_SIZES = "mask_brick_sizes"


def class_location_features(class_count: int) -> dict:
    """dataset.json's entries of the --class_locations features for ``class_count`` classes."""
    k = int(class_count)
    return {CLASS_VOXELS: {"dtype": "int64", "shape": [k], "description": "voxels of each class 1..K"},
            CLASS_BOX: {"dtype": "int64", "shape": [6 * k],
                        "description": "each class's box [k0, k1, j0, j1, i0, i1], half-open; zeros if absent"},
            CLASS_LOCATIONS: {"dtype": "int64", "shape": [-1],
                              "description": "sampled voxels (k, j, i) of class 1, then class 2, ..."},
            CLASS_LOCATION_COUNTS: {"dtype": "int64", "shape": [k],
                                    "description": "how many (k, j, i) of classes/locations each class has"}}
# The training view (convert --crop, --spacing, --intensity; issue 44), checked by verify
# (dataset/verify_view.py) in this layer: transforms/dicom/patient_space.py spells the geometry
# through these, transforms/images/intensity.py and fingerprint.py the intensity/* names
AFFINE = "dicom/affine"
PIXEL_SPACING = "dicom/pixel_spacing"
SLICE_SPACING = "dicom/slice_spacing"
ORIGINAL_SHAPE = "dicom/original_shape"
CROP_BOX = "dicom/crop_box"
INTENSITY_MEAN = "intensity/mean"
INTENSITY_STD = "intensity/std"
INTENSITY_CLIP_LOW = "intensity/clip_low"      # --intensity ct
INTENSITY_CLIP_HIGH = "intensity/clip_high"


class RecordKind(StrEnum):
    """What a record was made from: its FORMAT feature's value, the converter's source kind
    (transforms/sources/sniff.py tells them apart) and what readers and verify branch on.
    Members are written as their strings, as the plain strings were before."""
    DICOM = "dicom"
    IMAGE = "image"         # a raster image Pillow reads (PNG, JPEG, TIFF, ...)
    NIFTI = "nifti"         # NIfTI-1 / NIfTI-2, .nii or .nii.gz


CORE_FEATURES = {
    IMAGE_RAW: {"dtype": "bytes", "shape": [], "encoding": ENCODING_RAW,
                "description": "pixels, little-endian, row-major [depth, height, width, channels]"},
    LABEL: {"dtype": "int64", "shape": [], "description": "class index, -1 when unlabeled"},
    HEIGHT: {"dtype": "int64", "shape": []},
    WIDTH: {"dtype": "int64", "shape": []},
    CHANNELS: {"dtype": "int64", "shape": []},
    DEPTH: {"dtype": "int64", "shape": [], "description": "frames or slices; 1 for 2-D"},
    DTYPE: {"dtype": "bytes", "shape": [], "description": "numpy dtype name of image_raw"},
    ENCODING: {"dtype": "bytes", "shape": [], "description": "raw"},
    ID: {"dtype": "bytes", "shape": [], "description": "keyed hash of the source path"},
    FORMAT: {"dtype": "bytes", "shape": [], "description": "dicom, image or nifti"},
}
SOURCE_PATH_FEATURE = {"dtype": "bytes", "shape": [], "description": "--keep_source_path"}


def image_features(encoding: str) -> dict:
    """dataset.json's ``image_raw`` and ``encoding`` entries for records of ``encoding``
    (CORE_FEATURES' for raw)."""
    if encoding == ENCODING_RAW:
        return {IMAGE_RAW: dict(CORE_FEATURES[IMAGE_RAW]), ENCODING: dict(CORE_FEATURES[ENCODING])}
    return {IMAGE_RAW: {"dtype": "bytes", "shape": [], "encoding": ENCODING_PNG,
                        "description": "one PNG image: the [depth, height, width, channels] pixels as "
                                       "depth * height rows; signed dtypes as their unsigned bits"},
            ENCODING: {"dtype": "bytes", "shape": [], "description": ENCODING_PNG}}


def _label_feature(label):
    """int -> Int64List, float -> FloatList, multi-hot tuple -> Int64List of the vector."""
    if isinstance(label, tuple):
        return np.asarray(label, dtype=np.int64)
    if isinstance(label, float):
        return float(label)
    return int(label)


def serialize_record(pixels: np.ndarray, record_id: str, kind: str, label=-1,
                     metadata: Mapping[str, object] | None = None, encoding: str = ENCODING_RAW,
                     chunks: tuple[int, str] | None = None) -> bytes:
    """One serialized tf.train.Example for a (D, H, W, C) pixel array."""
    return b"".join(serialize_record_parts(pixels, record_id, kind, label, metadata, encoding, chunks))


def serialize_record_parts(pixels: np.ndarray, record_id: str, kind: str, label=-1,
                           metadata: Mapping[str, object] | None = None, encoding: str = ENCODING_RAW,
                           chunks: tuple[int, str] | None = None) -> list:
    """:func:`serialize_record`'s bytes as parts (``encode_example_parts``): raw pixels
    stay a view of ``pixels``, uncopied, for the shard writer to frame and write; with
    ``encoding`` png they are one PNG image (:class:`png.NotEncodable` where they cannot be);
    with ``chunks`` ``(edge, codec)`` (--volume_chunks) the image and mask are bricks
    (dataset/bricks.py)."""
    depth, height, width, channels = pixels.shape
    features: dict = {
        IMAGE_RAW: pixels.data.cast("B") if encoding == ENCODING_RAW else png.encode(pixels),
        LABEL: _label_feature(label),
        HEIGHT: height,
        WIDTH: width,
        CHANNELS: channels,
        DEPTH: depth,
        DTYPE: pixels.dtype.newbyteorder("=").name,
        ENCODING: encoding,
        ID: record_id,
        FORMAT: kind,
    }
    if metadata:
        features.update(metadata)
    if chunks:
        from dcm2tfrecord.dataset import bricks     # it spells its feature names through this module
        features = bricks.record_features(features, pixels, chunks[0], chunks[1])
    return encode_example_parts(features)
