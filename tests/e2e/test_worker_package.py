"""The worker package: what Dataflow installs on every worker from --setup_file=./setup.py.

Fast checks (always): the packages import nothing from tests/ or tools/, and
every third-party module they import comes from a distribution that
install_requires brings in (directly or as a dependency).

The real thing (marked ``slow``: a fresh virtual environment installs
TensorFlow and Beam, several minutes): build the sdist as Beam's stager does,
pip-install it into a new venv, import every module from there, and run a
small multi-process conversion from that venv, away from the source tree; its
shards are byte-identical to the same conversion from the development install.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from importlib import metadata

import pytest

from tests.support import pydicom_test_files
from tests.support import (COLLIDING_PYPI, TEST_SALT, THEIRS_WORK, package_folder, run_convert,
                            write_png_archive)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One per decoder the workers need (distinct SOP Instance UIDs: no duplicates dropped):
# uncompressed, RLE, JPEG 2000, JPEG-LS, 12-bit lossy JPEG (imagecodecs), baseline JPEG.
DICOM = ("CT_small.dcm", "MR_small_RLE.dcm", "JPEG2000.dcm", "JPEGLSNearLossless_08.dcm",
         "JPEG-lossy.dcm", "SC_rgb_jpeg_dcmtk.dcm")
OPTIONS = ["--target_shard_mb=0.02", "--min_shard_mb=0.01", "--max_shard_mb=1"]


def _setup_argument(name: str):
    """A literal keyword argument of the setup() call in setup.py; install_requires is the
    module-level literal INSTALL_REQUIRES (setup() takes it with the reader's requirement
    pointed at ./reader_dist in a checkout: tests/e2e/test_install.py)."""
    with open(os.path.join(ROOT, "setup.py")) as handle:
        tree = ast.parse(handle.read())
    if name == "install_requires":
        for node in tree.body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["INSTALL_REQUIRES"]:
                return ast.literal_eval(node.value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup":
            for keyword in node.keywords:
                if keyword.arg == name:
                    return ast.literal_eval(keyword.value)
    raise AssertionError(f"setup.py passes no {name}=")


def _setup_packages() -> list[str]:
    return list(_setup_argument("packages"))


def _install_requires() -> list[str]:
    return list(_setup_argument("install_requires"))


def _modules():
    """(module name, path) of every module the worker package ships."""
    for package in _setup_packages():
        folder = os.path.join(ROOT, *package.split("."))
        for path in sorted(glob.glob(os.path.join(folder, "*.py"))):
            rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            yield rel[:-len(".__init__")] if rel.endswith(".__init__") else rel, path


def _imports(path: str) -> set[str]:
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_setup_lists_every_package_of_the_tree():
    """The converter ships pipeline/ and transforms/ (every subpackage) as dcm2tfrecord.*;
    the format and the reader come from the dcm2tfrecord-reader distribution it requires."""
    listed = set(_setup_packages())
    for package in listed:
        assert os.path.isfile(os.path.join(ROOT, package_folder(package), "__init__.py")), package
    assert {"dcm2tfrecord.pipeline", "dcm2tfrecord.transforms"} <= listed
    assert not {"dcm2tfrecord.dataset", "dcm2tfrecord.reader"} & listed      # never a second copy
    assert all(name.startswith("dcm2tfrecord.") for name in listed)
    for folder in ("pipeline", "transforms"):
        for init in glob.glob(os.path.join(ROOT, folder, "**", "__init__.py"), recursive=True):
            package = "dcm2tfrecord." + os.path.relpath(os.path.dirname(init), ROOT).replace(os.sep, ".")
            assert package in listed, f"package {package} is not in setup.py packages"
    reader_version = re.search(r'^VERSION = "([^"]+)"',
                               open(os.path.join(ROOT, "reader_dist", "setup.py")).read(), re.M)[1]
    assert f"dcm2tfrecord-reader=={reader_version}" in _install_requires()


def test_package_imports_nothing_outside_itself():
    own = set(_setup_packages())
    bad = []
    for module, path in _modules():
        for name in _imports(path):
            top = name.split(".")[0]
            if top in ("tests", "tools", "benchmarks", "scripts", "conftest"):
                bad.append(f"{module}: {name}")
    assert not bad, bad
    assert own


def _requirement_closure() -> set[str]:
    """Normalized names of install_requires and everything they require (extras included)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    seen: set[str] = set()
    todo = [(Requirement(r), frozenset(Requirement(r).extras)) for r in _install_requires()]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        seen.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            sub = Requirement(line)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in envs):
                todo.append((sub, frozenset(sub.extras)))
    return {s for s in seen if "[" not in s}


def test_every_third_party_import_is_installed_by_install_requires():
    from packaging.utils import canonicalize_name
    closure = _requirement_closure()
    providers = metadata.packages_distributions()
    missing = []
    for module, path in _modules():
        for name in _imports(path):
            top = name.split(".")[0]
            if top == "dcm2tfrecord" or top in sys.stdlib_module_names:
                continue        # ours: this distribution, or dcm2tfrecord-reader it requires
            dists = {canonicalize_name(d) for d in providers.get(top, [])}
            if not dists & closure:
                missing.append(f"{module} imports {name} (from {sorted(dists) or 'nothing installed'})")
    assert not missing, missing


# ---------------------------------------------------------------- the real install

def _small_archive(root: str) -> None:
    write_png_archive(os.path.join(root, "png"), 3, 24, 20, channels=3, seed=5)
    os.makedirs(os.path.join(root, "dicom"))
    for name in DICOM:
        shutil.copyfile(os.path.join(pydicom_test_files(), name), os.path.join(root, "dicom", name))


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "DCM2TFRECORD_ID_SALT")}
    env.update(CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    return env


@pytest.fixture(scope="module")
def worker_venv(tmp_path_factory):
    """A fresh venv with only the sdist (and its dependencies) installed; timings."""
    work = tmp_path_factory.mktemp("worker_package")
    dist = work / "dist"
    timings = {}
    started = time.time()
    # as Beam's stager builds the package it stages for --setup_file
    try:
        import build  # noqa: F401
        command = [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", str(dist), ROOT]
    except ImportError:
        command = [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(dist)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=300)
    sdists = glob.glob(str(dist / "*.tar.gz"))
    assert len(sdists) == 1, sdists
    # the reader distribution it requires, as the wheel run_dataflow.sh stages beside it
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(dist), os.path.join(ROOT, "reader_dist")],
                   cwd=str(work), check=True, capture_output=True, timeout=300)
    reader_wheel = glob.glob(str(dist / "*.whl"))
    assert len(reader_wheel) == 1, reader_wheel
    timings["sdist_s"] = time.time() - started

    venv = work / "venv"
    started = time.time()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    # PyPI's owners of our old import names go in first: ours must install beside them
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           *COLLIDING_PYPI], capture_output=True, text=True, timeout=600,
                          cwd=str(work), env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    proc = subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           reader_wheel[0], sdists[0]], capture_output=True, text=True, timeout=1800,
                          cwd=str(work), env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    timings["install_s"] = time.time() - started
    print(f"\nworker package: sdist {timings['sdist_s']:.0f} s, fresh venv + install "
          f"{timings['install_s']:.0f} s")
    yield {"python": python, "venv": str(venv), "work": work, "sdist": sdists[0], "timings": timings}
    shutil.rmtree(venv, ignore_errors=True)     # ~3 GB; pytest keeps its last temp folders


def _run(worker_venv, *args, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([worker_venv["python"], *args], capture_output=True, text=True,
                          cwd=str(worker_venv["work"]), env=_clean_env(), timeout=timeout)


@pytest.mark.slow
def test_sdist_ships_the_packages_only(worker_venv):
    import tarfile
    with tarfile.open(worker_venv["sdist"]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for _, path in _modules():
        assert os.path.relpath(path, ROOT) in names, path
    assert not any(n.startswith(("dataset/", "reader/")) for n in names)   # dcm2tfrecord-reader's


@pytest.mark.slow
def test_every_module_imports_from_the_fresh_venv(worker_venv):
    code = (
        "import importlib, json, os, pkgutil, sys\n"
        f"packages = {_setup_packages()!r}\n"
        "found = {}\n"
        "for name in packages:\n"
        "    package = importlib.import_module(name)\n"
        "    found[name] = os.path.dirname(package.__file__)\n"
        "    for info in pkgutil.walk_packages(package.__path__, name + '.'):\n"
        "        if not info.name.endswith('__main__'):\n"
        "            importlib.import_module(info.name)\n"
        "print(json.dumps(found))\n")
    proc = _run(worker_venv, "-c", code)
    assert proc.returncode == 0, proc.stderr[-4000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, where in found.items():
        assert where.startswith(worker_venv["venv"]), f"{name} imported from {where}, not the venv"


@pytest.mark.slow
def test_installs_beside_the_pypi_packages_of_the_old_import_names(worker_venv):
    """dataset, reader, pipeline and transforms from PyPI, installed first, still work,
    and so do ours, as dcm2tfrecord.*, in the same interpreter."""
    code = THEIRS_WORK + (
        "from dcm2tfrecord import reader as ours\n"
        "from dcm2tfrecord.pipeline.cli import main\n"
        "from dcm2tfrecord.dataset.names import MANIFEST_NAME\n"
        "assert callable(ours.RandomAccess) and callable(main) and MANIFEST_NAME\n"
        "print('both')\n")
    proc = _run(worker_venv, "-c", code)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip().endswith("both")


@pytest.mark.slow
def test_conversion_from_the_fresh_venv(worker_venv, tmp_path):
    archive, out = tmp_path / "archive", tmp_path / "out"
    _small_archive(str(archive))
    dcm2tfrecord = os.path.join(worker_venv["venv"], "bin", "dcm2tfrecord")
    started = time.time()
    proc = subprocess.run(
        [dcm2tfrecord, "convert", "--input", str(archive), "--output", str(out),
         f"--id_salt={TEST_SALT}", "--progress=none", *OPTIONS,
         "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        capture_output=True, text=True, cwd=str(worker_venv["work"]), env=_clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"\nconversion from the fresh venv: {time.time() - started:.0f} s")
    with open(out / "dataset.json") as handle:
        manifest = json.load(handle)
    counts = manifest["counts"]
    assert counts["failed"] == {}, counts          # every decoder plugin is there
    assert counts["records"] == 3 + len(DICOM) and counts["unaccounted"] == 0

    reference = tmp_path / "reference"
    run_convert(str(archive), str(reference), target_shard_mb=0.02, min_shard_mb=0.01, max_shard_mb=1)
    shards = sorted(f for f in os.listdir(reference) if ".tfrecord" in f)
    assert shards == sorted(f for f in os.listdir(out) if ".tfrecord" in f)
    for name in shards:
        assert (reference / name).read_bytes() == (out / name).read_bytes(), name
