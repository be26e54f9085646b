"""HTTP API of roles (SPEC RT-7) and of the voices a role can speak with.

Routes (``docs/http_api.md#roles``):

- ``GET    /api/roles`` (members) → ``{"roles": [role]}``, the default role first.
- ``POST   /api/roles`` (admins) → 201 the new role, at revision 1.
- ``GET    /api/roles/{role_id}`` (members) → the role.
- ``PATCH  /api/roles/{role_id}`` (admins) ``{expected_revision?, name?, …}`` → the role after it.
- ``DELETE /api/roles/{role_id}?expected_revision=n`` (admins) → 204.
- ``GET    /api/roles/{role_id}/impact`` (admins) → what deleting the role would do.
- ``GET    /api/voices`` (members) → the voices the configured TTS offers.
- ``POST   /api/voices/sample`` (members) ``{voice?, language?, text?}`` → ``audio/wav``.

Rules
-----
1. Roles are the caller's tenant's (the bearer token's, never a body field); another tenant's
   role answers 404 ``role_not_found`` like an unknown one.
2. Revisions (``runtime/roles.py`` rules 1–3): a PATCH's body field ``expected_revision`` and a
   DELETE's query parameter of that name are checked by the store in the same step as the write;
   another revision is 409 ``stale_revision`` with ``current_revision`` and the ``role`` as it
   is now, and nothing changes. Left out, the write is unconditional (last writer wins): clients
   older than revisions keep working, at that risk.
3. Deleting a role: the default role cannot be deleted (409 ``role_is_default``). The role and
   its users' overrides go at once; its threads stay (their history remains readable) but can
   never be continued (``runtime/realtime/continuity.py``: ``role_not_found``); its memory pool —
   the role's shared entries and every user's long-term memories of it — and its role-memory
   records (settings, confessions, enrichments, model call log) are purged after it, and so are
   its tools: the declared HTTP tools, grants, rules and cached judgements. Knowledge
   documents stay; their bindings to the role are left behind and answer nothing (no role id
   is ever reused). ``/impact`` says this with the count of threads beforehand.
4. A voice sample speaks through the configured TTS plugin (``services.plugins.tts``), the one
   sessions use: at most ``MAX_SAMPLE_CHARS`` of text, ``MAX_SAMPLE_SECONDS`` of audio,
   ``SAMPLE_TIMEOUT_S`` of waiting, and ``MAX_CONCURRENT_SAMPLES`` per process (more: 429
   ``voice_sample_busy`` with ``Retry-After``); it is a write request, so it also counts against
   the caller's write limit (``runtime/http/policy.py`` rule 4). A TTS failure is 503 ``tts_failed``
   (``tts_timeout`` when too slow). Nothing here logs the text.
5. A role's own chat agent (``agent_url``, ``agent_secret``: ``runtime.role_agent``) is set by
   PATCH: the URL http(s), without credentials, its host on the tool allowlist
   (``OPENREALTIME_TOOL_HOSTS``; else 422 ``host_not_allowed``); the secret a name of the
   tenant's tool secrets that exists (else 422 ``invalid_role``) — its value is never part of
   the role. ``null`` clears either; the deployment's brain answers a role without an agent.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from memory.errors import MemoryStoreError
from memory.pool import tenant_tag
from pipeline.audio import PCM, resample
from plugins.asr.openai_asr import wav_bytes
from plugins.contracts import TTS
from plugins.errors import PluginError
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow
from runtime.realtime.session_config import GA_VOICES
from runtime.roles import Role, StaleRoleRevision, default_role
from runtime.services import Services
from tools.errors import ToolError
from tools.registry import SECRET_NAME, check_host

log = logging.getLogger(__name__)

router = APIRouter(tags=["roles"])

MAX_SAMPLE_CHARS = 200
"""Longest text a voice sample speaks."""
MAX_SAMPLE_SECONDS = 15.0
"""Longest voice sample; the rest of the speech is cut."""
SAMPLE_TIMEOUT_S = 20.0
"""Longest wait for a voice sample, queueing behind sessions included."""
MAX_CONCURRENT_SAMPLES = 1
"""Voice samples one process makes at once (the TTS serves live sessions first)."""

SAMPLE_TEXT = {
    "en": "Hello! This is how I sound in this role.",
    "zh": "你好!这是这个角色的声音。",
}

EMBEDDED_VOICES: dict[str, dict[str, str]] = {
    "auto": {"en": "Piper en_US-joe-medium", "zh": "eSpeak NG cmn"},
    "piper": {"en": "Piper en_US-joe-medium"},
    "espeak": {"en": "eSpeak NG en-us", "zh": "eSpeak NG cmn"},
}
"""The embedded engines' one voice per language (``plugins/tts``): they take no voice name."""

_LANGUAGE = r"^(en|zh)$"

MAX_FAILURE_MESSAGE_CHARS = 200
MAX_AGENT_URL_CHARS = 2_000
"""A failed turn's apology is one short sentence (SPEC RT-11)."""


class RoleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    instructions: str = Field(default="", max_length=20_000)
    voice: str | None = Field(default=None, max_length=100)
    language: str | None = Field(default=None, pattern=_LANGUAGE)
    memory_enabled: bool = True
    failure_message: str | None = Field(default=None, max_length=MAX_FAILURE_MESSAGE_CHARS)


class RolePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expected_revision: int | None = Field(default=None, ge=1)
    name: str | None = Field(default=None, min_length=1, max_length=100)
    instructions: str | None = Field(default=None, max_length=20_000)
    voice: str | None = Field(default=None, max_length=100)
    language: str | None = Field(default=None, pattern=_LANGUAGE)
    memory_enabled: bool | None = None
    failure_message: str | None = Field(default=None, max_length=MAX_FAILURE_MESSAGE_CHARS)
    recording_enabled: bool | None = None
    agent_url: str | None = Field(default=None, min_length=1, max_length=MAX_AGENT_URL_CHARS)
    agent_secret: str | None = Field(default=None, pattern=SECRET_NAME.pattern)


class VoiceSampleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    voice: str | None = Field(default=None, max_length=100)
    language: str | None = Field(default=None, pattern=_LANGUAGE)
    text: str | None = Field(default=None, min_length=1, max_length=MAX_SAMPLE_CHARS)


def role_json(role: Role) -> dict[str, Any]:
    return {
        "id": role.id,
        "name": role.name,
        "instructions": role.instructions,
        "voice": role.voice,
        "language": role.language,
        "memory_enabled": role.memory_enabled,
        "failure_message": role.failure_message,
        "recording_enabled": role.recording_enabled,
        "agent_url": role.agent_url,
        "agent_secret": role.agent_secret,
        "is_default": role.is_default,
        "revision": role.revision,
        "created_at": role.created_at.isoformat(),
        "updated_at": role.updated_at.isoformat(),
    }


class StaleRole(ApiError):
    """Rule 2: 409 ``stale_revision`` with ``current_revision`` and the current ``role``."""

    def __init__(self, current: Role) -> None:
        super().__init__(409, "stale_revision", "the role changed since it was read; reload it")
        assert isinstance(self.detail, dict)
        self.detail["current_revision"] = current.revision
        self.detail["role"] = role_json(current)


def _not_found(role_id: str) -> ApiError:
    return ApiError(404, "role_not_found", f"no role {role_id}")


@router.get("/api/roles", dependencies=[allow(Policy.MEMBER)])
async def list_roles(who: Caller, services: ServicesDep) -> dict[str, Any]:
    await default_role(services.roles, who.tenant)
    return {"roles": [role_json(r) for r in await services.roles.list(who.tenant)]}


@router.post("/api/roles", status_code=201, dependencies=[allow(Policy.ADMIN)])
async def create_role(body: RoleIn, who: Caller, services: ServicesDep) -> dict[str, Any]:
    return role_json(await services.roles.create(who.tenant, **body.model_dump()))


@router.get("/api/roles/{role_id}", dependencies=[allow(Policy.MEMBER)])
async def get_role(role_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    role = await services.roles.get(who.tenant, role_id)
    if role is None:
        raise _not_found(role_id)
    return role_json(role)


@router.patch("/api/roles/{role_id}", dependencies=[allow(Policy.ADMIN)])
async def update_role(
    role_id: str, body: RolePatch, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    changes = body.model_dump(exclude_unset=True)
    expected = changes.pop("expected_revision", None)
    if "name" in changes and changes["name"] is None:
        raise ApiError(422, "invalid_role", "name cannot be null")
    if "recording_enabled" in changes and changes["recording_enabled"] is None:
        raise ApiError(422, "invalid_role", "recording_enabled cannot be null")
    await _check_agent(changes, who.tenant, services)
    try:
        role = await services.roles.update(
            who.tenant, role_id, expected_revision=expected, **changes
        )
    except StaleRoleRevision as e:
        raise StaleRole(e.current) from e
    if role is None:
        raise _not_found(role_id)
    return role_json(role)


async def _check_agent(changes: dict[str, Any], tenant: str, services: Services) -> None:
    """Rule 5."""
    url, secret = changes.get("agent_url"), changes.get("agent_secret")
    try:
        if url is not None:
            check_host(url, services.settings.tool_host_set())
        known = secret is None or await services.tool_secrets.get(tenant, secret) is not None
    except ToolError as e:
        raise ApiError(503 if e.retryable else 422, e.code, e.message) from e
    if not known:
        raise ApiError(422, "invalid_role", f"the tenant has no tool secret named {secret!r}")


@router.get("/api/roles/{role_id}/impact", dependencies=[allow(Policy.ADMIN)])
async def role_deletion_impact(role_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """What deleting the role would do (rule 3), for the page's confirmation."""
    role = await services.roles.get(who.tenant, role_id)
    if role is None:
        raise _not_found(role_id)
    return {
        "role_id": role.id,
        "revision": role.revision,
        "deletable": not role.is_default,
        "threads": await services.threads.count_for_role(who.tenant, role.id),
        "threads_resumable_after": False,
        "memory_purged": True,
        "tools_removed": True,
        "documents_kept": True,
    }


@router.delete("/api/roles/{role_id}", status_code=204, dependencies=[allow(Policy.ADMIN)])
async def delete_role(
    role_id: str,
    who: Caller,
    services: ServicesDep,
    expected_revision: Annotated[int | None, Query(ge=1)] = None,
) -> None:
    role = await services.roles.get(who.tenant, role_id)
    if role is None:
        raise _not_found(role_id)
    if role.is_default:
        raise ApiError(409, "role_is_default", "the default role cannot be deleted")
    try:
        deleted = await services.roles.delete(
            who.tenant, role_id, expected_revision=expected_revision
        )
    except StaleRoleRevision as e:
        raise StaleRole(e.current) from e
    if not deleted:
        raise _not_found(role_id)
    # Rule 3: after the role is gone (a failed purge must not leave a role without its memory);
    # nothing can reach a deleted role's leftovers, so a failure here is logged, not answered.
    try:
        await services.pool.purge(who.tenant, role_id, tenant_tag(who.tenant))
        await services.role_records.forget_role(who.tenant, role_id)
    except MemoryStoreError as e:
        log.warning("role %s deleted; purging its memory failed (%s)", role_id, e.code)
    try:
        for store in (services.tool_catalog, services.grants, services.rules, services.judgements):
            await store.forget_role(who.tenant, role_id)
    except ToolError as e:
        log.warning("role %s deleted; removing its tools failed (%s)", role_id, e.code)


# ------------------------------------------------------------------ voices (rule 4)


@router.get("/api/voices", dependencies=[allow(Policy.MEMBER)])
async def voices(services: ServicesDep) -> dict[str, Any]:
    """The voices of the configured TTS. An OpenAI-compatible speech server takes a voice name
    (``voices``; ``default`` when a role names none); the embedded engines take none and speak
    one voice per language (``by_language``)."""
    engine = services.settings.tts
    if engine == "openai":
        return {
            "engine": engine,
            "voices": sorted(GA_VOICES),
            "default": services.settings.tts_voice,
            "by_language": {},
        }
    return {"engine": engine, "voices": [], "default": None, "by_language": EMBEDDED_VOICES[engine]}


def _sample_gate(request: Request) -> asyncio.Semaphore:
    state = request.app.state
    gate: asyncio.Semaphore | None = getattr(state, "voice_sample_gate", None)
    if gate is None:
        gate = state.voice_sample_gate = asyncio.Semaphore(MAX_CONCURRENT_SAMPLES)
    return gate


@router.post("/api/voices/sample", dependencies=[allow(Policy.MEMBER)])
async def voice_sample(body: VoiceSampleIn, request: Request, services: ServicesDep) -> Response:
    """A short WAV of ``text`` (else a greeting in ``language``) in ``voice`` (rule 4)."""
    gate = _sample_gate(request)
    if gate.locked():
        raise ApiError(
            429, "voice_sample_busy", "another voice sample is being made; retry in a moment",
            headers={"Retry-After": "1"},
        )  # fmt: skip
    text = body.text or SAMPLE_TEXT[body.language or "en"]
    async with gate:
        try:
            async with asyncio.timeout(SAMPLE_TIMEOUT_S):
                pcm, rate = await _speak(services.plugins.tts, text, body.voice, body.language)
        except TimeoutError as e:
            raise ApiError(503, "tts_timeout", "the speech engine took too long") from e
        except PluginError as e:
            raise ApiError(503, "tts_failed", f"the speech engine failed ({e.code})") from e
    return Response(wav_bytes(pcm, rate), media_type="audio/wav")


async def _speak(tts: TTS, text: str, voice: str | None, language: str | None) -> tuple[PCM, int]:
    """The speech of ``text`` at the first chunk's rate, cut at ``MAX_SAMPLE_SECONDS``."""
    parts: list[PCM] = []
    rate = 0
    total = 0
    stream = tts.stream(text, voice=voice, language=language)
    try:
        async for chunk in stream:
            rate = rate or chunk.sample_rate
            pcm = chunk.pcm
            if chunk.sample_rate != rate:
                pcm = resample(pcm, chunk.sample_rate, rate)
            parts.append(pcm)
            total += len(pcm)
            if total >= MAX_SAMPLE_SECONDS * rate:
                break
    finally:
        close = getattr(stream, "aclose", None)  # an engine cut short stops synthesising
        if close is not None:
            await close()
    if not parts:
        raise PluginError("the speech engine produced no audio")
    audio = np.concatenate(parts)[: int(MAX_SAMPLE_SECONDS * rate)]
    return audio.astype(np.int16), rate
