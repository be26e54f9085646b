"""HTTP API for usage and cost (SPEC OPS-6): ``GET /api/usage``.

Members see what their own conversations used; admins may ask for their tenant's
(``scope=tenant``). Rows are per day (UTC), role and user; each is priced with the running
stack's prices (``runtime.usage`` Rule 3) in micro-USD. Text tokens are estimated (the brains do
not report theirs); audio is in milliseconds, ASR in milliseconds of speech transcribed, TTS in
characters spoken.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from fastapi import APIRouter, Query

from runtime.http.api import Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden
from runtime.usage import Counts, prices_for, stack_of

router = APIRouter(prefix="/api/usage", tags=["usage"])


@router.get("", dependencies=[allow(Policy.MEMBER)])
async def get_usage(
    who: Caller,
    services: ServicesDep,
    scope: Literal["mine", "tenant"] = "mine",
    days: int = Query(default=30, ge=1, le=366),
) -> dict[str, Any]:
    if scope == "tenant" and not who.can("admin"):
        raise forbidden("only the tenant's admins and owners may see everyone's usage")
    until = datetime.now(UTC).date()
    since = until - timedelta(days=days - 1)
    user = None if scope == "tenant" else who.user
    rows = await services.usage.rows(who.tenant, user, since, until)
    prices = prices_for(services.settings.prices, stack_of(services.settings))
    total = Counts()
    out = []
    for row in rows:
        total.add(row.counts)
        out.append({
            "day": row.key.day.isoformat(), "role_id": row.key.role_id, "user_id": row.key.user,
            **row.counts.to_json(), "cost_micro_usd": prices.cost_micro_usd(row.counts),
        })  # fmt: skip
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "scope": scope,
        "rows": out,
        "totals": {**total.to_json(), "cost_micro_usd": sum(r["cost_micro_usd"] for r in out)},
        "prices": prices.to_json(),
        "tokens_estimated": True,
    }
