"""dcm2tfrecord-reader: the dataset format and the reader, without the converter.

A training job installs this instead of dcm2tfrecord: it holds
``dcm2tfrecord.dataset`` (the on-disk format: names, codecs,
dataset.json, verify) and ``dcm2tfrecord.reader`` (``reader.load`` for tf.data,
``reader.RandomAccess`` for NumPy), and needs
only numpy, protobuf and google-crc32c; TensorFlow comes with the
``tensorflow`` extra (for ``reader.load``), google-cloud-storage with ``gcs``
(for ``RandomAccess`` on gs://). No Beam, pydicom or Pillow: their pins
cannot clash with the training framework's.

    pip install ./reader_dist                 # RandomAccess, verify
    pip install "./reader_dist[tensorflow]"   # and reader.load

README.md beside this file is the distribution's long description.
The packages are the repository's own folders (``../dataset``, ``../reader``),
not copies; the converter (``../setup.py``) depends on this distribution rather
than shipping them again. tests/e2e/test_reader_dist.py installs it into a fresh venv.
"""
import atexit
import os
import shutil
import tempfile

from setuptools import setup

VERSION = "0.1.0"  # the converter (../setup.py) requires exactly this one

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A fresh build folder each time, outside the tree: a module removed from ../reader
# never lingers in a stale build/lib and ships again.
BUILD = tempfile.mkdtemp(prefix="dcm2tfrecord-reader-build-")
atexit.register(shutil.rmtree, BUILD, True)

setup(
    name="dcm2tfrecord-reader",
    version=VERSION,
    description="Read datasets written by dcm2tfrecord (tf.data and random access), without Beam.",
    long_description=open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "README.md"),
                          encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    # dcm2tfrecord is a namespace package (no __init__.py): this distribution and the
    # converter each install their own subpackages into it, neither owns a shared file.
    packages=["dcm2tfrecord.dataset", "dcm2tfrecord.reader"],
    package_dir={"dcm2tfrecord.dataset": os.path.join(ROOT, "dataset"),
                 "dcm2tfrecord.reader": os.path.join(ROOT, "reader")},
    install_requires=["numpy>=1.24", "protobuf>=4.21", "google-crc32c>=1.5"],
    extras_require={
        "tensorflow": ["tensorflow>=2.15"],
        "gcs": ["google-cloud-storage>=2.0"],
        "png": ["pillow>=10.0"],
        # datasets written with convert --encrypt (dataset/encryption.py); gcp-kms for their
        # gcp-kms:// keys
        "encryption": ["cryptography>=41"],
        "gcp-kms": ["cryptography>=41", "google-cloud-kms>=2.0"],
        # --volume_codec zstd bricks (dataset/bricks.py imports it when one is read)
        "zstd": ["imagecodecs>=2024.1"],
        # reader.torch_loader / reader.grain_loader (reader/loaders.py) import them when called
        "torch": ["torch>=2.0"],
        "grain": ["grain>=0.2"],
    },
    options={"build": {"build_base": BUILD}, "egg_info": {"egg_base": BUILD}},
)
