"""Twilio's side of a call without I/O (``runtime/telephony/twilio_protocol.py``): the webhook
signature against Twilio's published example, stream tokens, marks and keypad entries."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from runtime.telephony.calls import PhoneCalls, number_digest
from runtime.telephony.phone import KeypadEntry
from runtime.telephony.twilio_protocol import (
    StreamTokens,
    TokenRefused,
    audio_mark,
    connect_stream_twiml,
    mint_stream_token,
    read_audio_mark,
    read_stream_token,
    signature_valid,
    twilio_signature,
)

# Twilio's published request-validation example (auth token 12345).
URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+14158675309",
    "Digits": "1234",
    "From": "+14158675309",
    "To": "+18005551212",
}


def test_the_signature_is_twilios_on_its_published_example() -> None:
    assert twilio_signature("12345", URL, PARAMS) == "RSOYDt4T1cUTdK1PDd93/VVr8B8="
    assert signature_valid("12345", URL, PARAMS, "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
    assert not signature_valid("12345", URL + "&x=1", PARAMS, "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
    assert not signature_valid("54321", URL, PARAMS, "RSOYDt4T1cUTdK1PDd93/VVr8B8=")
    tampered = {**PARAMS, "Digits": "9999"}
    assert not signature_valid("12345", URL, tampered, "RSOYDt4T1cUTdK1PDd93/VVr8B8=")


def mint(**overrides: object) -> str:
    values: dict[str, object] = {
        "call_sid": "CA1", "role_id": "role_x", "caller": "+1555", "called": "+1666",
        "ttl_s": 30.0, "now": 1000.0,
    }  # fmt: skip
    values.update(overrides)
    return mint_stream_token("secret", **values)  # type: ignore[arg-type]


def test_a_stream_token_opens_one_stream_of_its_call_while_it_lives() -> None:
    token = mint()
    grant = read_stream_token("secret", token, call_sid="CA1", now=1010.0)
    assert (grant.call_sid, grant.role_id, grant.caller, grant.called) == (
        "CA1", "role_x", "+1555", "+1666",
    )  # fmt: skip
    used = StreamTokens()
    used.redeem(grant, now=1010.0)
    with pytest.raises(TokenRefused, match="already used"):
        used.redeem(grant, now=1011.0)
    refusals = {
        "expired": lambda: read_stream_token("secret", token, call_sid="CA1", now=1031.0),
        "minted for another call": lambda: read_stream_token(
            "secret", token, call_sid="CA2", now=1010.0
        ),
        "bad signature": lambda: read_stream_token("other", token, call_sid="CA1", now=1010.0),
        "not a stream token": lambda: read_stream_token("secret", "ek_x", call_sid="CA1"),
    }
    for reason, attempt in refusals.items():
        with pytest.raises(TokenRefused) as refused:
            attempt()
        assert refused.value.reason == reason
    # The body cannot be changed under its MAC (another role, a later expiry).
    prefix, body, mac = token.split(".")
    forged = mint(role_id="role_admin")
    with pytest.raises(TokenRefused, match="bad signature"):
        read_stream_token("secret", f"{prefix}.{forged.split('.')[1]}.{mac}", call_sid="CA1")


def test_the_twiml_carries_the_token_as_a_parameter_never_in_the_url() -> None:
    stream_url = "wss://h/v1/telephony/twilio/stream"
    twiml = connect_stream_twiml(stream_url, 'a"b<c&d', action_url="https://h/v")
    root = ET.fromstring(twiml)
    connect = root.find("Connect")
    assert connect is not None and connect.get("action") == "https://h/v"
    stream = connect.find("Stream")
    assert stream is not None and stream.get("url") == stream_url
    params = [(p.get("name"), p.get("value")) for p in stream.findall("Parameter")]
    assert params == [("token", 'a"b<c&d')]


def test_marks_name_a_generation_and_the_ms_heard_and_nothing_else() -> None:
    assert read_audio_mark(audio_mark(7, 1200.4)) == (7, 1200.0)
    assert read_audio_mark("c1") is None
    assert read_audio_mark("gx:1") is None
    assert read_audio_mark("somebody else's") is None


def test_keypad_entries_end_with_hash_or_a_pause() -> None:
    keys = KeypadEntry(gap_s=2.0)
    assert [keys.press(d, 0.1 * i) for i, d in enumerate("123")] == [None, None, None]
    assert keys.deadline() == pytest.approx(2.2)
    assert keys.due(1.0) is None
    assert keys.press("#", 0.5) == "123"
    assert keys.deadline() is None
    assert keys.press("4", 3.0) is None
    assert keys.due(4.9) is None
    assert keys.due(5.0) == "4"
    assert keys.press("*", 6.0) == "*"  # alone: a key of its own
    assert keys.press("#", 6.1) == "#"
    assert keys.press("x", 6.2) is None  # not a key
    assert keys.due(100.0) is None


def test_calls_are_bounded_and_numbers_never_logged_as_numbers() -> None:
    calls = PhoneCalls()
    calls.MAX_CALLS = 3  # type: ignore[misc]
    first = calls.open("CA1", caller="+1", called="+2", role_id="r")
    calls.end(first, "caller")
    for sid in ("CA2", "CA3", "CA4"):
        calls.open(sid, caller="+1", called="+2", role_id="r")
    assert calls.get("CA1") is None and len(calls) == 3  # the ended one went first
    again = calls.open("CA2", caller="+1", called="+2", role_id="r")
    assert again.streams == 2
    assert "+1555" not in number_digest("+15550001111")
