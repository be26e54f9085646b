"""The knowledge store contract, run against the in-memory and the PostgreSQL store."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from knowledge.errors import DocumentNotFound, LimitExceeded
from knowledge.store import KnowledgeStore, NewChunk
from plugins.embedding import from_bytes, to_bytes

T, ALICE, BOB = "tenant-a", "alice", "bob"


def chunks(*texts: str) -> list[NewChunk]:
    return [NewChunk(t) for t in texts]


async def add(store: KnowledgeStore, user: str = ALICE, name: str = "Doc", **kw: object) -> str:
    info = await store.create(
        T,
        user,
        name=name,
        text=str(kw.get("text", "one. two.")),
        chunks=kw.get("chunks", chunks("one.", "two.")),  # type: ignore[arg-type]
        role_ids=kw.get("role_ids", ["role_a"]),  # type: ignore[arg-type]
        max_documents=int(kw.get("max_documents", 10)),  # type: ignore[call-overload]
    )
    return info.id


async def test_create_get_and_list(store: KnowledgeStore) -> None:
    info = await store.create(
        T, ALICE, name="Shop", text="退货期限为 7 天。客服时间 9 点。",
        chunks=chunks("退货期限为 7 天。", "客服时间 9 点。"), role_ids=["r1", "r1", "r2"],
        max_documents=10,
    )  # fmt: skip
    assert (info.name, info.chars, info.chunks, info.role_ids) == ("Shop", 19, 2, ("r1", "r2"))
    document = await store.get(T, ALICE, info.id)
    assert document is not None
    assert document.text == "退货期限为 7 天。客服时间 9 点。"
    assert document.info.role_ids == ("r1", "r2")
    second = await add(store, name="Second")
    assert [d.id for d in await store.documents(T, ALICE)] == [info.id, second]


async def test_every_read_is_scoped_by_tenant_and_user(store: KnowledgeStore) -> None:
    doc = await add(store)
    assert await store.get(T, BOB, doc) is None
    assert await store.get("tenant-b", ALICE, doc) is None
    assert await store.documents(T, BOB) == []
    assert await store.role_documents(T, BOB, "role_a") == []
    assert await store.update(T, BOB, doc, name="stolen") is None
    assert await store.delete(T, BOB, doc) is False
    with pytest.raises(DocumentNotFound):
        await store.set_role_documents(T, BOB, "role_a", [doc])
    snapshot = await store.snapshot(T, BOB)
    assert (snapshot.documents, snapshot.chunks) == ({}, [])
    assert (await store.get(T, ALICE, doc)) is not None


async def test_update_replaces_name_text_and_chunks(store: KnowledgeStore) -> None:
    doc = await add(store)
    before = await store.get(T, ALICE, doc)
    assert before is not None
    renamed = await store.update(T, ALICE, doc, name="Renamed")
    assert renamed is not None and renamed.name == "Renamed" and renamed.chunks == 2
    changed = await store.update(T, ALICE, doc, text="New text.", chunks=chunks("New text."))
    assert changed is not None and (changed.chars, changed.chunks) == (9, 1)
    assert changed.updated_at >= before.info.updated_at
    snapshot = await store.snapshot(T, ALICE)
    assert [c.text for c in snapshot.chunks] == ["New text."]
    with pytest.raises(ValueError):
        await store.update(T, ALICE, doc, text="text without chunks")


async def test_delete_removes_chunks_and_bindings(store: KnowledgeStore) -> None:
    doc = await add(store)
    keep = await add(store, name="Keep")
    assert await store.delete(T, ALICE, doc) is True
    assert await store.delete(T, ALICE, doc) is False
    snapshot = await store.snapshot(T, ALICE)
    assert set(snapshot.documents) == {keep}
    assert {c.document_id for c in snapshot.chunks} == {keep}
    assert [d.id for d in await store.role_documents(T, ALICE, "role_a")] == [keep]


async def test_role_bindings_are_replaced_as_a_whole(store: KnowledgeStore) -> None:
    a = await add(store, name="A", role_ids=["role_a"])
    b = await add(store, name="B", role_ids=["role_b"])
    c = await add(store, name="C", role_ids=["role_a", "role_b"])
    assert [d.id for d in await store.role_documents(T, ALICE, "role_a")] == [a, c]
    bound = await store.set_role_documents(T, ALICE, "role_a", [b, b])
    assert [d.id for d in bound] == [b]
    assert [d.id for d in await store.role_documents(T, ALICE, "role_b")] == [b, c]
    info = await store.get(T, ALICE, c)
    assert info is not None and info.info.role_ids == ("role_b",)
    with pytest.raises(DocumentNotFound):
        await store.set_role_documents(T, ALICE, "role_a", [a, "doc_unknown"])
    # Nothing changed by the refused call.
    assert [d.id for d in await store.role_documents(T, ALICE, "role_a")] == [b]
    assert await store.set_role_documents(T, ALICE, "role_a", []) == []


async def test_version_changes_with_every_write(store: KnowledgeStore) -> None:
    assert await store.version(T, ALICE) == 0
    seen = [0]
    doc = await add(store)
    seen.append(await store.version(T, ALICE))
    await store.update(T, ALICE, doc, name="x")
    seen.append(await store.version(T, ALICE))
    await store.set_role_documents(T, ALICE, "role_z", [doc])
    seen.append(await store.version(T, ALICE))
    await store.delete(T, ALICE, doc)
    seen.append(await store.version(T, ALICE))
    assert len(set(seen)) == len(seen)
    assert await store.version(T, BOB) == 0
    assert (await store.snapshot(T, ALICE)).version == seen[-1]


async def test_embeddings_round_trip(store: KnowledgeStore) -> None:
    vector = np.linspace(-1, 1, 8, dtype=np.float32)
    await add(store, chunks=[NewChunk("with", to_bytes(vector)), NewChunk("without")])
    stored = (await store.snapshot(T, ALICE)).chunks
    assert [c.ordinal for c in stored] == [0, 1]
    assert stored[0].embedding is not None
    again = from_bytes(stored[0].embedding, 8)
    assert again is not None and np.array_equal(again[0], vector)
    assert stored[1].embedding is None


async def test_max_documents_holds_under_concurrent_creates(store: KnowledgeStore) -> None:
    results = await asyncio.gather(
        *(add(store, name=f"D{i}", max_documents=3) for i in range(6)), return_exceptions=True
    )
    refused = [r for r in results if isinstance(r, LimitExceeded)]
    assert len(refused) == 3 and refused[0].code == "too_many_documents"
    assert len(await store.documents(T, ALICE)) == 3
    # Another user has their own allowance.
    await add(store, user=BOB, max_documents=3)
