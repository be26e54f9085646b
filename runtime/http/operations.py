"""What an operator's tools ask a process: metrics, liveness, readiness (SPEC OPS-2, OPS-3).

Rules
-----
1. ``GET /metrics`` (policy ``metrics``): the process's registry in the Prometheus text format
   (``runtime/metrics.py``). ``GET /metrics.json`` (``metrics``): the small JSON summary —
   sessions and the event-loop lag window (``?reset=1`` starts a new window).
2. ``GET /healthz/live`` (anonymous): 200 whenever the process and its event loop answer —
   nothing else is checked, so a slow database never gets a process restarted.
3. ``GET /healthz/ready`` (anonymous): 200 when the process should get new sessions — the
   database answers ``SELECT 1`` within ``readiness_timeout_s`` (or none is used), the plugins
   are warmed, and the process is not draining (``Services.start_draining``); else 503
   ``not_ready`` with every check's state, so a load balancer or Kubernetes sends new
   connections elsewhere. Sessions already here are not affected.
4. Probe answers carry states and counts only; never a URL, a credential or an error text.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from runtime.http.api import ServicesDep
from runtime.http.policy import Policy, allow
from runtime.metrics import CONTENT_TYPE
from runtime.services import Services

router = APIRouter()


@router.get("/metrics", dependencies=[allow(Policy.METRICS)])
async def metrics(services: ServicesDep) -> Response:
    return Response(services.telemetry.metrics.render(), media_type=CONTENT_TYPE)


@router.get("/metrics.json", dependencies=[allow(Policy.METRICS)])
async def metrics_json(services: ServicesDep, reset: bool = False) -> dict[str, Any]:
    summary = services.loop_lag.summary()
    if reset:
        services.loop_lag.reset()
    return {"sessions": len(services.active_sessions), "loop_lag_ms": summary}


@router.get("/healthz/live", dependencies=[allow(Policy.ANONYMOUS)])
async def live() -> dict[str, str]:
    return {"status": "live"}


@router.get("/healthz/ready", dependencies=[allow(Policy.ANONYMOUS)])
async def ready(services: ServicesDep) -> JSONResponse:
    checks = await readiness_checks(services)
    if all(state in ("ok", "not_used") for state in checks.values()):
        return JSONResponse({"status": "ready", "checks": checks})
    return JSONResponse(
        {
            "code": "not_ready",
            "message": "this process is not taking new sessions",
            "checks": checks,
        },
        status_code=503,
    )


async def readiness_checks(services: Services) -> dict[str, str]:
    """Each readiness check's state (rule 3): ``ok``, ``not_used``, or why not."""
    return {
        "database": await _database_state(services),
        "plugins": "ok" if services.warmed else "warming",
        "draining": "draining" if services.draining else "ok",
    }


async def _database_state(services: Services) -> str:
    database = services.database
    if database is None:
        return "not_used"
    try:
        async with asyncio.timeout(services.settings.readiness_timeout_s):
            await database.pool.fetchval("SELECT 1")
    except TimeoutError:
        return "timeout"
    except Exception:  # any failure to answer is "unreachable"; the reason is not shown
        return "unreachable"
    return "ok"
