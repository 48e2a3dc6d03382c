"""ScriptedLLM (a TEST DOUBLE, see agent/llm_scripted.py) served as an OpenAI-compatible chat
endpoint: its replies stream as server-sent events, so that a worker's real OpenAI client
path, or another framework's OpenAI plugin, can talk to it. Used by `voxroom bench --path
livekit` (a repeatable LLM with a fixed time to first token) and by the end-to-end tests."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from agent.llm_scripted import ScriptedLLM


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@asynccontextmanager
async def scripted_llm_server(llm: ScriptedLLM) -> AsyncIterator[str]:
    """Serves /v1/chat/completions on loopback; yields the base URL (…/v1)."""

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            async for word in llm.stream(body["messages"]):
                chunk = {"id": "scripted", "object": "chat.completion.chunk", "created": 0,
                         "model": body.get("model", "scripted"),
                         "choices": [{"index": 0, "delta": {"content": word},
                                      "finish_reason": None}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
        except ConnectionResetError:
            pass  # the client cancelled the reply (a barge-in): nothing left to send
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    port = _free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()
