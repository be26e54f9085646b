"""Where a recording's audio rests: sealed pieces (SPEC REC-2, REC-6).

Rules
-----
1. A recording is a numbered series of pieces (``records.recorder.Piece``); a store keeps the
   last of each number, and ``read`` returns them in order. Every piece is sealed with the
   keyring before it reaches a store (``seal_piece``): AES-256-GCM under the active key, bound to
   the tenant, the recording and the piece number, so a piece copied to another recording or
   place fails to open. No store ever sees plaintext audio.
2. ``LocalAudioStore`` keeps a recording in one directory under the data directory
   (``recordings/<id>/``), a file per piece named by its number and key id; a piece is written
   aside and renamed into place, so a reader never sees half of one. ``delete`` removes the
   files, then the directory; a crash in between leaves fewer files, and the next ``delete``
   finishes (it is idempotent and says whether anything was left).
3. Recording ids are checked (``check_recording_id``): they name directories.
4. ``remove_all`` empties the store: with the in-memory index (``storage=memory``) every
   recording's row is gone when the process ends, so the files left from before can never be
   listed, downloaded or expired — the process removes them when it starts (no orphan files).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Protocol

from memory.crypto import Keyring, Sealed, row_context

_ID = re.compile(r"rec_[0-9a-f]{32}")
_PIECE = re.compile(r"(\d{6})\.([A-Za-z0-9_-]{1,32})")


def check_recording_id(recording_id: str) -> str:
    if not _ID.fullmatch(recording_id):
        raise ValueError("not a recording id")
    return recording_id


def piece_context(tenant: str, recording_id: str, index: int) -> bytes:
    return row_context("recordings", "audio", tenant, recording_id, str(index))


def seal_piece(keyring: Keyring, tenant: str, recording_id: str, index: int, data: bytes) -> Sealed:
    return keyring.seal_bytes(data, context=piece_context(tenant, recording_id, index))


def open_pieces(
    keyring: Keyring, tenant: str, recording_id: str, pieces: list[tuple[int, Sealed]]
) -> bytes:
    """The recording's file (Rule 1): every piece opened, in order."""
    return b"".join(
        keyring.open_bytes(sealed, context=piece_context(tenant, recording_id, index))
        for index, sealed in pieces
    )


class AudioStore(Protocol):
    async def put(self, recording_id: str, index: int, sealed: Sealed) -> None:
        """Keep ``sealed`` as piece ``index``, replacing one of that number."""
        ...

    async def read(self, recording_id: str) -> list[tuple[int, Sealed]]:
        """The pieces in order (none: an empty list)."""
        ...

    async def delete(self, recording_id: str) -> bool:
        """Remove every piece; whether any was there (Rule 2)."""
        ...


class LocalAudioStore:
    """Rule 2."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, recording_id: str) -> Path:
        return self.root / check_recording_id(recording_id)

    async def put(self, recording_id: str, index: int, sealed: Sealed) -> None:
        await asyncio.to_thread(self._put, recording_id, index, sealed)

    def _put(self, recording_id: str, index: int, sealed: Sealed) -> None:
        directory = self._dir(recording_id)
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        for old in directory.glob(f"{index:06d}.*"):
            if old.name != f"{index:06d}.{sealed.key_id}":
                old.unlink(missing_ok=True)
        target = directory / f"{index:06d}.{sealed.key_id}"
        aside = directory / f".{target.name}.part"
        descriptor = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(sealed.blob)
        os.replace(aside, target)

    async def read(self, recording_id: str) -> list[tuple[int, Sealed]]:
        return await asyncio.to_thread(self._read, recording_id)

    def _read(self, recording_id: str) -> list[tuple[int, Sealed]]:
        directory = self._dir(recording_id)
        if not directory.is_dir():
            return []
        pieces: list[tuple[int, Sealed]] = []
        for path in directory.iterdir():
            found = _PIECE.fullmatch(path.name)
            if found is not None:
                pieces.append((int(found.group(1)), Sealed(found.group(2), path.read_bytes())))
        return sorted(pieces, key=lambda piece: piece[0])

    async def delete(self, recording_id: str) -> bool:
        return await asyncio.to_thread(self._delete, recording_id)

    def _delete(self, recording_id: str) -> bool:
        directory = self._dir(recording_id)
        if not directory.exists():
            return False
        for path in directory.iterdir():
            path.unlink(missing_ok=True)
        directory.rmdir()
        return True

    def remove_all(self) -> int:
        """Rule 4: every recording's directory removed; how many there were."""
        if not self.root.is_dir():
            return 0
        removed = 0
        for directory in self.root.iterdir():
            if directory.is_dir() and _ID.fullmatch(directory.name):
                self._delete(directory.name)
                removed += 1
        return removed


class InMemoryAudioStore:
    """For unit tests: the same rules, in a dict (both storage modes keep audio on disk)."""

    def __init__(self) -> None:
        self.pieces: dict[str, dict[int, Sealed]] = {}

    async def put(self, recording_id: str, index: int, sealed: Sealed) -> None:
        self.pieces.setdefault(check_recording_id(recording_id), {})[index] = sealed

    async def read(self, recording_id: str) -> list[tuple[int, Sealed]]:
        return sorted(self.pieces.get(recording_id, {}).items())

    async def delete(self, recording_id: str) -> bool:
        return self.pieces.pop(recording_id, None) is not None
