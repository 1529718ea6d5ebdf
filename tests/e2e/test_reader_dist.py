"""The reader's own distribution (reader_dist/): the format and the reader, installable alone.

A training image installs ``dcm2tfrecord-reader`` instead of the converter:
numpy, protobuf and google-crc32c, plus TensorFlow with the ``tensorflow``
extra. The slow test builds the wheel from this repository, installs it
into a fresh virtual environment (no system site-packages, so nothing of
the converter's environment leaks in), and reads a converted dataset there
with ``RandomAccess`` and, after the extra, ``reader.load``; Beam, pydicom
and Pillow are never importable in it.
"""
from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from dcm2tfrecord import reader
from tests.support import COLLIDING_PYPI, THEIRS_WORK, run_convert, write_png_archive

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIST = os.path.join(ROOT, "reader_dist")
ABSENT = ("apache_beam", "pydicom", "PIL", "dcm2tfrecord.transforms", "dcm2tfrecord.pipeline")


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _setup_keywords(path: str) -> dict:
    tree = ast.parse(open(path).read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return {k.arg: k.value for k in call.keywords}


def test_reader_dist_ships_the_format_and_the_reader_with_light_requirements():
    keywords = _setup_keywords(os.path.join(DIST, "setup.py"))
    assert ast.literal_eval(keywords["packages"]) == ["dcm2tfrecord.dataset", "dcm2tfrecord.reader"]
    requires = [r.split(">")[0].split("=")[0] for r in ast.literal_eval(keywords["install_requires"])]
    assert requires == ["numpy", "protobuf", "google-crc32c"]
    assert ast.literal_eval(keywords["extras_require"])["tensorflow"][0].startswith("tensorflow")


@pytest.fixture(scope="module")
def dataset_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("reader_dist_data")
    write_png_archive(root / "archive", count=12, height=9, width=7, channels=3, seed=2)
    run_convert(root / "archive", root / "dataset", target_shard_mb=0.001, min_shard_mb=0.0005,
                max_shard_mb=1)
    return str(root / "dataset")


@pytest.fixture(scope="module")
def reader_venv(tmp_path_factory):
    work = tmp_path_factory.mktemp("reader_dist")
    started = time.time()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(work / "dist"), DIST],
                   check=True, capture_output=True, timeout=300, cwd=str(work), env=_clean_env())
    wheels = glob.glob(str(work / "dist" / "*.whl"))
    assert len(wheels) == 1, wheels
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    # PyPI's owners of our old import names go in first: ours must install beside them
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", *COLLIDING_PYPI],
                          capture_output=True, text=True, timeout=600, cwd=str(work), env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", wheels[0]],
                          capture_output=True, text=True, timeout=1200, cwd=str(work), env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"\nreader distribution: wheel + fresh venv + install {time.time() - started:.0f} s")
    return {"python": python, "wheel": wheels[0], "work": str(work)}


def _run(venv: dict, script: str, timeout: int = 600) -> dict:
    code = textwrap.dedent("""
        import importlib.util, json, sys
        def _absent(name):
            try:
                return importlib.util.find_spec(name) is None
            except ModuleNotFoundError:
                return True
        out = {"absent": {name: _absent(name) for name in %r}}
    """ % (ABSENT,)) + textwrap.dedent(script) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([venv["python"], "-c", code], capture_output=True, text=True,
                          cwd=venv["work"], env=_clean_env(), timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_random_access_and_verify_from_the_fresh_venv(reader_venv, dataset_dir):
    out = _run(reader_venv, f"""
        import hashlib
        from dcm2tfrecord import reader
        from dcm2tfrecord.dataset.verify import verify_dataset
        records = reader.RandomAccess({dataset_dir!r})
        out["where"] = reader.__file__
        out["records"] = len(records)
        out["pixels"] = [hashlib.sha256(records[i]["image"].tobytes()).hexdigest() for i in range(len(records))]
        out["verdict"] = verify_dataset({dataset_dir!r}).verdict()
        out["tensorflow"] = importlib.util.find_spec("tensorflow") is not None
    """)
    assert out["where"].startswith(os.path.dirname(os.path.dirname(reader_venv["python"])))
    assert all(out["absent"].values()), out["absent"]
    assert not out["tensorflow"]          # RandomAccess and verify need no TensorFlow
    records = reader.RandomAccess(dataset_dir)
    assert out["pixels"] == [hashlib.sha256(records[i]["image"].tobytes()).hexdigest()
                             for i in range(len(records))]
    assert out["records"] == 12 and out["verdict"].startswith("OK ")


@pytest.mark.slow
def test_reader_load_from_the_fresh_venv_with_the_tensorflow_extra(reader_venv, dataset_dir):
    proc = subprocess.run([reader_venv["python"], "-m", "pip", "install", "--quiet",
                           reader_venv["wheel"] + "[tensorflow]"],
                          capture_output=True, text=True, timeout=1800, cwd=reader_venv["work"],
                          env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = _run(reader_venv, f"""
        from dcm2tfrecord import reader
        ds = reader.load({dataset_dir!r}, batch_size=5, shuffle=False)
        out["shapes"] = [list(images.shape) for images, _ in ds]
        out["first"] = next(iter(ds))[0].numpy()[0].tolist()
    """)
    assert all(out["absent"].values()), out["absent"]
    assert out["shapes"] == [[5, 9, 7, 3], [5, 9, 7, 3], [2, 9, 7, 3]]
    expected = next(iter(reader.load(dataset_dir, batch_size=5, shuffle=False)))[0].numpy()[0]
    assert np.array_equal(np.asarray(out["first"], expected.dtype), expected)


@pytest.mark.slow
def test_reader_dist_installs_beside_the_pypi_packages_of_the_old_import_names(reader_venv, dataset_dir):
    """PyPI's dataset, reader, pipeline and transforms, installed first, still work; ours
    reads as dcm2tfrecord.reader in the same interpreter."""
    out = _run(reader_venv, THEIRS_WORK + f"""
from dcm2tfrecord import reader as ours
out["records"] = len(ours.RandomAccess({dataset_dir!r}))
out["ours"] = ours.__file__
""")
    assert out["records"] == 12
    assert "site-packages" in out["ours"] and out["ours"].endswith(os.path.join("dcm2tfrecord", "reader",
                                                                                "__init__.py"))
