"""Errors of the memory package.

::

    MemoryStoreError
    ├── InvalidMemory          (remote: bad content from a person or an import; 422)
    │   └── SensitiveContent   (passwords, keys, access links are never stored; 422)
    ├── MemoryNotFound         (no such entry for this user; 404)
    ├── StaleRevision          (the entry changed since it was read; 409)
    ├── DuplicateMemory        (an edit would duplicate another active entry; 409)
    ├── MemoryFull             (the user×role holds MAX_ENTRIES_PER_ROLE entries; 409)
    ├── UnknownFact            (thread memory: Forget of a key with no active fact; 409)
    ├── ThreadMemoryFull       (thread memory: a new key past MAX_THREAD_FACTS; 409)
    ├── RevisionConflict       (thread memory moved since it was read; carries it; 409)
    ├── MemoryUnavailable      (local/infrastructure: the store cannot be reached; retryable)
    └── MemoryKeyError         (local: encryption at rest, ``memory/crypto.py``)
        ├── KeyConfigError     (the keys' configuration or key file is unusable)
        ├── UnknownKey         (a row is sealed under a key id the keyring does not hold)
        └── SealBroken         (a ciphertext's tag does not verify: tampered or not this row's)

Every error carries a stable ``code`` (used by the HTTP API and the ``memory.status`` event).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memory.thread_memory import ThreadMemory


class MemoryStoreError(Exception):
    code = "memory_error"
    retryable = False


class InvalidMemory(MemoryStoreError):
    code = "invalid_memory"


class SensitiveContent(InvalidMemory):
    code = "sensitive_content"


class MemoryNotFound(MemoryStoreError):
    code = "memory_not_found"


class StaleRevision(MemoryStoreError):
    code = "stale_revision"

    def __init__(self, message: str, current_revision: int) -> None:
        super().__init__(message)
        self.current_revision = current_revision


class DuplicateMemory(MemoryStoreError):
    code = "duplicate_memory"


class MemoryFull(MemoryStoreError):
    code = "memory_full"


class UnknownFact(MemoryStoreError):
    code = "unknown_fact"


class ThreadMemoryFull(MemoryStoreError):
    code = "thread_memory_full"


class RevisionConflict(MemoryStoreError):
    """A compare-and-set save found the thread's memory at another revision: ``current`` is
    what the store holds now (re-check against it and try again, or answer 409)."""

    code = "thread_conflict"

    def __init__(self, current: ThreadMemory) -> None:
        super().__init__(f"thread memory is at revision {current.revision}")
        self.current = current


class MemoryUnavailable(MemoryStoreError):
    code = "memory_unavailable"
    retryable = True


class MemoryKeyError(MemoryStoreError):
    """Encryption at rest failed; messages never hold plaintext or key material."""

    code = "memory_key_error"


class KeyConfigError(MemoryKeyError):
    code = "memory_key_config"


class UnknownKey(MemoryKeyError):
    code = "memory_key_unknown"


class SealBroken(MemoryKeyError):
    code = "memory_seal_broken"
