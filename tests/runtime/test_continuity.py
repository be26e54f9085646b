"""The continuity rules of ``runtime/realtime/continuity.py``, each against real in-memory stores: a
continuation's checks (rule 1), the resume handshake (rule 2), continuing from the journal and
the claim race (rule 3), the fencing order (rule 4), reconcile items from the journal — amended
items included, bounded (rule 5) — and ``resumed_message``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import pytest

from journal.amendments import item_deleted, item_truncated
from journal.events import NewEvent, ThreadRef
from journal.store import InMemoryJournalStore
from runtime.accounts import Principal
from runtime.errors import ContinuityRefused
from runtime.realtime.continuity import (
    RECONCILE_MAX_ITEMS,
    RECONCILE_SCAN_EVENTS,
    RESUME_RACE_ATTEMPTS,
    ContinueHere,
    HandOver,
    LiveSession,
    check_continuation,
    reconcile_from_journal,
    redeem,
    resumed_message,
)
from runtime.realtime.protocol import CloseCode, ErrorCode, SessionResume, SessionStart
from runtime.realtime.resume import InMemoryResumeTokenStore, VoiceSessionRecord
from runtime.roles import InMemoryRoleStore, Role
from runtime.threads import InMemoryThreadStore
from tests.journal.builders import THREAD, answered, said, tool_call

if TYPE_CHECKING:
    from runtime.services import Services


def in_session(event: NewEvent, session: str) -> NewEvent:
    return NewEvent(event.event_id, event.kind, event.payload, session)


async def test_reconcile_hides_deleted_items_and_shows_truncated_ones_as_heard() -> None:
    journal = InMemoryJournalStore()
    events = [
        said("u1", "Please forget this: my PIN is 9731.", item_id="item_u1"),
        answered("a1", "Forgotten.", item_id="item_a1"),
        said("u2", "Opening hours?", item_id="item_u2"),
        answered("a2", "We open at nine and close at six.", item_id="item_a2"),
        item_deleted("d1", "item_u1"),
        item_truncated("t1", "item_a2", "We open at nine"),
    ]
    await journal.append(THREAD, [in_session(e, "vs1") for e in events])
    # An amendment by a later session of the thread counts too.
    await journal.append(THREAD, [in_session(item_deleted("d2", "item_a1"), "vs2")])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 10, None)
    assert reconcile["items"] == [
        {"journal_seq": 3, "role": "user", "text": "Opening hours?"},
        {"journal_seq": 4, "role": "assistant", "text": "We open at nine", "interrupted": True},
    ]
    assert reconcile["complete"] is True


async def test_reconcile_of_events_without_item_ids_is_unchanged() -> None:
    journal = InMemoryJournalStore()
    events = [said("u1", "Hi."), answered("a1", "Hello.", heard="Hel"), item_deleted("d1", "u1")]
    await journal.append(THREAD, [in_session(e, "vs1") for e in events])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 1, 5)
    assert reconcile["items"] == [
        {"journal_seq": 1, "role": "user", "text": "Hi."},
        {"journal_seq": 2, "role": "assistant", "text": "Hel", "interrupted": True},
    ]


def texts(reconcile: dict[str, object]) -> list[object]:
    items = reconcile["items"]
    assert isinstance(items, list)
    return [item["text"] for item in items]


async def test_reconcile_keeps_the_latest_items_and_says_when_it_cut_them() -> None:
    journal = InMemoryJournalStore()
    turns = [e for i in range(30) for e in (said(f"u{i}", f"q{i}"), answered(f"a{i}", f"r{i}"))]
    await journal.append(THREAD, [in_session(e, "vs1") for e in turns])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 1, None)
    items = reconcile["items"]
    assert isinstance(items, list) and len(items) == RECONCILE_MAX_ITEMS
    assert items[0] == {"journal_seq": 11, "role": "user", "text": "q5"}
    last = {"journal_seq": 60, "role": "assistant", "text": "r29", "interrupted": False}
    assert items[-1] == last
    assert reconcile["complete"] is False


async def test_reconcile_shows_only_this_sessions_items() -> None:
    journal = InMemoryJournalStore()
    await journal.append(THREAD, [in_session(said("u1", "mine"), "vs1")])
    await journal.append(THREAD, [in_session(said("u2", "theirs"), "vs2")])
    await journal.append(THREAD, [in_session(answered("a1", "also mine"), "vs1")])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 3, 7)
    assert texts(reconcile) == ["mine", "also mine"]
    assert (reconcile["from_seq"], reconcile["to_seq"]) == (3, 7)
    assert (reconcile["session_id"], reconcile["thread_id"]) == ("vs1", THREAD.thread_id)
    assert reconcile["complete"] is True


async def test_reconcile_is_incomplete_when_its_scan_did_not_reach_the_sessions_start() -> None:
    journal = InMemoryJournalStore()
    filler = [tool_call(f"c{i}", f"call{i}") for i in range(RECONCILE_SCAN_EVENTS)]
    await journal.append(THREAD, [in_session(e, "vs1") for e in filler])
    await journal.append(THREAD, [in_session(said("u1", "late question"), "vs1")])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 1, None)
    assert texts(reconcile) == ["late question"]
    assert reconcile["complete"] is False


async def test_reconcile_is_complete_when_its_scan_reached_back_past_the_session() -> None:
    journal = InMemoryJournalStore()
    await journal.append(THREAD, [in_session(said(f"o{i}", "earlier"), "vs0") for i in range(10)])
    filler = [tool_call(f"c{i}", f"call{i}") for i in range(RECONCILE_SCAN_EVENTS - 6)]
    await journal.append(THREAD, [in_session(e, "vs1") for e in filler])
    await journal.append(THREAD, [in_session(said("u1", "question"), "vs1")])
    reconcile = await reconcile_from_journal(journal, THREAD, "vs1", 1, None)
    assert texts(reconcile) == ["question"]
    assert reconcile["complete"] is True


# ---------------------------------------------------------------- the handshake (rules 1-4)

TENANT, USER = "acme", "alice"
ALICE = Principal(TENANT, USER)
BOB = Principal(TENANT, "bob")
OWN_THREAD = ThreadRef(TENANT, USER, "th_1")
OPTIONS = {"config": {"voice": "alloy"}, "extensions": {"seq": True}}


@dataclass
class FakeSettings:
    resume_ttl_s: float = 60.0


@dataclass
class LiveCopy:
    """A session live in this process, as the handshake sees it."""

    epoch: int
    fenced: list[int] = field(default_factory=list)

    def fence(self, epoch: int) -> None:
        self.fenced.append(epoch)


class WatchedTokens(InMemoryResumeTokenStore):
    """The in-memory token store, with its calls recorded and hooks around ``claim``:
    ``before_claim`` runs first (a concurrent resume getting there first), ``lose_claims``
    claims fail as if another resume won, ``after_claim`` runs when a claim returns."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []
        self.before_claim: Callable[[VoiceSessionRecord], Awaitable[None]] | None = None
        self.after_claim: Callable[[], None] | None = None
        self.lose_claims = 0

    async def redeem(
        self, principal: Principal, session_id: str, token: str, *, ttl_s: float
    ) -> tuple[VoiceSessionRecord, str] | None:
        self.calls.append("redeem")
        return await super().redeem(principal, session_id, token, ttl_s=ttl_s)

    async def claim(self, record: VoiceSessionRecord) -> VoiceSessionRecord | None:
        self.calls.append("claim")
        if self.before_claim is not None:
            await self.before_claim(record)
        if self.lose_claims:
            self.lose_claims -= 1
            return None
        claimed = await super().claim(record)
        if self.after_claim is not None:
            self.after_claim()
        return claimed


@dataclass
class World:
    """What ``check_continuation`` and ``redeem`` use of ``Services``: real in-memory stores."""

    role: Role
    other_role: Role
    token: str
    threads: InMemoryThreadStore = field(default_factory=InMemoryThreadStore)
    roles: InMemoryRoleStore = field(default_factory=InMemoryRoleStore)
    journal: InMemoryJournalStore = field(default_factory=InMemoryJournalStore)
    resume_tokens: WatchedTokens = field(default_factory=WatchedTokens)
    settings: FakeSettings = field(default_factory=FakeSettings)
    live: dict[str, LiveCopy] = field(default_factory=dict)

    @property
    def services(self) -> Services:
        return cast("Services", self)

    def lookup(self, session_id: str) -> LiveSession | None:
        return self.live.get(session_id)


async def new_role(roles: InMemoryRoleStore, name: str) -> Role:
    return await roles.create(
        TENANT, name=name, instructions="Help.", voice=None, language=None, memory_enabled=False
    )


async def world(*, thread_id: str = "th_1") -> World:
    """Alice's thread th_1 (role Support), once served by voice session vs_prev; her voice
    session vs_1 on ``thread_id`` with a resume token, not live anywhere."""
    roles, threads = InMemoryRoleStore(), InMemoryThreadStore()
    role, other = await new_role(roles, "Support"), await new_role(roles, "Sales")
    await threads.create(TENANT, USER, "th_1", role.id)
    journal = InMemoryJournalStore()
    await journal.append(OWN_THREAD, [in_session(said("p1", "hello"), "vs_prev")])
    tokens = WatchedTokens()
    record = VoiceSessionRecord("vs_1", TENANT, USER, thread_id, role.id, options=OPTIONS)
    token = await tokens.issue(record, ttl_s=60.0)
    return World(role, other, token, threads, roles, journal, tokens)


def start(**fields: str | None) -> SessionStart:
    values: dict[str, str | None] = {
        "requested_thread_id": "th_1",
        "previous_voice_session_id": "vs_prev",
        **fields,
    }
    return SessionStart(type="openrealtime.session.start", **values)  # type: ignore[arg-type]


def resume(token: str) -> SessionResume:
    return SessionResume(
        type="openrealtime.session.resume", session_id="vs_1", resume_token=token, last_seq=0
    )


def refusal(caught: pytest.ExceptionInfo[ContinuityRefused]) -> tuple[str, int, str]:
    return caught.value.error_code, caught.value.close_code, caught.value.close_reason


NO_CONTINUATION = (CloseCode.FORBIDDEN, "continuation refused")
NO_RESUME = (CloseCode.FORBIDDEN, "resume refused")


# Rule 1 — continuation


async def test_a_continuation_of_the_callers_thread_gets_its_thread_and_role() -> None:
    w = await world()
    thread, role = await check_continuation(w.services, ALICE, start())
    assert thread == OWN_THREAD and role == w.role


async def test_a_continuation_needs_the_previous_voice_session() -> None:
    w = await world()
    with pytest.raises(ContinuityRefused) as caught:
        await check_continuation(w.services, ALICE, start(previous_voice_session_id=None))
    assert refusal(caught) == (ErrorCode.INVALID_MESSAGE, *NO_CONTINUATION)


async def test_someone_elses_thread_and_an_unknown_one_are_refused_alike() -> None:
    w = await world()
    with pytest.raises(ContinuityRefused) as foreign:
        await check_continuation(w.services, BOB, start())
    with pytest.raises(ContinuityRefused) as unknown:
        await check_continuation(w.services, ALICE, start(requested_thread_id="th_nope"))
    assert refusal(foreign) == (ErrorCode.THREAD_NOT_FOUND, *NO_CONTINUATION)
    assert (refusal(foreign), foreign.value.message) == (refusal(unknown), unknown.value.message)


async def test_a_continuation_may_name_its_role_by_id_or_by_name() -> None:
    w = await world()
    for model in (w.role.id, w.role.name):
        assert await check_continuation(w.services, ALICE, start(model=model)) == (
            OWN_THREAD,
            w.role,
        )


async def test_a_continuation_asking_for_another_role_is_refused() -> None:
    w = await world()
    for model in (w.other_role.id, w.other_role.name, "no such role"):
        with pytest.raises(ContinuityRefused) as caught:
            await check_continuation(w.services, ALICE, start(model=model))
        assert refusal(caught) == (ErrorCode.ROLE_MISMATCH, *NO_CONTINUATION)
        assert caught.value.message == "the thread belongs to another role"


async def test_a_continuation_of_a_thread_whose_role_was_deleted_is_refused() -> None:
    w = await world()
    await w.roles.delete(TENANT, w.role.id)
    with pytest.raises(ContinuityRefused) as caught:
        await check_continuation(w.services, ALICE, start())
    assert refusal(caught) == (ErrorCode.ROLE_NOT_FOUND, *NO_CONTINUATION)


async def test_a_continuation_needs_the_previous_session_in_that_threads_journal() -> None:
    w = await world()
    # vs_other served another thread of Alice's, never th_1.
    await w.threads.create(TENANT, USER, "th_2", w.role.id)
    await w.journal.append(
        ThreadRef(TENANT, USER, "th_2"), [in_session(said("x1", "elsewhere"), "vs_other")]
    )
    for previous in ("vs_never", "vs_other"):
        with pytest.raises(ContinuityRefused) as caught:
            await check_continuation(w.services, ALICE, start(previous_voice_session_id=previous))
        assert refusal(caught) == (ErrorCode.PREVIOUS_SESSION_UNKNOWN, *NO_CONTINUATION)


async def test_a_client_secret_continues_only_threads_of_its_role() -> None:
    w = await world()
    bound_elsewhere = Principal(TENANT, USER, bound_role_id=w.other_role.id)
    with pytest.raises(ContinuityRefused) as caught:
        await check_continuation(w.services, bound_elsewhere, start())
    assert refusal(caught) == (ErrorCode.ROLE_MISMATCH, *NO_CONTINUATION)
    assert caught.value.message == "this client secret is bound to another role"
    bound_here = Principal(TENANT, USER, bound_role_id=w.role.id)
    assert await check_continuation(w.services, bound_here, start()) == (OWN_THREAD, w.role)


# Rule 2 — the resume handshake


async def test_a_wrong_token_is_refused() -> None:
    w = await world()
    for who, token in ((ALICE, "not-the-token"), (BOB, w.token)):
        with pytest.raises(ContinuityRefused) as caught:
            await redeem(w.services, who, resume(token), live=w.lookup, this=object())
        assert refusal(caught) == (ErrorCode.RESUME_REFUSED, *NO_RESUME)
    assert "claim" not in w.resume_tokens.calls


async def test_a_client_secret_of_another_role_is_refused_after_its_token_was_redeemed() -> None:
    w = await world()
    w.live["vs_1"] = copy = LiveCopy(epoch=0)
    bound_elsewhere = Principal(TENANT, USER, bound_role_id=w.other_role.id)
    with pytest.raises(ContinuityRefused) as caught:
        await redeem(w.services, bound_elsewhere, resume(w.token), live=w.lookup, this=object())
    assert refusal(caught) == (ErrorCode.ROLE_MISMATCH, *NO_RESUME)
    assert w.resume_tokens.calls == ["redeem"]  # redeemed, then refused: no claim, no hand-over
    assert copy.fenced == []


async def test_a_session_live_here_at_the_tokens_epoch_gets_the_connection() -> None:
    w = await world()
    w.live["vs_1"] = copy = LiveCopy(epoch=0)
    outcome = await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert isinstance(outcome, HandOver) and outcome.target is copy
    assert copy.fenced == [] and w.resume_tokens.calls == ["redeem"]
    # The token was rotated: the fresh one redeems next time.
    assert outcome.fresh_token != w.token
    assert await w.resume_tokens.redeem(ALICE, "vs_1", outcome.fresh_token, ttl_s=60) is not None


async def test_a_stale_live_copy_is_fenced_and_the_session_continues_here() -> None:
    w = await world()
    # Another process continued vs_1 (epoch 1); this process still holds its epoch-0 copy.
    redeemed = await w.resume_tokens.redeem(ALICE, "vs_1", w.token, ttl_s=60)
    assert redeemed is not None
    assert await w.resume_tokens.claim(redeemed[0]) is not None
    w.live["vs_1"] = stale = LiveCopy(epoch=0)
    outcome = await redeem(w.services, ALICE, resume(redeemed[1]), live=w.lookup, this=object())
    assert isinstance(outcome, ContinueHere) and outcome.record.epoch == 2
    assert stale.fenced and set(stale.fenced) == {2}


# Rule 3 — continued from the journal


async def test_a_session_not_live_here_continues_from_the_journal_at_the_next_epoch() -> None:
    w = await world()
    outcome = await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert isinstance(outcome, ContinueHere)
    assert (outcome.record.session_id, outcome.record.epoch) == ("vs_1", 1)
    assert outcome.thread == OWN_THREAD and outcome.role == w.role
    assert outcome.options == OPTIONS
    assert w.resume_tokens.calls == ["redeem", "claim"]
    again = await w.resume_tokens.redeem(ALICE, "vs_1", outcome.fresh_token, ttl_s=60)
    assert again is not None and again[0].epoch == 1


async def test_continuing_a_session_whose_thread_is_not_the_users_is_refused() -> None:
    w = await world(thread_id="th_gone")
    with pytest.raises(ContinuityRefused) as caught:
        await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert refusal(caught) == (ErrorCode.THREAD_NOT_FOUND, *NO_RESUME)
    assert "claim" not in w.resume_tokens.calls


async def test_continuing_a_session_whose_role_was_deleted_is_refused() -> None:
    w = await world()
    await w.roles.delete(TENANT, w.role.id)
    with pytest.raises(ContinuityRefused) as caught:
        await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert refusal(caught) == (ErrorCode.ROLE_NOT_FOUND, *NO_RESUME)
    assert "claim" not in w.resume_tokens.calls


async def test_a_claim_lost_to_a_concurrent_resume_looks_again_and_hands_over_to_it() -> None:
    w = await world()
    winner: list[LiveCopy] = []

    async def concurrent_resume(record: VoiceSessionRecord) -> None:
        # The client's retry, on this process, claims first and registers its copy.
        w.resume_tokens.before_claim = None
        claimed = await InMemoryResumeTokenStore.claim(w.resume_tokens, record)
        assert claimed is not None
        w.live["vs_1"] = LiveCopy(epoch=claimed.epoch)
        winner.append(w.live["vs_1"])

    w.resume_tokens.before_claim = concurrent_resume
    outcome = await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert isinstance(outcome, HandOver) and outcome.target is winner[0]
    assert w.resume_tokens.calls == ["redeem", "claim", "redeem"]
    assert winner[0].fenced == []


async def test_a_resume_that_keeps_losing_the_claim_gives_up() -> None:
    w = await world()
    w.resume_tokens.lose_claims = RESUME_RACE_ATTEMPTS
    with pytest.raises(ContinuityRefused) as caught:
        await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert refusal(caught) == (ErrorCode.RESUME_REFUSED, *NO_RESUME)
    assert caught.value.message == "the session is being resumed elsewhere"
    assert w.resume_tokens.calls == ["redeem", "claim"] * RESUME_RACE_ATTEMPTS


# Rule 4 — fencing order


def lookups(*answers: LiveSession | None) -> Callable[[str], LiveSession | None]:
    """A live lookup answering in turn (the last answer repeats)."""
    queue = list(answers)

    def lookup(session_id: str) -> LiveSession | None:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return lookup


async def test_an_older_copy_found_after_the_claim_is_fenced_at_the_claimed_epoch() -> None:
    w = await world()
    older = LiveCopy(epoch=0)
    live = lookups(None, older)
    outcome = await redeem(w.services, ALICE, resume(w.token), live=live, this=object())
    assert isinstance(outcome, ContinueHere) and outcome.record.epoch == 1
    assert older.fenced == [1]


async def test_a_newer_copy_found_after_the_claim_supersedes_this_resume() -> None:
    w = await world()
    newer = LiveCopy(epoch=5)
    with pytest.raises(ContinuityRefused) as caught:
        await redeem(w.services, ALICE, resume(w.token), live=lookups(None, newer), this=object())
    superseded = (CloseCode.SUPERSEDED, "resumed by another connection")
    assert refusal(caught) == (ErrorCode.RESUME_REFUSED, *superseded)
    assert newer.fenced == []


async def test_the_callers_own_session_is_never_fenced() -> None:
    w = await world()
    this = LiveCopy(epoch=0)
    outcome = await redeem(w.services, ALICE, resume(w.token), live=lookups(None, this), this=this)
    assert isinstance(outcome, ContinueHere) and this.fenced == []


async def test_redeem_returns_straight_after_the_claim_without_letting_other_tasks_run() -> None:
    w = await world()
    ran: list[str] = []
    loop = asyncio.get_running_loop()

    def another_task_is_due() -> None:
        loop.call_soon(ran.append, "another task")

    w.resume_tokens.after_claim = another_task_is_due
    outcome = await redeem(w.services, ALICE, resume(w.token), live=w.lookup, this=object())
    assert isinstance(outcome, ContinueHere)
    assert ran == []  # nothing ran between the claim and here: the caller can register first
    await asyncio.sleep(0)
    assert ran == ["another task"]


# ---------------------------------------------------------------- resumed_message


def test_the_answer_to_a_replayed_resume_has_no_seq_and_nulls_what_does_not_apply() -> None:
    message = json.loads(
        resumed_message("vs_1", "tok2", replayed=3, missing=None, reconcile=None, last_seq=12)
    )
    assert message == {
        "type": "openrealtime.session.resumed",
        "event_id": "event_resumed_12",
        "session_id": "vs_1",
        "resume_token": "tok2",
        "replayed": 3,
        "missing": None,
        "reconcile": None,
        "last_seq": 12,
    }


def test_the_answer_to_a_resume_past_the_window_names_the_missing_range() -> None:
    reconcile: dict[str, object] = {"from_seq": 5, "to_seq": 9, "items": [], "complete": True}
    message = json.loads(
        resumed_message(
            "vs_1", "tok2", replayed=2, missing=[5, 9], reconcile=reconcile, last_seq=11
        )
    )
    assert (message["missing"], message["reconcile"], message["replayed"]) == ([5, 9], reconcile, 2)
    assert "seq" not in message and "session" not in message


def test_the_answer_to_a_journal_continuation_carries_the_session() -> None:
    session: dict[str, object] = {"id": "vs_1", "voice": "alloy"}
    reconcile: dict[str, object] = {"from_seq": 42, "to_seq": None, "items": []}
    message = json.loads(
        resumed_message(
            "vs_1",
            "tok2",
            replayed=False,
            missing=None,
            reconcile=reconcile,
            last_seq=41,
            session=session,
        )
    )
    assert message["replayed"] is False and message["session"] == session
    assert message["reconcile"] == reconcile and message["event_id"] == "event_resumed_41"
