"""The grant policy as a pure function: a table of grants, calls and the grant that decides."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tools.capability import Capability
from tools.errors import InvalidGrant
from tools.grants import (
    Effect,
    Grant,
    GrantedBy,
    GrantStatus,
    NewGrant,
    Scope,
    check_new_grant,
    grant_policy,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PERSON = GrantedBy("person", "p1")


def grant(
    id_: str,
    effect: Effect,
    action: str = "send_email",
    target: str = "*",
    arguments: dict[str, object] | None = None,
    *,
    scope: Scope = "lifetime",
    thread: str | None = None,
    status: GrantStatus = "active",
) -> Grant:
    return Grant(id=id_, tenant="t", role_id="r", capability=Capability(action, target, arguments),
                 effect=effect, scope=scope, thread_id=thread, granted_by=PERSON, parent=None,
                 status=status, created_at=T0)  # fmt: skip


CALL = Capability("send_email", "anna@example.com", {"to": "anna@example.com", "subject": "Hi"})

TABLE = [
    # (what it shows, grants in creation order, the deciding grant's id or None)
    ("no grants, no decision", [], None),
    ("a matching allow decides", [grant("a", "allow")], "a"),
    ("a deny after an allow still wins", [grant("a", "allow"), grant("d", "deny")], "d"),
    ("a deny before an allow wins", [grant("d", "deny"), grant("a", "allow")], "d"),
    ("the first of two denies decides", [grant("a", "allow"), grant("d1", "deny"),
                                         grant("d2", "deny")], "d1"),
    ("the first of two allows decides", [grant("a1", "allow"), grant("a2", "allow")], "a1"),
    ("another action never matches", [grant("x", "allow", action="send_sms")], None),
    ("another target never matches", [grant("x", "allow", target="bob@example.com")], None),
    ("an equal target matches", [grant("a", "allow", target="anna@example.com")], "a"),
    ("pinned arguments must be equal", [grant("x", "allow", arguments={"to": "anna@example.com"})],
     None),
    ("equal arguments in another key order match",
     [grant("a", "allow", arguments={"subject": "Hi", "to": "anna@example.com"})], "a"),
    ("a deny for other arguments does not apply",
     [grant("d", "deny", arguments={"subject": "Other"}), grant("a", "allow")], "a"),
    ("a revoked deny no longer applies", [grant("d", "deny", status="revoked"),
                                          grant("a", "allow")], "a"),
    ("a used once allow no longer applies", [grant("o", "allow", scope="once",
                                                   status="used")], None),
    ("a thread grant applies in its thread", [grant("a", "allow", scope="thread",
                                                    thread="th1")], "a"),
    ("a thread grant does not apply elsewhere", [grant("a", "allow", scope="thread",
                                                       thread="th2")], None),
    ("a thread deny elsewhere does not block", [grant("d", "deny", scope="thread", thread="th2"),
                                                grant("a", "allow")], "a"),
    ("a once grant in another thread does not apply", [grant("o", "allow", scope="once",
                                                             thread="th2")], None),
    ("a once grant without a thread applies", [grant("o", "allow", scope="once")], "o"),
]  # fmt: skip


@pytest.mark.parametrize(("grants", "expected"), [(g, e) for _, g, e in TABLE],
                         ids=[name for name, _, _ in TABLE])  # fmt: skip
def test_grant_policy_table(grants: list[Grant], expected: str | None) -> None:
    decided = grant_policy(grants, CALL, "th1")
    assert (decided.id if decided else None) == expected


def test_deny_beats_allow_in_every_order() -> None:
    import itertools

    grants = [grant("a1", "allow"), grant("a2", "allow"), grant("d", "deny")]
    for order in itertools.permutations(grants):
        decided = grant_policy(list(order), CALL, "th1")
        assert decided is not None and decided.id == "d"


@pytest.mark.parametrize(
    ("new", "problem"),
    [
        (NewGrant(capability=Capability("x"), effect="allow", scope="thread", granted_by=PERSON),
         "thread_id"),
        (NewGrant(capability=Capability(""), effect="allow", scope="lifetime", granted_by=PERSON),
         "action"),
        (NewGrant(capability=Capability("x"), effect="allow", scope="lifetime", granted_by=PERSON,
                  thread_id="th"), "lifetime"),
        (NewGrant(capability=Capability("x"), effect="maybe", scope="lifetime",  # type: ignore[arg-type]
                  granted_by=PERSON), "effect"),
        (NewGrant(capability=Capability("x"), effect="allow", scope="lifetime",
                  granted_by=GrantedBy("person", "")), "granted_by"),
    ],
)  # fmt: skip
def test_a_bad_grant_is_refused_with_its_reason(new: NewGrant, problem: str) -> None:
    with pytest.raises(InvalidGrant) as raised:
        check_new_grant(new)
    assert problem in raised.value.message
    assert raised.value.code == "invalid_grant"
