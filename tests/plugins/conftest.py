"""Plugin test fixtures: ``embedder`` — the real offline embedding model, loaded once per test
session (``tests/embedder.py``)."""

from __future__ import annotations

from tests.embedder import embedder

__all__ = ["embedder"]
