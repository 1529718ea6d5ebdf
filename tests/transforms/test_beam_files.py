"""Beam's FileSystems under the format package's storage facade: installed by one explicit call.

Importing ``dcm2tfrecord.transforms`` or ``dcm2tfrecord.pipeline`` changes nothing in
``dataset.storage`` (each checked in a fresh interpreter); ``install_beam_storage`` puts
Beam's FileSystems there once; each worker's steps install it where their code starts
(a DoFn's ``setup`` in a fresh interpreter); and the salt file and the class map are
read through the same facade as the dataset.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from dcm2tfrecord.dataset import storage
from dcm2tfrecord.transforms.beam_files import BeamFiles, install_beam_storage
from dcm2tfrecord.transforms.masks import classes
from dcm2tfrecord.transforms.settings import SaltFileError, read_salt_file

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _fresh(script: str) -> dict:
    """``script`` run in a new interpreter (it sets ``out``); its ``out``."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    code = "import json\nout = {}\n" + textwrap.dedent(script) + "\nprint(json.dumps(out))\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_the_converter_installs_nothing():
    out = _fresh("""
        import dcm2tfrecord.transforms, dcm2tfrecord.pipeline, dcm2tfrecord.pipeline.convert
        import dcm2tfrecord.transforms.output.steps, dcm2tfrecord.transforms.sources.steps
        from dcm2tfrecord.dataset import storage
        out["after_import"] = type(storage.installed()).__name__
        from dcm2tfrecord.transforms.beam_files import install_beam_storage
        install_beam_storage()
        first = storage.installed()
        install_beam_storage()
        out["after_install"] = type(first).__name__
        out["same_after_second_call"] = storage.installed() is first
    """)
    assert out == {"after_import": "LocalFiles", "after_install": "BeamFiles", "same_after_second_call": True}


WORKER_STEPS = {
    "ExpandPatternFn.setup": """
        from dcm2tfrecord.transforms.sources.steps import ExpandPatternFn
        ExpandPatternFn().setup()
    """,
    "ReadsSourcesFn.setup (probe, write, slice masks)": """
        from dcm2tfrecord.transforms.records.steps import ProbeHeadersFn
        from dcm2tfrecord.transforms.settings import DecodeSettings
        ProbeHeadersFn(DecodeSettings()).setup()
    """,
    "VolumeOfSeriesFn.setup": """
        from dcm2tfrecord.transforms.series.steps import VolumeOfSeriesFn
        from dcm2tfrecord.transforms.settings import DecodeSettings
        VolumeOfSeriesFn(DecodeSettings()).setup()
    """,
    "record_plan": """
        import tempfile
        from dcm2tfrecord.transforms.output.steps import record_plan
        record_plan(None, {}, tempfile.mkdtemp())
    """,
}


@pytest.mark.parametrize("step", sorted(WORKER_STEPS))
def test_a_worker_step_installs_beam_storage_in_a_fresh_process(step):
    """A worker process (Beam's SDK harness) only unpickles the steps and calls them."""
    out = _fresh(WORKER_STEPS[step] + """
        from dcm2tfrecord.dataset import storage
        out["installed"] = type(storage.installed()).__name__
    """)
    assert out["installed"] == "BeamFiles", step


class _Objects:
    """A storage backend for ``obj://`` only, a scheme neither Beam nor ``os`` serves: a read
    that bypassed the facade could not find the object."""

    def __init__(self, objects: dict):
        self.objects, self.opened = objects, []

    def open(self, path: str):
        self.opened.append(path)
        if path not in self.objects:
            raise FileNotFoundError(path)
        return io.BytesIO(self.objects[path])


@pytest.fixture
def objects():
    before = storage.installed()
    backend = _Objects({})
    storage.install(backend)     # type: ignore[arg-type]  (open is all the reads call)
    yield backend
    storage.install(before)


def test_the_salt_file_is_read_through_the_storage_facade(objects):
    objects.objects["obj://secrets/salt"] = b"\xef\xbb\xbf  s3cret salt \n"
    assert read_salt_file("obj://secrets/salt") == "s3cret salt"
    assert objects.opened == ["obj://secrets/salt"]
    objects.objects["obj://secrets/big"] = b"x" * 100_000
    with pytest.raises(SaltFileError, match="holds more than"):
        read_salt_file("obj://secrets/big")


def test_the_class_map_is_read_through_the_storage_facade(objects):
    objects.objects["obj://maps/classes.yaml"] = 'kidney: ["1"]\ntumour: ["2", "3"]\n'.encode()
    loaded = classes.load("obj://maps/classes.yaml")
    assert loaded == classes.parse_mapping('kidney: ["1"]\ntumour: ["2", "3"]\n', "obj://maps/classes.yaml")
    assert objects.opened == ["obj://maps/classes.yaml"]
    with pytest.raises(classes.MappingError, match="cannot be read"):
        classes.load("obj://maps/missing.yaml")


def test_a_local_salt_file_that_is_not_a_regular_file_is_refused_before_any_open(tmp_path, objects):
    """The FIFO check stays ahead of the facade: nothing is opened, nothing blocks."""
    fifo = tmp_path / "salt"
    os.mkfifo(fifo)
    with pytest.raises(SaltFileError, match="is a FIFO"):
        read_salt_file(str(fifo))
    assert objects.opened == []


def test_install_beam_storage_puts_beam_filesystems_under_the_facade(tmp_path):
    before = storage.installed()
    try:
        storage.install(storage.LocalFiles())
        install_beam_storage()
        assert isinstance(storage.installed(), BeamFiles)
        (tmp_path / "a.txt").write_bytes(b"through Beam")
        with storage.FileSystems.open(str(tmp_path / "a.txt")) as handle:
            assert handle.read() == b"through Beam"
    finally:
        storage.install(before)
