"""Logs (``runtime/logs.py``): JSON lines with safe fields, and no conversation content.

The content test runs a real conversation through a real server on PostgreSQL at the default
log level, with scripted plugins whose transcript, answer, instructions, typed text and memory
are made of marker words, plus a client error and a failing brain; every log line written (the
JSON handler on the root logger) and everything printed is searched for those words.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from plugins.fakes import FakeASR, FakeBrain, Faults
from runtime.accounts import LOCAL_PRINCIPAL
from runtime.client import RealtimeClient
from runtime.config import Settings
from runtime.logs import JsonLogFormatter, chosen_format, configure_logging
from runtime.server import running_server
from tests.postgres import pg_pool, postgres_url
from tests.runtime.conftest import fake_plugins
from tests.runtime.test_conversation import SILENCE, stream, tone_frame

__all__ = ["pg_pool", "postgres_url"]

TRANSCRIPT = "my locker code is porcupine lighthouse"
ANSWER = "Your locker code is marmalade zeppelin. Anything else?"
INSTRUCTIONS = "Speak like captain nebula quasar."
TYPED = "remind me about the walrus trombone"
MEMORY = "I keep the spare keys under the geranium flowerpot"
BAD_MESSAGE = '{"type": "conversation.item.create", "item": {"bogus": "xylophone kumquat"}}'
MARKERS = (
    "porcupine",
    "lighthouse",
    "marmalade",
    "zeppelin",
    "nebula",
    "quasar",
    "walrus",
    "trombone",
    "geranium",
    "flowerpot",
    "xylophone",
    "kumquat",
)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """Every record of every logger, as ``serve`` writes them by default (JSON, INFO)."""
    out = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(
        format="json", level=Settings().log_level, stream=out, replace=False
    )
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def test_a_conversation_logs_no_transcript_prompt_answer_or_memory(
    captured: io.StringIO,
    capfd: pytest.CaptureFixture[str],
    pg_pool: Any,
    postgres_url: str,
    tmp_path: Path,
) -> None:
    brain = FakeBrain([ANSWER])
    settings = Settings(
        port=0,
        data_dir=tmp_path,
        database_url=postgres_url,
        knowledge_semantic=False,
        silence_ms=300,
        min_interrupt_ms=300,
    )
    plugins = fake_plugins(asr=FakeASR([TRANSCRIPT]), brain=brain)
    async with running_server(settings, plugins=plugins) as server:
        headers = {"Authorization": f"Bearer {server.token}"}
        async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
            added = await http.post("/api/memory", json={"kind": "fact", "content": MEMORY})
            assert added.status_code == 201, added.text
        services = server.services
        talk = await services.accounts.issue_token(
            LOCAL_PRINCIPAL.tenant, LOCAL_PRINCIPAL.user, name="talk"
        )
        async with RealtimeClient(server.ws_url, talk.secret) as client:
            await client.connect()
            await client.send_json(
                {"type": "session.update", "session": {"instructions": INSTRUCTIONS}}
            )
            await client.wait_type("session.updated")
            await stream(client, SILENCE, 200)
            await stream(client, tone_frame(), 600)
            await stream(client, SILENCE, 500)
            done = await client.wait_type("response.done", timeout=10)
            assert done["response"]["output_text"] == ANSWER
            await client.send_raw(BAD_MESSAGE)
            await client.wait_type("error")
            await client.send_text(TYPED)
            await client.wait_type("response.done", timeout=10)
            brain.faults = Faults(fail=True)  # the next answer fails
            await client.send_text(TYPED)
            await client.wait_type("response.done", timeout=10)
            services.start_draining()  # logged
            async with httpx.AsyncClient(base_url=server.http_url, headers=headers) as http:
                revoked = await http.delete(f"/api/tokens/{talk.info.id}")
                assert revoked.status_code == 200, revoked.text
            assert await client.wait_closed() == 4013  # logged: the session closes
    # The content did reach the brain (so its absence below means something).
    prompt = " ".join(f"{r.system} {r.model_text}" for r in brain.requests)
    for text in ("porcupine", "nebula", "geranium", "walrus"):
        assert text in prompt, text
    logged = captured.getvalue()
    assert "credentials were revoked" in logged and "draining" in logged  # the capture works
    for line in logged.splitlines():
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record)
    printed = capfd.readouterr()
    for marker in MARKERS:
        assert marker not in logged.lower(), (marker, logged)
        assert marker not in printed.out.lower() and marker not in printed.err.lower(), marker


def record(message: str, **extra: Any) -> logging.LogRecord:
    made = logging.LogRecord("runtime.test", logging.WARNING, __file__, 1, message, None, None)
    made.__dict__.update(extra)
    return made


def test_a_json_line_has_the_basics_and_only_safe_fields() -> None:
    line = JsonLogFormatter().format(
        record(
            "session %s closed",
            session_id="vs_1",
            code="journal_unavailable",
            count=3,
            transcript="hello there",  # not a safe field: dropped
            status={"nested": "object"},  # a safe name but not a plain value: dropped
        )
    )
    out = json.loads(line)
    assert out["level"] == "WARNING" and out["logger"] == "runtime.test"
    assert out["message"] == "session %s closed"
    assert out["time"].endswith("+00:00")
    assert out["session_id"] == "vs_1" and out["code"] == "journal_unavailable"
    assert out["count"] == 3
    assert "transcript" not in out and "status" not in out


def test_an_exception_is_one_bounded_line() -> None:
    try:
        raise ValueError("x" * 20_000)
    except ValueError:
        import sys

        made = record("failed")
        made.exc_info = sys.exc_info()
    line = JsonLogFormatter().format(made)
    assert "\n" not in line
    out = json.loads(line)
    assert out["exception"] == "ValueError" and len(out["traceback"]) <= 8_000


def test_auto_is_text_on_a_terminal_and_json_otherwise() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert chosen_format("auto", Terminal()) == "text"
    assert chosen_format("auto", io.StringIO()) == "json"
    assert chosen_format("text", io.StringIO()) == "text"
    assert chosen_format("json", Terminal()) == "json"
