"""A deleted role's tools go with it (``DELETE /api/roles/{id}``): every tool store's
``forget_role`` removes that role's rows and nothing of another role or tenant, on both stores."""

from __future__ import annotations

from tests.tools.test_catalog_contract import weather
from tools.capability import Capability
from tools.catalog import ToolCatalog
from tools.grants import GrantedBy, GrantStore, NewGrant
from tools.judgements import Judgement, JudgementCache
from tools.rules import Author, RuleStore


def allow(action: str) -> NewGrant:
    return NewGrant(capability=Capability(action), effect="allow", scope="lifetime",
                    granted_by=GrantedBy("person", "ada"))  # fmt: skip


async def test_forgetting_a_role_removes_its_tools_only(
    tool_catalog: ToolCatalog,
    grant_store: GrantStore,
    rule_store: RuleStore,
    judgement_cache: JudgementCache,
) -> None:
    scopes = [("t", "gone"), ("t", "kept"), ("other", "gone")]
    for tenant, role in scopes:
        await tool_catalog.put(tenant, role, weather("a"))
        await grant_store.create(tenant, role, allow("a"))
        await rule_store.create(tenant, role, "Weather lookups are fine.", Author("person", "ada"))
        await judgement_cache.put(tenant, role, "k", Judgement(effect="allow"))

    removed = [
        await store.forget_role("t", "gone")
        for store in (tool_catalog, grant_store, rule_store, judgement_cache)
    ]

    assert removed == [1, 1, 1, 1]
    assert await tool_catalog.list("t", "gone") == []
    assert await grant_store.list("t", "gone") == []
    assert await rule_store.list("t", "gone") == []
    assert await judgement_cache.get("t", "gone", "k") is None
    for tenant, role in scopes[1:]:
        assert [t.name for t in await tool_catalog.list(tenant, role)] == ["a"]
        assert len(await grant_store.list(tenant, role)) == 1
        assert len(await rule_store.list(tenant, role)) == 1
        assert await judgement_cache.get(tenant, role, "k") is not None
    assert [await s.forget_role("t", "gone") for s in (tool_catalog, grant_store)] == [0, 0]
