"""The memory keyring: AES-256-GCM round trips bound to their row, stable errors that never
carry plaintext, and a key file made 0600 that is refused when others may read it."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from memory.crypto import (
    NONCE_BYTES,
    Keyring,
    KeySource,
    Sealed,
    load_key_file,
    row_context,
    write_key_file,
)
from memory.errors import KeyConfigError, SealBroken, UnknownKey

SECRET = "I am allergic to penicillin"
ROW = row_context("memory_entries", "content", "t", "owner", "mem_1")


def test_a_sealed_text_opens_with_its_context() -> None:
    keyring = Keyring.generate("k1")
    sealed = keyring.seal(SECRET, context=ROW)
    assert sealed.key_id == "k1"
    assert SECRET.encode() not in sealed.blob
    assert keyring.open(sealed, context=ROW) == SECRET
    assert keyring.open(keyring.seal("", context=ROW), context=ROW) == ""


def test_a_ciphertext_copied_to_another_row_does_not_open() -> None:
    keyring = Keyring.generate()
    sealed = keyring.seal(SECRET, context=ROW)
    for other in (
        row_context("memory_entries", "content", "t", "owner", "mem_2"),
        row_context("memory_entries", "content", "t", "other", "mem_1"),
        row_context("memory_entries", "key", "t", "owner", "mem_1"),
        row_context("memory_entries", "content", "t", "ownermem_1", ""),  # no ambiguous joins
    ):
        with pytest.raises(SealBroken) as caught:
            keyring.open(sealed, context=other)
        assert caught.value.code == "memory_seal_broken"
        assert SECRET not in str(caught.value)


def test_an_unknown_key_id_is_a_stable_error() -> None:
    sealed = Keyring.generate("k1").seal(SECRET, context=ROW)
    with pytest.raises(UnknownKey) as caught:
        Keyring.generate("k2").open(sealed, context=ROW)
    assert caught.value.code == "memory_key_unknown"
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("where", [0, NONCE_BYTES, -1])
def test_a_tampered_ciphertext_does_not_open(where: int) -> None:
    keyring = Keyring.generate()
    sealed = keyring.seal(SECRET, context=ROW)
    blob = bytearray(sealed.blob)
    blob[where] ^= 0x01
    with pytest.raises(SealBroken):
        keyring.open(Sealed(sealed.key_id, bytes(blob)), context=ROW)
    with pytest.raises(SealBroken):
        keyring.open(Sealed(sealed.key_id, sealed.blob[:20]), context=ROW)


def test_every_seal_takes_a_fresh_nonce() -> None:
    keyring = Keyring.generate()
    nonces = {keyring.seal(SECRET, context=ROW).blob[:NONCE_BYTES] for _ in range(10_000)}
    assert len(nonces) == 10_000


def test_old_keys_still_open_after_a_new_active_key() -> None:
    old = Keyring.generate("k1")
    sealed = old.seal(SECRET, context=ROW)
    rotated = old.with_new_active_key("k2")
    assert rotated.active_id == "k2" and rotated.key_ids == ("k2", "k1")
    assert rotated.open(sealed, context=ROW) == SECRET
    assert rotated.seal(SECRET, context=ROW).key_id == "k2"
    retired = rotated.without({"k1"})
    with pytest.raises(UnknownKey):
        retired.open(sealed, context=ROW)
    with pytest.raises(KeyConfigError):
        rotated.without({"k2"})


def test_content_hashes_are_keyed_and_scoped() -> None:
    keyring = Keyring.generate("k1").with_new_active_key("k2")
    a = keyring.content_hash("i like tea", scope=("t", "alice"), key_id="k1")
    assert a == keyring.content_hash("i like tea", scope=("t", "alice"), key_id="k1")
    assert a != keyring.content_hash("i like tea", scope=("t", "bob"), key_id="k1")
    assert a != keyring.content_hash("i like tea", scope=("t", "alice"), key_id="k2")
    assert a != Keyring.generate("k1").content_hash("i like tea", scope=("t", "alice"), key_id="k1")
    assert a in keyring.content_hashes("i like tea", scope=("t", "alice"))


def test_keys_from_configuration_first_is_active() -> None:
    one, two = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    keyring = Keyring.from_config(f"a:{one}, b:{two}")
    assert keyring.active_id == "a" and set(keyring.key_ids) == {"a", "b"}
    for bad in ("a", f"a:{one[:-4]}", f"a:{one},a:{two}", f"bad id:{one}", "a:!!!"):
        with pytest.raises(KeyConfigError) as caught:
            Keyring.from_config(bad)
        assert one not in str(caught.value)


def test_the_key_file_is_made_0600_on_first_start_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "data" / "memory-keys.json"
    source = KeySource(configured=None, path=path)
    first = source.load()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = source.load()
    assert again.key_ids == first.key_ids
    sealed = first.seal(SECRET, context=ROW)
    assert again.open(sealed, context=ROW) == SECRET
    rotated = again.with_new_active_key()
    write_key_file(path, rotated)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key_file(path, create=False).active_id == rotated.active_id


def test_a_new_key_file_is_visible_only_once_it_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fleet's processes make the key file at once; one read an empty file (created, not yet
    # written) and failed to start. While the keys are written, the file must not be there.
    import memory.crypto as crypto

    path = tmp_path / "data" / "memory-keys.json"
    seen_while_writing: list[bool] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        seen_while_writing.append(path.exists())
        real_fsync(fd)

    monkeypatch.setattr(crypto.os, "fsync", fsync)
    made = KeySource(configured=None, path=path).load()
    assert seen_while_writing == [False]
    assert load_key_file(path, create=False).key_ids == made.key_ids
    assert [p.name for p in path.parent.iterdir()] == ["memory-keys.json"]  # no leftovers
    # A second process that finds it there reads the same keys.
    assert KeySource(configured=None, path=path).load().key_ids == made.key_ids


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_a_key_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "memory-keys.json"
    path.write_text(Keyring.generate().to_json())
    path.chmod(mode)
    with pytest.raises(KeyConfigError) as caught:
        KeySource(configured=None, path=path).load()
    assert "chmod 600" in str(caught.value)


def test_configured_keys_win_over_the_key_file(tmp_path: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    keyring = KeySource(configured=f"env1:{key}", path=tmp_path / "k.json").load()
    assert keyring.active_id == "env1"
    assert not (tmp_path / "k.json").exists()


def test_reprs_hold_no_key_material() -> None:
    keyring = Keyring.generate("k1")
    sealed = keyring.seal(SECRET, context=ROW)
    assert "bytes" in repr(sealed) and "k1" in repr(keyring)
    assert base64.b64encode(sealed.blob).decode() not in repr(sealed)
