"""The real local model, loaded once for the test session: a few focused tests (SPEC BRAIN-1).

Everything else about the brain runs on fakes (``test_llm_brain.py``, ``test_local_model.py``).
Skipped, with the reason, when the model's packages are not installed (``make`` installs them).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Iterator

import pytest

from journal.projection import turn_line
from pipeline.content import TurnContent
from plugins.brain.grounding import NOT_IN_DOCUMENTS
from plugins.brain.llm import LLMBrain
from plugins.brain.local_model import Generation, LocalModel, LocalModelSettings
from plugins.brain.tool_loop import run_brain_with_tools
from plugins.contracts import HistoryTurn, ToolSpec
from plugins.errors import PluginTimeout

pytestmark = pytest.mark.skipif(
    LocalModel.unavailable_reason() is not None,
    reason=f"local model not installed: {LocalModel.unavailable_reason()}",
)

SHOP = (
    "[source: 星河商店售后说明 v1]\n<untrusted_knowledge>星河商店的退货期限为签收后 7 天。"
    "退货条件:商品未使用、包装完整,并提供订单号。客服服务时间为工作日 09:00—18:00。"
    "退货运费规则:商品质量问题由商店承担,其他情况由买家承担。</untrusted_knowledge>"
)
KNOWLEDGE = ToolSpec(
    "knowledge_search", "Search the documents.", {"type": "object", "properties": {}}
)
MEMORY = (
    "以下是过去对话中记住的内容。\n<memory_data>\n- 我喜欢简洁回答\n- 我的目标是学会日语\n"
    "</memory_data>"
)


def tcp_listeners_of_this_process() -> set[str]:
    """Inodes of the TCP sockets this process listens on (Linux /proc)."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    listening.add(fields[9])
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                mine.add(target[8:-1])
    return listening & mine


LISTENERS: dict[str, set[str]] = {}


@pytest.fixture(scope="module")
def model() -> Iterator[LocalModel]:
    local = LocalModel(LocalModelSettings(start_deadline_s=30.0))
    LISTENERS["before"] = tcp_listeners_of_this_process()
    asyncio.run(local.warm_up())
    LISTENERS["after"] = tcp_listeners_of_this_process()
    yield local
    asyncio.run(local.aclose())


def test_the_model_opens_no_network_listener(model: LocalModel) -> None:
    # llama.cpp's server object must listen somewhere: on a Unix socket in a private directory.
    assert LISTENERS["after"] == LISTENERS["before"]
    backend = model._backend
    socket_dir = getattr(backend, "_socket_dir", None)
    assert socket_dir is not None
    assert stat.S_IMODE(os.stat(socket_dir).st_mode) == 0o700
    assert any(stat.S_ISSOCK(os.stat(p).st_mode) for p in socket_dir.iterdir())


async def search(arguments: dict[str, object]) -> str:
    # The documents have nothing about refunds: the retrieval returns no passage for them.
    return "No knowledge found." if "退款" in str(arguments.get("query")) else SHOP


async def turn(
    brain: LLMBrain, text: str, history: list[HistoryTurn], memory: str | None = None
) -> str:
    content = TurnContent(
        "你是商店助手,请依据资料回答。",
        "\n".join(turn_line(past, "zh") for past in history),
        text,
        language="zh",
        memory_data=memory,
        tools=(KNOWLEDGE,),
        history=tuple(history),
    )
    request = content.to_brain_input(session="walk-through")
    deltas = run_brain_with_tools(brain, request, {"knowledge_search": search})
    answer = "".join([d.text async for d in deltas])
    history += [HistoryTurn("user", text), HistoryTurn("assistant", answer)]
    return answer


async def test_the_product_guides_after_sales_walk_through(model: LocalModel) -> None:
    brain = LLMBrain(model)
    history: list[HistoryTurn] = []
    assert "7" in await turn(brain, "请查知识库,星河商店的退货期限是多少?", history)
    acknowledged = await turn(brain, "我是因为商品质量问题退货。", history)
    assert acknowledged.startswith("好的")
    assert "商店" in await turn(brain, "那运费谁承担?", history)
    assert await turn(brain, "退款多久到账?", history) == NOT_IN_DOCUMENTS["zh"]
    # A new session: memory, not history, holds the goal.
    assert "日语" in await turn(brain, "我之前说过的学习目标是什么?", [], MEMORY)


async def test_closing_the_stream_stops_generation_and_frees_the_model(
    model: LocalModel,
) -> None:
    long_answer = {
        "messages": [{"role": "user", "content": "Count from 1 to 300, separated by commas."}],
        "max_tokens": 400,
        "temperature": 0,
    }
    stopped_before = model.stats.stopped_early
    generation = Generation(lane="interrupted")
    pieces = model.chat(long_answer, lane="interrupted", generation=generation)
    received = [await anext(pieces) for _ in range(3)]
    assert received
    await pieces.aclose()  # what an interruption does to the brain's stream
    quick = {"messages": [{"role": "user", "content": "Say OK."}], "max_tokens": 2}
    answer = "".join([p async for p in model.chat(quick, lane="next")])
    assert answer  # the model was freed for the next request
    # llama.cpp was told to stop at the next token: it never finished its 400 tokens (a
    # finished request reports its timings with its last chunk).
    assert generation.stopped and generation.timings is None
    assert model.stats.stopped_early == stopped_before + 1


async def test_two_sessions_are_served_in_turn_and_late_requests_expire(
    model: LocalModel,
) -> None:
    prompt = {
        "messages": [{"role": "user", "content": "Write the word yes."}],
        "max_tokens": 3,
        "temperature": 0,
    }
    order: list[str] = []

    async def ask(lane: str, tag: str) -> None:
        async for _ in model.chat(prompt, lane=lane):
            pass
        order.append(tag)

    blocker = model.chat(
        {"messages": [{"role": "user", "content": "Count to 50."}], "max_tokens": 60},
        lane="busy",
    )
    await anext(blocker)  # the model is now busy with the blocker
    tasks = [
        asyncio.create_task(ask("a", "a1")),
        asyncio.create_task(ask("a", "a2")),
        asyncio.create_task(ask("b", "b1")),
    ]
    while len(model._queue) < 3:  # noqa: ASYNC110 (polls a thread-safe queue of another thread)
        await asyncio.sleep(0.01)
    async for _ in blocker:
        pass
    await asyncio.gather(*tasks)
    assert order == ["a1", "b1", "a2"]  # round robin: b does not wait behind all of a's
    assert max(model.stats.queue_waits_ms) > 0

    # A request whose start deadline passes while the model is busy fails, retryable.
    blocker = model.chat(
        {"messages": [{"role": "user", "content": "Count to 50."}], "max_tokens": 60},
        lane="busy",
    )
    await anext(blocker)
    with pytest.raises(PluginTimeout):
        async for _ in model.chat(prompt, lane="late", start_deadline_s=0.01):
            pass
    await blocker.aclose()
