"""The offline embedder: query vectors are cached, and the engine's OpenMP settings apply to
the engine only (one thread, passive waiting — no spinning threads next to the event loop)."""

from __future__ import annotations

import os

import numpy as np

from plugins.embedding import ENGINE_ENV, E5Embedder, _engine_environment


async def test_a_repeated_query_is_not_embedded_again(embedder: E5Embedder) -> None:
    embedder.forget_queries()
    first = await embedder.query("星河商店的退货期限是多少?")
    again = await embedder.query("星河商店的退货期限是多少?")
    assert again is first and not first.flags.writeable
    embedder.forget_queries()
    fresh = await embedder.query("星河商店的退货期限是多少?")
    assert fresh is not first and np.allclose(fresh, first, atol=1e-5)


def test_the_engine_environment_is_set_only_while_the_engine_loads() -> None:
    before = {name: os.environ.get(name) for name in ENGINE_ENV}
    with _engine_environment():
        assert all(os.environ[name] == value for name, value in ENGINE_ENV.items())
    assert {name: os.environ.get(name) for name in ENGINE_ENV} == before
