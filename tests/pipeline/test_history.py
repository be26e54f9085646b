"""What the brain sees of the thread (``pipeline/history.py``): deleted and truncated realtime
items (SPEC OAI-1, OAI-3) as the model's history has them."""

from __future__ import annotations

from journal.amendments import item_deleted, item_truncated
from journal.checkpoints import InMemoryCheckpointStore
from journal.store import InMemoryJournalStore
from pipeline.history import ConversationHistory
from plugins.contracts import HistoryTurn
from tests.journal.builders import THREAD, answered, said, tool_call, tool_result


async def test_deleted_items_leave_the_history_and_truncations_cut_it() -> None:
    journal = InMemoryJournalStore()
    history = ConversationHistory(journal, InMemoryCheckpointStore())
    await journal.append(
        THREAD,
        [
            said("u1", "My card is 4111 1111 1111.", item_id="item_u1"),
            answered("a1", "Noted, I won't repeat it.", item_id="item_a1"),
            said("u2", "Where is my order?", item_id="item_u2"),
            tool_call("c1", "call-1", order="48213", item_id="item_c1"),
            tool_result("r1", "call-1", {"status": "shipped"}, item_id="item_r1"),
            answered("a2", "It has shipped and arrives Monday.", item_id="item_a2"),
            item_deleted("d1", "item_u1"),
            item_deleted("d2", "item_a1"),
            item_deleted("d3", "item_r1"),
            item_truncated("t1", "item_a2", "It has shipped"),
        ],
    )
    [current] = await journal.append(THREAD, [said("u3", "Thanks!", item_id="item_u3")])
    context = await history.context(
        THREAD,
        instructions="Be brief.",
        tools=[],
        current_input="Thanks!",
        language="en",
        before_seq=current.seq,
    )
    assert context.text == "User: Where is my order?\nAssistant: It has shipped …"
    assert context.history == (
        HistoryTurn("user", "Where is my order?"),
        HistoryTurn("assistant", "It has shipped", interrupted=True),
    )
