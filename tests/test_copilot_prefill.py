"""LlamaPrefill against a fake llama.cpp server (its two endpoints, on 127.0.0.1), and against
the bundled one: the answer's chat request reuses what the prefill read (slow)."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from agent.copilot_engine import COPILOT_SYSTEM_PROMPT, copilot_messages
from agent.copilot_prefill import LlamaPrefill, llama_prefill_for

QUESTION = "Tell me about a time you had an outage"


def chatml(messages: list[dict[str, str]]) -> str:
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


class FakeLlamaServer:
    """TEST DOUBLE: llama.cpp's /apply-template (ChatML) and /completion, recording bodies."""

    def __init__(self) -> None:
        self.completions: list[dict[str, Any]] = []
        self.status = 200

    async def apply_template(self, request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"prompt": chatml(body["messages"])}, status=self.status)

    async def completion(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.completions.append(body)
        return web.json_response({"content": " x", "timings": {
            "cache_n": 120, "prompt_n": 3, "prompt_ms": 150.5}})


@pytest.fixture
async def fake_server() -> AsyncIterator[tuple[FakeLlamaServer, str]]:
    fake = FakeLlamaServer()
    app = web.Application()
    app.router.add_post("/apply-template", fake.apply_template)
    app.router.add_post("/completion", fake.completion)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield fake, f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


async def test_the_prompt_is_the_rendered_answer_prompt_cut_after_the_question(
    fake_server: tuple[FakeLlamaServer, str],
) -> None:
    fake, base_url = fake_server
    prefill = LlamaPrefill(base_url)
    messages = copilot_messages(COPILOT_SYSTEM_PROMPT, [], QUESTION)
    try:
        result = await prefill.prefill(messages, QUESTION)
    finally:
        await prefill.aclose()

    [body] = fake.completions
    assert body["prompt"] == chatml(messages).removesuffix("<|im_end|>\n<|im_start|>assistant\n")
    assert body["prompt"].endswith("Interviewer: " + QUESTION)
    assert body["n_predict"] == 0 and body["cache_prompt"] is True
    assert (result.cached, result.read, result.ms) == (120, 3, 150.5)


async def test_a_server_error_is_raised(fake_server: tuple[FakeLlamaServer, str]) -> None:
    fake, base_url = fake_server
    fake.status = 404  # not llama.cpp
    prefill = LlamaPrefill(base_url)
    try:
        with pytest.raises(Exception, match="404"):
            await prefill.prefill(copilot_messages("S", [], QUESTION), QUESTION)
    finally:
        await prefill.aclose()
    assert fake.completions == []


def test_only_the_bundled_local_server_gets_a_prefill() -> None:
    class Client:
        def __init__(self, base_url: str | None) -> None:
            self.base_url = base_url

    assert llama_prefill_for(Client("http://127.0.0.1:8080/v1")) is not None
    assert llama_prefill_for(Client("https://api.example.com/v1")) is None
    assert llama_prefill_for(Client(None)) is None
    assert llama_prefill_for(object()) is None


@pytest.mark.slow
async def test_the_bundled_servers_chat_request_reuses_what_was_read_ahead() -> None:
    from agent.llm_local import LocalLLMServer

    server = LocalLLMServer(n_parallel=1)
    base_url = await asyncio.to_thread(server.start)
    prefill = LlamaPrefill(base_url)
    start, final = "Tell me about a time", QUESTION + " in production."
    try:
        partial = await prefill.prefill(
            copilot_messages(COPILOT_SYSTEM_PROMPT, [], start), start)
        grown = await prefill.prefill(
            copilot_messages(COPILOT_SYSTEM_PROMPT, [], QUESTION), QUESTION)
        body = {"messages": copilot_messages(COPILOT_SYSTEM_PROMPT, [], final),
                "max_tokens": 1, "cache_prompt": True}

        def chat() -> dict[str, Any]:
            request = urllib.request.Request(
                base_url + "/chat/completions", data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())

        timings = (await asyncio.to_thread(chat))["timings"]
    finally:
        await prefill.aclose()
        await asyncio.to_thread(server.stop)

    assert partial.cached + partial.read < grown.cached + grown.read
    assert grown.cached >= partial.cached + partial.read - 1  # only a grown last word again
    # The answer reads only " in production." and the template's tail (5 tokens).
    assert timings["cache_n"] == grown.cached + grown.read
    assert timings["prompt_n"] <= 3 + 5
