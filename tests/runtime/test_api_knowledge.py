"""``/api/documents``, ``/api/roles/{id}/documents`` and ``/api/knowledge/search`` over HTTP
(httpx on the ASGI app) on both stores: CRUD, import, role bindings, test retrieval, per-user
and per-tenant isolation, unbound documents missing, limits with stable codes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from knowledge.base import KnowledgeBase, KnowledgeLimits
from knowledge.tool import NO_RESULTS, format_hits
from runtime.accounts import Principal
from runtime.app import create_app
from runtime.config import Settings
from runtime.services import Services, open_services
from tests.postgres import postgres_url, truncate_all
from tests.runtime.conftest import fake_plugins

__all__ = ["postgres_url"]

SHOP = (
    "# 星河商店售后说明 v1\n\n星河商店的退货期限为签收后 7 天。\n\n"
    "退货条件:商品未使用、包装完整,并提供订单号。\n\n"
    "退货运费规则:商品质量问题由商店承担,其他情况由买家承担。\n"
)


@dataclass
class Api:
    services: Services
    http: httpx.AsyncClient
    alice: dict[str, str]
    bob: dict[str, str]
    eve: dict[str, str]

    async def create(self, headers: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
        response = await self.http.post("/api/documents", json=body, headers=headers or self.alice)
        assert response.status_code == 201, response.text
        result: dict[str, Any] = response.json()
        return result

    async def search(self, headers: dict[str, str] | None = None, **body: Any) -> dict[str, Any]:
        response = await self.http.post(
            "/api/knowledge/search", json=body, headers=headers or self.alice
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result


@pytest.fixture(params=["memory", "postgres"])
async def api(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Api]:
    extra: dict[str, Any] = {"storage": "memory"}
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        try:
            await truncate_all(pool)
        finally:
            await pool.close()
        extra = {"storage": "postgres", "database_url": url}
    services = await open_services(
        Settings(port=0, data_dir=tmp_path / "data", knowledge_semantic=False, **extra),
        plugins=fake_plugins(),
    )
    try:
        await services.accounts.add_token(Principal("local", "bob"), "bobs-token")
        # Eve owns her tenant: whatever she is refused is refused for being another tenant's.
        await services.accounts.add_token(
            Principal("other-tenant", "local-user", role="owner"), "eves-token"
        )
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            yield Api(
                services,
                http,
                {"Authorization": f"Bearer {services.local_token}"},
                {"Authorization": "Bearer bobs-token"},
                {"Authorization": "Bearer eves-token"},
            )
    finally:
        await services.close()


async def default_role_id(api: Api, headers: dict[str, str]) -> str:
    roles = (await api.http.get("/api/roles", headers=headers)).json()["roles"]
    return str(next(r["id"] for r in roles if r["is_default"]))


async def test_documents_crud(api: Api) -> None:
    created = await api.create(name="星河商店售后说明 v1", text=SHOP)
    assert set(created) == {"id", "name", "chars", "chunks", "role_ids", "created_at", "updated_at"}
    assert created["chars"] == len(SHOP) and created["chunks"] >= 1
    assert created["role_ids"] == [await default_role_id(api, api.alice)]
    listed = (await api.http.get("/api/documents", headers=api.alice)).json()["documents"]
    assert listed == [created]
    doc_url = f"/api/documents/{created['id']}"
    got = (await api.http.get(doc_url, headers=api.alice)).json()
    assert got["text"] == SHOP and got["name"] == "星河商店售后说明 v1"
    patched = await api.http.patch(doc_url, json={"name": "售后 v2"}, headers=api.alice)
    assert patched.status_code == 200 and patched.json()["name"] == "售后 v2"
    patched = await api.http.patch(doc_url, json={"text": "客服时间 9 点。"}, headers=api.alice)
    assert patched.json()["chars"] == 9 and patched.json()["name"] == "售后 v2"
    assert (await api.search(query="客服时间"))["hits"][0]["chunk_text"] == "客服时间 9 点。"
    assert (await api.http.delete(doc_url, headers=api.alice)).status_code == 204
    missing = await api.http.get(doc_url, headers=api.alice)
    assert missing.status_code == 404 and missing.json()["code"] == "document_not_found"
    assert (await api.http.delete(doc_url, headers=api.alice)).status_code == 404


async def test_import_takes_markdown_and_text_files(api: Api) -> None:
    imported = await api.http.post(
        "/api/documents/import",
        json={"filename": "docs/shop-knowledge.md", "content": "\ufeff" + SHOP},
        headers=api.alice,
    )
    assert imported.status_code == 201
    assert imported.json()["name"] == "shop-knowledge"
    text = (await api.http.get(f"/api/documents/{imported.json()['id']}", headers=api.alice)).json()
    assert text["text"] == SHOP
    plain = await api.http.post(
        "/api/documents/import", json={"filename": "Notes.TXT", "content": "a note."},
        headers=api.alice,
    )  # fmt: skip
    assert plain.status_code == 201 and plain.json()["name"] == "Notes"
    refused = await api.http.post(
        "/api/documents/import", json={"filename": "deck.pdf", "content": "%PDF"},
        headers=api.alice,
    )  # fmt: skip
    assert refused.status_code == 415 and refused.json()["code"] == "unsupported_file_type"


async def test_a_new_document_is_bound_to_the_role_it_was_created_for(api: Api) -> None:
    role = (await api.http.post("/api/roles", json={"name": "Sales"}, headers=api.alice)).json()
    doc = await api.create(name="Shop", text=SHOP, role_id=role["id"])
    assert doc["role_ids"] == [role["id"]]
    bound = await api.http.get(f"/api/roles/{role['id']}/documents", headers=api.alice)
    assert [d["id"] for d in bound.json()["documents"]] == [doc["id"]]
    unknown = await api.http.post(
        "/api/documents", json={"name": "x", "text": "y", "role_id": "role_nope"},
        headers=api.alice,
    )  # fmt: skip
    assert unknown.status_code == 404 and unknown.json()["code"] == "role_not_found"


async def test_role_bindings_are_listed_and_replaced(api: Api) -> None:
    default = await default_role_id(api, api.alice)
    role = (await api.http.post("/api/roles", json={"name": "Support"}, headers=api.alice)).json()
    a = await api.create(name="A", text="Alpha text.")
    b = await api.create(name="B", text="Beta text.")
    url = f"/api/roles/{role['id']}/documents"
    assert (await api.http.get(url, headers=api.alice)).json() == {"documents": []}
    put = await api.http.put(url, json={"document_ids": [b["id"]]}, headers=api.alice)
    assert put.status_code == 200
    assert [d["id"] for d in put.json()["documents"]] == [b["id"]]
    assert put.json()["documents"][0]["role_ids"] == sorted([default, role["id"]])
    default_docs = await api.http.get(f"/api/roles/{default}/documents", headers=api.alice)
    assert [d["id"] for d in default_docs.json()["documents"]] == [a["id"], b["id"]]
    bad = await api.http.put(url, json={"document_ids": ["doc_nope"]}, headers=api.alice)
    assert bad.status_code == 404 and bad.json()["code"] == "document_not_found"
    no_role = await api.http.get("/api/roles/role_nope/documents", headers=api.alice)
    assert no_role.status_code == 404 and no_role.json()["code"] == "role_not_found"


async def test_test_retrieval_shows_hits_and_the_tool_text(api: Api) -> None:
    doc = await api.create(name="星河商店售后说明 v1", text=SHOP)
    role = (await api.http.post("/api/roles", json={"name": "Other"}, headers=api.alice)).json()
    found = await api.search(query="退货期限是多少?")
    top = found["hits"][0]
    assert set(top) == {"document_id", "document_name", "chunk_text", "score"}
    assert top["document_id"] == doc["id"] and top["document_name"] == "星河商店售后说明 v1"
    assert "签收后 7 天" in top["chunk_text"] and top["score"] > 0
    assert "[source: 星河商店售后说明 v1]" in found["tool_result"]
    assert "签收后 7 天" in found["tool_result"]
    with_role = await api.search(query="退货期限是多少?", role_id=doc["role_ids"][0])
    assert with_role["hits"] == found["hits"]
    # A document not bound to the role never matches.
    unbound = await api.search(query="退货期限是多少?", role_id=role["id"])
    assert unbound == {"hits": [], "tool_result": NO_RESULTS}
    assert (await api.search(query="退款多久到账?"))["hits"] == []
    assert format_hits([]) == NO_RESULTS


async def test_other_users_and_tenants_see_nothing(api: Api) -> None:
    doc = await api.create(name="Shop", text=SHOP)
    url = f"/api/documents/{doc['id']}"
    for who in (api.bob, api.eve):
        assert (await api.http.get("/api/documents", headers=who)).json() == {"documents": []}
        for call in (
            api.http.get(url, headers=who),
            api.http.patch(url, json={"name": "mine"}, headers=who),
            api.http.delete(url, headers=who),
        ):
            response = await call
            assert response.status_code == 404 and response.json()["code"] == "document_not_found"
        assert (await api.search(who, query="退货期限"))["hits"] == []
        role = await default_role_id(api, who)
        put = await api.http.put(
            f"/api/roles/{role}/documents", json={"document_ids": [doc["id"]]}, headers=who
        )
        # Bob is a member (binding is an admin's right: 403); Eve owns her tenant, and Alice's
        # document does not exist there (404).
        assert put.status_code == (403 if who is api.bob else 404)
    # Bob's role in the same tenant is visible to him, Alice's documents are not.
    assert (await api.http.get(url, headers=api.alice)).json()["name"] == "Shop"
    assert (await api.http.get("/api/documents")).status_code == 401


async def test_limits_have_stable_codes(api: Api) -> None:
    api.services.knowledge = KnowledgeBase(
        api.services.knowledge.store, limits=KnowledgeLimits(max_documents=1)
    )
    cases = [
        ({"name": "n" * 201, "text": "ok"}, 422, "name_too_long"),
        ({"name": "  ", "text": "ok"}, 422, "invalid_name"),
        ({"name": "big", "text": "x" * 200_001}, 413, "document_too_large"),
        ({"name": "empty", "text": "\n "}, 422, "empty_document"),
        ({"name": "extra", "text": "ok", "owner": "bob"}, 422, "invalid_request"),
    ]
    for body, status, code in cases:
        response = await api.http.post("/api/documents", json=body, headers=api.alice)
        assert (response.status_code, response.json()["code"]) == (status, code), body
    await api.create(name="one", text="ok")
    full = await api.http.post(
        "/api/documents", json={"name": "two", "text": "ok"}, headers=api.alice
    )
    assert (full.status_code, full.json()["code"]) == (409, "too_many_documents")
    long_query = await api.http.post(
        "/api/knowledge/search", json={"query": "q" * 1001}, headers=api.alice
    )
    assert (long_query.status_code, long_query.json()["code"]) == (422, "query_too_long")
    empty = await api.http.post("/api/knowledge/search", json={"query": " "}, headers=api.alice)
    assert (empty.status_code, empty.json()["code"]) == (422, "empty_query")
    too_many = await api.http.post(
        "/api/knowledge/search", json={"query": "ok", "limit": 11}, headers=api.alice
    )
    assert too_many.status_code == 422
