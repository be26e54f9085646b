"""HTTP API of thread memory (SPEC TM-5): one view and one command route per thread.

- ``GET  /api/threads/{thread_id}/memory`` → the view (``runtime/thread_memory.py`` rule 1)
- ``POST /api/threads/{thread_id}/memory {expected, revision, command}`` → the new view.
  ``expected`` is the thread's head and ``revision`` the memory's, as the caller last saw them;
  either stale → 409 ``thread_conflict`` with the current ``head`` and ``revision``. Commands:
  ``{"type": "remember", "key", "content", "kind"}`` (adds or replaces, makes it active — the
  only way back for a retracted fact), ``{"type": "forget", "key"}`` (no active fact under it
  → 409 ``unknown_fact``), ``{"type": "configure", "use"?, "generate"?}`` (true/false set, null
  clears back to the tenant default, a missing field leaves it; the head does not move),
  ``{"type": "refresh"}`` (consolidate now with the thread's model; 402 ``budget_spent`` when
  the model is paid and the tenant spent its budget; 503
  ``memory_model_unavailable`` on a server whose brain has none).

- ``GET  /api/thread-memory/defaults`` (members) / ``PUT`` (admins) ``{use, generate}``: the
  tenant's defaults, both on unless an admin turns one off; a thread's overrides win.

Only the thread's owner reads or changes it: another user's thread, like an unknown one, is 404
``thread_not_found``. A secret or a password in content is 422 ``sensitive_content``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from journal.events import ThreadRef
from memory.errors import MemoryStoreError, UnknownFact
from memory.thread_memory import FACT_KINDS, MAX_FACT_CHARS, MAX_KEY_CHARS, UNSET, Settings
from runtime.accounts import Principal
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow
from runtime.services import Services
from runtime.thread_memory import Command, NoMemoryModel, ThreadConflict

router = APIRouter(prefix="/api/threads", tags=["threads"])

FactKindIn = Literal["fact", "decision", "preference", "procedure", "hypothesis"]
assert set(FactKindIn.__args__) == set(FACT_KINDS)  # type: ignore[attr-defined]


class Remember(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["remember"]
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS * 2)
    content: str = Field(min_length=1, max_length=MAX_FACT_CHARS)
    kind: FactKindIn = "fact"


class Forget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["forget"]
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS * 2)


class Configure(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["configure"]
    use: bool | None = None
    generate: bool | None = None


class Refresh(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["refresh"]


class CommandIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected: str | None = Field(max_length=200)
    """The thread's head as the caller last saw it (null: an empty thread)."""
    revision: int = Field(ge=0)
    command: Annotated[Remember | Forget | Configure | Refresh, Field(discriminator="type")]


async def _thread(services: Services, who: Principal, thread_id: str) -> ThreadRef:
    thread = await services.threads.get(who.tenant, who.user, thread_id)
    if thread is None:
        raise ApiError(404, "thread_not_found", f"no thread {thread_id}")
    return ThreadRef(who.tenant, who.user, thread_id)


@router.get("/{thread_id}/memory", dependencies=[allow(Policy.MEMBER)])
async def thread_memory(thread_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    thread = await _thread(services, who, thread_id)
    return await services.thread_memory_service.view(thread)


@router.post("/{thread_id}/memory", response_model=None, dependencies=[allow(Policy.MEMBER)])
async def thread_memory_command(
    thread_id: str, body: CommandIn, who: Caller, services: ServicesDep
) -> dict[str, Any] | JSONResponse:
    thread = await _thread(services, who, thread_id)
    given = body.command
    fields = given.model_fields_set
    if isinstance(given, Configure):
        command = Command(
            "configure",
            use=given.use if "use" in fields else UNSET,
            generate=given.generate if "generate" in fields else UNSET,
        )
    elif isinstance(given, Remember):
        command = Command("remember", key=given.key, content=given.content, kind=given.kind)
    elif isinstance(given, Forget):
        command = Command("forget", key=given.key)
    else:
        command = Command("refresh")
        guard = services.budget_guard  # runtime.budget Rule 5: not with a spent paid brain
        if guard is not None and services.prices.paid["brain"] and await guard.spent(who.tenant):
            raise ApiError(
                402, "budget_spent", "this tenant has spent its budget: the paid model is not used"
            )
    try:
        return await services.thread_memory_service.run_command(
            thread, expected=body.expected, revision=body.revision, command=command
        )
    except ThreadConflict as conflict:
        return JSONResponse(
            {
                "code": "thread_conflict",
                "message": "the thread changed since you looked; reload and try again",
                "head": conflict.head,
                "revision": conflict.revision,
            },
            status_code=409,
        )
    except UnknownFact as e:
        raise ApiError(409, e.code, str(e)) from None
    except NoMemoryModel:
        raise ApiError(
            503, "memory_model_unavailable", "this server's brain has no model to learn with"
        ) from None
    except MemoryStoreError as e:
        status = {"memory_unavailable": 503, "thread_memory_full": 409}.get(e.code, 422)
        raise ApiError(status, e.code, str(e)) from None


defaults_router = APIRouter(prefix="/api/thread-memory", tags=["threads"])


class DefaultsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    use: bool
    generate: bool


def _defaults_json(settings: Settings) -> dict[str, bool]:
    return {"use": settings.use, "generate": settings.generate}


@defaults_router.get("/defaults", dependencies=[allow(Policy.MEMBER)])
async def thread_memory_defaults(who: Caller, services: ServicesDep) -> dict[str, bool]:
    """The tenant's defaults of the two switches (both on unless an admin changed them)."""
    return _defaults_json(await services.thread_memory.get_defaults(who.tenant))


@defaults_router.put("/defaults", dependencies=[allow(Policy.ADMIN)])
async def set_thread_memory_defaults(
    body: DefaultsIn, who: Caller, services: ServicesDep
) -> dict[str, bool]:
    """Admins set the tenant's defaults; a thread's own overrides still win."""
    settings = Settings(use=body.use, generate=body.generate)
    await services.thread_memory.set_defaults(who.tenant, settings)
    return _defaults_json(settings)
