"""Who a Twilio webhook is (``Policy.TELEPHONY``, ``runtime/http/policy.py`` rule 6): a request
signed with the account's auth token (``twilio_protocol`` rule 1) acts as the phone line's
owner, the user ``telephony_token`` authenticates."""

from __future__ import annotations

from fastapi import Request

from accounts.model import Principal
from runtime.http.api import ApiError, services_of
from runtime.telephony.twilio_protocol import signature_valid

MAX_WEBHOOK_BYTES = 64 * 1024
"""A webhook's form body at most (Twilio's are a few hundred bytes): it is read before the
signature can be checked, so its size is bounded first (more: 413)."""


def requested_url(request: Request, public_url: str | None) -> str:
    """The URL Twilio requested and signed: behind a proxy only ``public_url`` knows it."""
    if not public_url:
        return str(request.url)
    query = f"?{request.url.query}" if request.url.query else ""
    return f"{public_url.rstrip('/')}{request.url.path}{query}"


async def telephony_caller(request: Request) -> Principal:
    services = services_of(request)
    settings = services.settings
    auth_token = settings.twilio_auth_token.get_secret_value()
    if not auth_token:
        raise ApiError(404, "telephony_disabled", "no phone provider is configured here")
    length = request.headers.get("content-length", "")
    if not length.isdigit():
        raise ApiError(411, "length_required", "a webhook body needs a Content-Length")
    if int(length) > MAX_WEBHOOK_BYTES:
        raise ApiError(
            413, "payload_too_large", f"a webhook body is at most {MAX_WEBHOOK_BYTES} bytes"
        )
    form = await request.form()
    params = {name: str(value) for name, value in form.items()}
    signature = request.headers.get("x-twilio-signature", "")
    url = requested_url(request, settings.public_url)
    if not signature or not signature_valid(auth_token, url, params, signature):
        raise ApiError(403, "invalid_signature", "the request is not signed by the phone provider")
    principal = await services.authenticate(settings.telephony_token.get_secret_value())
    if principal is None:
        raise ApiError(503, "telephony_misconfigured", "telephony_token authenticates no one")
    return principal
