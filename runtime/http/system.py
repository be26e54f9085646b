"""``GET /api/system``: what this process runs and how its turns are doing (issue 21, RT-10).

Rules
-----
1. Policy ``member``: any signed-in member of the tenant may see it (the system page). The
   answer is the same for every caller: nothing in it belongs to a tenant or a user.
2. Facts, not secrets: the running plugins from ``runtime/model_facts.py`` (a remote endpoint
   by host only, never a key), the database's kind (``embedded``, ``external`` with its host,
   or ``memory``) — never its URL, user or password — the package version, uptime, and counts
   of live sessions and connections.
3. Latency: the process's rolling window (``runtime/latency_window.py``): per minute and stage,
   p50/p95 in ms for the last ``window_minutes`` minutes, kept in memory per process.
4. No conversation content: no transcript, role name, thread or session id is part of it.
"""

from __future__ import annotations

import importlib.metadata
import time
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter

from runtime.http.api import ServicesDep
from runtime.http.policy import Policy, allow
from runtime.latency_window import WINDOW_STAGES
from runtime.model_facts import endpoint_host, running_models
from runtime.services import Services

router = APIRouter()

PACKAGE = "openrealtime"


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat()


def database_facts(services: Services) -> dict[str, Any]:
    """The database's kind, and an external server's host (rule 2)."""
    database = services.database
    if database is None:
        return {"kind": "memory", "host": None}
    if database.embedded is not None:
        return {"kind": "embedded", "host": None}
    host = endpoint_host(database.url)
    return {"kind": "external", "host": "a unix socket" if host == "?" else host}


@router.get("/api/system", dependencies=[allow(Policy.MEMBER)])
async def system(services: ServicesDep) -> dict[str, Any]:
    now = time.time()
    telemetry = services.telemetry
    window = telemetry.latency_window
    settings = services.settings
    state = services.operating_state()
    return {
        "version": package_version(),
        "started_at": _iso(telemetry.started_at),
        "uptime_s": round(max(0.0, now - telemetry.started_at), 1),
        "live_sessions": state.live_sessions,
        "waiting_for_resume": state.waiting_for_resume,
        "connections": state.connections,
        "draining": state.draining,
        "database": database_facts(services),
        "models": [
            {
                "stage": running.facts.stage,
                "plugin": running.plugin,
                "engine": running.facts.engine,
                "model": running.facts.model,
                "size_bytes": running.facts.size_bytes,
                "licence": running.facts.licence,
                "provenance": running.facts.provenance,
                "runs": "remote" if running.facts.remote else "offline",
                "endpoint_host": running.endpoint_host,
            }
            for running in running_models(services.plugins, settings)
        ],
        "turn_detection": {
            "silence_ms": settings.silence_ms,
            "eagerness": settings.eagerness,
            "preemptive": settings.preemptive,
        },
        "latency": {
            "scope": "this process, in memory",
            "window_minutes": window.minutes,
            "max_samples_per_minute": window.max_samples,
            "stages": list(WINDOW_STAGES),
            "minutes": [
                {
                    "start": _iso(minute.start),
                    "stages": {
                        name: {"count": s.count, "p50_ms": s.p50_ms, "p95_ms": s.p95_ms}
                        for name, s in minute.stages.items()
                    },
                    "failures": dict(minute.failures),
                }
                for minute in window.summary(now)
            ],
        },
    }
