"""The real offline embedder as a test fixture (register it in a folder's ``conftest.py`` by
importing it from here): loaded once per test session."""

from __future__ import annotations

import pytest

from plugins.embedding import E5Embedder


@pytest.fixture(scope="session")
def embedder() -> E5Embedder:
    """The process's embedder (``E5Embedder.shared``): the model loads once per session."""
    shared = E5Embedder.shared()
    shared.load()
    return shared
