"""The reader on its own: no Beam, any TensorFlow file system, PNG-encoded records.

A training job installs ``reader/`` with TensorFlow only; dataset.json is the
whole contract, so a dataset written by hand to it reads like a converted one.
"""
from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from dcm2tfrecord import reader
from tests.support import run_convert, write_png_archive
from tests.support.reader_datasets import _write_png_dataset

READER_DIR = pathlib.Path(reader.__file__).parent
FORMAT_DIR = READER_DIR.parent / "dataset"
FORBIDDEN = ("apache_beam", "dcm2tfrecord.pipeline", "dcm2tfrecord.transforms", "pydicom", "PIL")
PRODUCT = ("dcm2tfrecord", "benchmarks", "tools", "tests")
# what the format package (dataset/) may import besides the standard library and itself
# (imagecodecs: on use, for --volume_codec zstd bricks; reader_dist's zstd extra)
# and, imported on use by dataset/encryption.py for --encrypt datasets only (the reader's
# "encryption" and "gcp-kms" extras): cryptography's AES-GCM and the Cloud KMS client
FORMAT_THIRD_PARTY = ("numpy", "google.protobuf", "google_crc32c", "imagecodecs", "cryptography",
                      "google.cloud.kms")
# and the reader, besides those and the format package: TensorFlow for load(), Pillow for
# PNG/JPEG records and google-cloud-storage for RandomAccess on gs://, each imported on use
READER_THIRD_PARTY = FORMAT_THIRD_PARTY + ("tensorflow", "PIL", "google.cloud", "torch", "grain")


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("reader_standalone")
    write_png_archive(root / "archive", count=6, height=10, width=12, channels=1, seed=4)
    run_convert(root / "archive", root / "dataset")
    return str(root / "dataset")


def _imports(folder: pathlib.Path):
    """(module file, imported name) for every absolute import in ``folder``'s modules."""
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name != "__future__":
                    yield path.name, name


def _outside(name: str, own: tuple, third_party: tuple) -> bool:
    top = name.split(".")[0]
    if any(name == pkg or name.startswith(pkg + ".") for pkg in own) or \
            (top in sys.stdlib_module_names and top not in PRODUCT):
        return False
    return not any(name == allowed or name.startswith(allowed + ".") for allowed in third_party)


def test_format_package_is_a_leaf():
    """dataset/ imports nothing of the converter (transforms/, pipeline/) or the reader, and
    nothing heavier than numpy, protobuf and crc32c (and imagecodecs on use, for zstd bricks):
    both sides stand on it."""
    stray = [f"dataset/{module} imports {name}" for module, name in _imports(FORMAT_DIR)
             if _outside(name, ("dcm2tfrecord.dataset",), FORMAT_THIRD_PARTY)]
    assert not stray, stray


def test_reader_modules_import_nothing_but_the_format():
    """reader/ imports, of this project, only itself and the format package; of the rest only
    what its own distribution installs (reader_dist/setup.py and its extras)."""
    stray = [f"reader/{module} imports {name}" for module, name in _imports(READER_DIR)
             if _outside(name, ("dcm2tfrecord.reader", "dcm2tfrecord.dataset"), READER_THIRD_PARTY)]
    assert not stray, stray


def test_format_package_verifies_a_dataset_with_the_converter_hidden(small_dataset):
    """Every dataset/ module imports, and verify passes, with Beam, the converter, pydicom,
    Pillow and TensorFlow unimportable: the local file system backend serves it alone."""
    hidden = FORBIDDEN + ("tensorflow",)
    script = textwrap.dedent(f"""
        import importlib, pkgutil, sys
        for name in {hidden!r}:
            sys.modules[name] = None          # any import of it now raises ImportError
        from dcm2tfrecord import dataset
        for info in pkgutil.iter_modules(dataset.__path__):
            importlib.import_module("dcm2tfrecord.dataset." + info.name)
        from dcm2tfrecord.dataset.verify import verify_dataset
        print(verify_dataset({small_dataset!r}).verdict())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=str(READER_DIR.parent), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("OK "), result.stdout


def test_reader_imports_and_reads_with_beam_hidden(small_dataset):
    script = textwrap.dedent(f"""
        import sys
        for name in {FORBIDDEN!r}:
            sys.modules[name] = None          # any import of it now raises ImportError
        try:
            import apache_beam
        except ImportError:
            pass
        else:
            raise SystemExit("apache_beam still importable")
        from dcm2tfrecord import reader
        ds = reader.load({small_dataset!r}, batch_size=4)
        print("records", sum(int(images.shape[0]) for images, _ in ds))
        print("loaded", sorted(m for m in sys.modules
                               if m.split(".")[0] in {FORBIDDEN!r} and sys.modules[m] is not None))
    """)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, cwd=str(READER_DIR.parent), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "records 6" in result.stdout
    assert "loaded []" in result.stdout


def test_a_dataset_on_another_file_system_reads_the_same(small_dataset):
    """ram:// stands in for gs://: every path goes through tf.io.gfile, none through os."""
    remote = "ram://reader_test/dataset"
    tf.io.gfile.makedirs(remote)
    # dataset.json and the shards only: TF's RAM file system loses a file when
    # another is named with it as a prefix (shard.tfrecord, shard.tfrecord.idx).
    names = ["dataset.json"] + [os.path.basename(p) for p in reader.info(small_dataset).shard_paths()]
    for name in names:
        tf.io.gfile.copy(os.path.join(small_dataset, name), f"{remote}/{name}", overwrite=True)
    assert reader.info(remote).shard_paths()[0].startswith(remote + "/")

    def pixels(path):
        ds = reader.load(path, batch_size=6, shuffle=False, output="dict")
        batch = next(iter(ds))
        return sorted(zip(batch["id"].numpy().tolist(), [i.tobytes() for i in batch["image"].numpy()]))

    assert pixels(remote) == pixels(small_dataset)


@pytest.mark.parametrize("dtype,channels", [("uint8", 3), ("uint16", 1)])
def test_png_encoded_records_are_decoded(tmp_path, dtype, channels):
    rng = np.random.default_rng(1)
    top = np.iinfo(dtype).max
    images = [rng.integers(0, top, (6, 5, channels), dtype=dtype) for _ in range(5)]
    _write_png_dataset(tmp_path / "fixed", images)
    ds = reader.load(str(tmp_path / "fixed"), batch_size=5, shuffle=False)
    assert ds.element_spec[0] == tf.TensorSpec([None, 6, 5, channels], tf.as_dtype(dtype))
    batch, labels = next(iter(ds))
    for image, label in zip(batch.numpy(), labels.numpy()):
        np.testing.assert_array_equal(image, images[label])

    sizes = [rng.integers(0, top, (3 + k, 7 - k, channels), dtype=dtype) for k in range(3)]
    _write_png_dataset(tmp_path / "sizes", sizes)
    with pytest.raises(ValueError, match="--resize"):
        reader.load(str(tmp_path / "sizes"), batch_size=3)
    batch, labels = next(iter(reader.load(str(tmp_path / "sizes"), batch_size=3, pad=True)))
    assert batch.shape == (3, 5, 7, channels)
    for image, label in zip(batch.numpy(), labels.numpy()):
        h, w, _ = sizes[label].shape
        np.testing.assert_array_equal(image[:h, :w], sizes[label])


def _feature(value) -> tf.train.Feature:
    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, list):
        return tf.train.Feature(float_list=tf.train.FloatList(value=value))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def test_dict_output_fills_absent_features_and_keeps_variable_lengths(tmp_path):
    """A DICOM record next to a PNG-sourced one: metadata absent from the second."""
    records = [
        {"image_raw": bytes(range(4)), "modality": b"CT", "spacing": [0.5, 0.7]},
        {"image_raw": bytes(range(4, 8))},
    ]
    root = tmp_path / "dataset"
    root.mkdir()
    shard = "train-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(root / shard)) as writer:
        for label, record in enumerate(records):
            feature = {"image_raw": _feature(record["image_raw"]), "label": _feature(label),
                       "height": _feature(2), "width": _feature(2), "channels": _feature(1),
                       "depth": _feature(1), "dtype": _feature(b"uint8"), "id": _feature(b"r%d" % label)}
            if "modality" in record:
                feature["dicom/modality"] = _feature(record["modality"])
                feature["dicom/pixel_spacing"] = _feature(record["spacing"])
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    manifest = {
        "features": {"image_raw": {"dtype": "bytes", "shape": [], "encoding": "raw"},
                     "label": {"dtype": "int64", "shape": []}, "id": {"dtype": "bytes", "shape": []},
                     "dicom/modality": {"dtype": "bytes", "shape": []},
                     "dicom/pixel_spacing": {"dtype": "float", "shape": [-1]}},
        "splits": {"train": {"num_records": 2, "num_bytes": 8, "dtypes": ["uint8"],
                             "shapes": [[1, 2, 2, 1]], "fixed_shape": True, "max_depth": 1,
                             "shards": [{"file": shard, "num_records": 2}]}},
    }
    (root / "dataset.json").write_text(json.dumps(manifest))
    batch = next(iter(reader.load(str(root), batch_size=2, shuffle=False, output="dict")))
    assert batch["image"].shape == (2, 2, 2, 1)
    assert batch["image"].numpy().reshape(2, 4).tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert batch["dicom/modality"].numpy().tolist() == [b"CT", b""]
    assert isinstance(batch["dicom/pixel_spacing"], tf.RaggedTensor)
    assert batch["dicom/pixel_spacing"].to_list() == [[0.5, pytest.approx(0.7)], []]
    assert batch["id"].numpy().tolist() == [b"r0", b"r1"]
    assert "image_raw" not in batch
