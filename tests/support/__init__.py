"""Shared fixtures and helpers of the tests: real archives (pydicom's test files, generated
images), real runs.

The one place the tests import the product's sample archive (pipeline/commands/sample_archive.py,
also ``dcm2tfrecord demo``'s) and the benchmarks' generated CT slices (benchmarks/archives.py):
test files take them from here (tests/test_suite_layout.py holds them to it).
tests/conftest.py registers the fixtures defined here and the markers."""
from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "-1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from dcm2tfrecord.pipeline import convert  # noqa: E402
from dcm2tfrecord.pipeline.options.table import ConvertOptions  # noqa: E402
from benchmarks.archives import ct_file_bytes, ct_vendor_file_bytes  # noqa: E402,F401
from dcm2tfrecord.pipeline.commands.sample_archive import (  # noqa: E402,F401
    build_sample_archive, pydicom_test_files, synthetic_image)

IN_MEMORY = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
# Every local runner mode, each with more than one worker where it can have them.
RUNNER_MODES = {
    "in_memory": IN_MEMORY,
    "multi_threading": ["--direct_num_workers=3", "--direct_running_mode=multi_threading"],
    "multi_processing": ["--direct_num_workers=2", "--direct_running_mode=multi_processing"],
}
TEST_SALT = "dcm2tfrecord-tests"
# pytest-timeout's bound for the tests marked slow (pytest.ini sets everyone else's): a fresh
# virtual environment's install alone may take 30 minutes (tests/e2e/test_worker_package.py)
SLOW_TEST_TIMEOUT_S = 3600


def run_convert(inputs, output, beam_args=IN_MEMORY, **options) -> dict:
    """Runs a real conversion on Beam's local runner; returns the summary."""
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    options.setdefault("id_salt", TEST_SALT)
    # Test archives hold hostile files on purpose; the threshold has its own tests.
    options.setdefault("max_failure_ratio", 1.0)
    opts = ConvertOptions(inputs=tuple(str(i) for i in inputs), output=str(output), **options)
    return convert.run(opts, list(beam_args), quiet=True)


def write_png_archive(root, count: int, height: int, width: int, channels: int = 1,
                      seed: int = 0, ext: str = "png") -> list[str]:
    """``count`` generated images of one size; returns their paths."""
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    paths = []
    for i in range(count):
        arr = synthetic_image(rng, height, width, channels)
        arr = arr + rng.integers(0, 8, size=arr.shape, dtype=np.uint8)  # defeat PNG compression a bit
        path = os.path.join(str(root), f"img_{i:04d}.{ext}")
        Image.fromarray(arr).save(path)
        paths.append(path)
    return paths


@pytest.fixture(scope="session", autouse=True)
def launcher_storage():
    """Each test process stands for a launcher: its dataset, salt and class map files go
    through Beam's FileSystems under the format package's facade, installed explicitly as
    pipeline/cli.py does (importing the converter no longer does it). Every test sees the
    same backend, whichever ran before it in the process."""
    from dcm2tfrecord.transforms.beam_files import install_beam_storage
    install_beam_storage()


@pytest.fixture(scope="session")
def sample_archive(tmp_path_factory) -> str:
    return build_sample_archive(str(tmp_path_factory.mktemp("sample") / "archive"))


@pytest.fixture(scope="session")
def sample_dataset(sample_archive, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("sample_out") / "dataset"
    run_convert(sample_archive, out, **SAMPLE_OPTIONS)
    return str(out)


# pydicom ships the same instance in several encodings (MR_small, MR_small_bigendian, ...
# share one SOPInstanceUID); the round-trip tests want every one of them converted.
SAMPLE_OPTIONS = dict(target_shard_mb=4, min_shard_mb=1, max_shard_mb=16, duplicates="keep")


def rid(rel_path: str) -> str:
    """The record id the tests' conversions give the file at ``rel_path``."""
    from dcm2tfrecord.transforms.hashing import record_id
    return record_id(rel_path, TEST_SALT)


# ---------------------------------------------------------------- the import name
# The repository's top-level folders and the names they install as (setup.py's and
# reader_dist/setup.py's package_dir): one import name, dcm2tfrecord.
PACKAGE_FOLDERS = {"dcm2tfrecord.pipeline": "pipeline", "dcm2tfrecord.transforms": "transforms",
                   "dcm2tfrecord.dataset": "dataset", "dcm2tfrecord.reader": "reader"}


def package_folder(package: str) -> str:
    """dcm2tfrecord.transforms.dicom -> transforms/dicom (relative to the repository)."""
    for name, folder in PACKAGE_FOLDERS.items():
        if package == name or package.startswith(name + "."):
            return os.path.join(folder, *package[len(name):].split(".")[1:])
    raise KeyError(package)


# PyPI distributions that own the import names this project used before (CHANGELOG.md)
# (dataset, reader, pipeline, transforms): the fresh-venv tests install them first,
# then ours, and check that both sides import and work.
# (PyPI's transforms imports sgmllib without declaring it: sgmllib3k provides it.)
COLLIDING_PYPI = ("dataset==2.0.0", "reader==3.26", "pipeline==0.1.0", "transforms==0.2.1",
                  "sgmllib3k==1.0.0")
THEIRS_WORK = """
import dataset, pipeline.pipeline, reader, transforms
db = dataset.connect("sqlite:///:memory:")
db["t"].insert({"x": 1})
assert [row["x"] for row in db["t"].all()] == [1], "PyPI dataset"
feeds = reader.make_reader(":memory:")
assert list(feeds.get_feeds()) == [], "PyPI reader"
feeds.close()
assert issubclass(pipeline.pipeline.PipelineError, RuntimeError), "PyPI pipeline"
assert transforms.safe_html("<p>a <b>b</b></p>") == "<p>a <b>b</b></p>", "PyPI transforms"
for module in (dataset, pipeline, reader, transforms):
    assert "site-packages" in module.__file__ and "dcm2tfrecord" not in module.__file__, module
"""
