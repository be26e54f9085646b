"""Fuzzing the client side of the protocol: GA-shaped and arbitrary messages never crash the
parser, the session configuration or a live session; every refusal has a documented code.

The parser test draws 2,000 messages and derives 50 variants of each (100,000 messages); the
live test sends 1,500 through a real socket to one session and checks it still answers."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.errors import ProtocolError
from runtime.realtime.protocol import KNOWN_TYPES, ErrorCode, Limits, SessionUpdate
from runtime.realtime.protocol import parse_client_message as parse
from runtime.realtime.session_config import SessionConfig, apply_update
from runtime.server import running_server
from tests.runtime.conftest import fake_plugins

DOCUMENTED = frozenset(v for k, v in vars(ErrorCode).items() if k.isupper())
LIMITS = Limits(max_message_bytes=64 * 1024, max_audio_frame_ms=500)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=True),
    st.text(max_size=20), st.sampled_from(["", "inf", "audio/pcm", "server_vad", "user"]),
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def shaped(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """Some of ``fields`` (right or wrong values), and now and then a stray field."""
    return st.fixed_dictionaries(
        {}, optional={**fields, "event_id": st.text(max_size=40), "zzz": json_values}
    )


session_shapes = shaped({
    "type": st.sampled_from(["realtime", "transcription", 3]),
    "instructions": st.one_of(st.text(max_size=50), json_values),
    "output_modalities": st.lists(st.sampled_from(["audio", "text", "video"]), max_size=3),
    "audio": shaped({
        "input": shaped({
            "format": shaped({"type": st.sampled_from(["audio/pcm", "audio/pcmu", "x"]),
                              "rate": st.sampled_from([8000, 16000, 24000, 44100, -1])}),
            "turn_detection": st.one_of(st.none(), shaped({
                "type": st.sampled_from(["server_vad", "semantic_vad", "other"]),
                "threshold": st.floats(-1, 2), "silence_duration_ms": st.integers(-10, 20_000),
                "eagerness": st.sampled_from(["low", "high", "max"]),
                "create_response": json_values, "interrupt_response": st.booleans()})),
            "transcription": json_values, "noise_reduction": json_values}),
        "output": shaped({"voice": st.text(max_size=10), "speed": st.floats(0, 3),
                          "format": json_values})}),
    "tools": st.lists(shaped({"type": st.just("function"), "name": st.text(max_size=70),
                              "parameters": json_values}), max_size=3),
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required", "x"]), json_values),
    "max_output_tokens": st.one_of(st.integers(-5, 10_000), st.just("inf"), json_values),
    "tracing": json_values, "prompt": json_values,
})  # fmt: skip

item_shapes = st.one_of(
    shaped({"type": st.just("message"), "role": st.sampled_from(["user", "system", "tool"]),
            "content": st.lists(shaped({"type": st.sampled_from(["input_text", "input_audio",
                                                                 "output_text", "image"]),
                                        "text": st.text(max_size=30),
                                        "audio": st.sampled_from(["", "AAAA", "***"])}),
                                max_size=3)}),
    shaped({"type": st.just("function_call_output"), "call_id": st.text(max_size=20),
            "output": st.text(max_size=30)}),
    json_values,
)  # fmt: skip

ga_messages = st.one_of(
    st.builds(lambda s: {"type": "session.update", "session": s}, session_shapes),
    st.builds(lambda i: {"type": "conversation.item.create", "item": i}, item_shapes),
    st.builds(lambda t, rest: {"type": t, **rest}, st.sampled_from(sorted(KNOWN_TYPES)),
              shaped({"audio": st.sampled_from(["AAAA", "AAA", "***", ""]),
                      "item_id": st.text(max_size=70), "audio_end_ms": st.integers(-5, 10**7),
                      "content_index": st.integers(-1, 2), "seq": st.integers(-1, 10**6),
                      "generation": st.integers(-1, 5), "played_ms": st.floats(-1, 1e7),
                      "response": json_values})),
    st.builds(lambda v: {"type": "does.not.exist", "v": v}, json_values),
    json_values,
)  # fmt: skip
raw_frames = st.one_of(
    ga_messages.map(lambda m: json.dumps(m, allow_nan=True)),
    st.text(max_size=80),
    st.binary(max_size=200),
)


def check_one(frame: str | bytes) -> str | None:
    """Parse (and configure with) one frame; the error code, or None when accepted."""
    try:
        message = parse(frame, LIMITS)
        if isinstance(message, SessionUpdate):
            apply_update(SessionConfig(), message.session)
    except ProtocolError as e:
        assert e.code in DOCUMENTED, e.code
        return e.code
    return None


_POOL: list[Any] = [None, True, 0, -1, 2**63, 1.5, float("nan"), "", "x" * 70, [], {}, [1],
                    {"type": "x"}, "audio/pcm", "inf", "server_vad", "user"]  # fmt: skip


def mutants(message: Any, rng: random.Random, count: int) -> list[str | bytes]:
    """``count`` variants of one generated message: a field dropped or given a value of the
    wrong kind (at any depth), the JSON text cut short or with a byte flipped."""
    if isinstance(message, bytes):
        message = message.decode("latin-1")
    text = message if isinstance(message, str) else json.dumps(message, allow_nan=True)
    out: list[str | bytes] = [text]
    while len(out) < count:
        roll = rng.random()
        if roll < 0.6 and isinstance(message, dict):
            variant = json.loads(text)
            node = variant
            while True:  # walk down a random path of dicts
                keys = [k for k in node if k != "type"] if isinstance(node, dict) else []
                if not keys:
                    break
                key = rng.choice(keys)
                if isinstance(node[key], dict) and rng.random() < 0.6:
                    node = node[key]
                    continue
                if rng.random() < 0.3:
                    del node[key]
                else:
                    node[key] = rng.choice(_POOL)
                break
            out.append(json.dumps(variant, allow_nan=True))
        elif roll < 0.8 or not text:
            out.append(text[: rng.randrange(len(text) + 1)])
        else:
            data = bytearray(text.encode("utf-8", "surrogatepass"))
            data[rng.randrange(len(data))] = rng.randrange(256)
            out.append(bytes(data) if rng.random() < 0.5 else data.decode("utf-8", "replace"))
    return out


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(st.lists(st.one_of(ga_messages, raw_frames), min_size=10, max_size=10),
       st.integers(0, 2**32))  # fmt: skip
def test_a_hundred_thousand_messages_get_only_documented_errors(
    messages: list[Any], seed: int
) -> None:
    """200 examples × 10 generated messages × 50 variants = 100,000 messages."""
    rng = random.Random(seed)
    for message in messages:
        for frame in mutants(message, rng, 50):
            check_one(frame)


def generated_frames(batches: int) -> list[str | bytes]:
    """Frames for the live test, drawn by hypothesis from the same strategies."""
    frames: list[str | bytes] = []

    @settings(max_examples=batches, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(st.lists(raw_frames, min_size=50, max_size=50))
    def collect(batch: list[str | bytes]) -> None:
        frames.extend(batch)

    collect()
    return frames


async def test_a_live_session_survives_generated_messages(tmp_path: Path) -> None:
    frames = await asyncio.to_thread(generated_frames, 30)
    # Ending the session on purpose is not what this test is about.
    frames = [f for f in frames if not (isinstance(f, str) and "session.close" in f)]
    config = Settings(port=0, storage="memory", data_dir=tmp_path, max_errors_per_session=10**6)
    async with running_server(config, plugins=fake_plugins()) as server:
        async with RealtimeClient(server.ws_url, server.token) as client:
            await client.connect()
            for frame in frames:
                await client.send_raw(frame)
            # Put the session back into a known shape, then it must still answer.
            await client.send_json({"type": "openrealtime.input.resume"})
            await client.send_json({"type": "session.update", "session": {
                "output_modalities": ["audio"], "tools": [], "instructions": "",
                "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000},
                                    "turn_detection": {"type": "server_vad"}}}}})  # fmt: skip
            await client.send_text("are you still there?")
            done = await client.wait_for(
                lambda m: (
                    m.type == "response.done"
                    and m.event is not None
                    and m.event["response"]["status"] == "completed"
                ),
                timeout=30,
            )
            assert done.event is not None
            errors = client.events("error")
            assert errors and {e["error"]["code"] for e in errors} <= DOCUMENTED
            assert client.close_code is None
