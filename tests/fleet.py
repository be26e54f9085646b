"""A fleet on this machine: real server processes on one database, real nginx in front.

``ServerProcess.start`` runs ``python -m benchmarks.fake_server --storage postgres`` (the same
``running_server`` path as ``openrealtime serve``, instant fake speech plugins, SIGTERM drains)
on an ephemeral loopback port. Processes that share ``data_dir`` share the local token.

``Nginx.start`` runs Debian's nginx (``/usr/sbin/nginx``) with ``deploy/nginx/openrealtime.conf``
as documented, only its upstream lists pointed at the given ports and its ``listen`` at an
ephemeral loopback port, under a private prefix (pid, logs, temp files): the tested
configuration is the shipped one. Used by ``tests/runtime/test_fleet.py`` and
``benchmarks/fleet.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NGINX = Path("/usr/sbin/nginx")
NGINX_CONF = ROOT / "deploy" / "nginx" / "openrealtime.conf"
_SERVERS = re.compile(r"(# servers\n)(.*?)(\s*# end servers)", re.S)
_LISTEN = re.compile(r"listen \d+;\s*# listen")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    process: asyncio.subprocess.Process
    port: int
    ws_url: str
    http_url: str
    token: str
    name: str = ""

    @classmethod
    async def start(
        cls,
        *,
        database_url: str,
        data_dir: Path,
        env: Mapping[str, str] | None = None,
        port: int = 0,
        brain: str = "fake",
        tts_ms_per_char: float = 2.0,
        stderr: int | None = None,
        name: str = "",
        extra_args: Sequence[str] = (),
    ) -> ServerProcess:
        environment = {
            **os.environ,
            "OPENREALTIME_DATABASE_URL": database_url,
            "OPENREALTIME_RESUME_TTL_S": "60",
            **(env or {}),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "benchmarks.fake_server", "--port", str(port),
            "--storage", "postgres", "--data-dir", str(data_dir), "--brain", brain,
            "--tts-ms-per-char", str(tts_ms_per_char), *extra_args,
            cwd=ROOT, env=environment, stdout=asyncio.subprocess.PIPE, stderr=stderr,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            ready = json.loads(await asyncio.wait_for(process.stdout.readline(), 90))
        except BaseException:
            process.kill()
            await process.wait()
            raise
        http = str(ready["http"])
        return cls(
            process, int(http.rsplit(":", 1)[1]), ready["listening"], http, ready["token"], name
        )

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def kill(self) -> None:
        if self.alive:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()

    async def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM (the process drains) and wait for its exit status."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.process.wait(), timeout)


def nginx_config(ports: Sequence[int], listen: int, prefix: Path) -> str:
    """A whole nginx.conf: the shipped server config, pointed at ``ports`` on loopback."""
    servers = "".join(
        f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=5s;\n" for p in ports
    ).rstrip("\n")
    body = _SERVERS.sub(lambda m: m.group(1) + servers + m.group(3), NGINX_CONF.read_text())
    body, listens = _LISTEN.subn(f"listen 127.0.0.1:{listen};", body)
    assert listens == 1, "deploy/nginx/openrealtime.conf has one `listen …; # listen` line"
    return nginx_main(body, prefix)


def nginx_main(body: str, prefix: Path, name: str = "nginx", connections: int = 4096) -> str:
    """A whole nginx.conf around the ``http`` block's ``body``, every file under ``prefix``."""
    temp = prefix / "temp"
    return f"""
worker_processes 1;
pid {prefix}/{name}.pid;
error_log {prefix}/{"error" if name == "nginx" else f"error-{name}"}.log warn;
{"user root;" if os.geteuid() == 0 else ""}
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
{body}
}}
"""


@dataclass
class Nginx:
    prefix: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    ports: list[int] = field(default_factory=list)

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    async def start(cls, ports: Sequence[int], prefix: Path) -> Nginx:
        nginx = cls(prefix, free_port(), ports=list(ports))
        nginx.process = await asyncio.to_thread(nginx._launch)
        deadline = time.monotonic() + 10
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", nginx.port)
                writer.close()
                await writer.wait_closed()
                return nginx
            except OSError:
                if time.monotonic() > deadline or nginx.process.poll() is not None:
                    await nginx.stop()
                    raise RuntimeError(f"nginx did not start: see {prefix}/error.log") from None
                await asyncio.sleep(0.05)

    def _launch(self) -> subprocess.Popen[bytes]:
        if not NGINX.exists():
            raise FileNotFoundError(f"{NGINX} is not installed")
        prefix = self.prefix
        (prefix / "temp").mkdir(parents=True, exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(nginx_config(self.ports, self.port, prefix))
        check = subprocess.run(
            [str(NGINX), "-t", "-q", "-p", str(prefix), "-c", str(conf)], capture_output=True
        )
        if check.returncode:
            raise RuntimeError(f"nginx -t: {check.stderr.decode(errors='replace')}")
        return subprocess.Popen(
            [str(NGINX), "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
            stdin=subprocess.DEVNULL,
        )

    async def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGQUIT)  # graceful: let open connections finish
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)

    def errors(self) -> str:
        log = self.prefix / "error.log"
        return log.read_text(errors="replace") if log.exists() else ""


def have_nginx() -> bool:
    return NGINX.exists() and shutil.which(str(NGINX)) is not None


needs_nginx = pytest.mark.skipif(
    not have_nginx() and not os.environ.get("OPENREALTIME_REQUIRE_NGINX"),
    reason="needs /usr/sbin/nginx (apt-get install nginx)",
)
"""Skips a fleet test without nginx — unless ``OPENREALTIME_REQUIRE_NGINX`` is set (CI sets
it): then the test runs and fails at ``Nginx.start``; a missing part never hides a test."""
