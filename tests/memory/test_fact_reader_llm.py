"""The fact reader with the real local model: a fact the patterns miss, in each language, is
read and written so the brain finds it by attribute."""

from __future__ import annotations

import pytest

from memory.extraction import extract
from memory.fact_reader import FactReader
from memory.memory_ledger import InMemoryMemoryLedger
from memory.pool_memory import PoolMemoryStore
from memory.pool_store import InMemoryPoolStore, PoolLocks
from plugins.brain.json_model import LocalJsonModel
from plugins.brain.local_model import LocalModel
from plugins.brain.memory_match import (
    attributes,
)
from tests.memory.test_fact_reader import AT, contents, session

pytestmark = pytest.mark.skipif(
    LocalModel.unavailable_reason() is not None,
    reason=f"local model not installed: {LocalModel.unavailable_reason()}",
)


@pytest.mark.parametrize(
    ("text", "value", "attribute"),
    [
        ("Peanuts make me really sick, I'm allergic.", "peanuts", "allergy"),
        ("豆豆是我们家的狗。", "豆豆", "pet"),
    ],
)
async def test_the_local_model_reads_a_fact_the_patterns_miss(
    local_model: LocalModel, text: str, value: str, attribute: str
) -> None:
    assert extract(text) == []
    store = PoolMemoryStore(InMemoryPoolStore(locks=PoolLocks()), InMemoryMemoryLedger())
    reader = FactReader(LocalJsonModel(local_model), store)

    try:
        await session(store, reader).on_user_final(text, thread_id="th", seq=1, at=AT)
        await reader.drained()
    finally:
        await reader.close()

    (entry,) = await contents(store)
    assert value in entry.lower()
    assert attribute in attributes(entry)
