"""A chat agent for OpenRealtime's voice runtime (docs/agent_protocol.md), in one file.

Run it, then the runtime in front of it:
    ECHO_AGENT_TOKEN=s3cret uvicorn examples.echo_agent:app --port 8700
    OPENREALTIME_BRAIN=http OPENREALTIME_AGENT_URL=http://127.0.0.1:8700/turn \
        OPENREALTIME_AGENT_TOKEN=s3cret make run
(or give one role this agent: PATCH /api/roles/{id} with agent_url and agent_secret).
It echoes what it hears, tells a long story slowly (interrupt it: it sees the stream close),
and looks things up with the runtime's knowledge search when asked to.
"""

import asyncio
import json
import os

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

app = FastAPI()
requests: list[dict] = []
closed_early = [0]


def event(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"


async def answer(turn: dict):
    words, said = turn["input"].lower(), "".join
    if turn["tool_results"]:  # our lookup came back: say what it found
        found = turn["tool_results"][0]["content"][:200]
        yield event("text", {"delta": f"Here is what I found: {found}"})
    elif "look up" in words and any(t["name"] == "knowledge_search" for t in turn["tools"]):
        query = words.split("look up", 1)[1].strip() or words
        yield event(
            "tool_call",
            {"call_id": "call_1", "name": "knowledge_search", "arguments": {"query": query}},
        )
    elif "story" in words:
        told = False
        try:
            for word in ("Once upon a time, " * 40).split(" "):
                yield event("text", {"delta": word + " "})
                await asyncio.sleep(0.05)
            told = True
        finally:  # the person interrupted: the runtime closed the stream, we stop here
            closed_early[0] += 0 if told else 1
    else:
        heard = turn["previous_answer"] or {}
        cut = " (You cut me off earlier.)" if heard.get("interrupted") else ""
        yield event("text", {"delta": said(["You said: ", turn["input"], ".", cut])})
    yield event("done", {})


@app.post("/turn")
async def turn(request: Request) -> Response:
    token = os.environ.get("ECHO_AGENT_TOKEN")
    if token and request.headers.get("authorization") != f"Bearer {token}":
        return JSONResponse({"error": "unauthorized"}, status_code=401)
    body = await request.json()
    requests.append(body)
    return StreamingResponse(answer(body), media_type="text/event-stream")


@app.get("/seen")
async def stats() -> dict:
    return {"requests": requests, "closed_early": closed_early[0]}
