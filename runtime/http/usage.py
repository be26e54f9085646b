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
from pydantic import BaseModel, ConfigDict, Field

from runtime.budget import spend_of
from runtime.http.api import Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden
from runtime.usage import Budget, Counts

router = APIRouter(prefix="/api/usage", tags=["usage"])


class BudgetIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    daily_micro_usd: int | None = Field(ge=0)
    monthly_micro_usd: int | None = Field(ge=0)


async def _budget_json(who: Caller, services: ServicesDep) -> dict[str, Any]:
    budget = await services.usage.budget(who.tenant) or Budget()
    prices = services.prices
    spend = await spend_of(services.usage, prices, who.tenant)
    return {
        **budget.to_json(),
        "today_micro_usd": spend.today_micro_usd,
        "month_micro_usd": spend.month_micro_usd,
        "spent": spend.over(budget),
        "paid_brain": prices.paid["brain"],
        "paid": prices.paid,
        "fallback": services.settings.budget_fallback,
    }


@router.get("/budget", dependencies=[allow(Policy.ADMIN)])
async def get_budget(who: Caller, services: ServicesDep) -> dict[str, Any]:
    """The tenant's budget and what it spent today and this month (``runtime.budget``)."""
    return await _budget_json(who, services)


@router.put("/budget", dependencies=[allow(Policy.ADMIN)])
async def put_budget(body: BudgetIn, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """Set the tenant's daily and monthly budget in micro-USD (null: no limit)."""
    budget = Budget(body.daily_micro_usd, body.monthly_micro_usd)
    await services.usage.set_budget(who.tenant, budget, datetime.now(UTC))
    if services.budget_guard is not None:
        services.budget_guard.forget(who.tenant)
    return await _budget_json(who, services)


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
    prices = services.prices
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
