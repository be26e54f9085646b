"""The knowledge store contract and its in-memory implementation (SPEC KB-1).

Documents belong to one (tenant, user); every method takes both and never reads outside them.
A document is stored with its chunks (text plus an optional embedding, float32 bytes, computed
at ingest by ``knowledge.base.KnowledgeBase``) and its role bindings. Each write bumps the
owner's ``version``, so a process that caches a search index (``knowledge.retrieval``) knows
when to reload it — also when another process wrote.

``max_documents`` is enforced by the store, atomically with the insert.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Protocol

from knowledge.errors import DocumentNotFound, LimitExceeded


@dataclass(frozen=True, slots=True)
class NewChunk:
    text: str
    embedding: bytes | None = None


@dataclass(frozen=True, slots=True)
class StoredChunk:
    document_id: str
    ordinal: int
    text: str
    embedding: bytes | None = None


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    """A document without its text; ``role_ids`` sorted."""

    id: str
    name: str
    chars: int
    chunks: int
    role_ids: tuple[str, ...]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Document:
    info: DocumentInfo
    text: str


@dataclass(frozen=True, slots=True)
class KnowledgeSnapshot:
    """Everything a search index needs for one owner, read at one ``version``."""

    version: int
    documents: dict[str, DocumentInfo]
    chunks: list[StoredChunk]
    name_embeddings: dict[str, bytes] = field(default_factory=dict)
    """Document id → its name's vector, for documents stored with one."""


class KnowledgeStore(Protocol):
    async def create(
        self,
        tenant: str,
        user: str,
        *,
        name: str,
        text: str,
        chunks: Sequence[NewChunk],
        role_ids: Sequence[str],
        max_documents: int,
        name_embedding: bytes | None = None,
    ) -> DocumentInfo:
        """Store a new document bound to ``role_ids``; ``LimitExceeded`` past
        ``max_documents``."""
        ...

    async def get(self, tenant: str, user: str, document_id: str) -> Document | None: ...

    async def documents(self, tenant: str, user: str) -> list[DocumentInfo]:
        """The owner's documents, oldest first."""
        ...

    async def update(
        self,
        tenant: str,
        user: str,
        document_id: str,
        *,
        name: str | None = None,
        text: str | None = None,
        chunks: Sequence[NewChunk] | None = None,
        name_embedding: bytes | None = None,
    ) -> DocumentInfo | None:
        """Rename (with the new name's vector, if any) and/or replace the text (with its new
        chunks); None when not found."""
        ...

    async def delete(self, tenant: str, user: str, document_id: str) -> bool: ...

    async def role_documents(self, tenant: str, user: str, role_id: str) -> list[DocumentInfo]:
        """The owner's documents bound to ``role_id``, oldest first."""
        ...

    async def set_role_documents(
        self, tenant: str, user: str, role_id: str, document_ids: Sequence[str]
    ) -> list[DocumentInfo]:
        """Bind exactly ``document_ids`` (all the owner's, else ``DocumentNotFound`` and nothing
        changes) to ``role_id``; returns the bound documents."""
        ...

    async def version(self, tenant: str, user: str) -> int:
        """A number that changes with every write of this owner (0 before the first)."""
        ...

    async def snapshot(self, tenant: str, user: str) -> KnowledgeSnapshot: ...


def new_document_id() -> str:
    return f"doc_{uuid.uuid4().hex[:20]}"


# Checks every store makes the same way; the stores differ in how they read and write.


def check_room(count: int, max_documents: int) -> None:
    """``LimitExceeded`` when an owner who has ``count`` documents may not add one."""
    if count >= max_documents:
        raise LimitExceeded(
            f"at most {max_documents} documents per user", code="too_many_documents"
        )


def check_update(text: str | None, chunks: Sequence[NewChunk] | None) -> None:
    """An update replaces the text and its chunks together or neither."""
    if (text is None) != (chunks is None):
        raise ValueError("text and chunks change together")


def check_found(wanted: Iterable[str], found: Iterable[str]) -> None:
    """``DocumentNotFound`` naming the first of ``wanted`` not in ``found``."""
    missing = set(wanted).difference(found)
    if missing:
        raise DocumentNotFound(f"no document {min(missing)}")


@dataclass
class _Owner:
    version: int = 0
    documents: dict[str, Document] = field(default_factory=dict)
    chunks: dict[str, list[StoredChunk]] = field(default_factory=dict)
    name_embeddings: dict[str, bytes | None] = field(default_factory=dict)


class InMemoryKnowledgeStore:
    """The contract in process memory (tests, ``storage = "memory"``)."""

    def __init__(self) -> None:
        self._owners: dict[tuple[str, str], _Owner] = {}
        self._lock = asyncio.Lock()

    def _owner(self, tenant: str, user: str) -> _Owner:
        return self._owners.setdefault((tenant, user), _Owner())

    async def create(
        self,
        tenant: str,
        user: str,
        *,
        name: str,
        text: str,
        chunks: Sequence[NewChunk],
        role_ids: Sequence[str],
        max_documents: int,
        name_embedding: bytes | None = None,
    ) -> DocumentInfo:
        async with self._lock:
            owner = self._owner(tenant, user)
            check_room(len(owner.documents), max_documents)
            now = datetime.now(UTC)
            doc_id = new_document_id()
            info = DocumentInfo(
                doc_id, name, len(text), len(chunks), tuple(sorted(set(role_ids))), now, now
            )
            owner.documents[doc_id] = Document(info, text)
            owner.chunks[doc_id] = _stored(doc_id, chunks)
            owner.name_embeddings[doc_id] = name_embedding
            owner.version += 1
            return info

    async def get(self, tenant: str, user: str, document_id: str) -> Document | None:
        owner = self._owners.get((tenant, user))
        return None if owner is None else owner.documents.get(document_id)

    async def documents(self, tenant: str, user: str) -> list[DocumentInfo]:
        owner = self._owners.get((tenant, user))
        if owner is None:
            return []
        return sorted((d.info for d in owner.documents.values()), key=_order)

    async def update(
        self,
        tenant: str,
        user: str,
        document_id: str,
        *,
        name: str | None = None,
        text: str | None = None,
        chunks: Sequence[NewChunk] | None = None,
        name_embedding: bytes | None = None,
    ) -> DocumentInfo | None:
        check_update(text, chunks)
        async with self._lock:
            owner = self._owners.get((tenant, user))
            doc = None if owner is None else owner.documents.get(document_id)
            if owner is None or doc is None:
                return None
            info = replace(doc.info, updated_at=datetime.now(UTC))
            if name is not None:
                info = replace(info, name=name)
                owner.name_embeddings[document_id] = name_embedding
            new_text = doc.text
            if text is not None and chunks is not None:
                new_text = text
                info = replace(info, chars=len(text), chunks=len(chunks))
                owner.chunks[document_id] = _stored(document_id, chunks)
            owner.documents[document_id] = Document(info, new_text)
            owner.version += 1
            return info

    async def delete(self, tenant: str, user: str, document_id: str) -> bool:
        async with self._lock:
            owner = self._owners.get((tenant, user))
            if owner is None or owner.documents.pop(document_id, None) is None:
                return False
            owner.chunks.pop(document_id, None)
            owner.name_embeddings.pop(document_id, None)
            owner.version += 1
            return True

    async def role_documents(self, tenant: str, user: str, role_id: str) -> list[DocumentInfo]:
        return [d for d in await self.documents(tenant, user) if role_id in d.role_ids]

    async def set_role_documents(
        self, tenant: str, user: str, role_id: str, document_ids: Sequence[str]
    ) -> list[DocumentInfo]:
        async with self._lock:
            owner = self._owner(tenant, user)
            wanted = set(document_ids)
            check_found(wanted, owner.documents)
            for doc_id, doc in owner.documents.items():
                roles = [r for r in doc.info.role_ids if r != role_id]
                if doc_id in wanted:
                    roles.append(role_id)
                if tuple(sorted(roles)) != doc.info.role_ids:
                    owner.documents[doc_id] = Document(
                        replace(doc.info, role_ids=tuple(sorted(roles))), doc.text
                    )
            owner.version += 1
        return await self.role_documents(tenant, user, role_id)

    async def version(self, tenant: str, user: str) -> int:
        owner = self._owners.get((tenant, user))
        return 0 if owner is None else owner.version

    async def snapshot(self, tenant: str, user: str) -> KnowledgeSnapshot:
        owner = self._owners.get((tenant, user))
        if owner is None:
            return KnowledgeSnapshot(0, {}, [])
        return KnowledgeSnapshot(
            owner.version,
            {doc_id: d.info for doc_id, d in owner.documents.items()},
            [c for doc_id in owner.documents for c in owner.chunks.get(doc_id, [])],
            {d: e for d, e in owner.name_embeddings.items() if e is not None},
        )


def _stored(document_id: str, chunks: Sequence[NewChunk]) -> list[StoredChunk]:
    return [StoredChunk(document_id, i, c.text, c.embedding) for i, c in enumerate(chunks)]


def _order(info: DocumentInfo) -> tuple[datetime, str]:
    return (info.created_at, info.id)
