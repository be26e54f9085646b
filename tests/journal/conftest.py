"""Journal test fixtures: PostgreSQL from ``tests/postgres.py``."""

from __future__ import annotations

from tests.postgres import pg_pool, postgres_url

__all__ = ["pg_pool", "postgres_url"]
