"""`pip install .` from the repository: the converter and the reader's distribution, one copy each.

The converter requires dcm2tfrecord-reader, which no package index holds; setup.py names
./reader_dist beside it by direct reference when built from a checkout. Each test works
on a copy of the repository and a fresh virtual environment whose third-party packages
come from this interpreter's site-packages through a .pth file (a folder of links to
them, without any dcm2tfrecord distribution), so pip resolves with ``--no-index`` and
downloads nothing: the resolution is exactly the one a newcomer's ``pip install .`` runs.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OURS = ("dcm2tfrecord", "__editable__")     # our distributions' files, editable finders included


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _third_party(folder: str) -> str:
    """A folder of links to every installed third-party package of this interpreter, and
    nothing of ours (no dcm2tfrecord files, no editable finders, no .pth files)."""
    os.makedirs(folder)
    site = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)]
    for directory in site:
        for name in os.listdir(directory):
            target = os.path.join(folder, name)
            if name.startswith(OURS) or name.endswith(".pth") or os.path.lexists(target):
                continue
            os.symlink(os.path.join(directory, name), target)
    return folder


def _repository_copy(folder: str) -> str:
    shutil.copytree(ROOT, folder, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "build", "dist", "*.egg-info", "out", ".pytest_cache", ".cache"))
    return folder


def _venv(folder: str, third_party: str) -> str:
    subprocess.run([sys.executable, "-m", "venv", folder], check=True, timeout=300)
    python = os.path.join(folder, "bin", "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(purelib, "zz_third_party.pth"), "w") as handle:
        handle.write(third_party + "\n")
    return python


def _pip_install(python: str, *specs: str, cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", *specs],
                          capture_output=True, text=True, timeout=600, cwd=cwd, env=_clean_env())


# Where each of our packages imports from, how many folders on sys.path hold it, and which
# distribution's RECORD lists its files.
PROBE = textwrap.dedent("""
    import importlib, json, os, sys
    from importlib import metadata
    out = {"where": {}, "copies": {}, "owners": {}, "missing": []}
    for name in ("dataset", "reader", "pipeline", "transforms"):
        out["copies"][name] = sum(os.path.isfile(os.path.join(p, "dcm2tfrecord", name, "__init__.py"))
                                  for p in sys.path if p and os.path.isdir(p))
        try:
            out["where"][name] = importlib.import_module("dcm2tfrecord." + name).__file__
        except ImportError:
            out["missing"].append(name)
    for dist in ("dcm2tfrecord", "dcm2tfrecord-reader"):
        try:
            files = metadata.files(dist) or []
        except metadata.PackageNotFoundError:
            continue
        for name in ("dataset", "reader", "pipeline", "transforms"):
            if any(str(f).startswith(f"dcm2tfrecord/{name}/") for f in files):
                out["owners"].setdefault(name, []).append(dist)
    print(json.dumps(out))
""")


def _probe(python: str, cwd: str) -> dict:
    proc = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    root = tmp_path_factory.mktemp("install")
    return {"root": str(root), "repo": _repository_copy(str(root / "repo")),
            "third_party": _third_party(str(root / "third_party"))}


def test_pip_install_dot_installs_the_converter_and_the_reader_once(work):
    """`pip install .` from a copy of the repository, no index: the converter and
    dcm2tfrecord-reader (from ./reader_dist), each package imported from the venv's
    site-packages (not the copy), one folder each, dataset/ and reader/ owned by the
    reader's distribution only."""
    venv = os.path.join(work["root"], "venv_full")
    python = _venv(venv, work["third_party"])
    proc = _pip_install(python, ".", cwd=work["repo"])
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    out = _probe(python, cwd=work["root"])
    assert out["missing"] == [], out
    for name, where in out["where"].items():
        assert where.startswith(venv + os.sep) and "site-packages" in where, (name, where)
    assert out["copies"] == {"dataset": 1, "reader": 1, "pipeline": 1, "transforms": 1}, out
    assert out["owners"] == {"dataset": ["dcm2tfrecord-reader"], "reader": ["dcm2tfrecord-reader"],
                             "pipeline": ["dcm2tfrecord"], "transforms": ["dcm2tfrecord"]}, out


def test_pip_install_reader_dist_alone_installs_the_reader_only(work):
    venv = os.path.join(work["root"], "venv_reader")
    python = _venv(venv, work["third_party"])
    proc = _pip_install(python, "./reader_dist", cwd=work["repo"])
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    out = _probe(python, cwd=work["root"])
    assert sorted(out["missing"]) == ["pipeline", "transforms"], out
    assert out["copies"] == {"dataset": 1, "reader": 1, "pipeline": 0, "transforms": 0}, out
    assert out["owners"] == {"dataset": ["dcm2tfrecord-reader"], "reader": ["dcm2tfrecord-reader"]}, out


def test_the_sdist_requires_the_reader_by_version_not_by_a_local_path(work, tmp_path):
    """The sdist Beam's stager builds for --setup_file (python setup.py sdist) carries the
    plain requirement the workers meet with the staged reader wheel (run_dataflow.sh)."""
    subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)],
                   cwd=work["repo"], check=True, capture_output=True, timeout=300, env=_clean_env())
    (sdist,) = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".egg-info/requires.txt"))
        requires = tar.extractfile(member).read().decode().splitlines()
        assert not any(n.split("/", 1)[-1].startswith("reader_dist/") for n in tar.getnames())
    assert "dcm2tfrecord-reader==0.1.0" in requires, requires
    assert not any("file:" in line for line in requires), requires
