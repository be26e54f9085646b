"""``openrealtime`` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from evals import cli as cli_eval
from runtime.cli import accounts as cli_accounts
from runtime.cli import memory as cli_memory
from runtime.config import Settings
from runtime.logs import configure_logging
from runtime.loop import install_uvloop, stop_signals, tune_gc
from runtime.talk import cli as cli_talk


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openrealtime", description="OpenRealtime voice runtime")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the server")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--data-dir", type=Path)
    models = sub.add_parser(
        "serve-models",
        help="serve the embedded models as OpenAI-compatible endpoints (runtime/model_server.py)",
    )
    models.add_argument("--host")
    models.add_argument("--port", type=int)
    models.add_argument("--data-dir", type=Path)
    cli_accounts.add_parsers(sub)
    cli_memory.add_parsers(sub)
    cli_talk.add_parser(sub)
    cli_eval.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "talk":
        return cli_talk.run(args)
    if args.command == "eval":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return cli_eval.run(args)
    if args.command == "serve-models" and args.port is not None:
        args.models_port, args.port = args.port, None
    options = {
        "host": getattr(args, "host", None),
        "port": getattr(args, "port", None),
        "models_port": getattr(args, "models_port", None),
        "data_dir": args.data_dir,
    }
    settings = Settings(**{k: v for k, v in options.items() if v is not None})
    if args.command in ("users", "tokens"):
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return asyncio.run(cli_accounts.run(args.command, args, settings))
    if args.command == "memory":
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        return asyncio.run(cli_memory.run(args, settings))
    configure_logging(format=settings.log_format, level=settings.log_level)
    install_uvloop()
    if args.command == "serve-models":
        return _serve_models(settings)
    try:
        asyncio.run(_serve(settings))
    except KeyboardInterrupt:
        pass
    return 0


async def _serve(settings: Settings) -> None:
    import signal

    from runtime.server import running_server

    stop, drain = stop_signals()
    async with running_server(settings) as server:
        # preStop (deploy/k8s): stop taking new sessions; SIGTERM's drain is SPEC OPS-1's.
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, server.services.start_draining)
        base = settings.public_url or server.http_url
        print(f"OpenRealtime listening on {base}/#token={server.token}", flush=True)
        print(f"WebSocket endpoint: {server.ws_url}", flush=True)
        if settings.webrtc:
            print(f"WebRTC calls: POST {base}/v1/realtime/calls", flush=True)
        tune_gc()  # after start-up: see runtime/loop.py
        await stop.wait()
        if drain.is_set():  # SIGTERM: hand the sessions over first (runtime/drain.py)
            print("draining", file=sys.stderr, flush=True)
            await server.drain()
        print("shutting down", file=sys.stderr, flush=True)


def _serve_models(settings: Settings) -> int:
    import uvicorn

    from runtime.model_server import ModelServerLimits, create_model_app
    from runtime.plugin_factory import build_model_backends

    keys = settings.models_api_keys.get_secret_value()
    if not keys.strip():
        print("serve-models needs OPENREALTIME_MODELS_API_KEYS (name:key,…)", file=sys.stderr)
        return 2
    app = create_model_app(
        build_model_backends(settings),
        api_keys=keys,
        limits=ModelServerLimits(max_request_bytes=settings.models_max_request_bytes),
    )
    print(
        f"OpenRealtime models on http://{settings.host}:{settings.models_port}/v1 "
        f"(callers: {', '.join(app.state.callers)})",
        flush=True,
    )
    uvicorn.run(
        app, host=settings.host, port=settings.models_port, log_level="warning", access_log=False
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
