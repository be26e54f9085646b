"""HTTP API for recordings (SPEC REC-2 … REC-4): ``/api/recordings``.

A recording belongs to the user whose session it recorded. Members see and download their own;
admins may see and download their tenant's (``scope=tenant``) and put or lift a legal hold.
Another user's or tenant's recording answers 404 exactly like an unknown one. A deleted
recording answers 404 ``recording_deleted`` with its deletion receipt (what it was, why and
when — never its audio).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from records.audio_store import open_pieces
from records.recordings import DeletionReceipt, Recording, RecordingBeingDeleted
from records.timeline import open_timeline
from runtime.http.api import ApiError, Caller, ServicesDep
from runtime.http.policy import Policy, allow, forbidden

router = APIRouter(prefix="/api/recordings", tags=["recordings"])


class Protection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    protected: bool


class RecordingDeleted(ApiError):
    """404 ``recording_deleted`` with the deletion ``receipt``."""

    def __init__(self, receipt: DeletionReceipt) -> None:
        super().__init__(404, "recording_deleted", "the recording was deleted")
        assert isinstance(self.detail, dict)
        self.detail["receipt"] = receipt.to_json()


async def _visible(recording_id: str, who: Caller, services: ServicesDep) -> Recording:
    recording = await services.recording_index.get(who.tenant, recording_id)
    if recording is None or (recording.owner != who.user and not who.can("admin")):
        receipt = await services.recording_index.receipt(who.tenant, recording_id)
        if receipt is not None and (receipt.owner == who.user or who.can("admin")):
            raise RecordingDeleted(receipt)
        raise ApiError(404, "recording_not_found", "no such recording")
    return recording


@router.get("", dependencies=[allow(Policy.MEMBER)])
async def list_recordings(
    thread_id: str, who: Caller, services: ServicesDep, scope: Literal["mine", "tenant"] = "mine"
) -> dict[str, Any]:
    """A thread's recordings, oldest first."""
    if scope == "tenant" and not who.can("admin"):
        raise forbidden("only the tenant's admins and owners may list everyone's recordings")
    owner = None if scope == "tenant" else who.user
    found = await services.recording_index.of_thread(who.tenant, owner, thread_id)
    return {"recordings": [r.to_json() for r in found]}


class RetentionPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")
    retention_days: int | None = Field(ge=1, le=36_500)
    """None: the deployment's (``OPENREALTIME_RECORDING_RETENTION_DAYS``)."""


async def _policy_json(who: Caller, services: ServicesDep) -> dict[str, Any]:
    own = await services.recording_index.retention_days(who.tenant)
    default = services.settings.recording_retention_days
    return {
        "retention_days": own,
        "deployment_retention_days": default,
        "effective_retention_days": own if own is not None else default,
    }


@router.get("/policy", dependencies=[allow(Policy.ADMIN)])
async def get_policy(who: Caller, services: ServicesDep) -> dict[str, Any]:
    """The tenant's retention period for recordings (SPEC REC-4)."""
    return await _policy_json(who, services)


@router.put("/policy", dependencies=[allow(Policy.ADMIN)])
async def put_policy(body: RetentionPolicy, who: Caller, services: ServicesDep) -> dict[str, Any]:
    """Set the tenant's retention period (null: the deployment's). Every recording of the
    tenant not already scheduled for deletion is then kept that long from its start: a shorter
    period lets the next expiry run delete what is now past it (protected ones stay)."""
    days = body.retention_days
    effective = days if days is not None else services.settings.recording_retention_days
    moved = await services.recording_index.set_retention_days(
        who.tenant, days, effective=effective, at=datetime.now(UTC)
    )
    return {**await _policy_json(who, services), "recordings_updated": moved}


@router.get("/{recording_id}", dependencies=[allow(Policy.MEMBER)])
async def get_recording(recording_id: str, who: Caller, services: ServicesDep) -> dict[str, Any]:
    return (await _visible(recording_id, who, services)).to_json()


@router.get("/{recording_id}/audio", dependencies=[allow(Policy.MEMBER)])
async def download_recording(recording_id: str, who: Caller, services: ServicesDep) -> Response:
    """The recording as a stereo FLAC file (left: the person, right: the agent)."""
    recording = await _visible(recording_id, who, services)
    store, keyring = services.audio_store, services.keyring
    if store is None or keyring is None:
        raise ApiError(404, "recording_not_found", "no such recording")
    pieces = await store.read(recording.id)
    if not pieces:
        raise ApiError(404, "recording_not_found", "the recording holds no audio")
    audio = open_pieces(keyring, recording.tenant, recording.id, pieces)
    return Response(
        audio,
        media_type="audio/flac",
        headers={
            "Content-Disposition": f'attachment; filename="{recording.id}.flac"',
            "Cache-Control": "private, no-store",
        },
    )


@router.get("/{recording_id}/timeline", dependencies=[allow(Policy.MEMBER)])
async def recording_timeline(
    recording_id: str, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """What was said when (``records.timeline``): segments of the person and the agent on the
    recording's clock, their words' estimated times, interruptions where they happened."""
    recording = await _visible(recording_id, who, services)
    keyring = services.keyring
    sealed = await services.recording_index.timeline(who.tenant, recording.id)
    if sealed is None or keyring is None:
        found: dict[str, Any] = {"segments": [], "word_timing": "estimated", "truncated": False}
    else:
        found = open_timeline(keyring, recording.tenant, recording.id, sealed)
    return {"recording_id": recording.id, "duration_ms": recording.duration_ms, **found}


@router.put("/{recording_id}/protection", dependencies=[allow(Policy.ADMIN)])
async def protect_recording(
    recording_id: str, body: Protection, who: Caller, services: ServicesDep
) -> dict[str, Any]:
    """A legal hold put on (``protected: true``) or lifted: a protected recording is never
    deleted (SPEC REC-5)."""
    try:
        updated = await services.recording_index.set_protected(
            who.tenant, recording_id, body.protected
        )
    except RecordingBeingDeleted:
        raise ApiError(
            409, "recording_being_deleted", "the recording's deletion has begun; no hold now"
        ) from None
    if updated is None:
        raise ApiError(404, "recording_not_found", "no such recording")
    return updated.to_json()
