"""convert --encrypt: records encrypted under a per-shard data key wrapped by a KEK
(dataset/encryption.py), read back by RandomAccess and reader.load; every failure one line."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from dcm2tfrecord import reader
from dcm2tfrecord.dataset import encryption
from dcm2tfrecord.dataset.encryption import DecryptionError, KeyUnavailable
from dcm2tfrecord.dataset.tfrecord import read_records
from tests.support import run_convert, write_png_archive

SIZE = 16


@pytest.fixture(scope="module")
def encrypted(tmp_path_factory):
    """An archive converted twice, plain and encrypted (two shards a split), and its key."""
    root = tmp_path_factory.mktemp("crypt")
    archive = root / "archive"
    write_png_archive(archive, 12, SIZE, SIZE, seed=3)
    key = str(root / "kek.json")
    encryption.new_key_file(key)
    options = dict(splits="train=0.75,validation=0.25", min_shards=2, min_shard_mb=0.0001)
    run_convert(archive, root / "plain", **options)
    run_convert(archive, root / "enc", encrypt=f"keyfile:{key}", **options)
    return root, f"keyfile:{key}"


def _manifest(path) -> dict:
    return json.loads((path / "dataset.json").read_text())


def test_ciphertext_holds_no_plaintext_pixel_row_and_reads_back_equal(encrypted):
    root, uri = encrypted
    plain, enc = reader.RandomAccess(str(root / "plain"), "train"), reader.RandomAccess(str(root / "enc"), "train")
    assert len(plain) == len(enc) > 1
    shards = b"".join(p.read_bytes() for p in (root / "enc").glob("*.tfrecord"))
    for i in range(len(plain)):
        a, b = plain[i], enc[i]
        assert set(a) == set(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
        for row in a["image"].reshape(SIZE, -1):
            assert row.tobytes() not in shards
    manifest = _manifest(root / "enc")
    assert manifest["encryption"] == {"scheme": encryption.SCHEME, "key_uri": uri}
    assert manifest["format_version"] == 2 and _manifest(root / "plain")["format_version"] == 1
    for entry in manifest["splits"].values():
        assert entry["shards"] and all(s["wrapped_key"] for s in entry["shards"])
    assert "encryption" not in _manifest(root / "plain") and "wrapped_key" not in json.dumps(_manifest(root / "plain"))
    key_text = json.loads(open(uri[len("keyfile:"):]).read())["key"]
    assert key_text not in (root / "enc" / "dataset.json").read_text()


def test_reader_load_decrypts_in_order_like_the_plain_dataset(encrypted):
    root, _ = encrypted
    for split in ("train", "validation", "train[2:7]"):
        plain = list(reader.as_numpy(reader.load(str(root / "plain"), split, 4, shuffle=False)))
        enc = list(reader.as_numpy(reader.load(str(root / "enc"), split, 4, shuffle=False)))
        assert len(plain) == len(enc)
        for (a, la), (b, lb) in zip(plain, enc):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(la, lb)
    seeded = dict(seed=5, resumable=True)
    a = list(reader.as_numpy(reader.load(str(root / "plain"), "train", 2, start_step=2, **seeded)))
    b = list(reader.as_numpy(reader.load(str(root / "enc"), "train", 2, start_step=2, **seeded)))
    for (x, _), (y, _) in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_missing_and_wrong_keys_fail_in_one_line_naming_the_key_uri(encrypted, tmp_path):
    root, uri = encrypted
    missing = f"keyfile:{tmp_path / 'nowhere.json'}"
    with pytest.raises(KeyUnavailable, match="nowhere.json cannot be read") as caught:
        reader.RandomAccess(str(root / "enc"), "train", key=missing)[0]
    assert "\n" not in str(caught.value)
    with pytest.raises(KeyUnavailable, match="nowhere.json"):
        reader.load(str(root / "enc"), "train", 4, key=missing)
    other = tmp_path / "other.json"
    encryption.new_key_file(str(other))
    with pytest.raises(DecryptionError, match=r"train-0000\d-of-00002.tfrecord: keyfile:.*other.json does "
                                              "not unwrap") as caught:
        reader.RandomAccess(str(root / "enc"), "train", key=f"keyfile:{other}")[0]
    assert "\n" not in str(caught.value)


def _flip(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _reframe(path, index: int, change) -> None:
    """Record ``index`` of shard ``path`` changed by ``change`` and framed again with good CRCs
    (an attacker's edit, which the TFRecord CRCs alone would not catch)."""
    from dcm2tfrecord.dataset.tfrecord import framed_segments
    with open(path, "rb") as handle:
        records = [r.data for r in read_records(handle)]
    records[index] = change(records[index])
    path.write_bytes(b"".join(b"".join(framed_segments([r])) for r in records))


def test_a_changed_record_fails_authentication_naming_shard_record_and_key(encrypted, tmp_path):
    root, uri = encrypted
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root / "enc", copy)
    shard = sorted(copy.glob("train-*.tfrecord"))[0]
    _reframe(shard, 1, lambda data: data[:40] + bytes([data[40] ^ 1]) + data[41:])
    records = reader.RandomAccess(str(copy), "train")
    records[0]
    with pytest.raises(DecryptionError, match=rf"{shard.name}: record 1 fails authentication with key "
                                              rf"{uri}") as caught:
        records[1]
    assert "\n" not in str(caught.value)
    with pytest.raises(Exception, match=rf"{shard.name}: record 1 fails authentication"):
        list(reader.as_numpy(reader.load(str(copy), "train", 1, shuffle=False)))
    # two records swapped within the shard: each is authentic, neither is in its place
    shutil.copy(root / "enc" / shard.name, shard)
    with open(shard, "rb") as handle:
        first, second = [r.data for r in read_records(handle)][:2]
    _reframe(shard, 0, lambda _: second)
    with pytest.raises(DecryptionError, match="record 0 fails authentication"):
        reader.RandomAccess(str(copy), "train")[0]


def test_a_flipped_bit_or_truncated_shard_is_a_crc_error_before_any_decryption(encrypted, tmp_path):
    root, _ = encrypted
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root / "enc", copy)
    shard = sorted(copy.glob("train-*.tfrecord"))[0]
    _flip(shard, 100)
    with pytest.raises(reader.CorruptRecordError, match=rf"{shard.name}: record 0: data checksum mismatch"):
        reader.RandomAccess(str(copy), "train")[0]
    shutil.copy(root / "enc" / shard.name, shard)
    shard.write_bytes(shard.read_bytes()[:-10])
    records = reader.RandomAccess(str(copy), "train")
    with pytest.raises(reader.CorruptRecordError, match=rf"{shard.name}: record \d+") as caught:
        [records[i] for i in range(len(records))]
    assert "\n" not in str(caught.value)


def test_reruns_write_other_ciphertext_and_the_same_records(encrypted, tmp_path):
    root, uri = encrypted
    options = dict(splits="train=0.75,validation=0.25", min_shards=2, min_shard_mb=0.0001)
    run_convert(root / "archive", tmp_path / "again", encrypt=uri, **options)
    first = sorted((root / "enc").glob("*.tfrecord"))
    again = sorted((tmp_path / "again").glob("*.tfrecord"))
    assert [p.name for p in first] == [p.name for p in again]
    assert all(a.read_bytes() != b.read_bytes() for a, b in zip(first, again))
    for split in ("train", "validation"):
        a = reader.RandomAccess(str(root / "enc"), split)
        b = reader.RandomAccess(str(tmp_path / "again"), split)
        assert [bytes(a.serialized(i)) for i in range(len(a))] == [bytes(b.serialized(i)) for i in range(len(b))]


def test_key_files_are_private_and_never_overwritten(tmp_path):
    path = str(tmp_path / "kek.json")
    encryption.new_key_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        encryption.new_key_file(path)
    with pytest.raises(encryption.EncryptionError, match="names no known key source"):
        encryption.kek("aws-kms://nothing")
