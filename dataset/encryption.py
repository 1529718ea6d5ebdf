"""Encryption at rest (``convert --encrypt KEY_URI``): envelope encryption of each record.

Each shard has its own fresh 256-bit data key; each record's payload (its serialized
``tf.train.Example``) is stored as ``nonce (12 bytes) || AES-256-GCM ciphertext and tag``,
with the shard's file name and the record's index in the shard as associated data, so a
record moved to another position or shard fails to decrypt as surely as a flipped bit.
The TFRecord framing (length, CRC32Cs) stays around the ciphertext: ``.idx`` offsets,
``RandomAccess`` and a CRC check without the key work as on plain shards.

The data keys are stored only wrapped (encrypted) by a key-encryption key (KEK), named
by a key URI, in each shard's dataset.json entry (``wrapped_key``); dataset.json's
``encryption`` block names the scheme and the key URI. Nothing secret is written: the
unwrapped data key lives in the writing or reading process only. Key URIs:

- ``keyfile:PATH`` (PATH local or ``gs://``): a file holding a KEK that
  ``dcm2tfrecord keygen PATH`` made (tests, on-premises sites). Every worker reads it,
  as workers read ``--id_salt_file``.
- ``gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K``: Google Cloud KMS wraps and
  unwraps (google-cloud-kms; the key never leaves KMS).
- others: :func:`register_scheme`.

The cryptography is the ``cryptography`` package's AESGCM (OpenSSL); nothing here is a
primitive of our own. Rotating the KEK re-wraps the data keys (``dcm2tfrecord rekey``),
no shard is rewritten; destroying the KEK (or its KMS key versions) makes every copy of
the shards unreadable (crypto-shredding).
"""
from __future__ import annotations

import base64
import json
import os
import secrets
from typing import Callable, Optional, Protocol

from dcm2tfrecord.dataset.errors import CorruptDataError, FormatError

SCHEME = "aes256gcm-envelope-v1"     # dataset.json's encryption.scheme
NONCE_BYTES = 12
KEY_BYTES = 32
TAG_BYTES = 16
OVERHEAD = NONCE_BYTES + TAG_BYTES    # bytes a record grows by
KEYFILE = "keyfile:"
GCP_KMS = "gcp-kms://"
_KEK_TYPE = "dcm2tfrecord-kek"
_WRAP_AAD = b"dcm2tfrecord data key v1"
WRAPPED_SECRET_TYPE = "dcm2tfrecord-wrapped-secret"     # a wrapped --id_salt_file's "type"
_SECRET_AAD = b"dcm2tfrecord wrapped secret v1"


class EncryptionError(FormatError):
    """A key that cannot be had, or a record that does not decrypt: one line saying which."""


class KeyUnavailable(EncryptionError, PermissionError):
    """The KEK the key URI names cannot be read or used (missing file, no KMS access)."""


class DecryptionError(EncryptionError, CorruptDataError, ValueError):
    """A record (or a wrapped data key) that fails authentication: a wrong key or changed bytes."""


def _aesgcm():
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:     # pragma: no cover - the converter depends on it
        raise EncryptionError("encrypted datasets need the 'cryptography' package: "
                              "pip install 'dcm2tfrecord-reader[encryption]'") from None
    return AESGCM


class Kek(Protocol):
    """A key-encryption key: wraps and unwraps data keys; ``uri`` names it."""
    uri: str

    def wrap(self, data_key: bytes) -> bytes: ...
    def unwrap(self, wrapped: bytes) -> bytes: ...


class LocalKek:
    """``keyfile:PATH``: a 256-bit KEK in a JSON file, wrapping with AES-256-GCM."""

    def __init__(self, uri: str, key: bytes):
        self.uri, self._key = uri, key

    def wrap(self, data_key: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + _aesgcm()(self._key).encrypt(nonce, data_key, _WRAP_AAD)

    def unwrap(self, wrapped: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag
        try:
            return _aesgcm()(self._key).decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], _WRAP_AAD)
        except InvalidTag:
            raise DecryptionError(f"{self.uri} does not unwrap this dataset's data keys: "
                                  "the wrong key (or a key rotated away by rekey)") from None


class GcpKmsKek:
    """``gcp-kms://projects/.../cryptoKeys/K``: Cloud KMS encrypts and decrypts the data keys.

    ``client``: anything with KMS's ``encrypt(request=...)``/``decrypt(request=...)``
    (default: ``google.cloud.kms.KeyManagementServiceClient()``)."""

    def __init__(self, uri: str, client=None):
        self.uri = uri
        self.name = uri[len(GCP_KMS):]
        self._client = client

    def _kms(self):
        if self._client is None:
            try:
                from google.cloud.kms import KeyManagementServiceClient   # type: ignore[attr-defined,unused-ignore]
            except ImportError:
                raise KeyUnavailable(f"{self.uri}: Cloud KMS keys need google-cloud-kms "
                                     "(pip install google-cloud-kms)") from None
            self._client = KeyManagementServiceClient()
        return self._client

    def _call(self, method: str, request: dict) -> bytes:
        try:
            response = getattr(self._kms(), method)(request=request)
        except EncryptionError:
            raise
        except Exception as exc:  # noqa: BLE001 - KMS's errors (permission, not found): one line
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if method == "decrypt" and "invalid" in first.lower():
                raise DecryptionError(f"{self.uri} does not unwrap this dataset's data keys ({first})") from None
            raise KeyUnavailable(f"{self.uri}: Cloud KMS {method} failed ({first})") from None
        return bytes(response.plaintext if method == "decrypt" else response.ciphertext)

    def wrap(self, data_key: bytes) -> bytes:
        return self._call("encrypt", {"name": self.name, "plaintext": data_key,
                                      "additional_authenticated_data": _WRAP_AAD})

    def unwrap(self, wrapped: bytes) -> bytes:
        return self._call("decrypt", {"name": self.name, "ciphertext": wrapped,
                                      "additional_authenticated_data": _WRAP_AAD})


ReadBytes = Callable[[str], bytes]


def _read_with_format_storage(path: str) -> bytes:
    from dcm2tfrecord.dataset.storage import FileSystems
    with FileSystems.open(path) as handle:
        return handle.read()


def _keyfile(uri: str, read_bytes: Optional[ReadBytes] = None) -> LocalKek:
    path = uri[len(KEYFILE):]
    if not path:
        raise KeyUnavailable(f"{uri}: no path after '{KEYFILE}'")
    try:
        data = (read_bytes or _read_with_format_storage)(path)
    except Exception as exc:  # noqa: BLE001 - missing, unreadable: one line
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise KeyUnavailable(f"key {uri} cannot be read ({first}): this dataset is encrypted, "
                             "reading it needs that key") from None
    try:
        content = json.loads(data)
        if content.get("type") != _KEK_TYPE:
            raise ValueError("not a dcm2tfrecord key file")
        key = base64.b64decode(content["key"], validate=True)
        if len(key) != KEY_BYTES:
            raise ValueError(f"a key of {len(key)} bytes, not {KEY_BYTES}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise KeyUnavailable(f"key {uri} is not a key file made by 'dcm2tfrecord keygen' ({exc})") from None
    return LocalKek(uri, key)


_SCHEMES: dict[str, Callable[..., Kek]] = {
    KEYFILE: lambda uri, read_bytes=None, **_: _keyfile(uri, read_bytes),
    GCP_KMS: lambda uri, kms_client=None, **_: GcpKmsKek(uri, kms_client),
}


def register_scheme(prefix: str, factory: Callable[..., Kek]) -> None:
    """Another KEK source: ``factory(uri, **options)`` for key URIs starting with ``prefix``."""
    _SCHEMES[prefix] = factory


def check_uri(uri: str) -> str:
    """``uri`` if some scheme takes it, else an EncryptionError naming the ones there are."""
    if not any(uri.startswith(prefix) for prefix in _SCHEMES):
        known = ", ".join(f"{p}..." for p in _SCHEMES)
        raise EncryptionError(f"key URI {uri!r} names no known key source ({known})")
    return uri


def kek(uri: str, **options) -> Kek:
    """The KEK ``uri`` names (``read_bytes`` reads a key file; ``kms_client`` stands in for
    Cloud KMS). A ``Kek`` object is returned as it is."""
    if not isinstance(uri, str):
        return uri
    check_uri(uri)
    for prefix, factory in _SCHEMES.items():
        if uri.startswith(prefix):
            return factory(uri, **options)
    raise AssertionError(uri)    # pragma: no cover - check_uri said one takes it


def wrap_secret(text: str, key, **options) -> str:
    """``text`` (an identifier salt) sealed under the KEK ``key`` names, as the JSON text of a
    ``--id_salt_file``: the envelope of the shards (a fresh data key wrapped by the KEK, the text
    under AES-256-GCM with an associated data of its own, so a wrapped secret is never taken for
    a record or a data key). The file names the key URI; it holds nothing readable without it."""
    kek_ = kek(key, **options)
    data_key = _aesgcm().generate_key(bit_length=256)
    nonce = os.urandom(NONCE_BYTES)
    sealed = nonce + _aesgcm()(data_key).encrypt(nonce, text.encode("utf-8"), _SECRET_AAD)
    return json.dumps({"type": WRAPPED_SECRET_TYPE, "key_uri": kek_.uri,
                       "wrapped_key": encode_wrapped(kek_.wrap(data_key)),
                       "ciphertext": encode_wrapped(sealed)}, indent=2) + "\n"


def is_wrapped_secret(text: str) -> bool:
    stripped = text.strip()
    if not stripped.startswith("{"):
        return False
    try:
        found = json.loads(stripped)
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("type") == WRAPPED_SECRET_TYPE


def unwrap_secret(text: str, where: str, key=None, **options) -> str:
    """The secret :func:`wrap_secret` sealed, unwrapped by ``key`` (default: the key URI the
    text names). KeyUnavailable when the key cannot be had, DecryptionError when it is the wrong
    key or the text was changed; each one line naming ``where``."""
    from cryptography.exceptions import InvalidTag
    try:
        found = json.loads(text)
        uri, wrapped, sealed = found["key_uri"], found["wrapped_key"], found["ciphertext"]
    except (ValueError, KeyError, TypeError):
        raise DecryptionError(f"{where}: not a wrapped secret (JSON with key_uri, wrapped_key, "
                              "ciphertext)") from None
    kek_ = kek(key if key is not None else uri, **options)
    try:
        data_key = kek_.unwrap(decode_wrapped(wrapped, where))
    except DecryptionError as exc:
        raise DecryptionError(f"{where}: {exc}") from None
    sealed_bytes = decode_wrapped(sealed, where)
    try:
        plain = _aesgcm()(data_key).decrypt(sealed_bytes[:NONCE_BYTES], sealed_bytes[NONCE_BYTES:], _SECRET_AAD)
    except InvalidTag:
        raise DecryptionError(f"{where}: the wrapped secret fails authentication with key {kek_.uri}: "
                              "the file was changed") from None
    return plain.decode("utf-8")


def new_key_file(path: str) -> None:
    """Writes a fresh KEK to local ``path`` (readable by its owner only); never over a file."""
    key = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")
    text = json.dumps({"type": _KEK_TYPE, "key": key}, indent=2) + "\n"
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as handle:
        handle.write(text)


def encode_wrapped(wrapped: bytes) -> str:
    return base64.b64encode(wrapped).decode("ascii")


def decode_wrapped(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        raise DecryptionError(f"{where}: its wrapped_key is not base64") from None


def encryption_block(uri: str) -> dict:
    """dataset.json's ``encryption`` object: what reading needs, nothing secret."""
    return {"scheme": SCHEME, "key_uri": uri}


def _aad(shard: str, index: int) -> bytes:
    return f"{shard.rsplit('/', 1)[-1]}\x00{index}".encode("utf-8")


class ShardCipher:
    """One shard's data key: encrypts its records as written, decrypts them as read.

    ``shard`` is the shard's file name (its last path part is bound into every record);
    ``key_uri`` is named in every error."""

    def __init__(self, data_key: bytes, shard: str, key_uri: str):
        self._aead = _aesgcm()(data_key)
        self.shard, self.key_uri = shard, key_uri

    @classmethod
    def new(cls, key: Kek, shard: str) -> tuple["ShardCipher", str]:
        """A fresh data key for ``shard``, and it wrapped by ``key`` (base64, for dataset.json)."""
        data_key = _aesgcm().generate_key(bit_length=256)
        return cls(data_key, shard, key.uri), encode_wrapped(key.wrap(data_key))

    @classmethod
    def opened(cls, key: Kek, shard: str, wrapped_key: Optional[str]) -> "ShardCipher":
        """The cipher of a written shard, its data key unwrapped by ``key``."""
        if not wrapped_key:
            raise DecryptionError(f"{shard}: dataset.json lists no wrapped_key for this shard of an "
                                  "encrypted dataset")
        try:
            data_key = key.unwrap(decode_wrapped(wrapped_key, shard))
        except DecryptionError as exc:
            raise DecryptionError(f"{shard}: {exc}") from None
        return cls(data_key, shard, key.uri)

    def encrypt(self, data: bytes, index: int) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, bytes(data), _aad(self.shard, index))

    def decrypt(self, data, index: int) -> bytes:
        from cryptography.exceptions import InvalidTag
        # slices of a view, not of bytes: a copy of a large record (a fresh allocation, its pages
        # faulted in) cost ten times the decryption itself (benchmarks/bench_encryption.py)
        view = memoryview(data).cast("B")
        if len(view) < OVERHEAD:
            raise DecryptionError(f"{self.shard}: record {index} is {len(view)} bytes, too short "
                                  f"to be encrypted ({OVERHEAD} at least)")
        try:
            return self._aead.decrypt(view[:NONCE_BYTES], view[NONCE_BYTES:], _aad(self.shard, index))
        except InvalidTag:
            raise DecryptionError(f"{self.shard}: record {index} fails authentication with key "
                                  f"{self.key_uri}: the record was changed or moved") from None


    def decrypt_into(self, data, index: int, out) -> int:
        """:meth:`decrypt` into the writable buffer ``out`` (at least the plaintext's size)
        instead of a fresh bytes object; the plaintext's size. A reader reusing ``out`` for
        record after record spares an allocation, and its pages' faults, per record."""
        from cryptography.exceptions import InvalidTag
        view = memoryview(data).cast("B")
        if len(view) < OVERHEAD:
            raise DecryptionError(f"{self.shard}: record {index} is {len(view)} bytes, too short "
                                  f"to be encrypted ({OVERHEAD} at least)")
        size = len(view) - OVERHEAD
        target = memoryview(out).cast("B")[:size]
        try:
            if hasattr(self._aead, "decrypt_into"):          # cryptography >= 45
                self._aead.decrypt_into(view[:NONCE_BYTES], view[NONCE_BYTES:], _aad(self.shard, index), target)
            else:
                target[:] = self._aead.decrypt(view[:NONCE_BYTES], view[NONCE_BYTES:], _aad(self.shard, index))
        except InvalidTag:
            raise DecryptionError(f"{self.shard}: record {index} fails authentication with key "
                                  f"{self.key_uri}: the record was changed or moved") from None
        return size


class DatasetKeys:
    """Every shard cipher of an encrypted dataset, opened lazily (one unwrap per shard).

    ``shards``: shard file name -> its wrapped key (base64); ``key``: the KEK, or a key URI
    (default: the one dataset.json names); ``options`` go to :func:`kek`."""

    def __init__(self, key_uri: str, shards: dict, key=None, **options):
        self.key_uri = key_uri
        self._shards = shards
        self._key_spec = key if key is not None else key_uri
        self._options = options
        self._kek: Optional[Kek] = None
        self._ciphers: dict = {}

    def kek(self) -> Kek:
        if self._kek is None:
            self._kek = kek(self._key_spec, **self._options)
        return self._kek

    def cipher(self, shard: str) -> ShardCipher:
        found = self._ciphers.get(shard)
        if found is None:
            found = self._ciphers[shard] = ShardCipher.opened(self.kek(), shard, self._shards.get(shard))
        return found

    def decrypt(self, shard: str, data, index: int) -> bytes:
        return self.cipher(shard).decrypt(data, index)

    def __getstate__(self):
        return (self.key_uri, self._shards, self._key_spec, self._options)

    def __setstate__(self, state):
        self.__init__(state[0], state[1], state[2], **state[3])   # type: ignore[misc]


def rekey(dataset_dir: str, new_key, old_key=None, **options) -> int:
    """Re-wraps every shard's data key of the encrypted dataset in ``dataset_dir`` under
    ``new_key`` (a key URI or KEK), unwrapped with ``old_key`` (default: the key URI
    dataset.json names), and replaces dataset.json at once with the new wrapped keys and key
    URI; no shard is rewritten. Returns the number of keys re-wrapped. Nothing is written when
    any key does not unwrap."""
    import dataclasses
    from dcm2tfrecord.dataset.files import replace_file
    from dcm2tfrecord.dataset.manifest import encode_manifest, read_manifest
    from dcm2tfrecord.dataset.names import MANIFEST_NAME
    from dcm2tfrecord.dataset.storage import FileSystems
    manifest = read_manifest(dataset_dir)
    if manifest.encryption is None or not manifest.key_uri:
        raise EncryptionError(f"{dataset_dir} is not encrypted (convert --encrypt): it has no keys to rekey")
    old, new = kek(old_key or manifest.key_uri, **options), kek(new_key, **options)
    splits, count = {}, 0
    for name, entry in manifest.splits.items():
        shards = []
        for shard in entry.shards:
            if not shard.wrapped_key:
                raise DecryptionError(f"{shard.file}: dataset.json lists no wrapped_key for it")
            try:
                data_key = old.unwrap(decode_wrapped(shard.wrapped_key, shard.file))
            except DecryptionError as exc:
                raise DecryptionError(f"{shard.file}: {exc}") from None
            shards.append(dataclasses.replace(shard, wrapped_key=encode_wrapped(new.wrap(data_key))))
            count += 1
        splits[name] = dataclasses.replace(entry, shards=tuple(shards))
    renewed = dataclasses.replace(manifest, splits=splits,
                                  encryption={**manifest.encryption, "key_uri": new.uri})
    replace_file(FileSystems.join(dataset_dir, MANIFEST_NAME), encode_manifest(renewed).encode("utf-8"),
                 "application/json")
    return count
