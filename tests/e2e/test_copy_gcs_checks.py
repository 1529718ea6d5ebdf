"""``dcm2tfrecord copy`` to and from gs:// checks each file against the CRC-32C the store computed
of it (no read-back), on gcp-storage-emulator, through google-cloud-storage as the converter
installs it: a bit flipped on the wire (in the request carrying an upload, one-request and
resumable, or in the answer carrying a download) is caught, the object deleted (or the local
temp file removed), and the copy fails naming it; a copy killed in the middle of a file and run
again equals the source byte for byte. Where the whole-file path is off (other stores), an object
changed after the streamed CRC-32C is caught by the store's. Local destinations:
tests/dataset/test_transfer.py."""
from __future__ import annotations

import os
import re

import google_crc32c
import pytest
import requests

from dcm2tfrecord.dataset import storage, transfer
from dcm2tfrecord.dataset.verify import verify_dataset
from dcm2tfrecord.transforms.beam_files import BeamFiles, install_beam_storage
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)
from tests.support.processes import tree_bytes
from tests.support.reader_datasets import archive, plain  # noqa: F401  (fixtures)


@pytest.fixture()
def beam_storage():
    before = storage.installed()
    install_beam_storage()
    yield
    storage.install(before)


class _Streamed(BeamFiles):
    """Beam's FileSystems without the whole-file path: what a store other than gs:// gets
    (and gs:// to gs://), each file streamed through open / create."""

    def direct_transfer(self, path: str) -> bool:
        return False


@pytest.fixture()
def streamed_storage():
    before = storage.installed()
    storage.install(_Streamed())
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


class _Raw:
    """A response's body (urllib3's) whose chunks go through ``change``."""

    def __init__(self, raw, change):
        self.raw, self.change = raw, change

    def stream(self, amount, decode_content=None):
        for chunk in self.raw.stream(amount, decode_content=decode_content):
            yield self.change(chunk)

    def read(self, *args, **kwargs):
        return self.change(self.raw.read(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self.raw, name)


def _marker(root: str, name: str) -> bytes:
    """32 bytes found in the file ``name`` of the dataset at ``root`` and in no other file."""
    files = tree_bytes(root)
    content = files[name]
    for at in range(0, len(content) - 32, 8):
        window = content[at:at + 32]
        if content.count(window) == 1 and not any(window in data for other, data in files.items() if other != name):
            return window
    raise AssertionError(f"no bytes of {name} are its own")


def _on_the_wire(monkeypatch, marker: bytes, change) -> None:
    """Every HTTP request of this process whose body carries ``marker`` (an upload of the one
    file holding it, multipart or a resumable chunk), and every download chunk carrying it,
    has its bytes from there on go through ``change`` (bytes -> bytes): altered between the
    client and the store, after the client's CRC-32C."""
    request = requests.Session.request

    def changed(data):
        if isinstance(data, bytes) and marker in data:
            at = data.index(marker)
            return data[:at] + change(data[at:])
        return data

    def sent(self, method, url, *args, **kwargs):
        kwargs["data"] = changed(kwargs.get("data"))
        response = request(self, method, url, *args, **kwargs)
        if method == "GET" and "alt=media" in url and kwargs.get("stream"):
            response.raw = _Raw(response.raw, changed)
        return response
    monkeypatch.setattr(requests.Session, "request", sent)


def _flipped(chunk):
    return chunk[:40] + bytes([chunk[40] ^ 1]) + chunk[41:]              # one bit


def _killed(chunk):
    raise KeyboardInterrupt          # as a kill while the file streams


@pytest.mark.parametrize("upload", ["one request", "resumable"])
def test_a_bit_flipped_on_the_wire_fails_the_stores_crc32c_both_ways(plain, gcs_emulator, beam_storage,  # noqa: F811
                                                                     monkeypatch, tmp_path, upload):
    if upload == "resumable":                   # the library's threshold, lowered: shards go resumable
        from google.cloud.storage import blob
        monkeypatch.setattr(blob, "_MAX_MULTIPART_SIZE", 1024)
    shard = sorted(n for n in os.listdir(plain) if n.endswith(".tfrecord"))[0]
    assert len(tree_bytes(plain)[shard]) > 1024
    marker = _marker(plain, shard)
    destination = gcs_emulator.url(f"crc/changed-{upload[:3]}")
    prefix = destination.split("/", 3)[3]
    with monkeypatch.context() as wire:
        _on_the_wire(wire, marker, _flipped)
        with pytest.raises(transfer.CopyFailed, match="the store's CRC-32C of the object") as failed:
            transfer.copy_dataset(plain, destination)
    assert shard in str(failed.value)
    left = gcs_emulator.list(prefix)
    assert f"{prefix}/{shard}" not in left                      # deleted, not left to look whole
    assert f"{prefix}/dataset.json" not in left and f"{prefix}/{transfer.MARKER_NAME}" in left
    report = transfer.copy_dataset(plain, destination)         # run again: only what is missing
    assert report.copied >= 2 and report.kept == len(tree_bytes(plain)) - report.copied
    assert _bucket_files(gcs_emulator, prefix) == tree_bytes(plain)
    assert verify_dataset(destination).ok
    manifest = tree_bytes(plain)["dataset.json"]           # what the check reads: GCS's own CRC-32C
    assert storage.FileSystems.stored_crc32c(destination + "/dataset.json") == google_crc32c.value(manifest)
    assert storage.FileSystems.stored_crc32c(os.path.join(plain, "dataset.json")) is None

    back = tmp_path / "back"                                   # and back, the download's bit flipped
    with monkeypatch.context() as wire:
        _on_the_wire(wire, marker, _flipped)
        with pytest.raises(transfer.CopyFailed, match="store's CRC-32C of the object") as failed:
            transfer.copy_dataset(destination, str(back))
    assert shard in str(failed.value)
    assert not (back / shard).exists() and not (back / "dataset.json").exists()
    assert not [p for p in back.rglob("*")                                  # its temp file removed
                if re.fullmatch(re.escape(shard) + r"\.[0-9a-f]{32}", p.name)]
    transfer.copy_dataset(destination, str(back))
    assert tree_bytes(str(back)) == tree_bytes(plain) and verify_dataset(str(back)).ok


def test_a_copy_killed_inside_a_file_and_run_again_equals_the_source(plain, gcs_emulator,  # noqa: F811
                                                                    beam_storage, monkeypatch, tmp_path):
    shard = sorted(n for n in os.listdir(plain) if n.endswith(".tfrecord"))[1]

    _on_the_wire(monkeypatch, _marker(plain, shard), _killed)          # killed while it is sent
    destination = gcs_emulator.url("crc/killed")
    with pytest.raises(KeyboardInterrupt):
        transfer.copy_dataset(plain, destination, workers=1)
    assert "crc/killed/dataset.json" not in gcs_emulator.list("crc/killed")
    assert f"crc/killed/{shard}" not in gcs_emulator.list("crc/killed")
    monkeypatch.undo()
    transfer.copy_dataset(plain, destination)
    assert _bucket_files(gcs_emulator, "crc/killed") == tree_bytes(plain)
    back = tmp_path / "back"                # and back to a local folder, killed while it is written
    _writes_through(monkeypatch, shard, _killed)
    with pytest.raises(KeyboardInterrupt):
        transfer.copy_dataset(destination, str(back), workers=1)
    monkeypatch.undo()
    transfer.copy_dataset(destination, str(back))
    assert tree_bytes(str(back)) == tree_bytes(plain) and verify_dataset(str(back)).ok


def test_streamed_an_object_changed_on_the_way_fails_the_stores_crc32c(plain, gcs_emulator,  # noqa: F811
                                                                       streamed_storage, monkeypatch):
    shard = sorted(n for n in os.listdir(plain) if n.endswith(".tfrecord"))[0]
    _writes_through(monkeypatch, shard, _flipped)               # after the CRC-32C computed on the way
    destination = gcs_emulator.url("crc/streamed")
    with pytest.raises(transfer.CopyFailed, match="the store's CRC-32C of the object") as failed:
        transfer.copy_dataset(plain, destination)
    assert shard in str(failed.value)
    left = gcs_emulator.list("crc/streamed")
    assert "crc/streamed/" + shard not in left and "crc/streamed/dataset.json" not in left
    monkeypatch.undo()
    transfer.copy_dataset(plain, destination)
    assert _bucket_files(gcs_emulator, "crc/streamed") == tree_bytes(plain)
