"""HTTP API for phone calls (SPEC TEL-5): ``/api/calls``, what the history page lists.

A call belongs to the user phone calls run as (the line's owner, ``telephony_token``). Members
see their own calls; admins may ask for their tenant's (``scope=tenant``). Another user's call
answers 404 exactly like an unknown one. A call's transcript is its thread's journal: what the
caller said and what the agent said (heard prefix, when interrupted).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query

from journal.events import EventKind, ThreadRef
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden

router = APIRouter(prefix="/api/calls", tags=["telephony"])


@router.get("", dependencies=[allow(Policy.MEMBER)])
async def list_calls(
    who: Caller,
    services: ServicesDep,
    scope: Literal["mine", "tenant"] = "mine",
    limit: int = Query(default=100, ge=1, le=200),
) -> dict[str, Any]:
    if scope == "tenant" and not who.can("admin"):
        raise forbidden("only the tenant's admins and owners may list every call")
    user = None if scope == "tenant" else who.user
    records = await services.call_records.list(who.tenant, user, limit)
    return {"calls": [r.to_json() for r in records]}


@router.get("/{call_id}", dependencies=[allow(Policy.MEMBER)])
async def get_call(call_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """``call_id``: the record's ``id`` (``call_…``)."""
    record = await services.call_records.get(who.tenant, call_id)
    if record is None or (record.user != who.user and not who.can("admin")):
        raise ApiError(404, "call_not_found", "no such call")
    view = record.to_json()
    messages: list[dict[str, Any]] = []
    if record.thread_id is not None:
        ref = ThreadRef(record.tenant, record.user, record.thread_id)
        for event in await services.journal.read(ref):
            payload = event.payload
            if event.kind == EventKind.USER_INPUT:
                messages.append({"role": "user", "text": payload.get("text", "")})
            elif event.kind == EventKind.ASSISTANT_OUTPUT:
                interrupted = bool(payload.get("interrupted"))
                text = payload.get("heard_text", "") if interrupted else payload.get("text", "")
                messages.append({"role": "assistant", "text": text, "interrupted": interrupted})
    view["messages"] = messages
    return view
