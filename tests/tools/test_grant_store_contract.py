"""The grant store contract, run against the in-memory and the PostgreSQL store."""

from __future__ import annotations

import asyncio

import pytest

from tools.capability import Capability
from tools.errors import GrantNotFound, InvalidGrant, ToolLimitExceeded
from tools.grants import GrantedBy, GrantStore, NewGrant, Scope

PERSON = GrantedBy("person", "p1")
CALL = Capability("send_email", "anna@example.com", {"to": "anna@example.com"})


def new(
    effect: str = "allow",
    *,
    action: str = "send_email",
    target: str = "*",
    arguments: dict[str, object] | None = None,
    scope: Scope = "lifetime",
    thread: str | None = None,
    parent: str | None = None,
    by: GrantedBy = PERSON,
) -> NewGrant:
    return NewGrant(capability=Capability(action, target, arguments), effect=effect,  # type: ignore[arg-type]
                    scope=scope, granted_by=by, thread_id=thread, parent=parent)  # fmt: skip


async def test_create_then_get_and_list_round_trip(grant_store: GrantStore) -> None:
    made = await grant_store.create("t", "r", new(arguments={"to": "anna@example.com", "n": 1},
                                                  scope="thread", thread="th1"))  # fmt: skip
    assert made.status == "active" and made.tenant == "t" and made.role_id == "r"
    got = await grant_store.get("t", "r", made.id)
    assert got == made
    assert got.capability.arguments == {"n": 1, "to": "anna@example.com"}
    assert got.granted_by == PERSON and got.scope == "thread" and got.thread_id == "th1"
    assert await grant_store.list("t", "r") == [made]


async def test_grants_are_scoped_by_tenant_and_role(grant_store: GrantStore) -> None:
    made = await grant_store.create("t", "r", new())
    assert await grant_store.list("t", "other") == []
    assert await grant_store.list("t2", "r") == []
    assert await grant_store.decide("t", "other", CALL, "th1") is None
    assert await grant_store.decide("t2", "r", CALL, "th1") is None
    with pytest.raises(GrantNotFound):
        await grant_store.get("t", "other", made.id)
    with pytest.raises(GrantNotFound):
        await grant_store.revoke("t2", "r", made.id)


async def test_list_is_in_creation_order_and_filters_by_status(grant_store: GrantStore) -> None:
    made = [await grant_store.create("t", "r", new(target=f"x{n}")) for n in range(5)]
    assert [g.id for g in await grant_store.list("t", "r")] == [g.id for g in made]
    await grant_store.revoke("t", "r", made[1].id)
    active = await grant_store.list("t", "r", status="active")
    assert [g.id for g in active] == [made[n].id for n in (0, 2, 3, 4)]
    assert [g.id for g in await grant_store.list("t", "r", status="revoked")] == [made[1].id]


async def test_deny_beats_an_earlier_allow_and_the_first_allow_decides(
    grant_store: GrantStore,
) -> None:
    first = await grant_store.create("t", "r", new())
    await grant_store.create("t", "r", new(target="anna@example.com"))
    decided = await grant_store.decide("t", "r", CALL, "th1")
    assert decided is not None and decided.id == first.id
    deny = await grant_store.create("t", "r", new("deny", arguments=dict(CALL.arguments or {})))
    decided = await grant_store.decide("t", "r", CALL, "th1")
    assert decided is not None and decided.id == deny.id and decided.effect == "deny"
    other = Capability("send_email", "anna@example.com", {"to": "bob@example.com"})
    decided = await grant_store.decide("t", "r", other, "th1")
    assert decided is not None and decided.id == first.id


async def test_thread_grants_decide_only_in_their_thread(grant_store: GrantStore) -> None:
    made = await grant_store.create("t", "r", new(scope="thread", thread="th1"))
    decided = await grant_store.decide("t", "r", CALL, "th1")
    assert decided is not None and decided.id == made.id
    assert await grant_store.decide("t", "r", CALL, "th2") is None
    assert await grant_store.decide("t", "r", CALL, None) is None


async def test_a_once_grant_is_used_up_by_its_decision(grant_store: GrantStore) -> None:
    once = await grant_store.create("t", "r", new(scope="once", thread="th1"))
    decided = await grant_store.decide("t", "r", CALL, "th1")
    assert decided is not None and decided.id == once.id
    assert (await grant_store.get("t", "r", once.id)).status == "used"
    assert await grant_store.decide("t", "r", CALL, "th1") is None


async def test_a_once_grant_that_does_not_decide_is_kept(grant_store: GrantStore) -> None:
    once = await grant_store.create("t", "r", new(scope="once"))
    deny = await grant_store.create("t", "r", new("deny"))
    decided = await grant_store.decide("t", "r", CALL, "th1")
    assert decided is not None and decided.id == deny.id
    assert (await grant_store.get("t", "r", once.id)).status == "active"


async def test_concurrent_decisions_use_a_once_grant_at_most_once(
    grant_store: GrantStore,
) -> None:
    for round_ in range(5):
        thread = f"th{round_}"
        once = [await grant_store.create("t", "r", new(scope="once", thread=thread))
                for _ in range(2)]  # fmt: skip
        results = await asyncio.gather(
            *[grant_store.decide("t", "r", CALL, thread) for _ in range(6)]
        )
        used = [g.id for g in results if g is not None]
        # Two once grants, six racing decisions: each grant answers exactly one of them.
        assert sorted(used) == sorted(g.id for g in once), results
        statuses = {(await grant_store.get("t", "r", g.id)).status for g in once}
        assert statuses == {"used"}


async def test_revoking_a_grant_revokes_everything_derived_from_it(
    grant_store: GrantStore,
) -> None:
    root = await grant_store.create("t", "boss", new())
    child = await grant_store.create("t", "r", new(parent=root.id, by=GrantedBy("role", "boss")))
    grandchild = await grant_store.create("t", "sub", new(parent=child.id,
                                                          by=GrantedBy("role", "r")))  # fmt: skip
    sibling = await grant_store.create("t", "r", new(target="x"))
    once = await grant_store.create("t", "r", new(scope="once", parent=root.id))
    assert await grant_store.decide("t", "r", CALL, "th1") is not None  # uses nothing: child
    revoked = await grant_store.revoke("t", "boss", root.id)
    assert sorted(revoked) == sorted([root.id, child.id, grandchild.id, once.id])
    assert (await grant_store.get("t", "r", child.id)).status == "revoked"
    assert (await grant_store.get("t", "sub", grandchild.id)).status == "revoked"
    assert (await grant_store.get("t", "r", sibling.id)).status == "active"
    assert await grant_store.decide("t", "sub", CALL, "th1") is None
    assert await grant_store.revoke("t", "boss", root.id) == []  # again: nothing new


async def test_a_revoked_decision_cannot_be_derived_from(grant_store: GrantStore) -> None:
    root = await grant_store.create("t", "r", new())
    await grant_store.revoke("t", "r", root.id)
    with pytest.raises(InvalidGrant):
        await grant_store.create("t", "r", new(parent=root.id))
    with pytest.raises(InvalidGrant):
        await grant_store.create("t", "r", new(parent="grant_missing"))


async def test_a_role_holds_a_bounded_number_of_active_grants(grant_store: GrantStore) -> None:
    made = [await grant_store.create("t", "r", new(target=f"x{n}")) for n in range(20)]
    with pytest.raises(ToolLimitExceeded):
        await grant_store.create("t", "r", new(target="one more"))
    await grant_store.revoke("t", "r", made[0].id)
    await grant_store.create("t", "r", new(target="one more"))
    await grant_store.create("t", "other", new())  # another role has its own bound
