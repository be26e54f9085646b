"""Liveness and readiness (``runtime/http/operations.py``), on services with real PostgreSQL.

Both probes are anonymous (the policy table test covers that); readiness follows the database,
the plugins' warm-up and draining, and says which check failed without saying more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime.app import create_app
from runtime.config import Settings
from runtime.services import Services, open_services
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_metrics import parse, value

__all__ = ["pg_pool", "postgres_url"]


@pytest.fixture
async def services(pg_pool: Any, postgres_url: str, tmp_path: Path) -> AsyncIterator[Services]:
    settings = Settings(
        port=0, data_dir=tmp_path, database_url=postgres_url, knowledge_semantic=False
    )
    opened = await open_services(settings, plugins=fake_plugins())
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def http(services: Services) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(services))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        yield client


async def test_a_serving_process_is_live_and_ready(http: httpx.AsyncClient) -> None:
    live = await http.get("/healthz/live")
    assert live.status_code == 200 and live.json() == {"status": "live"}
    ready = await http.get("/healthz/ready")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "plugins": "ok", "draining": "ok"},
    }


async def test_a_draining_process_is_live_but_not_ready(
    services: Services, http: httpx.AsyncClient
) -> None:
    services.start_draining()
    ready = await http.get("/healthz/ready")
    assert ready.status_code == 503
    body = ready.json()
    assert body["code"] == "not_ready"
    assert body["checks"] == {"database": "ok", "plugins": "ok", "draining": "draining"}
    assert (await http.get("/healthz/live")).status_code == 200
    _, samples = parse(services.telemetry.metrics.render().decode())
    assert value(samples, "openrealtime_draining") == 1


async def test_plugins_still_warming_are_not_ready(
    services: Services, http: httpx.AsyncClient
) -> None:
    services.warmed = False
    ready = await http.get("/healthz/ready")
    assert ready.status_code == 503 and ready.json()["checks"]["plugins"] == "warming"


async def test_an_unreachable_database_is_not_ready_and_says_no_more(
    services: Services, http: httpx.AsyncClient
) -> None:
    assert services.database is not None
    await services.database.pool.close()
    ready = await http.get("/healthz/ready")
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == "unreachable"
    assert "postgresql" not in ready.text  # no URL, no error text (rule 4)
    assert (await http.get("/healthz/live")).status_code == 200


async def test_without_a_database_readiness_does_not_need_one(tmp_path: Path) -> None:
    settings = Settings(port=0, storage="memory", data_dir=tmp_path)
    services = await open_services(settings, plugins=fake_plugins())
    try:
        transport = httpx.ASGITransport(app=create_app(services))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            ready = await http.get("/healthz/ready")
        assert ready.status_code == 200
        assert ready.json()["checks"]["database"] == "not_used"
    finally:
        await services.close()
