"""The first-token budget: a slow or failing primary LLM hands over to the fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from agent.adapters.llm.fallback import FallbackLLM
from agent.testing.scripted_llm import ScriptedLLM

MESSAGES = [{"role": "user", "content": "hi"}]


class FailingLLM:
    """A test double whose request fails after `after_s`."""

    def __init__(self, after_s: float = 0.0) -> None:
        self.after_s = after_s

    async def stream(self, messages: list) -> AsyncIterator[str]:
        await asyncio.sleep(self.after_s)
        raise ConnectionError("provider down")
        yield ""  # pragma: no cover - makes this an async generator


async def collect(llm: FallbackLLM) -> str:
    return "".join([d async for d in llm.stream(MESSAGES)])


async def test_fast_primary_answers_and_fallback_is_never_asked() -> None:
    reasons: list[str] = []
    llm = FallbackLLM(
        ScriptedLLM(["primary reply"], ttft_ms=50, words_per_s=100),
        ScriptedLLM(["fallback reply"], ttft_ms=10),
        first_token_budget_s=0.3,
        on_fallback=reasons.append,
    )
    assert await collect(llm) == "primary reply"
    assert reasons == []


async def test_slow_primary_is_raced_by_the_fallback_which_wins() -> None:
    reasons: list[str] = []
    llm = FallbackLLM(
        ScriptedLLM(["primary reply"], ttft_ms=2000),
        ScriptedLLM(["fallback reply"], ttft_ms=50, words_per_s=100),
        first_token_budget_s=0.2,
        on_fallback=reasons.append,
    )
    start = asyncio.get_running_loop().time()
    assert await collect(llm) == "fallback reply"
    assert asyncio.get_running_loop().time() - start < 1.0
    assert reasons == ["primary slow to first token"]


async def test_slow_primary_still_wins_if_it_speaks_before_the_fallback() -> None:
    llm = FallbackLLM(
        ScriptedLLM(["primary reply"], ttft_ms=300, words_per_s=100),
        ScriptedLLM(["fallback reply"], ttft_ms=2000),
        first_token_budget_s=0.2,
    )
    assert await collect(llm) == "primary reply"


async def test_failing_primary_hands_over_at_once() -> None:
    reasons: list[str] = []
    llm = FallbackLLM(
        FailingLLM(),
        ScriptedLLM(["fallback reply"], ttft_ms=10),
        first_token_budget_s=5.0,
        on_fallback=reasons.append,
    )
    start = asyncio.get_running_loop().time()
    assert await collect(llm) == "fallback reply"
    assert asyncio.get_running_loop().time() - start < 1.0
    assert reasons and reasons[0].startswith("primary failed")


async def test_both_failing_raises() -> None:
    llm = FallbackLLM(FailingLLM(), FailingLLM(after_s=0.05), first_token_budget_s=5.0)
    with pytest.raises(ConnectionError):
        await collect(llm)


async def test_closing_the_stream_cancels_both_models() -> None:
    llm = FallbackLLM(
        ScriptedLLM(["one two three four five six"], ttft_ms=2000),
        ScriptedLLM(["a b c d e f g h"], ttft_ms=10, words_per_s=5),
        first_token_budget_s=0.1,
    )
    stream = llm.stream(MESSAGES)
    assert (await anext(stream)).strip() == "a"
    await stream.aclose()
    await asyncio.sleep(0)
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftover == []


# --- against real servers (slow): a slow OpenAI-compatible primary, the bundled fallback -------


@pytest.fixture(scope="module")
def bundled_llm_url() -> Iterator[str]:
    from agent.adapters.llm.llama_server import LocalLLMServer

    server = LocalLLMServer(n_parallel=1)
    url = server.start()
    server.warm("You are terse.")  # as the worker does at start: the first request is cold
    yield url
    server.stop()


@pytest.mark.slow
async def test_slow_compatible_server_hands_over_to_the_bundled_llm(bundled_llm_url) -> None:
    from agent.adapters.llm.llama_server import DEFAULT_MODEL_NAME
    from agent.adapters.llm.openai_chat import OpenAIChatLLM, ReplySettings
    from agent.testing.scripted_llm_server import scripted_llm_server

    reasons: list[str] = []
    # The primary is the scripted test double behind a real OpenAI-compatible HTTP endpoint;
    # its first word would come after 10 s (the server's shutdown waits for that).
    async with scripted_llm_server(ScriptedLLM(["primary reply"], ttft_ms=10_000)) as slow_url:
        primary = OpenAIChatLLM(model="slow", base_url=slow_url)
        fallback = OpenAIChatLLM(
            model=DEFAULT_MODEL_NAME, base_url=bundled_llm_url, reply=ReplySettings(max_tokens=12)
        )
        llm = FallbackLLM(primary, fallback, first_token_budget_s=0.3, on_fallback=reasons.append)
        try:
            reply = await collect(llm)
        finally:
            await primary.aclose()
            await fallback.aclose()
    assert reply.strip() and "primary reply" not in reply  # the bundled model answered
    assert reasons == ["primary slow to first token"]
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftover == []


async def test_a_tool_call_is_a_first_token_and_the_tools_reach_the_model() -> None:
    from agent.adapters.llm.fallback import FallbackLLM
    from agent.engines import ToolCall, ToolSpec
    from agent.testing.scripted_llm import ScriptedLLM, ScriptedToolTurn

    turn = ScriptedToolTurn(tool="get_weather", arguments={"city": "Oslo"})
    spec = ToolSpec("get_weather", "The weather.", {"type": "object", "properties": {}})
    llm = FallbackLLM(
        ScriptedLLM([turn], ttft_ms=0),
        ScriptedLLM(["fallback"], ttft_ms=0),
        first_token_budget_s=1.0,
    )
    out = [d async for d in llm.stream([{"role": "user", "content": "Weather?"}], [spec])]
    assert [type(d) for d in out] == [ToolCall] and out[0].name == "get_weather"
