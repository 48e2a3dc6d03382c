"""CopilotLlamaClient against a fake llama.cpp server (its two endpoints, on 127.0.0.1), and
against the bundled one: the answer reuses what was read ahead and reads 3-4 tokens more (slow)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from agent.adapters.llm.openai_chat import ReplySettings
from agent.adapters.llm.prefill import (
    ANSWER_CUE,
    ANSWER_OPENING,
    ROLES_LINE,
    CopilotLlamaClient,
    PrefillResult,
    _after_opening,
    llama_client_for,
)
from agent.copilot.prompts import COPILOT_SYSTEM_PROMPT, copilot_messages
from tests.local_http import serve_app

QUESTION = "Tell me about a time you had an outage"
ANSWER_END = f"{ANSWER_CUE} {ANSWER_OPENING}"


def chatml(messages: list[dict[str, str]]) -> str:
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


class FakeLlamaServer:
    """TEST DOUBLE: llama.cpp's /apply-template (ChatML) and /completion, recording bodies; a
    streamed completion sends `words` (an SSE ping first), then the timings."""

    def __init__(self) -> None:
        self.completions: list[dict[str, Any]] = []
        self.templates = 0  # /apply-template requests
        self.status = 200
        self.words = [" ", " I", " led", " it."]
        self.sent = 0  # words streamed

    async def apply_template(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.templates += 1
        return web.json_response({"prompt": chatml(body["messages"])}, status=self.status)

    async def completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.completions.append(body)
        timings = {"cache_n": 120, "prompt_n": 3, "prompt_ms": 150.5}
        if not body.get("stream"):
            return web.json_response({"content": " x", "timings": timings})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b": ping\n\n")
        for word in self.words:
            await response.write(b"data: " + json.dumps({"content": word}).encode() + b"\n\n")
            self.sent += 1
            await asyncio.sleep(0.01)
        last = {"content": "", "stop": True, "timings": timings}
        await response.write(b"data: " + json.dumps(last).encode() + b"\n\n")
        return response


@pytest.fixture
async def fake_server() -> AsyncIterator[tuple[FakeLlamaServer, str]]:
    fake = FakeLlamaServer()
    app = web.Application()
    app.router.add_post("/apply-template", fake.apply_template)
    app.router.add_post("/completion", fake.completion)
    async with serve_app(app) as origin:
        yield fake, f"{origin}/v1"


@pytest.fixture
async def llama(
    fake_server: tuple[FakeLlamaServer, str],
) -> AsyncIterator[tuple[FakeLlamaServer, CopilotLlamaClient]]:
    """The fake server and a client of it with the default settings, closed afterwards."""
    fake, base_url = fake_server
    client = CopilotLlamaClient(base_url)
    yield fake, client
    await client.aclose()


def copilot_layout(messages: list[dict[str, str]], question: str) -> str:
    """The prompt of the copilot's layout up to the end of `question`, rendered by ChatML."""
    system, user = messages
    context = user["content"].removesuffix("Interviewer: " + question)
    return chatml([system, {"role": "user", "content": context + ROLES_LINE}]) + (
        "Interviewer: " + question
    )


async def test_a_read_ahead_is_the_answer_prompt_cut_after_the_question(
    llama: tuple[FakeLlamaServer, CopilotLlamaClient],
) -> None:
    fake, client = llama
    messages = copilot_messages(COPILOT_SYSTEM_PROMPT, [], QUESTION)
    result = await client.prefill(messages, QUESTION)

    [body] = fake.completions
    assert body["prompt"] == copilot_layout(messages, QUESTION)
    assert body["prompt"].endswith("<|im_start|>assistant\nInterviewer: " + QUESTION)
    assert body["n_predict"] == 0 and body["cache_prompt"] is True
    assert result == PrefillResult(cached=120, read=3, ms=150.5)


async def test_the_shared_head_is_rendered_once_for_every_question(
    llama: tuple[FakeLlamaServer, CopilotLlamaClient],
) -> None:
    fake, client = llama
    other = copilot_messages(COPILOT_SYSTEM_PROMPT, [], "Why payments?")
    await client.prefill(copilot_messages(COPILOT_SYSTEM_PROMPT, [], QUESTION), QUESTION)
    _ = [w async for w in client.stream(other)]
    assert fake.templates == 1  # the system prompt (and documents) did not change
    await client.prefill(copilot_messages("Another system prompt.", [], QUESTION), QUESTION)
    assert fake.templates == 2
    assert fake.completions[1]["prompt"] == copilot_layout(other, "Why payments?") + ANSWER_END
    assert fake.completions[2]["prompt"].startswith("<|im_start|>system\nAnother system")


async def test_an_answer_continues_the_question_after_a_short_cue(
    fake_server: tuple[FakeLlamaServer, str],
) -> None:
    fake, base_url = fake_server
    client = CopilotLlamaClient(
        base_url, reply=ReplySettings(max_tokens=50, temperature=0.2, stop=("END",))
    )
    reads: list[PrefillResult] = []
    client.on_answer_read = reads.append
    question = QUESTION + " in production?"
    messages = copilot_messages(COPILOT_SYSTEM_PROMPT, [], question)
    try:
        words = [w async for w in client.stream(messages)]
    finally:
        await client.aclose()

    assert words == ["I", " led", " it."]  # no ping, no space before the answer
    [body] = fake.completions
    assert body["prompt"] == copilot_layout(messages, question) + ANSWER_END
    assert ANSWER_END == "\nMe: I"  # the answer's first word: the candidate speaks
    assert (body["stream"], body["cache_prompt"], body["n_predict"], body["temperature"]) == (
        True,
        True,
        50,
        0.2,
    )
    # not the next exchange it imagines, nor a second answer
    assert body["stop"] == ["END", "\nInterviewer:", "\nMe:"]
    assert reads == [PrefillResult(cached=120, read=3, ms=150.5)]


def test_the_answer_goes_on_from_the_opening_in_the_prompt() -> None:
    assert _after_opening(" studied in Munich.") == "I studied in Munich."
    assert _after_opening("'m a nurse.") == "I'm a nurse."
    assert _after_opening(" I led it.") == "I led it."  # the model said it again
    assert _after_opening(" I") == "I"
    assert _after_opening("  ") == ""


async def test_closing_an_answer_early_closes_its_response(
    llama: tuple[FakeLlamaServer, CopilotLlamaClient],
) -> None:
    fake, client = llama
    fake.words = [f" w{i}" for i in range(100)]
    stream = client.stream(copilot_messages("S", [], QUESTION))
    assert await anext(stream) == "I w0"  # type: ignore[arg-type]
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)
    assert fake.sent < 10  # the server's writes failed once the client had gone


async def test_a_server_error_is_raised(
    llama: tuple[FakeLlamaServer, CopilotLlamaClient],
) -> None:
    fake, client = llama
    fake.status = 404  # not llama.cpp
    with pytest.raises(Exception, match="404"):
        await client.prefill(copilot_messages("S", [], QUESTION), QUESTION)
    assert fake.completions == []


def test_only_the_bundled_local_server_gets_a_client_with_the_chat_clients_settings() -> None:
    from agent.adapters.llm.llama_server import DEFAULT_MODEL_NAME

    class Client:
        def __init__(self, base_url: str | None, model: str = DEFAULT_MODEL_NAME) -> None:
            self.base_url, self.model = base_url, model
            self.reply = ReplySettings(max_tokens=77, temperature=0.5, stop=("X",))

    local = llama_client_for(Client("http://127.0.0.1:8080/v1"))
    assert local is not None and local.root == "http://127.0.0.1:8080"
    assert (local.reply.max_tokens, local.reply.temperature, local.stop) == (
        77,
        0.5,
        ["X", "\nInterviewer:", "\nMe:"],
    )
    assert llama_client_for(Client("https://api.example.com/v1")) is None
    assert llama_client_for(Client(None)) is None
    # Another OpenAI-compatible server on this machine (a test double, a user's own server).
    assert llama_client_for(Client("http://127.0.0.1:8080/v1", model="other")) is None
    assert llama_client_for(object()) is None


@pytest.mark.slow
async def test_the_bundled_servers_answer_reuses_what_was_read_ahead() -> None:
    from agent.adapters.llm.llama_server import LocalLLMServer

    server = LocalLLMServer(n_parallel=1)
    base_url = await asyncio.to_thread(server.start)
    client = CopilotLlamaClient(
        base_url, reply=ReplySettings(max_tokens=1), timeout_s=120
    )  # a cold system prompt
    reads: list[PrefillResult] = []
    client.on_answer_read = reads.append
    start, final = "Tell me about a time", QUESTION + " in production?"
    try:
        partial = await client.prefill(copilot_messages(COPILOT_SYSTEM_PROMPT, [], start), start)
        grown = await client.prefill(
            copilot_messages(COPILOT_SYSTEM_PROMPT, [], QUESTION), QUESTION
        )
        words = [w async for w in client.stream(copilot_messages(COPILOT_SYSTEM_PROMPT, [], final))]
    finally:
        await client.aclose()
        await asyncio.to_thread(server.stop)

    assert partial.cached + partial.read < grown.cached + grown.read
    assert grown.cached >= partial.cached + partial.read - 1  # only a grown last word again
    assert "".join(words).strip()
    # The answer reads only " in production?" (2-3 tokens), the cue and the opening after it
    # ("\nMe: I": 3 more; 2 of them in the question's prompt).
    [answer] = reads
    assert answer.cached == grown.cached + grown.read
    assert answer.read <= 3 + 3


async def test_the_exchange_before_is_in_the_answers_turn_and_read_ahead_with_the_head(
    llama: tuple[FakeLlamaServer, CopilotLlamaClient],
) -> None:
    """The previous question and answer open the assistant's turn, after the line that says who
    is who (before it, the model took that line for the answer to go on with); the prompt up
    to where the next question goes is a prefix of the follow-up's."""
    fake, client = llama
    exchange = (QUESTION + "?", "I wrote the on-call handbook.")
    head = copilot_messages(COPILOT_SYSTEM_PROMPT, [], "", exchange)
    follow_up = copilot_messages(COPILOT_SYSTEM_PROMPT, [], "How long did it take?", exchange)
    await client.prefill(head, "")
    _ = [w async for w in client.stream(follow_up)]

    read_ahead, answer = (body["prompt"] for body in fake.completions)
    dialogue = (
        f"Interviewer: {QUESTION}?\nMe: I wrote the on-call handbook.\n"
        "Interviewer: How long did it take?"
    )
    assert (
        answer
        == chatml(
            [
                {"role": "system", "content": COPILOT_SYSTEM_PROMPT},
                {"role": "user", "content": ROLES_LINE},
            ]
        )
        + dialogue
        + ANSWER_END
    )
    assert answer.startswith(read_ahead) and read_ahead.endswith("\nInterviewer: ")
