"""``dcm2tfrecord copy`` to gs:// checks each object against the CRC-32C the store computed of
it (no read-back), on gcp-storage-emulator: an object whose bytes changed on the way is caught
by the store's CRC-32C, deleted, and the copy fails naming it; a copy killed in the middle of a
file and run again equals the source byte for byte. Local destinations: tests/dataset/test_transfer.py."""
from __future__ import annotations

import os
import re

import google_crc32c
import pytest

from dcm2tfrecord.dataset import storage, transfer
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.transforms.beam_files import install_beam_storage
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.processes import tree_bytes
from tests.support.reader_datasets import archive, plain  # noqa: F401  (fixtures)


@pytest.fixture()
def beam_storage():
    before = storage.installed()
    install_beam_storage()
    yield
    storage.install(before)


def _bucket_files(emulator, prefix: str) -> dict[str, bytes]:
    bucket = emulator.client().bucket(emulator.bucket)
    return {name[len(prefix) + 1:]: bucket.blob(name).download_as_bytes() for name in emulator.list(prefix)}


class _Writer:
    """A writer passing its bytes on to ``inner``, through ``change`` (chunk -> chunk)."""

    def __init__(self, inner, change):
        self.inner, self.change = inner, change

    def write(self, chunk):
        return self.inner.write(self.change(chunk))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def _writes_through(monkeypatch, target: str, change) -> None:
    """Every write of ``copy`` to the file named ``target`` (or to its temp file) goes through
    ``change``."""
    create = transfer.create_output

    def created(output_dir, path, *args):
        writer = create(output_dir, path, *args)
        name = path.rsplit("/", 1)[-1]
        ours = name == target or re.fullmatch(re.escape(target) + r"\.[0-9a-f]{32}", name)
        return _Writer(writer, change) if ours else writer
    monkeypatch.setattr(transfer, "create_output", created)


def _killed(chunk):
    raise KeyboardInterrupt          # as a kill while the file streams


def test_an_object_changed_on_the_way_fails_the_stores_crc32c(plain, gcs_emulator, beam_storage,  # noqa: F811
                                                               monkeypatch):
    shard = sorted(n for n in os.listdir(plain) if n.endswith(".tfrecord"))[0]
    _writes_through(monkeypatch, shard,
                    lambda chunk: chunk[:40] + bytes([chunk[40] ^ 1]) + chunk[41:])   # one bit flipped
    destination = gcs_emulator.url("crc/changed")
    with pytest.raises(transfer.CopyFailed, match="the store's CRC-32C of the object") as failed:
        transfer.copy_dataset(plain, destination)
    assert shard in str(failed.value)
    left = gcs_emulator.list("crc/changed")
    assert f"crc/changed/{shard}" not in left                   # deleted, not left to look whole
    assert "crc/changed/dataset.json" not in left and f"crc/changed/{transfer.MARKER_NAME}" in left
    monkeypatch.undo()
    report = transfer.copy_dataset(plain, destination)         # run again: only what is missing
    assert report.copied >= 2 and report.kept == len(tree_bytes(plain)) - report.copied
    assert _bucket_files(gcs_emulator, "crc/changed") == tree_bytes(plain)
    assert verify_dataset(destination).ok
    manifest = tree_bytes(plain)["dataset.json"]           # what the check reads: GCS's own CRC-32C
    assert storage.FileSystems.stored_crc32c(destination + "/dataset.json") == google_crc32c.value(manifest)
    assert storage.FileSystems.stored_crc32c(os.path.join(plain, "dataset.json")) is None


def test_a_copy_killed_inside_a_file_and_run_again_equals_the_source(plain, gcs_emulator,  # noqa: F811
                                                                    beam_storage, monkeypatch, tmp_path):
    shard = sorted(n for n in os.listdir(plain) if n.endswith(".tfrecord"))[1]

    _writes_through(monkeypatch, shard, _killed)
    destination = gcs_emulator.url("crc/killed")
    with pytest.raises(KeyboardInterrupt):
        transfer.copy_dataset(plain, destination, workers=1)
    assert "crc/killed/dataset.json" not in gcs_emulator.list("crc/killed")
    monkeypatch.undo()
    transfer.copy_dataset(plain, destination)
    assert _bucket_files(gcs_emulator, "crc/killed") == tree_bytes(plain)
    back = tmp_path / "back"                                   # and back to a local folder, killed too
    _writes_through(monkeypatch, shard, _killed)
    with pytest.raises(KeyboardInterrupt):
        transfer.copy_dataset(destination, str(back), workers=1)
    monkeypatch.undo()
    transfer.copy_dataset(destination, str(back))
    assert tree_bytes(str(back)) == tree_bytes(plain) and verify_dataset(str(back)).ok
