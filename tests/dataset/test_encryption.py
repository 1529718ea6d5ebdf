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
from tests.support import IN_MEMORY, run_convert, write_png_archive
from tests.support.gcs_emulator import gcs_emulator  # noqa: F401  (fixture)

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


def test_both_hand_offs_read_what_the_plain_dataset_holds(encrypted, monkeypatch):
    """reader.load's two ways to decrypt (reader/tfdata.py BATCH_DECRYPTION): batches read and
    decrypted by one call each (the default for local shards), and each record decrypted alone
    (the rest): both give the plain dataset's batches, as tuples and as dicts of every feature."""
    from dcm2tfrecord.reader import tfdata
    root, _ = encrypted
    plain = {output: list(reader.as_numpy(reader.load(str(root / "plain"), "train", 3, shuffle=False,
                                                      output=output, drop_remainder=True)))
             for output in ("tuple", "dict")}
    for batched in (True, False):
        monkeypatch.setattr(tfdata, "BATCH_DECRYPTION", batched)
        for output in ("tuple", "dict"):
            enc = reader.load(str(root / "enc"), "train", 3, shuffle=False, output=output, drop_remainder=True)
            assert enc.element_spec == reader.load(str(root / "plain"), "train", 3, shuffle=False, output=output,
                                                   drop_remainder=True).element_spec
            got = list(reader.as_numpy(enc))
            assert len(got) == len(plain[output]) > 0
            for a, b in zip(plain[output], got):
                for x, y in (zip(a, b) if output == "tuple" else ((a[k], b[k]) for k in set(a) | set(b))):
                    np.testing.assert_array_equal(x, y)


def _flipped_copy(root, tmp_path):
    """A copy of the encrypted dataset whose first train shard has a bit flipped in record 0."""
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root / "enc", copy)
    shard = sorted(copy.glob("train-*.tfrecord"))[0]
    _flip(shard, 100)
    return copy, shard


def test_a_flipped_bit_fails_load_naming_shard_and_record(encrypted, tmp_path):
    copy, shard = _flipped_copy(encrypted[0], tmp_path)
    with pytest.raises(Exception, match=rf"{shard.name}: record 0: data checksum mismatch"):
        list(reader.as_numpy(reader.load(str(copy), "train", 2, shuffle=False)))


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
    copy, shard = _flipped_copy(root, tmp_path)
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


def _cli(*argv) -> tuple[int, str, str]:
    import contextlib
    import io
    from dcm2tfrecord.pipeline.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(argv))
    return status, out.getvalue(), err.getvalue()


def test_verify_checks_integrity_without_the_key_and_decrypts_with_it(encrypted, tmp_path):
    root, uri = encrypted
    status, out, err = _cli("verify", str(root / "enc"))
    assert status == 0 and "schema, pixel sizes" in out, out + err
    status, out, err = _cli("verify", str(root / "enc"), "--no_decrypt")
    assert status == 0 and "encrypted records not decrypted without the key" in out, out + err
    status, out, err = _cli("verify", str(root / "enc"), "--key", f"keyfile:{tmp_path / 'gone.json'}")
    assert status == 1 and "gone.json cannot be read" in out.splitlines()[0], out + err
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root / "enc", copy)
    shard = sorted(copy.glob("validation-*.tfrecord"))[0]
    _reframe(shard, 0, lambda data: data[:-1] + bytes([data[-1] ^ 1]))
    status, out, _ = _cli("verify", str(copy), "--no_decrypt")      # the CRCs were redone: sha256 tells
    assert status == 1 and "sha256" in out
    status, out, _ = _cli("verify", str(copy))
    assert status == 1 and f"{shard.name}" in out and "fails authentication" in out + _


def test_inspect_reads_the_metadata_without_the_key(encrypted, tmp_path):
    root, uri = encrypted
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root / "enc", copy)
    manifest = _manifest(copy)
    manifest["encryption"]["key_uri"] = f"keyfile:{tmp_path / 'elsewhere.json'}"
    (copy / "dataset.json").write_text(json.dumps(manifest))
    status, out, err = _cli("inspect", str(copy))
    assert status == 0 and "encrypted (aes256gcm-envelope-v1)" in out and "elsewhere.json" in out, err
    status, out, err = _cli("inspect", str(copy), "--record", "0")
    assert status == 1 and err.count("\n") == 1 and "elsewhere.json cannot be read" in err, err


class KmsStandIn:
    """A local stand-in for google.cloud.kms.KeyManagementServiceClient: the same
    encrypt(request=...)/decrypt(request=...) calls and responses, AES-GCM under a key it
    holds per key name (the real KMS is not reachable from the tests)."""

    def __init__(self):
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        self._aead, self.calls = AESGCM, []
        self._keys: dict = {}

    def _key(self, name):
        return self._aead(self._keys.setdefault(name, self._aead.generate_key(bit_length=256)))

    def encrypt(self, request):
        import types
        self.calls.append(("encrypt", request["name"]))
        nonce = os.urandom(12)
        sealed = self._key(request["name"]).encrypt(nonce, request["plaintext"],
                                                    request["additional_authenticated_data"])
        return types.SimpleNamespace(ciphertext=nonce + sealed)

    def decrypt(self, request):
        import types
        from cryptography.exceptions import InvalidTag
        self.calls.append(("decrypt", request["name"]))
        data = request["ciphertext"]
        try:
            plain = self._key(request["name"]).decrypt(data[:12], data[12:], request["additional_authenticated_data"])
        except InvalidTag:
            raise ValueError("400 Decryption failed: the ciphertext is invalid.") from None
        return types.SimpleNamespace(plaintext=plain)


def test_rekey_rewraps_under_a_new_key_without_rewriting_shards(encrypted, tmp_path):
    root, uri = encrypted
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root / "enc", copy)
    shards = {p.name: p.read_bytes() for p in copy.glob("*.tfrecord")}
    before = [bytes(r) for r in (reader.RandomAccess(str(copy), "train")[i]["image"] for i in range(3))]
    new = tmp_path / "new.json"
    assert _cli("keygen", str(new))[0] == 0
    assert _cli("keygen", str(new))[0] == 2           # never over a key
    status, out, err = _cli("rekey", str(copy), "--new_key", f"keyfile:{new}")
    assert status == 0 and "data keys now wrapped" in out, err
    assert {p.name: p.read_bytes() for p in copy.glob("*.tfrecord")} == shards
    assert _manifest(copy)["encryption"]["key_uri"] == f"keyfile:{new}"
    after = [bytes(r) for r in (reader.RandomAccess(str(copy), "train")[i]["image"] for i in range(3))]
    assert after == before
    with pytest.raises(DecryptionError, match="does not unwrap"):     # the old key opens it no more
        reader.RandomAccess(str(copy), "train", key=uri)[0]
    status, _, err = _cli("rekey", str(copy), "--new_key", f"keyfile:{new}", "--old_key", uri)
    assert status == 1 and "does not unwrap" in err and err.count("\n") == 1
    # to Cloud KMS (its stand-in) and back: wrapped by KMS, read through it
    kms = KmsStandIn()
    kms_uri = "gcp-kms://projects/p/locations/global/keyRings/r/cryptoKeys/k"
    assert encryption.rekey(str(copy), kms_uri, kms_client=kms) == sum(
        len(e["shards"]) for e in _manifest(copy)["splits"].values())
    assert _manifest(copy)["encryption"]["key_uri"] == kms_uri and kms.calls[0] == ("encrypt", kms_uri[10:])
    key = encryption.GcpKmsKek(kms_uri, kms)
    assert [bytes(reader.RandomAccess(str(copy), "train", key=key)[i]["image"]) for i in range(3)] == before
    with pytest.raises(KeyUnavailable, match="Cloud KMS decrypt failed"):
        reader.RandomAccess(str(copy), "train", key=encryption.GcpKmsKek(kms_uri, _Refusing()))[0]
    with pytest.raises(DecryptionError, match="does not unwrap"):
        reader.RandomAccess(str(copy), "train", key=encryption.GcpKmsKek(kms_uri, KmsStandIn()))[0]
    # crypto-shredding: the KEK destroyed, no copy of the shards reads
    os.remove(new)
    with pytest.raises(KeyUnavailable):
        encryption.rekey(str(copy), f"keyfile:{new}", old_key=f"keyfile:{new}")


class _Refusing:
    def decrypt(self, request):
        raise PermissionError("403 Permission 'cloudkms.cryptoKeyVersions.useToDecrypt' denied")


def test_convert_refuses_a_key_it_cannot_use_and_gzip_in_one_line(tmp_path):
    from dcm2tfrecord.pipeline.options.usage import UsageError
    archive = tmp_path / "archive"
    write_png_archive(archive, 2, 8, 8)
    with pytest.raises(UsageError, match=r"--encrypt: key keyfile:.*missing.json cannot be read"):
        run_convert(archive, tmp_path / "out", encrypt=f"keyfile:{tmp_path / 'missing.json'}")
    with pytest.raises(UsageError, match="names no known key source"):
        run_convert(archive, tmp_path / "out", encrypt="vault://x")
    key = tmp_path / "kek.json"
    encryption.new_key_file(str(key))
    with pytest.raises(UsageError, match="--encrypt and --compression gzip exclude each other"):
        run_convert(archive, tmp_path / "out", encrypt=f"keyfile:{key}", compression="gzip")
    with pytest.raises(UsageError, match="--volume_chunks 64 and --encrypt exclude each other"):
        run_convert(archive, tmp_path / "out", encrypt=f"keyfile:{key}", volume_chunks=64)
    assert not (tmp_path / "out").exists()


def test_gs_round_trip_on_the_emulator_with_a_key_file_in_the_bucket(encrypted, gcs_emulator, tmp_path):  # noqa: F811
    root, uri = encrypted
    key = tmp_path / "kek.json"
    encryption.new_key_file(str(key))
    gs_key = f"keyfile:{gcs_emulator.upload_file(str(key), 'keys/kek.json')}"
    gcs_emulator.upload_tree(str(root / "archive"), "crypt/archive")
    out = gcs_emulator.url("crypt/out")
    options = dict(splits="train=0.75,validation=0.25", min_shards=2, min_shard_mb=0.0001)
    run_convert(gcs_emulator.url("crypt/archive"), out, encrypt=gs_key,
                beam_args=IN_MEMORY + [f"--temp_location={gcs_emulator.url('tmp')}"], **options)
    remote, local = reader.RandomAccess(out, "train"), reader.RandomAccess(str(root / "plain"), "train")
    assert len(remote) == len(local)
    for i in range(len(local)):
        np.testing.assert_array_equal(remote[i]["image"], local[i]["image"])
    assert _cli("verify", out)[0] == 0
    copy = tmp_path / "copy"
    gcs_emulator.download_tree("crypt/out", str(copy))
    assert json.loads((copy / "dataset.json").read_text())["encryption"]["key_uri"] == gs_key
    shards = b"".join(p.read_bytes() for p in copy.glob("*.tfrecord"))
    assert local[0]["image"].tobytes()[:SIZE] not in shards


def test_torch_and_grain_loaders_read_encrypted_records_in_worker_processes(encrypted):
    root, _ = encrypted
    plain = reader.RandomAccess(str(root / "plain"), "train")
    records = reader.RandomAccess(str(root / "enc"), "train")
    want = sorted(plain[i]["image"].tobytes() for i in range(len(plain)))
    torch_batches = list(reader.torch_loader(records, 3, shuffle=True, seed=1, num_workers=2))
    got = sorted(image.numpy().tobytes() if hasattr(image, "numpy") else np.asarray(image).tobytes()
                 for batch in torch_batches for image in batch["image"])
    assert got == want
    grain_batches = list(reader.grain_loader(records, 3, seed=1))
    assert sorted(np.asarray(image).tobytes() for batch in grain_batches for image in batch["image"]) == want


def test_a_salt_wrapped_by_the_key_keys_the_ids_as_the_plain_salt(encrypted, tmp_path):
    """dcm2tfrecord wrap-salt: the salt file sealed under the KEK; --id_salt_file of it gives the
    ids of the plain salt, and neither the salt nor any readable form of it is in the file."""
    from dcm2tfrecord.transforms.settings import SaltFileError, read_salt_file
    from tests.support import TEST_SALT
    root, uri = encrypted
    plain = tmp_path / "salt.txt"
    plain.write_text(TEST_SALT + "\n")
    wrapped = tmp_path / "salt.wrapped"
    status, out, err = _cli("wrap-salt", str(plain), str(wrapped), "--key", uri)
    assert status == 0 and "--id_salt_file" in out, err
    assert oct(wrapped.stat().st_mode & 0o777) == "0o600"
    text = wrapped.read_text()
    assert TEST_SALT not in text and json.loads(text)["key_uri"] == uri
    assert _cli("wrap-salt", str(plain), str(wrapped), "--key", uri)[0] == 2      # never over a file
    assert read_salt_file(str(wrapped)) == TEST_SALT
    # the ids of a conversion with the wrapped salt are those of the plain salt's
    archive = root / "archive"
    run_convert(archive, tmp_path / "wrapped_out", id_salt="", id_salt_file=str(wrapped))
    run_convert(archive, tmp_path / "plain_out", id_salt="", id_salt_file=str(plain))
    shards = [{p.name: p.read_bytes() for p in (tmp_path / name).glob("*.tfrecord")}
              for name in ("wrapped_out", "plain_out")]
    assert shards[0] == shards[1] and shards[0]       # the record ids are in the shards
    run_convert(archive, tmp_path / "other_out", id_salt="another salt")
    assert {p.name: p.read_bytes() for p in (tmp_path / "other_out").glob("*.tfrecord")} != shards[0]
    # another key, a changed file, an unreadable key: one line each
    other = tmp_path / "other.kek"
    encryption.new_key_file(str(other))
    with pytest.raises(SaltFileError, match="does not unwrap"):
        encryption_text = text.replace(uri, f"keyfile:{other}")
        (tmp_path / "other.wrapped").write_text(encryption_text)
        read_salt_file(str(tmp_path / "other.wrapped"))
    sealed = json.loads(text)
    body = bytearray(encryption.decode_wrapped(sealed["ciphertext"], "t"))
    body[-1] ^= 1
    sealed["ciphertext"] = encryption.encode_wrapped(bytes(body))
    (tmp_path / "changed.wrapped").write_text(json.dumps(sealed))
    with pytest.raises(SaltFileError, match="fails authentication"):
        read_salt_file(str(tmp_path / "changed.wrapped"))
    (tmp_path / "gone.wrapped").write_text(text.replace(uri, f"keyfile:{tmp_path / 'missing.kek'}"))
    with pytest.raises(SaltFileError) as info:
        read_salt_file(str(tmp_path / "gone.wrapped"))
    assert "\n" not in str(info.value)
    status, _, err = _cli("wrap-salt", str(plain), str(tmp_path / "x"), "--key", f"keyfile:{tmp_path / 'missing.kek'}")
    assert status == 1 and err.count("\n") == 1 and not (tmp_path / "x").exists()
