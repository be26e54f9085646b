"""A real MCP server for the tests (the ``mcp`` package's ``MCPServer`` over streamable HTTP):
``python -m tests.mcp.server PORT [API_KEY]``. With a key, a request without the header
``X-Api-Key: <key>`` is refused with 401 (the runtime must send a declaration's headers).

Tools: ``stock_level`` (read-only), ``reorder``, ``slow_report`` (answers after 30 s: the
caller's timeout), ``broken`` (answers with an error result)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

app = MCPServer("openrealtime-test-tools")
STOCK = {"bolts": 17, "nuts": 240, "washers": 0}


@app.tool(
    description="How many of a product are in stock in the warehouse.",
    annotations=ToolAnnotations(read_only_hint=True),
)
def stock_level(product: str) -> str:
    count = STOCK.get(product.lower().rstrip("s") + "s", STOCK.get(product.lower()))
    if count is None:
        return f"{product}: not a product we stock"
    return f"{product}: {count} in stock"


@app.tool(description="Order more of a product from the supplier.")
def reorder(product: str, quantity: int) -> str:
    return f"Ordered {quantity} {product}; delivery on Tuesday."


@app.tool(description="A report that takes a long time.")
async def slow_report() -> str:
    await asyncio.sleep(30)
    return "done"


@app.tool(description="A tool that always fails.")
def broken() -> str:
    raise RuntimeError("the warehouse database is down")


def main() -> None:
    import uvicorn

    port = int(sys.argv[1])
    key = sys.argv[2] if len(sys.argv) > 2 else None
    inner = app.streamable_http_app(host="127.0.0.1")

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and key is not None:
            headers = dict(scope.get("headers") or [])
            if headers.get(b"x-api-key", b"").decode() != key:
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain")]})  # fmt: skip
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await inner(scope, receive, send)

    uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", lifespan="on")


if __name__ == "__main__":
    main()
