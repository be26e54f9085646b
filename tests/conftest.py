"""Session-wide test fixtures.

``no_leaked_tasks`` is autouse: a test that leaves asyncio tasks running on its loop fails.

``make test`` runs the suite on two pytest-xdist workers (``--dist loadgroup``). The modules that
run the real local language model or the full speech stack are one group (``MODEL_MODULES``):
one worker runs them one after another, so two of them never share the two cores, and the model
is loaded by that worker only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

MODEL_MODULES = frozenset(
    {
        "test_llm_real.py",
        "test_local_model.py",
        "test_model_server.py",
        "test_speech_e2e.py",
        "test_judge_llm.py",
        "test_role_learning_llm.py",
        "test_thread_consolidation_llm.py",
        "test_fact_reader_llm.py",
        "test_eval_cli.py",
        "test_function_tools_real.py",
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in MODEL_MODULES:
            item.add_marker(pytest.mark.xdist_group("models"))


@pytest.fixture(autouse=True)
async def no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    # Give tasks that are finishing (cancelled, closing sockets) a moment to end.
    for _ in range(50):
        leaked = [t for t in asyncio.all_tasks() - before if not t.done()]
        leaked = [t for t in leaked if t is not asyncio.current_task()]
        if not leaked:
            return
        await asyncio.sleep(0.01)
    names = ", ".join(sorted(t.get_name() + ":" + repr(t.get_coro()) for t in leaked))
    for task in leaked:
        task.cancel()
    pytest.fail(f"test leaked {len(leaked)} asyncio task(s): {names}")
