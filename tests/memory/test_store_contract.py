"""The memory store contract, run against the in-memory and the PostgreSQL store."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest

from memory.backup import from_document, to_document
from memory.entries import MemoryDraft, MemorySource, owner_key
from memory.errors import (
    DuplicateMemory,
    InvalidMemory,
    MemoryNotFound,
    SensitiveContent,
    StaleRevision,
)
from memory.store import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LATER = datetime.now(UTC) + timedelta(days=1)


def said(content: str, thread: str, seq: int, at: datetime, *, kind: str = "preference",
         key: str | None = None) -> MemoryDraft:  # fmt: skip
    return MemoryDraft(kind, content, key, "extraction", MemorySource(thread, seq, at))  # type: ignore[arg-type]


def person(content: str, kind: str = "preference") -> MemoryDraft:
    return MemoryDraft(kind, content)  # type: ignore[arg-type]


async def contents(store: MemoryStore, user: str = "u1", role: str = "r1") -> list[str]:
    return [e.content for e in await store.list_entries("t", user, role)]


async def test_entries_are_scoped_by_tenant_user_and_role(store: MemoryStore) -> None:
    saved = await store.save("t", "u1", "r1", person("I like tea"))
    await store.save("t", "u2", "r1", person("I like coffee"))
    await store.save("t", "u1", "r2", person("I like juice"))
    await store.save("t2", "u1", "r1", person("I like water"))
    assert await contents(store) == ["I like tea"]
    assert await contents(store, "u2") == ["I like coffee"]
    assert await contents(store, "u1", "r2") == ["I like juice"]
    assert [e.content for e in await store.list_entries("t2", "u1", "r1")] == ["I like water"]
    assert saved.entry is not None
    assert await store.get("t", "u2", saved.entry.id) is None
    assert await store.get("t2", "u1", saved.entry.id) is None
    assert (await store.get("t", "u1", saved.entry.id)) == saved.entry


async def test_owner_partition_is_the_sha256_of_the_user_id(store: MemoryStore) -> None:
    outcome = await store.save("t", "alice@example", "r1", person("I like tea"))
    assert outcome.entry is not None
    expected = hashlib.sha256(b"alice@example").hexdigest()
    assert outcome.entry.owner == owner_key("alice@example") == expected
    assert "alice@example" not in json.dumps(to_document(await store.backup("t", "alice@example")))


async def test_new_entry_has_revision_status_times_and_origin(store: MemoryStore) -> None:
    outcome = await store.save("t", "u1", "r1", said("I like tea", "th_a", 3, T0))
    entry = outcome.entry
    assert outcome.action == "created" and entry is not None
    assert (entry.revision, entry.status, entry.origin) == (1, "active", "extraction")
    assert (entry.source_thread_id, entry.source_seq, entry.stated_at) == ("th_a", 3, T0)
    assert entry.created_at == entry.updated_at
    assert entry.kind == "preference" and entry.key is None


async def test_list_is_most_recently_updated_first_with_a_limit(store: MemoryStore) -> None:
    first = await store.save("t", "u1", "r1", person("one"))
    await store.save("t", "u1", "r1", person("two"))
    await store.save("t", "u1", "r1", person("three"))
    assert await contents(store) == ["three", "two", "one"]
    assert first.entry is not None
    await store.edit("t", "u1", first.entry.id, revision=1, content="one, edited")
    assert await contents(store) == ["one, edited", "three", "two"]
    assert [e.content for e in await store.list_entries("t", "u1", "r1", limit=2)] == [
        "one, edited",
        "three",
    ]


async def test_exact_duplicates_are_merged(store: MemoryStore) -> None:
    await store.save("t", "u1", "r1", said("I like tea.", "th_a", 1, T0))
    again = await store.save("t", "u1", "r1", said("i like  TEA", "th_b", 4, T0))
    assert again.action == "duplicate"
    assert await contents(store) == ["I like tea."]
    assert len(await store.changes("t", "u1", "r1")) == 1


async def test_unchanged_resave_does_not_replay(store: MemoryStore) -> None:
    draft = said("I live in Paris", "th_a", 2, T0, kind="fact", key="current_city")
    assert (await store.save("t", "u1", "r1", draft)).action == "created"
    assert (await store.save("t", "u1", "r1", draft)).action == "unchanged"
    [entry] = await store.list_entries("t", "u1", "r1")
    assert entry.revision == 1
    assert len(await store.changes("t", "u1", "r1")) == 1


async def test_stable_key_newer_statement_wins_and_older_never_overwrites(
    store: MemoryStore,
) -> None:
    old = said("I live in Paris", "th_a", 2, T0, kind="fact", key="current_city")
    new = said("I live in Berlin", "th_b", 5, T0 + timedelta(days=3), kind="fact",
               key="current_city")  # fmt: skip
    await store.save("t", "u1", "r1", old)
    updated = await store.save("t", "u1", "r1", new)
    assert updated.action == "updated" and updated.entry is not None
    assert updated.entry.revision == 2 and updated.entry.source_thread_id == "th_b"
    # The older transcript saved again (a late re-save) does not bring Paris back.
    assert (await store.save("t", "u1", "r1", old)).action == "stale"
    assert await contents(store) == ["I live in Berlin"]


async def test_older_transcript_never_overwrites_a_manual_edit(store: MemoryStore) -> None:
    draft = said("My birthday is May 1", "th_a", 2, T0, kind="fact", key="birthday")
    created = await store.save("t", "u1", "r1", draft)
    assert created.entry is not None
    await store.edit("t", "u1", created.entry.id, revision=1, content="My birthday is May 2")
    # Another older statement from another thread: stale against the edit.
    other = said("My birthday is May 3", "th_c", 9, T0 + timedelta(days=1), kind="fact",
                 key="birthday")  # fmt: skip
    assert (await store.save("t", "u1", "r1", other)).action == "stale"
    # The edited entry's own old source is blocked.
    revised = said("My birthday is May 9", "th_a", 2, T0, kind="fact", key="birthday")
    assert (await store.save("t", "u1", "r1", revised)).action == "blocked"
    # A newer explicit statement still wins.
    newer = said("My birthday is June 1", "th_d", 1, LATER, kind="fact", key="birthday")
    assert (await store.save("t", "u1", "r1", newer)).action == "updated"
    assert await contents(store) == ["My birthday is June 1"]


async def test_manual_edit_unlinks_the_source_and_blocks_its_old_statements(
    store: MemoryStore,
) -> None:
    created = await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))
    assert created.entry is not None
    edited = await store.edit("t", "u1", created.entry.id, revision=1, content="I like green tea")
    assert (edited.source_thread_id, edited.source_seq, edited.origin) == (None, None, "person")
    assert edited.revision == 2
    # The pre-edit version, re-extracted from the old transcript, does not come back …
    assert (await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))).action == (
        "blocked"
    )
    # … while something the user says later in that thread still counts.
    later = await store.save("t", "u1", "r1", said("I like rooibos", "th_a", 7, LATER))
    assert later.action == "created"
    assert sorted(await contents(store)) == ["I like green tea", "I like rooibos"]


async def test_same_source_message_revised_updates_its_entry(store: MemoryStore) -> None:
    await store.save("t", "u1", "r1", said("I like te", "th_a", 4, T0))
    revised = await store.save("t", "u1", "r1", said("I like tea", "th_a", 4, T0))
    assert revised.action == "updated"
    assert await contents(store) == ["I like tea"]


async def test_two_clauses_of_one_message_are_two_entries(store: MemoryStore) -> None:
    await store.save("t", "u1", "r1", said("我是小学语文老师", "th_a", 4, T0))
    other = await store.save("t", "u1", "r1", said("我周末喜欢去爬山", "th_a", 4, T0))
    assert other.action == "created"
    assert sorted(await contents(store)) == ["我周末喜欢去爬山", "我是小学语文老师"]


async def test_stale_revisions_are_refused(store: MemoryStore) -> None:
    created = await store.save("t", "u1", "r1", person("I like tea"))
    assert created.entry is not None
    entry_id = created.entry.id
    await store.edit("t", "u1", entry_id, revision=1, content="I like black tea")
    with pytest.raises(StaleRevision) as stale:
        await store.edit("t", "u1", entry_id, revision=1, content="I like milk tea")
    assert stale.value.current_revision == 2
    with pytest.raises(StaleRevision):
        await store.delete("t", "u1", entry_id, revision=1)
    await store.delete("t", "u1", entry_id, revision=2)
    assert await store.get("t", "u1", entry_id) is None
    with pytest.raises(MemoryNotFound):
        await store.delete("t", "u1", entry_id, revision=3)
    with pytest.raises(MemoryNotFound):
        await store.edit("t", "u2", "mem_unknown", revision=1, content="x")


async def test_another_user_cannot_edit_or_delete(store: MemoryStore) -> None:
    created = await store.save("t", "u1", "r1", person("I like tea"))
    assert created.entry is not None
    with pytest.raises(MemoryNotFound):
        await store.edit("t", "u2", created.entry.id, revision=1, content="hacked")
    with pytest.raises(MemoryNotFound):
        await store.delete("t", "u2", created.entry.id, revision=1)
    assert await contents(store) == ["I like tea"]


async def test_edit_to_a_duplicate_is_refused(store: MemoryStore) -> None:
    await store.save("t", "u1", "r1", person("I like tea"))
    other = await store.save("t", "u1", "r1", person("I like coffee"))
    assert other.entry is not None
    with pytest.raises(DuplicateMemory):
        await store.edit("t", "u1", other.entry.id, revision=1, content="I like tea")


async def test_content_limits_and_secrets(store: MemoryStore) -> None:
    with pytest.raises(InvalidMemory):
        await store.save("t", "u1", "r1", person("x" * 301))
    with pytest.raises(InvalidMemory):
        await store.save("t", "u1", "r1", person("   "))
    with pytest.raises(InvalidMemory):
        await store.save("t", "u1", "r1", person("hello", kind="opinion"))
    for secret in ("my password is hunter2", "我的密码是123456", "see https://x.example/a?t=1",
                   "key sk-abcdefghijklmnopqrstu"):  # fmt: skip
        with pytest.raises(SensitiveContent):
            await store.save("t", "u1", "r1", person(secret))
    assert (await store.save("t", "u1", "r1", person("x" * 300))).action == "created"


async def test_at_the_per_role_limit_new_entries_are_refused_and_keys_still_update(
    store: MemoryStore,
) -> None:
    for n in range(3):
        await store.save("t", "u1", "r1", person(f"fact {n}"), max_entries=3)
    full = await store.save("t", "u1", "r1", person("fact 3"), max_entries=3)
    assert full.action == "full" and full.entry is None
    assert len(await store.list_entries("t", "u1", "r1")) == 3
    # Other roles and users have their own limit.
    assert (await store.save("t", "u1", "r2", person("fact 3"), max_entries=3)).changed
    # An existing key is updated in place even at the limit.
    await store.clear("t", "u1", "r1")
    await store.save("t", "u1", "r1", said("I live in Rome", "a", 1, T0, kind="fact",
                                            key="current_city"), max_entries=1)  # fmt: skip
    moved = await store.save("t", "u1", "r1", said("I live in Oslo", "b", 1, LATER, kind="fact",
                                                    key="current_city"), max_entries=1)  # fmt: skip
    assert moved.action == "updated"


async def test_change_log_says_who_did_what_and_when(store: MemoryStore) -> None:
    created = await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))
    assert created.entry is not None
    edited = await store.edit("t", "u1", created.entry.id, revision=1, content="I like chai")
    await store.delete("t", "u1", created.entry.id, revision=edited.revision)
    await store.save("t", "u1", "r2", person("other role"))
    changes = await store.changes("t", "u1", "r1")
    assert [(c.action, c.actor, c.revision) for c in changes] == [
        ("deleted", "person", 3),
        ("updated", "person", 2),
        ("created", "extraction", 1),
    ]
    assert all(c.entry_id == created.entry.id for c in changes)
    assert changes[0].at >= changes[1].at >= changes[2].at
    assert not hasattr(changes[0], "content")
    assert await store.changes("t", "u2", "r1") == []


async def test_clear_deletes_the_role_only_and_blocks_sources(store: MemoryStore) -> None:
    await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))
    await store.save("t", "u1", "r1", person("I like cake"))
    await store.save("t", "u1", "r2", person("I like pie"))
    assert await store.clear("t", "u1", "r1") == 2
    assert await contents(store) == []
    assert await contents(store, "u1", "r2") == ["I like pie"]
    assert (await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))).action == (
        "blocked"
    )


async def test_delete_source_writes_a_receipt_and_a_tombstone(store: MemoryStore) -> None:
    a1 = await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))
    a2 = await store.save("t", "u1", "r2", said("I like jazz", "th_a", 3, T0))
    await store.save("t", "u1", "r1", said("I like cats", "th_b", 1, T0))
    await store.save("t", "u1", "r1", person("I like dogs"))
    receipt = await store.delete_source("t", "u1", "th_a")
    assert receipt.receipt_id and receipt.deleted == 2
    assert a1.entry is not None and a2.entry is not None
    assert set(receipt.entry_ids) == {a1.entry.id, a2.entry.id}
    assert sorted(await contents(store)) == ["I like cats", "I like dogs"]
    assert await contents(store, "u1", "r2") == []
    # A late revision of that conversation's transcript never re-extracts, for any role.
    for role in ("r1", "r2", "r3"):
        late = await store.save("t", "u1", role, said("I like tea", "th_a", 1, LATER))
        assert late.action == "blocked"
    actions = [c.action for c in await store.changes("t", "u1", "r1")]
    assert actions[0] == "source_deleted"
    # Deleting again (or a source with nothing) still gives a receipt.
    empty = await store.delete_source("t", "u1", "th_none")
    assert empty.deleted == 0 and empty.receipt_id != receipt.receipt_id
    assert (await store.save("t", "u1", "r1", said("I like x", "th_none", 1, T0))).action == (
        "blocked"
    )
    # Another user's memory from a thread with the same id is untouched.
    other = await store.save("t", "u2", "r1", said("I like tea", "th_a", 1, T0))
    assert other.action == "created"


async def test_edited_entries_survive_the_deletion_of_their_old_source(
    store: MemoryStore,
) -> None:
    created = await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))
    assert created.entry is not None
    await store.edit("t", "u1", created.entry.id, revision=1, content="I like green tea")
    receipt = await store.delete_source("t", "u1", "th_a")
    assert receipt.deleted == 0
    assert await contents(store) == ["I like green tea"]


async def test_restoring_an_older_export_never_brings_deleted_entries_back(
    store: MemoryStore,
) -> None:
    await store.save("t", "u1", "r1", said("I like tea", "th_a", 1, T0))
    manual = await store.save("t", "u1", "r1", person("I like dogs"))
    await store.save("t", "u1", "r1", person("I like cats"))
    old = to_document(await store.backup("t", "u1"))
    assert {e["content"] for e in old["entries"]} == {"I like tea", "I like dogs", "I like cats"}

    await store.delete_source("t", "u1", "th_a")
    assert manual.entry is not None
    await store.delete("t", "u1", manual.entry.id, revision=1)
    result = await store.restore("t", "u1", from_document(old, tenant="t", user="u1"))
    assert (result.imported, result.skipped) == (0, 3)
    assert await contents(store) == ["I like cats"]

    # Into an empty memory (another account restoring its own copy of the newer export), the
    # newer export's deletions hold too, and the tombstone keeps blocking re-extraction.
    newer = json.loads(json.dumps(to_document(await store.backup("t", "u1"))))
    fresh = await store.restore("t", "u9", from_document(newer, tenant="t", user="u9"))
    assert (fresh.imported, fresh.skipped) == (1, 0)
    again = await store.restore("t", "u9", from_document(old, tenant="t", user="u9"))
    assert again.imported == 0
    assert await contents(store, "u9") == ["I like cats"]
    assert (await store.save("t", "u9", "r1", said("I like tea", "th_a", 1, LATER))).action == (
        "blocked"
    )
    assert [c.action for c in await store.changes("t", "u9", "r1")] == ["imported"]


async def test_restore_skips_duplicates_second_keys_and_bad_content(store: MemoryStore) -> None:
    await store.save("t", "u1", "r1", person("I like tea"))
    await store.save("t", "u1", "r1", said("I live in Rome", "a", 1, T0, kind="fact",
                                            key="current_city"))  # fmt: skip
    doc = to_document(await store.backup("t", "u1"))
    await store.clear("t", "u1", "r1")  # the entries' ids are now deleted ids
    doc["deleted_entry_ids"] = []
    for n, entry in enumerate(doc["entries"]):
        entry["id"] = f"mem_new_{n}"
    doc["entries"].append({**doc["entries"][0], "id": "mem_dup"})
    doc["entries"].append({**doc["entries"][0], "id": "mem_secret", "content": "password: x1"})
    await store.save("t", "u1", "r1", said("I live in Oslo", "b", 1, LATER, kind="fact",
                                            key="current_city"))  # fmt: skip
    result = await store.restore("t", "u1", from_document(doc, tenant="t", user="u1"))
    assert (result.imported, result.skipped) == (1, 3)
    assert sorted(await contents(store)) == ["I like tea", "I live in Oslo"]
