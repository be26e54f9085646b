"""``openrealtime users …`` / ``tokens …`` through the real entry point (``python -m
runtime.cli``), against the test database when ``OPENREALTIME_TEST_DATABASE_URL`` is set, else
an embedded PostgreSQL on a data directory — with a server running on the same database, so a
revocation made by the CLI is seen by the server at once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import websockets

from runtime.config import Settings
from runtime.database import EmbeddedPostgres, open_database
from runtime.realtime.protocol import CloseCode
from runtime.server import RunningServer, running_server
from tests.postgres import (
    TEST_DATABASE_URL_ENV,
    embedded_data_dir,
    pg_pool,
    postgres_url,
    session_database_url,
    truncate_all,
)
from tests.runtime.conftest import fake_plugins

__all__ = ["pg_pool", "postgres_url"]

WORKTREE = Path(__file__).resolve().parents[2]


@dataclass
class Cli:
    data_dir: Path
    env: dict[str, str]

    async def run(self, *args: str, ok: bool = True) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runtime.cli", *args, "--data-dir", str(self.data_dir),
            cwd=WORKTREE, env=self.env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 120)
        code = process.returncode
        assert code is not None
        if ok:
            assert code == 0, err.decode()
        return code, out.decode(), err.decode()


@contextlib.contextmanager
def _database() -> Iterator[tuple[Path, dict[str, str]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREALTIME_")}
    env.pop("DATABASE_URL", None)
    with embedded_data_dir() as data_dir:
        yield data_dir, env


@pytest.fixture
async def cli(request: pytest.FixtureRequest) -> AsyncIterator[Cli]:
    with _database() as (data_dir, env):
        if os.environ.get(TEST_DATABASE_URL_ENV):
            # The session database, resolved off the loop (its first use creates it with a
            # blocking helper; requesting the fixtures from this async fixture would nest
            # event loops).
            url = await asyncio.to_thread(session_database_url, request.config)
            database = await open_database(database_url=url, data_dir=data_dir, max_size=2)
            try:
                await truncate_all(database.pool)
            finally:
                await database.close()
            env["OPENREALTIME_DATABASE_URL"] = url
            yield Cli(data_dir, env)
        else:
            # Held for the test, so each CLI run reuses this embedded server (as it does one
            # that a running `openrealtime serve` started) instead of starting its own.
            server = await asyncio.to_thread(EmbeddedPostgres.attach, data_dir)
            try:
                yield Cli(data_dir, env)
            finally:
                await asyncio.to_thread(server.detach)


def _rows(out: str) -> list[dict[str, str]]:
    lines = [line for line in out.splitlines() if line and not line.startswith("#")]
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"), strict=True)) for line in lines[1:]]


async def test_users_and_tokens_are_managed_from_the_command_line(cli: Cli) -> None:
    await cli.run("users", "add", "alice", "--role", "owner")
    await cli.run("users", "add", "bob")  # regression: a second user can be made
    code, _, err = await cli.run("users", "add", "bob", ok=False)
    assert code == 1 and "user_exists" in err
    users = _rows((await cli.run("users", "list"))[1])
    assert [(u["user"], u["role"], u["status"]) for u in users] == [
        ("alice", "owner", "active"),
        ("bob", "member", "active"),
    ]

    _, out, _ = await cli.run("tokens", "issue", "bob", "--name", "laptop", "--expires-days", "7")
    first = out.splitlines()[-1]
    _, out, _ = await cli.run("tokens", "issue", "bob", "--name", "phone")
    second = out.splitlines()[-1]  # regression: a second token can be made
    assert first.startswith("ort_") and second.startswith("ort_") and first != second
    _, out, _ = await cli.run("tokens", "issue", "alice", "--scope", "metrics")
    assert out.splitlines()[-1].startswith("ort_")

    _, out, _ = await cli.run("tokens", "list", "bob")
    tokens = _rows(out)
    assert [t["name"] for t in tokens] == ["laptop", "phone"]
    assert tokens[0]["expires"] != "-" and tokens[1]["expires"] == "-"
    assert first not in out and second not in out  # lists never show a secret
    assert len(_rows((await cli.run("tokens", "list"))[1])) == 3

    await cli.run("tokens", "revoke", tokens[0]["id"])
    statuses = [t["status"] for t in _rows((await cli.run("tokens", "list", "bob"))[1])]
    assert statuses == ["revoked", "active"]
    code, _, err = await cli.run("tokens", "revoke", "tok_nope", ok=False)
    assert code == 1 and "token_not_found" in err

    await cli.run("users", "disable", "bob")
    code, _, err = await cli.run("users", "disable", "alice", ok=False)
    assert code == 1 and "last_owner" in err
    code, _, err = await cli.run("tokens", "issue", "nobody", ok=False)
    assert code == 1 and "user_not_found" in err


async def test_a_cli_revocation_reaches_the_running_server_at_once(cli: Cli) -> None:
    database_url = cli.env.get("OPENREALTIME_DATABASE_URL")
    settings = Settings(port=0, data_dir=cli.data_dir, database_url=database_url)
    async with running_server(settings, plugins=fake_plugins()) as server:
        # The server made the local user, owner of "local", on start.
        users = _rows((await cli.run("users", "list"))[1])
        assert ("local-user", "owner") in [(u["user"], u["role"]) for u in users]
        await cli.run("users", "add", "bob")
        _, out, _ = await cli.run("tokens", "issue", "bob")
        token = out.splitlines()[-1]
        await _revoked_while_talking(cli, server, token)


async def _revoked_while_talking(cli: Cli, server: RunningServer, token: str) -> None:
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=server.http_url, timeout=10) as http:
        me = await http.get("/api/me", headers=auth)
        assert me.status_code == 200 and me.json()["user"] == "bob"
        async with websockets.connect(server.ws_url, additional_headers=auth) as ws:
            await ws.send(json.dumps({"type": "session.start"}))
            assert json.loads(await ws.recv())["type"] == "session.created"
            token_id = me.json()["token_id"]
            await cli.run("tokens", "revoke", token_id)
            assert (await http.get("/api/me", headers=auth)).status_code == 401
            with pytest.raises(websockets.ConnectionClosed) as closed:
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == CloseCode.CREDENTIALS_REVOKED
