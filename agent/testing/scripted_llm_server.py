"""ScriptedLLM (a TEST DOUBLE, see agent/testing/scripted_llm.py) served as an OpenAI-compatible
chat endpoint: its replies stream as server-sent events, so that a worker's real OpenAI client
path, or another framework's OpenAI plugin, can talk to it. Used by `voxroom bench --path
livekit` (a repeatable LLM with a fixed time to first token), by `voxroom loadtest` (a
remote-like LLM: a random extra delay before the first token) and by the end-to-end tests
(which read the requests it received)."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Protocol

from aiohttp import web

from agent.engines import ToolCall, ToolSpec
from agent.testing.ports import loopback_socket, port_of
from agent.testing.scripted_llm import ScriptedLLM


class RequestSink(Protocol):
    """Where the server appends each request body: a list, or one that keeps more with it
    (bench.livekit_path.RequestLog: the time it came in)."""

    def append(self, body: dict[str, Any], /) -> None: ...


@asynccontextmanager
async def scripted_llm_server(
    llm: ScriptedLLM,
    *,
    requests: RequestSink | None = None,
    extra_ttft_ms: tuple[float, float] = (0.0, 0.0),
    seed: int = 0,
    host: str = "127.0.0.1",
    port: int = 0,
) -> AsyncIterator[str]:
    """Serves /v1/chat/completions on loopback (or `host`, `port`: a container's address
    for other containers); yields the base URL (…/v1).

    Every request body is appended to `requests` when given. Before each reply's first
    token the server waits a uniform random `extra_ttft_ms` (low, high) on top of the
    script's own `ttft_ms`, as a remote LLM's queueing and prefill vary (seeded: repeatable).
    """
    low, high = extra_ttft_ms
    if not 0 <= low <= high:
        raise ValueError("extra_ttft_ms must be (low, high) with 0 <= low <= high")
    jitter = random.Random(seed)

    async def completions(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:  # the client may leave at any moment, even before its request is read
            body = await request.json()
            if requests is not None:
                requests.append(body)
            await resp.prepare(request)
            if high > 0:
                await asyncio.sleep(jitter.uniform(low, high) / 1000)
            model = body.get("model", "scripted")
            calls = 0
            offered = _offered(body)  # a double that takes no tools is never given them
            stream = (
                llm.stream(body["messages"], offered) if offered else llm.stream(body["messages"])
            )
            async for delta in stream:
                if isinstance(delta, ToolCall):
                    for piece in _tool_call_deltas(delta, calls):
                        await resp.write(_event(model, piece))
                    calls += 1
                else:
                    await resp.write(_event(model, {"content": delta}))
            await resp.write(_event(model, {}, "tool_calls" if calls else "stop"))
            await resp.write(b"data: [DONE]\n\n")
        except ConnectionResetError:
            pass  # the client cancelled the reply (a barge-in, a speculative start dropped)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = loopback_socket(host, port)
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://{host}:{port_of(sock)}/v1"
    finally:
        await runner.cleanup()


def _offered(body: dict[str, Any]) -> list[ToolSpec]:
    """The request's `tools`, as the double's stream takes them."""
    return [
        ToolSpec(
            t["function"]["name"],
            t["function"].get("description", ""),
            t["function"].get("parameters", {}),
        )
        for t in body.get("tools") or []
        if t.get("type") == "function"
    ]


def _tool_call_deltas(call: ToolCall, index: int) -> list[dict[str, Any]]:
    """A call as OpenAI streams it: id and name first, the arguments in two pieces."""
    half = len(call.arguments) // 2
    head = {
        "index": index,
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": ""},
    }
    return [{"tool_calls": [head]}] + [
        {"tool_calls": [{"index": index, "function": {"arguments": part}}]}
        for part in (call.arguments[:half], call.arguments[half:])
    ]


def _event(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    chunk = {
        "id": "scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(chunk)}\n\n".encode()
