"""dcm2tfrecord: DICOM and image archives -> size-bounded TFRecord shards, and back.

The converter requires dcm2tfrecord-reader (the format and the reader, ./reader_dist) of
exactly its version. No package index holds it, so when this file is built from the
repository (./reader_dist beside it) the requirement names that folder as a PEP 508 direct
reference, and ``pip install .`` installs both; an sdist (Beam's stager builds one for
--setup_file) and an install from it keep the plain ``==VERSION`` requirement, met by the
reader wheel staged beside it (run_dataflow.sh). tests/e2e/test_install.py holds both.
"""
import os
import sys
from pathlib import Path

from setuptools import setup

VERSION = "0.1.0"
READER = "dcm2tfrecord-reader"
READER_DIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reader_dist")


def reader_requirement(argv: list) -> str:
    """The reader requirement: ./reader_dist by direct reference when it is beside this file
    (a checkout), except in an sdist, whose metadata must not name a path of this machine."""
    if os.path.isfile(os.path.join(READER_DIST, "setup.py")) and "sdist" not in argv[1:]:
        return f"{READER} @ {Path(READER_DIST).as_uri()}"
    return f"{READER}=={VERSION}"


def with_reader_from_checkout(requires: list) -> list:
    return [reader_requirement(sys.argv) if r == f"{READER}=={VERSION}" else r for r in requires]


INSTALL_REQUIRES = [
    # the format and the reader: reader_dist/ of this repository, its VERSION (by direct
    # reference from a checkout: with_reader_from_checkout)
    "dcm2tfrecord-reader==0.1.0",
    "apache-beam[gcp]>=2.60",
    "tensorflow>=2.15",
    "numpy>=1.24",
    "pydicom>=3.0",
    "pillow>=10.0",
    "pylibjpeg>=2.0",
    "pylibjpeg-libjpeg>=2.1",
    "pylibjpeg-openjpeg>=2.3",
    "pylibjpeg-rle>=2.0",
    "tqdm>=4.60",
    "imagecodecs>=2024.1",
    # reader.RandomAccess reads shards without TensorFlow: the Example parser and
    # the TFRecord CRC (both came with TensorFlow and Beam before; named now
    # because reader/ imports them itself).
    "protobuf>=4.21",
    "google-crc32c>=1.5",
    # Siemens CSA headers (mosaic tile count, slice normal, diffusion b-value and
    # gradient): nibabel's nicom.csareader is the kept, tested parser of that private
    # binary format; ours would be a second one (docs/DICOM.md, "Geometry").
    "nibabel>=5.0",
    # DICOM Segmentation masks (transforms/masks/seg.py): highdicom decodes and indexes SEG
    # frames by source image (binary, fractional, label map); the tests also build their
    # independent Enhanced multi-frame objects with it
    "highdicom>=0.28",
    # --class_map's YAML form (transforms/masks/classes.py); Beam depends on it too, named
    # here because we import it ourselves
    "pyyaml>=5.4",
    # convert --encrypt (dataset/encryption.py): AES-256-GCM from the cryptography package
    # (OpenSSL's), no primitive of ours; it came with google-auth before, named now because we
    # import it ourselves. Cloud KMS keys (gcp-kms://) use google-cloud-kms, which
    # apache-beam[gcp] brings.
    "cryptography>=41",
    # class-map rules and --mask_pattern are users' regexes matched against ROI names and
    # paths nobody controls: RE2 matches in time linear in the text, where Python's re
    # backtracks for hours holding the GIL (transforms/masks/patterns.py); regex runs, with a
    # time bound per match, the few constructs RE2 lacks (lookarounds, backreferences)
    "google-re2>=1.1",
    "regex>=2023.0",
    # --spacing (transforms/images/spacing.py): scipy.ndimage's splines resample images and
    # masks to a target spacing, a kept library's interpolation, never ours
    "scipy>=1.10",
]

setup(
    name="dcm2tfrecord",
    version=VERSION,
    description=(
        "Apache Beam pipeline that converts DICOM/PNG/JPEG archives into "
        "deterministic, size-bounded TFRecord shards, plus a tf.data reader."
    ),
    python_requires=">=3.10",
    # One import name, dcm2tfrecord (README, "Migrating"). The converter ships the two
    # packages whose folders the design puts at the top of the repository; the format
    # (dcm2tfrecord.dataset) and the reader come from dcm2tfrecord-reader (reader_dist/),
    # which it requires, never a second copy (INSTALL_REQUIRES, reader_requirement).
    packages=[
        "dcm2tfrecord.pipeline",
        "dcm2tfrecord.pipeline.commands",
        "dcm2tfrecord.pipeline.launch",
        "dcm2tfrecord.pipeline.options",
        "dcm2tfrecord.transforms",
        "dcm2tfrecord.transforms.dicom",
        "dcm2tfrecord.transforms.images",
        "dcm2tfrecord.transforms.labels",
        "dcm2tfrecord.transforms.masks",
        "dcm2tfrecord.transforms.nifti",
        "dcm2tfrecord.transforms.output",
        "dcm2tfrecord.transforms.planning",
        "dcm2tfrecord.transforms.records",
        "dcm2tfrecord.transforms.series",
        "dcm2tfrecord.transforms.sources",
        "dcm2tfrecord.transforms.splits",
    ],
    package_dir={"dcm2tfrecord.pipeline": "pipeline", "dcm2tfrecord.transforms": "transforms"},
    install_requires=with_reader_from_checkout(INSTALL_REQUIRES),
    extras_require={
        "test": ["pytest>=7", "hypothesis>=6.80", "gcp-storage-emulator>=2024.0",
                 "grain>=0.2",
                 # tests/reader/test_loaders.py runs real torch. PyPI's Linux wheel is a CUDA
                 # build and will not import without its NVIDIA wheels (~1.5 min, ~5 GB here),
                 # even for CPU tensors; CI failed on a torch installed without them
                 "torch>=2.2",
                 # tests/dataset/test_tfds_metadata.py opens the output with TFDS itself
                 # (tfds.builder_from_directory over dataset_info.json and features.json), and
                 # tests/reader/test_hf_datasets.py runs docs/READING.md's Hugging Face recipe
                 "tensorflow-datasets>=4.9", "datasets>=2.14",
                 # run_tests.sh: one worker per core (the suite fits CI's 20 minutes)
                 "pytest-xdist>=3.5",
                 # pytest.ini's per-test timeout: a test that hangs fails instead of stalling the run
                 "pytest-timeout>=2.4",
                 # independent converters the geometry, mosaic and diffusion tests compare
                 # against (tests/transforms/series/): dcm2niix's own binary, and ITK's GDCM reader
                 "dcm2niix>=1.0.20240202", "SimpleITK>=2.3",
                 # independent RTSTRUCT writer and reader for tests/transforms/masks/test_rtstruct.py
                 # (it pulls opencv-python, whose findContours traces the masks)
                 "rt-utils>=1.2.7",
                 # nnU-Net v2's own fingerprint extractor and CTNormalization, the reference
                 # tests/transforms/images/test_fingerprint.py and masks/test_fingerprint_e2e.py
                 # compare --intensity ct against (issue 44: "equal nnU-Net's own code"), and its
                 # planner's determine_fullres_target_spacing, which tests/transforms/images/
                 # test_auto_spacing.py compares --spacing auto's rule against
                 "nnunetv2>=2.5",
                 # benchmarks/bench_patches.py's peers, which tests/e2e/test_bench_smoke_b.py runs at
                 # --smoke size so their code paths cannot rot (docs/BENCHMARKS.md, "26. Patches
                 # against MONAI, TorchIO and nnU-Net"): MONAI's CacheDataset/PersistentDataset with
                 # RandCropByPosNegLabeld, TorchIO's Queue with LabelSampler (both over torch, above)
                 "monai>=1.3", "torchio>=0.20",
                 # scikit-image's point-in-polygon labels: the independent answer
                 # tests/transforms/masks/test_polygons.py checks the RTSTRUCT fill against
                 "scikit-image>=0.21",
                 # scripts/static_checks.sh (ruff.toml, mypy.ini), run by .ci/run
                 "ruff>=0.6", "mypy>=1.10"],
        # benchmarks/bench_peers.py's peers (docs/BENCHMARKS.md, "18. dcm2tfrecord against its peers"):
        # WebDataset, and ArrayRecord read by Grain. Mosaic Streaming is installed apart
        # (--no-deps): mosaicml-streaming 0.13 pins numpy<2.2, google-cloud-storage<3.3 and
        # transformers<5, and an extra here would downgrade the project's own
        "bench": ["webdataset>=1.0", "grain>=0.2", "array-record>=0.8"],
    },
    entry_points={"console_scripts": ["dcm2tfrecord=dcm2tfrecord.pipeline.cli:main"]},
)
