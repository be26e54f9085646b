"""``KnowledgeBase``: documents, bindings and search for the runtime, on top of a store.

It validates input against ``KnowledgeLimits``, chunks text (``plugins.text``), embeds the
chunks at ingest when an embedder is configured (semantic recall on), and answers searches from
a cached ``KnowledgeIndex`` per (tenant, user). A cached index is used while the store's
``version`` for that owner is unchanged — one cheap read per search — and rebuilt (in a worker
thread) after any write, by this process or another. At most ``max_cached_owners`` indexes are
kept, least recently used dropped first.

A search runs the lexical side first. When its best chunk covers every word of the question
(``lexical_suffices``) the query is not embedded — embedding is most of a search's cost, and a
fully covered direct question needs no semantic recall; otherwise the query is embedded (the
embedder caches recent query vectors) and both sides are fused. ``skip_semantic_when_covered``
turns the shortcut off.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from knowledge.errors import InvalidDocument, LimitExceeded
from knowledge.retrieval import (
    DEFAULT_MIN_COVERAGE,
    DEFAULT_SPECIFICITY,
    Hit,
    KnowledgeIndex,
    LexicalHit,
)
from knowledge.store import Document, DocumentInfo, KnowledgeStore, NewChunk
from plugins.embedding import REFERENCE_LANGUAGES, Embedder, to_bytes
from plugins.text import chunk_text, parse_query, sentence_units

DEFAULT_SEMANTIC_MARGIN = 0.03
"""How far a chunk's similarity must beat the query's baseline (its best similarity to
``plugins.embedding.REFERENCE_PASSAGES``) to count as a semantic match."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class KnowledgeLimits:
    max_document_chars: int = 200_000
    """Longest document text (characters)."""
    max_name_chars: int = 200
    max_documents: int = 500
    """Documents per (tenant, user)."""
    max_query_chars: int = 1_000
    max_hits: int = 10
    chunk_target_chars: int = 200
    chunk_max_chars: int = 500


class KnowledgeBase:
    def __init__(
        self,
        store: KnowledgeStore,
        *,
        embedder: Embedder | None = None,
        limits: KnowledgeLimits | None = None,
        min_coverage: float = DEFAULT_MIN_COVERAGE,
        semantic_margin: float = DEFAULT_SEMANTIC_MARGIN,
        specificity: float = DEFAULT_SPECIFICITY,
        max_cached_owners: int = 256,
        skip_semantic_when_covered: bool = True,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.limits = limits or KnowledgeLimits()
        self.min_coverage = min_coverage
        self.semantic_margin = semantic_margin
        self.specificity = specificity
        self.max_cached_owners = max_cached_owners
        self.skip_semantic_when_covered = skip_semantic_when_covered
        self._indexes: OrderedDict[tuple[str, str], KnowledgeIndex] = OrderedDict()
        self._building: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def semantic(self) -> bool:
        return self.embedder is not None

    # ------------------------------------------------------------ documents

    def _check_name(self, name: str) -> str:
        name = name.strip()
        if not name:
            raise InvalidDocument("a document needs a name", code="invalid_name")
        if len(name) > self.limits.max_name_chars:
            raise LimitExceeded(
                f"a document name has at most {self.limits.max_name_chars} characters",
                code="name_too_long",
            )
        return name

    def _check_text(self, text: str) -> str:
        if len(text) > self.limits.max_document_chars:
            raise LimitExceeded(
                f"a document has at most {self.limits.max_document_chars} characters",
                code="document_too_large",
            )
        if not text.strip():
            raise InvalidDocument("a document needs some text", code="empty_document")
        return text

    async def _chunks(self, text: str) -> list[NewChunk]:
        pieces = chunk_text(
            text,
            target_chars=self.limits.chunk_target_chars,
            max_chars=self.limits.chunk_max_chars,
        )
        if self.embedder is None:
            return [NewChunk(p) for p in pieces]
        # Each chunk's whole text, then its sentences when it has several (module doc of
        # ``plugins.embedding``); one batch for the document.
        units = [[piece, *sentence_units(piece)] for piece in pieces]
        vectors = await self.embedder.passages([u for group in units for u in group])
        out: list[NewChunk] = []
        row = 0
        for piece, group in zip(pieces, units, strict=True):
            out.append(NewChunk(piece, to_bytes(vectors[row : row + len(group)])))
            row += len(group)
        return out

    async def _name_vector(self, name: str) -> bytes | None:
        if self.embedder is None:
            return None
        return to_bytes((await self.embedder.passages([name]))[0])

    async def add_document(
        self, tenant: str, user: str, *, name: str, text: str, role_ids: Sequence[str]
    ) -> DocumentInfo:
        name = self._check_name(name)
        text = self._check_text(text)
        chunks = await self._chunks(text)
        info = await self.store.create(
            tenant,
            user,
            name=name,
            text=text,
            chunks=chunks,
            role_ids=role_ids,
            max_documents=self.limits.max_documents,
            name_embedding=await self._name_vector(name),
        )
        self._forget(tenant, user)
        return info

    async def update_document(
        self,
        tenant: str,
        user: str,
        document_id: str,
        *,
        name: str | None = None,
        text: str | None = None,
    ) -> DocumentInfo | None:
        name_embedding = None
        if name is not None:
            name = self._check_name(name)
            name_embedding = await self._name_vector(name)
        chunks = None
        if text is not None:
            text = self._check_text(text)
            chunks = await self._chunks(text)
        info = await self.store.update(
            tenant,
            user,
            document_id,
            name=name,
            text=text,
            chunks=chunks,
            name_embedding=name_embedding,
        )
        self._forget(tenant, user)
        return info

    async def delete_document(self, tenant: str, user: str, document_id: str) -> bool:
        deleted = await self.store.delete(tenant, user, document_id)
        self._forget(tenant, user)
        return deleted

    async def get_document(self, tenant: str, user: str, document_id: str) -> Document | None:
        return await self.store.get(tenant, user, document_id)

    async def list_documents(self, tenant: str, user: str) -> list[DocumentInfo]:
        return await self.store.documents(tenant, user)

    async def role_documents(self, tenant: str, user: str, role_id: str) -> list[DocumentInfo]:
        return await self.store.role_documents(tenant, user, role_id)

    async def set_role_documents(
        self, tenant: str, user: str, role_id: str, document_ids: Sequence[str]
    ) -> list[DocumentInfo]:
        if len(document_ids) > self.limits.max_documents:
            raise LimitExceeded(
                f"at most {self.limits.max_documents} documents per role", code="too_many_documents"
            )
        out = await self.store.set_role_documents(tenant, user, role_id, document_ids)
        self._forget(tenant, user)
        return out

    # ------------------------------------------------------------ search

    def _forget(self, tenant: str, user: str) -> None:
        self._indexes.pop((tenant, user), None)

    async def index(self, tenant: str, user: str) -> KnowledgeIndex:
        """The owner's current search index (cached; see the module doc)."""
        key = (tenant, user)
        version = await self.store.version(tenant, user)
        cached = self._indexes.get(key)
        if cached is not None and cached.version == version:
            self._indexes.move_to_end(key)
            return cached
        lock = self._building.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._indexes.get(key)
            if cached is not None and cached.version == version:
                return cached
            snapshot = await self.store.snapshot(tenant, user)
            dim = self.embedder.dim if self.embedder is not None else None
            index = await asyncio.to_thread(KnowledgeIndex, snapshot, dim=dim)
            self._indexes[key] = index
            self._indexes.move_to_end(key)
            while len(self._indexes) > self.max_cached_owners:
                old, _ = self._indexes.popitem(last=False)
                self._building.pop(old, None)
        return index

    def check_query(self, query: str) -> str:
        query = query.strip()
        if not query:
            raise InvalidDocument("the query is empty", code="empty_query")
        if len(query) > self.limits.max_query_chars:
            raise LimitExceeded(
                f"a query has at most {self.limits.max_query_chars} characters",
                code="query_too_long",
            )
        return query

    async def search(
        self,
        tenant: str,
        user: str,
        query: str,
        *,
        role_id: str | None,
        limit: int = 3,
        focus: str | None = None,
    ) -> list[Hit]:
        """The best chunks for ``query`` among the owner's documents bound to ``role_id``
        (all of them when None). ``focus``: the part of ``query`` that asks (a follow-up's own
        words, the earlier turns in front of them in ``query``): each hit's closest sentence
        is the one closest to it (``retrieval`` Rule 8)."""
        query = self.check_query(query)
        focus = self.check_query(focus) if focus and focus.strip() != query.strip() else None
        limit = max(1, min(limit, self.limits.max_hits))
        index = await self.index(tenant, user)
        if not index.serves(role_id):
            return []  # nothing bound: no need to embed the query
        parsed = parse_query(query)
        lexical = index.lexical(parsed, role_id=role_id, min_coverage=self.min_coverage)
        vector = None
        reference = None
        floor = 1.0
        if self.embedder is not None and index.embedded and not self.lexical_suffices(lexical):
            vector = await self.embedder.query(query)
            reference = await self.embedder.reference()
            floor = float(np.max(reference @ vector)) + self.semantic_margin
        closest = None
        if self.embedder is not None and vector is not None and focus:
            closest = await self.embedder.query(focus)
        return index.search(
            parsed,
            vector,
            role_id=role_id,
            limit=limit,
            min_coverage=self.min_coverage,
            semantic_floor=floor,
            specificity=self.specificity,
            lexical=lexical,
            reference=reference,
            reference_languages=REFERENCE_LANGUAGES,
            closest_vector=closest,
        )

    def lexical_suffices(self, lexical: list[LexicalHit]) -> bool:
        """Whether the lexical side alone answers: its best chunk holds every word of the
        question (then the query is not embedded — the embedding is most of a search's cost)."""
        return self.skip_semantic_when_covered and bool(lexical) and lexical[0].units_covered >= 1.0
