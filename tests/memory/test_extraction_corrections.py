"""Spoken corrections (SPEC MEM-2/MEM-4): a corrective statement stores the corrected value —
under the stable key when it is one, so it replaces the older value in the store — while true
negations, questions, hypotheticals and third parties still store nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memory.entries import MemoryDraft, MemorySource
from memory.extraction import Extracted, extract
from memory.session import SessionMemory
from memory.store import MemoryStore
from pipeline.events import wire

CORRECTED: list[tuple[str, list[tuple[str, str | None, str]]]] = [
    # English: leading discourse markers, a trailing contrastive "not X", "… but I actually …"
    ("Actually my birthday is June 5, not May 5.", [("fact", "birthday", "my birthday is June 5")]),
    ("I live in Munich now, not Berlin.", [("fact", "current_city", "I live in Munich now")]),
    ("No, my name is Anna, not Anne.", [("fact", "name", "my name is Anna")]),
    (
        "I said Berlin earlier, but I actually live in Munich.",
        [("fact", "current_city", "I live in Munich")],
    ),
    ("Sorry, I mean my name is Anna", [("fact", "name", "my name is Anna")]),
    ("Wait, I work at Siemens, not at BMW", [("fact", "employer", "I work at Siemens")]),
    ("I work as a nurse - not a doctor", [("fact", "job", "I work as a nurse")]),
    ("I'm from Lagos, not Accra", [("fact", "hometown", "I'm from Lagos")]),
    ("I live in Munich, no longer in Berlin", [("fact", "current_city", "I live in Munich")]),
    ("My name is not Anne, it's Anna", [("fact", "name", "My name is Anna")]),
    ("My birthday isn't May 5 but June 5", [("fact", "birthday", "My birthday is June 5")]),
    (
        "Actually, no, my favorite color is blue, not green",
        [("preference", "favorite:color", "my favorite color is blue")],
    ),
    ("My wife's name is Anna, not Anne", [("relation", "relation:wife", "My wife's name is Anna")]),
    ("I prefer tea, not coffee", [("preference", None, "I prefer tea")]),
    ("I'm a vegetarian, not a vegan", [("fact", None, "I'm a vegetarian")]),
    ("Correction: I prefer tea, not coffee", [("correction", None, "I prefer tea")]),
    (
        "Remember that my birthday is June 5, not May 5",
        [("fact", "birthday", "my birthday is June 5")],
    ),
    (
        "My name is Anna, not Anne, and I live in Munich now, not Berlin",
        [("fact", "name", "My name is Anna"), ("fact", "current_city", "I live in Munich now")],
    ),
    (
        "He said I live in Berlin, but I live in Munich",
        [("fact", "current_city", "I live in Munich")],
    ),
    # Chinese: 不对/不是/我说错了/其实, a trailing 不是X/不在X/不叫X, 不是A，(而)是B
    ("不对,我住在上海,不是北京", [("fact", "current_city", "我住在上海")]),
    ("不对，我的生日是6月5日，不是5月5日", [("fact", "birthday", "我的生日是6月5日")]),
    ("我住在上海不是北京", [("fact", "current_city", "我住在上海")]),
    ("不是，我叫安娜", [("fact", "name", "我叫安娜")]),
    ("我说错了，我叫安娜，不叫安妮", [("fact", "name", "我叫安娜")]),
    ("我不叫安妮，我叫安娜", [("fact", "name", "我叫安娜")]),
    ("我其实住在上海", [("fact", "current_city", "我住在上海")]),
    ("我之前说北京，其实我住在上海", [("fact", "current_city", "我住在上海")]),
    ("我在腾讯工作，不在阿里了", [("fact", "employer", "我在腾讯工作")]),
    ("我的母语是粤语，而不是普通话", [("fact", "native_language", "我的母语是粤语")]),
    ("我的生日不是5月5日，是6月5日", [("fact", "birthday", "我的生日是6月5日")]),
    ("我最喜欢的颜色不是红色而是蓝色", [("preference", "favorite:颜色", "我最喜欢的颜色是蓝色")]),
    ("我喜欢的不是咖啡，是茶", [("preference", None, "我喜欢的是茶")]),
    ("纠正一下，我住在深圳，不是广州", [("fact", "current_city", "我住在深圳")]),
]

STILL_NOT_REMEMBERED = [
    # true negations: no corrected value
    "I don't live in Berlin",
    "my name is not Anne",
    "No, my name is not Anne",
    "My birthday isn't May 5",
    "我不住在北京",
    "我的名字不叫安妮",
    "我的名字不是安妮",
    "不对，我喜欢的不是咖啡",
    # "not" qualifies instead of contrasting
    "I like tea, not only green tea",
    "I don't like coffee, not at all",
    "I live in Munich, not far from Berlin",
    "我喜欢他不是因为钱",
    "我住在上海，不是很方便",
    "不是我喜欢咖啡",
    # questions
    "No, my name is Anna, not Anne?",
    "Do I live in Munich, not Berlin?",
    "我住在上海吗，不是北京",
    "不对，我是住在上海，不是北京吗？",
    # hypotheticals
    "If I lived in Munich, not Berlin, I would cycle",
    "Maybe I live in Munich now, not Berlin",
    "如果我住在上海，不是北京就好了",
    # third parties and reported speech
    "Actually, my friend's name is Anna, not Anne",
    "他住在上海，不是北京",
    "不对，我朋友住在上海，不是北京",
    "My friend said I live in Munich, not Berlin",
    "I said Berlin earlier",
]


@pytest.mark.parametrize(("text", "expected"), CORRECTED)
def test_corrections_store_the_corrected_value(
    text: str, expected: list[tuple[str, str | None, str]]
) -> None:
    assert extract(text) == [Extracted(kind, content, key) for kind, key, content in expected]


@pytest.mark.parametrize("text", STILL_NOT_REMEMBERED)
def test_negations_questions_and_others_still_store_nothing(text: str) -> None:
    assert extract(text) == []


T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


async def _enabled() -> bool:
    return True


@pytest.mark.parametrize(
    ("earlier", "correction", "negation", "key", "corrected"),
    [
        ("I live in Berlin.", "I said Berlin earlier, but I actually live in Munich.",
         "I don't live in Berlin", "current_city", "I live in Munich"),
        ("My birthday is May 5", "Actually my birthday is June 5, not May 5.",
         "My birthday isn't May 5", "birthday", "my birthday is June 5"),
        ("我住在北京", "不对,我住在上海,不是北京", "我不住在北京", "current_city", "我住在上海"),
    ],
)  # fmt: skip
async def test_a_spoken_correction_replaces_the_earlier_keyed_fact(
    store: MemoryStore, earlier: str, correction: str, negation: str, key: str, corrected: str
) -> None:
    reports: list[dict[str, Any]] = []
    memory = SessionMemory(
        store, tenant="t", user="u1", role_id="r1", language=None, is_enabled=_enabled,
        report=lambda e: reports.append(wire(e, extensions=True)),
    )  # fmt: skip
    await memory.on_user_final(earlier, thread_id="th_a", seq=1, at=T0)
    await memory.on_user_final(correction, thread_id="th_b", seq=3, at=T0 + timedelta(days=2))
    # A later true negation of the old value stores nothing and changes nothing.
    await memory.on_user_final(negation, thread_id="th_b", seq=5, at=T0 + timedelta(days=3))
    [entry] = await store.list_entries("t", "u1", "r1")
    assert (entry.kind, entry.key, entry.content, entry.revision) == ("fact", key, corrected, 2)
    assert (entry.source_thread_id, entry.source_seq) == ("th_b", 3)
    assert [r["entries"][0]["action"] for r in reports] == ["created", "updated"]
    assert [c.action for c in await store.changes("t", "u1", "r1")].count("updated") == 1


def test_a_relatives_corrected_city_is_kept_as_theirs() -> None:
    # A relative's home is remembered as said, as a relation: never the person's own city.
    assert extract("My sister lives in Munich, not Berlin") == [
        Extracted("relation", "My sister lives in Munich")
    ]


async def test_a_session_remembers_whom_he_means_from_the_message_before(
    store: MemoryStore,
) -> None:
    memory = SessionMemory(
        store, tenant="t", user="u1", role_id="r1", language=None, is_enabled=_enabled
    )
    for seq, said in enumerate(["We've got a beagle called Max.", "He's three.", "Thanks!",
                                "He is a good boy."], 1):  # fmt: skip
        await memory.on_user_final(said, thread_id="th_a", seq=seq, at=T0)
    contents = {entry.content for entry in await store.list_entries("t", "u1", "r1")}
    # "Thanks!" named nobody: "he" after it means no one remembered.
    assert contents == {"We've got a beagle called Max", "My beagle Max is three"}


async def test_a_bare_name_put_right_replaces_the_relatives_name(store: MemoryStore) -> None:
    # The second dev set: "Sorry, I meant Ellie, not Ella." after the daughter's name kept Ella.
    memory = SessionMemory(
        store, tenant="t", user="u1", role_id="r1", language=None, is_enabled=_enabled
    )
    for seq, said in enumerate(
        ["My daughter's name is Ella.", "Sorry, I meant Ellie, not Ella."], 1
    ):
        await memory.on_user_final(said, thread_id="th_a", seq=seq, at=T0)
    contents = {entry.content for entry in await store.list_entries("t", "u1", "r1")}
    assert contents == {"My daughter's name is Ellie"}


def test_a_bare_name_put_right_needs_the_old_name_to_be_the_subjects() -> None:
    from memory.extraction import next_subject

    cat = next_subject("我家的猫叫团团。", None)
    assert extract("不对，是圆圆，不是团团。", cat) == [
        Extracted("relation", "我家的猫叫圆圆", "relation:猫")
    ]
    assert extract("Ellie, not Ella.", None) == []
    daughter = next_subject("My daughter's name is Ella.", None)
    assert extract("I meant Rome, not Paris.", daughter) == []


def test_a_trailing_aside_leaves_the_introduction() -> None:
    assert extract("I'm Priya, by the way.") == [Extracted("fact", "My name is Priya", "name")]
    assert extract("I live in Leeds, btw.") == [
        Extracted("fact", "I live in Leeds", "current_city")
    ]


@pytest.mark.parametrize(
    ("said", "corrected"),
    [
        (["My birthday is on the 3rd of May.", "Sorry, I got that wrong, it's the 13th of May."],
         "My birthday is the 13th of May"),
        (["I live in Leeds.", "Oops, I meant Bristol."], "I live in Bristol"),
        (["我住在杭州。", "说错了，应该是苏州。"], "我住在苏州"),
    ],
)  # fmt: skip
async def test_a_bare_value_put_right_replaces_the_attribute_just_stated(
    store: MemoryStore, said: list[str], corrected: str
) -> None:
    # The new memory dev set: the correction gave only the date, and the 3rd of May stayed.
    memory = SessionMemory(
        store, tenant="t", user="u1", role_id="r1", language=None, is_enabled=_enabled
    )
    for seq, text in enumerate(said, 1):
        await memory.on_user_final(text, thread_id="th_a", seq=seq, at=T0)
    assert [entry.content for entry in await store.list_entries("t", "u1", "r1")] == [corrected]


async def test_a_bare_value_corrects_only_the_message_right_before(store: MemoryStore) -> None:
    memory = SessionMemory(
        store, tenant="t", user="u1", role_id="r1", language=None, is_enabled=_enabled
    )
    for seq, text in enumerate(
        ["My birthday is on the 3rd of May.", "What time is breakfast?",
         "Sorry, I got that wrong, it's the 13th of May.", "It's a lovely day."], 1,
    ):  # fmt: skip
        await memory.on_user_final(text, thread_id="th_a", seq=seq, at=T0)
    contents = [entry.content for entry in await store.list_entries("t", "u1", "r1")]
    assert contents == ["My birthday is on the 3rd of May"]


async def test_a_correction_deletes_the_unkeyed_entry_that_said_the_old_value(
    store: MemoryStore,
) -> None:
    # What no key holds ("我们一共五个人", kept as said) is not said back beside the correction.
    memory = SessionMemory(
        store, tenant="t", user="u1", role_id="r1", language="zh", is_enabled=_enabled
    )
    kept = [Extracted("fact", "我们一共五个人"), Extracted("fact", "我从五个城市来")]
    for seq, item in enumerate(kept, 1):
        draft = MemoryDraft(item.kind, item.content, None, "extraction",
                            MemorySource("th_a", seq, T0))  # fmt: skip
        await store.save("t", "u1", "r1", draft)

    await memory.on_user_final("我记错了，其实是七个人，不是五个。", thread_id="th_b", seq=1,
                               at=T0 + timedelta(days=1))  # fmt: skip

    # The entry that only mentions the old value, sharing nothing else with it, stays.
    contents = {entry.content for entry in await store.list_entries("t", "u1", "r1")}
    assert "我们一共五个人" not in contents and "我从五个城市来" in contents
