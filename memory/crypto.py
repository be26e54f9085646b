"""Encryption at rest for memory content (SPEC RM-8): a keyring of AES-256-GCM keys.

Theory of operation
-------------------
1. A ``Keyring`` holds keys by key id and names one of them active. ``seal`` encrypts under
   the active key with a fresh random 96-bit nonce and returns ``Sealed(key_id, nonce +
   ciphertext)``; the key id is stored beside the ciphertext in the row, so ``open`` finds the
   key and rotation can tell which rows still need to move.
2. Every seal takes a ``context``: associated data naming the row and column the ciphertext
   belongs to (``row_context``). A ciphertext copied to another row, user or column fails its
   tag like a tampered one.
3. Errors carry stable codes and never the plaintext: ``UnknownKey`` (``memory_key_unknown``)
   for a key id the keyring does not hold, ``SealBroken`` (``memory_seal_broken``) for a tag
   that does not verify (tampered, truncated, or opened under the wrong context).
4. ``content_hash`` replaces a plain SHA-256 of the content where SQL needs equality
   (duplicates): HMAC-SHA256 of ``tenant``, ``owner`` and the normalised content under a hash
   key derived (HKDF-SHA256) from one data key. The database then holds no value anyone can
   compare with a guessed sentence without the key, and the same sentence of two users hashes
   differently. A row's hash is made under the row's key, so ``content_hashes`` (one per key)
   finds it whichever key it is under; rotation rewrites hash and ciphertext together.
5. Keys come from configuration (``load_keyring``): ``OPENREALTIME_MEMORY_KEYS``
   (``id:base64key,…``, the first active), else a key file in the data directory, made on
   first start with mode 0600; a file group or others may read is refused. Key material is
   never logged, printed or put in an error message.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from memory.errors import KeyConfigError, SealBroken, UnknownKey

KEY_BYTES = 32
"""AES-256."""
NONCE_BYTES = 12
"""96-bit random nonces (NIST SP 800-38D's recommended size)."""
KEY_FILE_NAME = "memory-keys.json"
"""The key file in the data directory when ``OPENREALTIME_MEMORY_KEYS`` is not set."""
MAX_KEYS = 64
"""Most keys one keyring holds (a key file or the variable with more is refused)."""
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")
_HASH_INFO = b"openrealtime/memory/content-hash/v1"
_CONTEXT_VERSION = b"orm1"


@dataclass(frozen=True, slots=True)
class Sealed:
    """A ciphertext as stored: the key id and ``nonce + ciphertext + tag``."""

    key_id: str
    blob: bytes

    def __repr__(self) -> str:
        return f"Sealed(key_id={self.key_id!r}, {len(self.blob)} bytes)"


def row_context(table: str, column: str, *parts: str) -> bytes:
    """Associated data binding a ciphertext to its row: table, column and the row's key
    (e.g. tenant, owner, entry id), unambiguously joined."""
    fields = (table, column, *parts)
    return _CONTEXT_VERSION + b"".join(
        len(f.encode("utf-8")).to_bytes(4, "big") + f.encode("utf-8") for f in fields
    )


def new_key_id() -> str:
    return f"k{secrets.token_hex(6)}"


def check_key_id(key_id: str) -> str:
    if not _KEY_ID.fullmatch(key_id):
        raise KeyConfigError("a memory key id is 1-32 letters, digits, '_' or '-'")
    return key_id


class Keyring:
    """AES-256-GCM keys by id, one of them active (module docstring)."""

    def __init__(self, keys: Mapping[str, bytes], *, active: str) -> None:
        if not keys:
            raise KeyConfigError("a memory keyring needs at least one key")
        if len(keys) > MAX_KEYS:
            raise KeyConfigError(f"a memory keyring holds at most {MAX_KEYS} keys")
        if active not in keys:
            raise KeyConfigError("the active memory key is not among the keys")
        for key_id, key in keys.items():
            check_key_id(key_id)
            if len(key) != KEY_BYTES:
                raise KeyConfigError(f"memory key {key_id} is not {KEY_BYTES} bytes")
        self._keys = dict(keys)
        self._ciphers = {k: AESGCM(v) for k, v in keys.items()}
        self._hash_keys = {k: _hash_key(v) for k, v in keys.items()}
        self.active_id = active

    def __repr__(self) -> str:
        return f"Keyring(active={self.active_id!r}, keys={sorted(self._keys)!r})"

    @classmethod
    def generate(cls, key_id: str | None = None) -> Keyring:
        """A keyring of one new random key (tests; the first start's key file)."""
        key_id = key_id or new_key_id()
        return cls({key_id: AESGCM.generate_key(bit_length=256)}, active=key_id)

    @property
    def key_ids(self) -> tuple[str, ...]:
        """Every key id, the active one first."""
        return (self.active_id, *sorted(k for k in self._keys if k != self.active_id))

    def with_new_active_key(self, key_id: str | None = None) -> Keyring:
        """This keyring plus a new random key, made active (old keys stay for reading)."""
        key_id = check_key_id(key_id or new_key_id())
        if key_id in self._keys:
            raise KeyConfigError(f"memory key {key_id} already exists")
        keys = {**self._keys, key_id: AESGCM.generate_key(bit_length=256)}
        return Keyring(keys, active=key_id)

    def without(self, key_ids: set[str]) -> Keyring:
        """This keyring without ``key_ids`` (never the active key)."""
        if self.active_id in key_ids:
            raise KeyConfigError("the active memory key cannot be retired")
        return Keyring(
            {k: v for k, v in self._keys.items() if k not in key_ids}, active=self.active_id
        )

    def seal(self, plaintext: str, *, context: bytes) -> Sealed:
        return self.seal_bytes(plaintext.encode("utf-8"), context=context)

    def open(self, sealed: Sealed, *, context: bytes) -> str:
        return self.open_bytes(sealed, context=context).decode("utf-8")

    def seal_bytes(self, plaintext: bytes, *, context: bytes) -> Sealed:
        """``seal`` for binary content (a recording's audio)."""
        nonce = os.urandom(NONCE_BYTES)
        blob = self._ciphers[self.active_id].encrypt(nonce, plaintext, context)
        return Sealed(self.active_id, nonce + blob)

    def open_bytes(self, sealed: Sealed, *, context: bytes) -> bytes:
        cipher = self._ciphers.get(sealed.key_id)
        if cipher is None:
            raise UnknownKey(f"memory key {sealed.key_id!r} is not in the keyring")
        blob = bytes(sealed.blob)
        if len(blob) < NONCE_BYTES + 16:
            raise SealBroken("sealed memory content is truncated")
        try:
            plain = cipher.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], context)
        except InvalidTag as e:
            raise SealBroken(
                "sealed memory content does not verify (tampered, or not this row's)"
            ) from e
        return plain

    def content_hash(self, normalised: str, *, scope: tuple[str, ...], key_id: str) -> str:
        """HMAC-SHA256 (hex) of ``normalised`` content within ``scope`` (e.g. tenant, owner)
        under the hash key of ``key_id`` (rule 4)."""
        hash_key = self._hash_keys.get(key_id)
        if hash_key is None:
            raise UnknownKey(f"memory key {key_id!r} is not in the keyring")
        message = row_context("hash", "content", *scope, normalised)
        return hmac.new(hash_key, message, hashlib.sha256).hexdigest()

    def content_hashes(self, normalised: str, *, scope: tuple[str, ...]) -> list[str]:
        """``content_hash`` under every key: what a row with this content may hold."""
        return [self.content_hash(normalised, scope=scope, key_id=k) for k in self.key_ids]

    # ------------------------------------------------------------------ configuration

    def to_json(self) -> str:
        """The key file's text (key material: write it only to a 0600 file)."""
        keys = {k: base64.b64encode(v).decode("ascii") for k, v in self._keys.items()}
        return json.dumps({"version": 1, "active": self.active_id, "keys": keys}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Keyring:
        try:
            data = json.loads(text)
            active = data["active"]
            keys = {str(k): _decode_key(str(k), v) for k, v in data["keys"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise KeyConfigError(
                "the memory key file is not {version, active, keys: {id: base64}}"
            ) from e
        if not isinstance(active, str):
            raise KeyConfigError("the memory key file's active key id is not a string")
        return cls(keys, active=active)

    @classmethod
    def from_config(cls, value: str) -> Keyring:
        """``id1:base64key,id2:base64key`` (``OPENREALTIME_MEMORY_KEYS``), the first active."""
        keys: dict[str, bytes] = {}
        for item in value.split(","):
            key_id, sep, encoded = item.strip().partition(":")
            if not sep:
                raise KeyConfigError(
                    "OPENREALTIME_MEMORY_KEYS is id:base64key[,id:base64key…] (the first active)"
                )
            key_id = check_key_id(key_id.strip())
            if key_id in keys:
                raise KeyConfigError(f"OPENREALTIME_MEMORY_KEYS names key {key_id} twice")
            keys[key_id] = _decode_key(key_id, encoded.strip())
        return cls(keys, active=next(iter(keys)))


def _hash_key(key: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_HASH_INFO).derive(key)


def _decode_key(key_id: str, encoded: object) -> bytes:
    if not isinstance(encoded, str):
        raise KeyConfigError(f"memory key {key_id} is not base64 text")
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as e:
        raise KeyConfigError(f"memory key {key_id} is not valid base64") from e
    if len(key) != KEY_BYTES:
        raise KeyConfigError(f"memory key {key_id} is not {KEY_BYTES} bytes")
    return key


# ------------------------------------------------------------------ where keys come from


@dataclass(frozen=True, slots=True)
class KeySource:
    """Where the keyring is read from: ``configured`` (the variable's value) or ``path``."""

    configured: str | None
    path: Path

    @property
    def from_config(self) -> bool:
        return bool(self.configured)

    def load(self) -> Keyring:
        """The keyring; a missing key file is made (one new key, mode 0600)."""
        if self.configured:
            return Keyring.from_config(self.configured)
        return load_key_file(self.path, create=True)


def load_key_file(path: Path, *, create: bool) -> Keyring:
    """Read the key file, refusing one that group or others may read; make it when absent
    and ``create`` (exclusively, so two processes starting together agree on one key)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        if not create:
            raise KeyConfigError(f"no memory key file at {path}") from None
        return _create_key_file(path)
    except OSError as e:
        raise KeyConfigError(f"cannot read the memory key file {path}: {e.strerror}") from e
    with os.fdopen(fd, "r", encoding="utf-8") as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise KeyConfigError(f"the memory key file {path} is not a regular file")
        if mode & 0o077:
            raise KeyConfigError(
                f"the memory key file {path} may be read by group or others"
                f" (mode {stat.S_IMODE(mode):04o}); run: chmod 600 {path}"
            )
        return Keyring.from_json(f.read())


def _create_key_file(path: Path) -> Keyring:
    """Write a new key file whole, then link it into place: ``os.link`` fails when another
    process made the file first, and a file that is there is always complete (two processes
    of a fleet starting together once read an empty one, created but not yet written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keyring = Keyring.generate()
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(keyring.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return load_key_file(path, create=False)  # another process made it first
    finally:
        tmp.unlink(missing_ok=True)
    return keyring


def write_key_file(path: Path, keyring: Keyring) -> None:
    """Replace the key file atomically (a 0600 temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(keyring.to_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
