"""Twilio's voice webhook: ``POST /v1/telephony/twilio/voice`` (SPEC TEL-1).

Twilio asks this URL what to do with a call (configure it as the number's "A call comes in"
webhook, HTTP POST). The request is authenticated by its signature (``Policy.TELEPHONY``). The
answer is TwiML ``<Connect><Stream>`` to ``/v1/telephony/twilio/stream`` with a stream token for
this call and the role its called number chooses (``telephony_numbers``, else the tenant's
default); the ``<Connect>``'s action is this URL again, so when the stream ends Twilio asks
once more: a call ended for good (``runtime.telephony.calls`` rule 2) gets ``<Hangup/>``, a
dropped stream gets a new one, which continues the call's thread. A server that takes no new
sessions (draining, or at ``max_sessions``) answers ``<Reject reason="busy"/>``.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import Response

from accounts.model import Principal
from runtime.http.api import services_of
from runtime.http.policy import Policy, allow
from runtime.realtime.handshake import role_for
from runtime.telephony.calls import number_digest
from runtime.telephony.phone import number_roles
from runtime.telephony.twilio_protocol import (
    busy_twiml,
    connect_stream_twiml,
    dial_twiml,
    hangup_twiml,
    mint_stream_token,
    say_twiml,
)
from runtime.telephony.twilio_stream import TWILIO_STREAM_PATH

log = logging.getLogger(__name__)

VOICE_PATH = "/v1/telephony/twilio/voice"

router = APIRouter(tags=["telephony"])


def _twiml(body: str) -> Response:
    return Response(body, media_type="text/xml")


def _base_url(request: Request, public_url: str | None) -> str:
    return (public_url or str(request.base_url)).rstrip("/")


@router.post(VOICE_PATH, dependencies=[allow(Policy.TELEPHONY)])
async def voice(request: Request) -> Response:
    services = services_of(request)
    settings = services.settings
    principal = request.state.principal
    assert isinstance(principal, Principal), "Policy.TELEPHONY sets it"
    form = await request.form()
    call_sid = str(form.get("CallSid", ""))
    caller, called = str(form.get("From", "")), str(form.get("To", ""))
    if not call_sid:
        return _twiml(hangup_twiml())
    call = services.phone.get(call_sid)
    if call is not None and call.ended is not None:
        if call.transfer_target is not None:  # the agent put the call through (phone rule 4)
            return _twiml(dial_twiml(call.transfer_target))
        return _twiml(hangup_twiml())
    if services.draining or len(services.active_sessions) >= settings.max_sessions:
        return _twiml(busy_twiml())
    if call is not None:
        role_id = call.role_id
    else:
        wanted = number_roles(settings.telephony_numbers).get(called)
        role = await role_for(services, principal, wanted, strict=wanted is not None)
        if role is None:
            log.warning("phone call to %s: no role %r", number_digest(called), wanted)
            return _twiml(say_twiml("This number is not in service."))
        role_id = role.id
    token = mint_stream_token(
        settings.twilio_auth_token.get_secret_value(),
        call_sid=call_sid,
        role_id=role_id,
        caller=caller,
        called=called,
        ttl_s=settings.telephony_stream_token_ttl_s,
    )
    base = _base_url(request, settings.public_url)
    stream_url = base.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
    return _twiml(
        connect_stream_twiml(stream_url + TWILIO_STREAM_PATH, token, action_url=base + VOICE_PATH)
    )
