"""HTTP API for the knowledge base (SPEC KB-1, KB-2): documents, role bindings, test retrieval.

Every route serves the bearer token's (tenant, user) only: another user's document answers 404
exactly like an unknown one. Roles are the tenant's (``/api/roles``). A new document is bound to
the ``role_id`` given, else to the tenant's default role.

Limits (``knowledge.base.KnowledgeLimits``, errors ``{"code", "message"}``):

- text at most 200,000 characters → 413 ``document_too_large``; empty → 422 ``empty_document``
- name at most 200 characters → 422 ``name_too_long``; blank → 422 ``invalid_name``
- at most 500 documents per user → 409 ``too_many_documents``
- import: ``filename`` must end in ``.md``, ``.markdown`` or ``.txt`` → else 415
  ``unsupported_file_type``; the name is the file name without its extension
- search: query at most 1,000 characters → 422 ``query_too_long``; ``limit`` 1–10 (default 3)
- unknown document → 404 ``document_not_found``; unknown role → 404 ``role_not_found``
- the database unreachable → 503 ``knowledge_unavailable``
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from knowledge.errors import (
    DocumentNotFound,
    InvalidDocument,
    KnowledgeError,
    KnowledgeUnavailable,
    LimitExceeded,
)
from knowledge.retrieval import Hit
from knowledge.store import DocumentInfo
from knowledge.tool import format_hits
from runtime.accounts import Principal
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow
from runtime.roles import default_role
from runtime.services import Services

log = logging.getLogger(__name__)

router = APIRouter(tags=["knowledge"])

IMPORT_EXTENSIONS = (".md", ".markdown", ".txt")
MAX_FILENAME_CHARS = 255
MAX_BODY_TEXT_CHARS = 1_000_000
"""Hard cap of a text field in a request body; the document limit (smaller) gives the
friendly ``document_too_large`` below it."""
ROLE_ID = r"^[A-Za-z0-9_.:-]{1,128}$"
_STATUS = {
    "document_too_large": 413,
    "too_many_documents": 409,
}


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(max_length=MAX_BODY_TEXT_CHARS)
    text: str = Field(max_length=MAX_BODY_TEXT_CHARS)
    role_id: str | None = Field(default=None, pattern=ROLE_ID)


class DocumentImport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    filename: str = Field(min_length=1, max_length=MAX_FILENAME_CHARS)
    content: str = Field(max_length=MAX_BODY_TEXT_CHARS)
    role_id: str | None = Field(default=None, pattern=ROLE_ID)


class DocumentPatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=MAX_BODY_TEXT_CHARS)
    text: str | None = Field(default=None, max_length=MAX_BODY_TEXT_CHARS)


class Bindings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    document_ids: list[str] = Field(max_length=10_000)


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(max_length=MAX_BODY_TEXT_CHARS)
    role_id: str | None = Field(default=None, pattern=ROLE_ID)
    limit: int = Field(default=3, ge=1, le=10)


def document_json(info: DocumentInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "name": info.name,
        "chars": info.chars,
        "chunks": info.chunks,
        "role_ids": list(info.role_ids),
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
    }


def hit_json(hit: Hit) -> dict[str, Any]:
    return {
        "document_id": hit.document_id,
        "document_name": hit.document_name,
        "chunk_text": hit.chunk_text,
        "score": hit.score,
    }


@contextlib.contextmanager
def _knowledge_errors() -> Iterator[None]:
    """Answers a ``KnowledgeError`` with its HTTP error (``_api_error``)."""
    try:
        yield
    except KnowledgeError as e:
        raise _api_error(e) from e


def _api_error(e: KnowledgeError) -> ApiError:
    if isinstance(e, DocumentNotFound):
        return ApiError(404, e.code, e.message)
    if isinstance(e, KnowledgeUnavailable):
        log.warning("knowledge store unavailable: %s", e.message)
        return ApiError(503, e.code, "the knowledge base is unavailable; try again")
    if isinstance(e, LimitExceeded | InvalidDocument):
        return ApiError(_STATUS.get(e.code, 422), e.code, e.message)
    return ApiError(500, e.code, e.message)


async def _role_id(services: Services, who: Principal, role_id: str | None) -> str:
    """``role_id`` checked to be one of the tenant's roles, else the default role's id."""
    if role_id is None:
        return (await default_role(services.roles, who.tenant)).id
    if await services.roles.get(who.tenant, role_id) is None:
        raise ApiError(404, "role_not_found", f"no role {role_id}")
    return role_id


def _not_found(document_id: str) -> ApiError:
    return ApiError(404, "document_not_found", f"no document {document_id}")


@router.get("/api/documents", dependencies=[allow(Policy.MEMBER)])
async def list_documents(who: Caller, services: ServicesDep) -> dict[str, Any]:
    with _knowledge_errors():
        documents = await services.knowledge.list_documents(who.tenant, who.user)
    return {"documents": [document_json(d) for d in documents]}


async def _create(
    services: Services, who: Principal, name: str, text: str, role_id: str | None
) -> dict[str, Any]:
    role = await _role_id(services, who, role_id)
    with _knowledge_errors():
        info = await services.knowledge.add_document(
            who.tenant, who.user, name=name, text=text, role_ids=[role]
        )
    return document_json(info)


@router.post("/api/documents", status_code=201, dependencies=[allow(Policy.MEMBER)])
async def create_document(body: DocumentIn, who: Caller, services: ServicesDep) -> dict[str, Any]:
    return await _create(services, who, body.name, body.text, body.role_id)


@router.post("/api/documents/import", status_code=201, dependencies=[allow(Policy.MEMBER)])
async def import_document(
    body: DocumentImport, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    filename = re.split(r"[\\/]", body.filename)[-1].strip()
    lower = filename.lower()
    extension = next((e for e in IMPORT_EXTENSIONS if lower.endswith(e)), None)
    if extension is None:
        raise ApiError(415, "unsupported_file_type", "import takes .md, .markdown or .txt files")
    name = filename[: -len(extension)].strip()
    text = body.content.lstrip("\ufeff")  # a byte-order mark is not text
    return await _create(services, who, name, text, body.role_id)


@router.get("/api/documents/{document_id}", dependencies=[allow(Policy.MEMBER)])
async def get_document(document_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    with _knowledge_errors():
        document = await services.knowledge.get_document(who.tenant, who.user, document_id)
    if document is None:
        raise _not_found(document_id)
    return {**document_json(document.info), "text": document.text}


@router.patch("/api/documents/{document_id}", dependencies=[allow(Policy.MEMBER)])
async def update_document(
    document_id: str, body: DocumentPatch, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    with _knowledge_errors():
        info = await services.knowledge.update_document(
            who.tenant, who.user, document_id, name=body.name, text=body.text
        )
    if info is None:
        raise _not_found(document_id)
    return document_json(info)


@router.delete("/api/documents/{document_id}", status_code=204, dependencies=[allow(Policy.MEMBER)])
async def delete_document(document_id: str, who: Caller, services: ServicesDep) -> Response:
    with _knowledge_errors():
        deleted = await services.knowledge.delete_document(who.tenant, who.user, document_id)
    if not deleted:
        raise _not_found(document_id)
    return Response(status_code=204)


@router.get("/api/roles/{role_id}/documents", dependencies=[allow(Policy.MEMBER)])
async def role_documents(role_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    await _role_id(services, who, role_id)
    with _knowledge_errors():
        documents = await services.knowledge.role_documents(who.tenant, who.user, role_id)
    return {"documents": [document_json(d) for d in documents]}


@router.put("/api/roles/{role_id}/documents", dependencies=[allow(Policy.ADMIN)])
async def bind_role_documents(
    role_id: str, body: Bindings, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    await _role_id(services, who, role_id)
    with _knowledge_errors():
        documents = await services.knowledge.set_role_documents(
            who.tenant, who.user, role_id, body.document_ids
        )
    return {"documents": [document_json(d) for d in documents]}


@router.post("/api/knowledge/search", dependencies=[allow(Policy.MEMBER)])
async def search(body: SearchIn, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """Test retrieval: the hits for ``query`` among the caller's documents bound to ``role_id``
    (all of the caller's documents without one), and the exact text the brain would read."""
    if body.role_id is not None:
        await _role_id(services, who, body.role_id)
    with _knowledge_errors():
        hits = await services.knowledge.search(
            who.tenant, who.user, body.query, role_id=body.role_id, limit=body.limit
        )
    return {"hits": [hit_json(h) for h in hits], "tool_result": format_hits(hits)}
