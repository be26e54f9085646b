"""The role store contract (``runtime/roles.py``, revision rules 1–3) against the in-memory and
the PostgreSQL store, and the thread count a role's deletion reports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from runtime.postgres_stores import PostgresRoleStore, PostgresThreadStore
from runtime.roles import InMemoryRoleStore, RoleOverrides, RoleStore, StaleRoleRevision
from runtime.threads import InMemoryThreadStore, ThreadStore
from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]


async def tutor(store: RoleStore, tenant: str = "acme") -> Any:
    return await store.create(
        tenant, name="Tutor", instructions="Teach.", voice=None, language="en",
        memory_enabled=True,
    )  # fmt: skip


class RoleStoreContract:
    @pytest.fixture
    def store(self) -> RoleStore:
        raise NotImplementedError

    @pytest.fixture
    def threads(self) -> ThreadStore:
        raise NotImplementedError

    async def test_a_new_role_is_at_revision_one(self, store: RoleStore) -> None:
        role = await tutor(store)
        fetched = await store.get("acme", role.id)
        assert role.revision == 1
        assert fetched == role

    async def test_every_update_that_changes_something_adds_one(self, store: RoleStore) -> None:
        role = await tutor(store)
        renamed = await store.update("acme", role.id, name="Coach")
        muted = await store.update("acme", role.id, memory_enabled=False, voice="verse")
        untouched = await store.update("acme", role.id)
        assert renamed is not None and muted is not None and untouched is not None
        assert (renamed.revision, muted.revision, untouched.revision) == (2, 3, 3)
        assert (muted.name, muted.memory_enabled, muted.voice) == ("Coach", False, "verse")
        assert muted.updated_at >= role.updated_at

    async def test_a_roles_own_agent_is_kept_and_cleared(self, store: RoleStore) -> None:
        role = await tutor(store)
        url = "https://agents.example/turn"
        given = await store.update("acme", role.id, agent_url=url, agent_secret="agent_token")
        fetched = await store.get("acme", role.id)
        cleared = await store.update("acme", role.id, agent_url=None, agent_secret=None)
        assert given is not None and fetched == given
        assert (given.agent_url, given.agent_secret, given.revision) == (url, "agent_token", 2)
        assert cleared is not None and (cleared.agent_url, cleared.agent_secret) == (None, None)
        assert role.agent_url is None  # a new role has none: the deployment's brain

    async def test_an_update_naming_the_current_revision_wins(self, store: RoleStore) -> None:
        role = await tutor(store)
        updated = await store.update("acme", role.id, expected_revision=1, instructions="Drill.")
        assert updated is not None and updated.revision == 2
        assert updated.instructions == "Drill."

    async def test_a_stale_update_changes_nothing_and_carries_the_current_role(
        self, store: RoleStore
    ) -> None:
        role = await tutor(store)
        await store.update("acme", role.id, expected_revision=1, name="Coach")
        with pytest.raises(StaleRoleRevision) as raised:
            await store.update("acme", role.id, expected_revision=1, name="Mentor")
        with pytest.raises(StaleRoleRevision):
            await store.update("acme", role.id, expected_revision=7)
        now = await store.get("acme", role.id)
        assert raised.value.current == now
        assert now is not None and (now.name, now.revision) == ("Coach", 2)

    async def test_two_editors_of_one_revision_cannot_both_win(self, store: RoleStore) -> None:
        role = await tutor(store)
        results = await asyncio.gather(
            *(store.update("acme", role.id, expected_revision=1, name=f"N{i}") for i in range(6)),
            return_exceptions=True,
        )
        winners = [r for r in results if not isinstance(r, BaseException)]
        losers = [r for r in results if isinstance(r, StaleRoleRevision)]
        now = await store.get("acme", role.id)
        assert len(winners) == 1 and len(losers) == 5
        assert now is not None and now.revision == 2 and now.name == winners[0].name  # type: ignore[union-attr]

    async def test_a_stale_delete_keeps_the_role(self, store: RoleStore) -> None:
        role = await tutor(store)
        await store.update("acme", role.id, name="Coach")
        with pytest.raises(StaleRoleRevision) as raised:
            await store.delete("acme", role.id, expected_revision=1)
        assert raised.value.current.revision == 2
        assert await store.get("acme", role.id) is not None
        assert await store.delete("acme", role.id, expected_revision=2) is True
        assert await store.get("acme", role.id) is None

    async def test_without_an_expected_revision_the_last_writer_wins(
        self, store: RoleStore
    ) -> None:
        role = await tutor(store)
        await store.update("acme", role.id, name="Coach")
        latest = await store.update("acme", role.id, name="Mentor")
        assert latest is not None and (latest.name, latest.revision) == ("Mentor", 3)
        assert await store.delete("acme", role.id) is True

    async def test_an_unknown_role_is_none_whatever_the_revision(self, store: RoleStore) -> None:
        role = await tutor(store, tenant="globex")
        assert await store.update("acme", role.id, expected_revision=1, name="x") is None
        assert await store.update("acme", "role_missing", name="x") is None
        assert await store.delete("acme", role.id, expected_revision=1) is False
        assert await store.delete("acme", "role_missing") is False
        kept = await store.get("globex", role.id)
        assert kept is not None and kept.name == "Tutor"

    async def test_a_deleted_role_takes_its_overrides(self, store: RoleStore) -> None:
        role = await tutor(store)
        await store.set_overrides("acme", "bob", role.id, RoleOverrides(memory_enabled=False))
        assert await store.delete("acme", role.id) is True
        assert await store.overrides("acme", "bob", role.id) == RoleOverrides()

    async def test_the_failure_message_is_kept_set_switched_off_and_reset(
        self, store: RoleStore
    ) -> None:
        role = await store.create(
            "acme", name="Desk", instructions="", voice=None, language="zh",
            memory_enabled=True, failure_message="请再说一遍。",
        )  # fmt: skip
        assert role.failure_message == "请再说一遍。"
        silent = await store.update("acme", role.id, failure_message="")
        assert silent is not None and silent.failure_message == ""
        default = await store.update("acme", role.id, failure_message=None)
        assert default is not None and default.failure_message is None
        assert (await store.get("acme", role.id)) == default
        assert (await tutor(store)).failure_message is None

    async def test_only_the_editable_fields_change(self, store: RoleStore) -> None:
        role = await tutor(store)
        with pytest.raises(ValueError, match="cannot change"):
            await store.update("acme", role.id, revision=9)
        with pytest.raises(ValueError, match="cannot change"):
            await store.update("acme", role.id, is_default=True)

    async def test_threads_are_counted_per_role_across_the_tenants_users(
        self, store: RoleStore, threads: ThreadStore
    ) -> None:
        role = await tutor(store)
        other = await tutor(store)
        await threads.create("acme", "ann", "th_1", role.id)
        await threads.create("acme", "bob", "th_2", role.id)
        await threads.create("acme", "bob", "th_3", other.id)
        await threads.create("globex", "eve", "th_4", role.id)
        assert await threads.count_for_role("acme", role.id) == 2
        assert await threads.count_for_role("acme", other.id) == 1
        assert await threads.count_for_role("acme", "role_missing") == 0


class TestInMemoryRoleStore(RoleStoreContract):
    @pytest.fixture
    def store(self) -> RoleStore:
        return InMemoryRoleStore()

    @pytest.fixture
    def threads(self) -> ThreadStore:
        return InMemoryThreadStore()


class TestPostgresRoleStore(RoleStoreContract):
    @pytest.fixture
    def store(self, pg_pool: Any) -> RoleStore:
        return PostgresRoleStore(pg_pool)

    @pytest.fixture
    def threads(self, pg_pool: Any) -> ThreadStore:
        return PostgresThreadStore(pg_pool)
