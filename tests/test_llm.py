"""The LLM adapters: the scripted test double, the OpenAI-compatible client (against a fake
server and against the bundled llama.cpp server), the local server and the factory."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import urllib.request
from pathlib import Path

import pytest

from agent.adapters.llm.openai_chat import LLMError, OpenAIChatLLM, ReplySettings
from agent.adapters.providers import make_llm, make_llm_from_spec, parse_llm_spec
from agent.config import ConfigError, LLMSettings
from agent.testing.scripted_llm import ScriptedLLM
from tests.fake_openai_server import fake_openai_server

SYSTEM = {"role": "system", "content": "You are terse."}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


class VirtualSleep:
    """Records the sleeps and advances a virtual clock instead of waiting."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


async def collect(stream) -> list[str]:
    return [delta async for delta in stream]


# --- ScriptedLLM ------------------------------------------------------------------------------


async def test_scripted_reply_is_chosen_by_user_turns_and_cycles() -> None:
    llm = ScriptedLLM(["One.", "Two.", "Three."], ttft_ms=0, sleep=VirtualSleep())
    history = [SYSTEM]
    replies = []
    for i in range(4):
        history.append(user(f"question {i}"))
        reply = "".join(await collect(llm.stream(history)))
        replies.append(reply)
        history.append(assistant(reply))
    assert replies == ["One.", "Two.", "Three.", "One."]


async def test_scripted_call_cancelled_before_first_word_does_not_consume_a_reply() -> None:
    llm = ScriptedLLM(["First answer.", "Second answer."], ttft_ms=10_000)
    history = [SYSTEM, user("hi")]
    task = asyncio.create_task(collect(llm.stream(history)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fast = ScriptedLLM(llm.replies, ttft_ms=0, sleep=VirtualSleep())
    assert "".join(await collect(fast.stream(history))) == "First answer."


async def test_scripted_streams_words_with_their_spaces_in_virtual_time() -> None:
    sleep = VirtualSleep()
    llm = ScriptedLLM(["Sure,  I can help."], ttft_ms=150, words_per_s=15, sleep=sleep)
    stamps = []
    async for word in llm.stream([user("help?")]):
        stamps.append((sleep.now, word))
    assert [w for _, w in stamps] == ["Sure,  ", "I ", "can ", "help."]
    times = [t for t, _ in stamps]
    assert times[0] == pytest.approx(0.150)
    assert [b - a for a, b in itertools.pairwise(times)] == pytest.approx([1 / 15] * 3)


async def test_closing_the_scripted_stream_stops_it() -> None:
    sleep = VirtualSleep()
    llm = ScriptedLLM(["a b c d e f g"], sleep=sleep)
    stream = llm.stream([user("go")])
    assert await anext(stream) == "a "
    await stream.aclose()
    slept = len(sleep.sleeps)
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    assert len(sleep.sleeps) == slept


def test_scripted_from_file_ignores_blank_lines(tmp_path: Path) -> None:
    script = tmp_path / "replies.txt"
    script.write_text("Héllo there.\n\n   \nSecond line.\n", encoding="utf-8")
    assert ScriptedLLM.from_file(script).replies == ["Héllo there.", "Second line."]
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="no replies"):
        ScriptedLLM.from_file(tmp_path / "empty.txt")


def test_scripted_by_text_keeps_replies_in_step_when_a_turn_too_many_was_taken() -> None:
    """A backchannel taken as a turn ("okay") would shift every later reply by the count;
    by_text picks by what was said (a word misheard still matches), the count is the
    fallback for what matches nothing."""
    by_text = {
        "What is the capital of Australia?": "Canberra.",
        "How far away is the moon?": "About 380,000 km.",
    }
    llm = ScriptedLLM(["Canberra.", "About 380,000 km.", "Spare."], by_text=by_text)
    history = [
        SYSTEM,
        user("What is the capital of Australia?"),
        assistant("Canberra."),
        user("Okay."),
    ]
    assert llm.reply_for(history) == "About 380,000 km."  # no match: the second turn's
    history += [assistant("About 380,000 km."), user("How far away is the mood?")]
    assert llm.reply_for(history) == "About 380,000 km."  # the third turn, by its words
    parts = {"role": "user", "content": [{"type": "text", "text": "the capital of Australia"}]}
    assert llm.reply_for([SYSTEM, parts]) == "Canberra."  # OpenAI's content parts
    assert ScriptedLLM(["A.", "B."]).reply_for([user("x"), user("y")]) == "B."  # as before


def test_scripted_unmatched_answers_what_matches_no_key() -> None:
    """A driver that knows what its user says (the bench) names the reply to a misheard one:
    "Hara mountain formed" gets the long answer it was to have, not the count's short reply."""
    llm = ScriptedLLM(["Sorry, shall I go on?"], by_text={"How are mountains formed?": "Plates."})
    history = [SYSTEM, user("Hara mountain formed")]
    assert llm.reply_for(history) == "Sorry, shall I go on?"
    llm.unmatched = "Well, there are many things to say about that."
    assert llm.reply_for(history) == llm.unmatched
    assert llm.reply_for([SYSTEM, user("How are mountain formed?")]) == "Plates."


def test_scripted_needs_a_user_turn() -> None:
    with pytest.raises(ValueError, match="no user turn"):
        ScriptedLLM(["x"]).reply_for([SYSTEM])


# --- OpenAIChatLLM against a fake server (fast) -----------------------------------------------


async def test_openai_client_streams_deltas_from_a_compatible_server() -> None:
    reply = "The capital of France is Paris."
    async with fake_openai_server(ScriptedLLM([reply], ttft_ms=10, words_per_s=200)) as url:
        llm = OpenAIChatLLM(model="anything", base_url=url)
        try:
            deltas = await collect(llm.stream([SYSTEM, user("capital of France?")]))
        finally:
            await llm.aclose()
    assert len(deltas) == len(reply.split())
    assert "".join(deltas) == reply


async def test_openai_client_aclose_makes_the_server_stop_streaming() -> None:
    server_sleep = SpySleep()
    script = ScriptedLLM(["word " * 500], ttft_ms=0, words_per_s=100, sleep=server_sleep)
    async with fake_openai_server(script) as url:
        llm = OpenAIChatLLM(model="anything", base_url=url)
        stream = llm.stream([user("talk")])
        assert (await anext(stream)).strip() == "word"
        await stream.aclose()
        await asyncio.sleep(0.3)  # the server notices the closed connection on its next write
        words_sent = server_sleep.calls
        await asyncio.sleep(0.3)
        await llm.aclose()
    assert server_sleep.calls == words_sent < 100


class SpySleep:
    """A real sleep that counts its calls (the fake server's progress)."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, seconds: float) -> None:
        self.calls += 1
        await asyncio.sleep(seconds)


async def test_openai_client_unreachable_server_raises_llm_error_fast() -> None:
    llm = OpenAIChatLLM(model="m", base_url="http://127.0.0.1:9/v1")  # discard port: refused
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"127\.0\.0\.1:9"):
        await collect(llm.stream([user("hi")]))
    assert time.monotonic() - started < 3.0  # no retries, short connect timeout
    await llm.aclose()


async def test_openai_client_stalled_or_endless_stream_raises_llm_error() -> None:
    async with fake_openai_server(ScriptedLLM(["a b c"], ttft_ms=0, words_per_s=1)) as url:
        stalled = OpenAIChatLLM(model="m", base_url=url, reply=ReplySettings(stall_timeout_s=0.3))
        endless = OpenAIChatLLM(model="m", base_url=url, reply=ReplySettings(max_duration_s=0.5))
        try:
            with pytest.raises(LLMError, match="timed out"):
                await collect(stalled.stream([user("hi")]))
            with pytest.raises(LLMError, match=r"took over 0\.5 s"):
                await collect(endless.stream([user("hi")]))
        finally:
            await stalled.aclose()
            await endless.aclose()


# --- factory ----------------------------------------------------------------------------------


def test_parse_llm_spec() -> None:
    assert parse_llm_spec("local") == ("local", "")
    assert parse_llm_spec("openai:gpt-4o-mini") == ("openai", "gpt-4o-mini")
    assert parse_llm_spec("script:/tmp/a:b.txt") == ("script", "/tmp/a:b.txt")
    for bad in ("", "local:x", "openai", "openai:", "script:", "gpt"):
        with pytest.raises(ConfigError, match="--llm"):
            parse_llm_spec(bad)


def test_make_llm_from_settings() -> None:
    with pytest.raises(ConfigError, match="local LLM server"):
        make_llm(LLMSettings(provider="local"))
    local = make_llm(LLMSettings(provider="local"), local_base_url="http://127.0.0.1:5/v1")
    assert isinstance(local, OpenAIChatLLM) and local.base_url == "http://127.0.0.1:5/v1"
    remote = make_llm(
        LLMSettings(provider="openai", model="m1", base_url="http://h:1/v1", max_tokens=7)
    )
    assert isinstance(remote, OpenAIChatLLM)
    assert (remote.base_url, remote.model, remote.reply.max_tokens) == ("http://h:1/v1", "m1", 7)


def test_make_llm_from_spec(tmp_path: Path) -> None:
    script = tmp_path / "s.txt"
    script.write_text("Hello.\n", encoding="utf-8")
    assert isinstance(make_llm_from_spec(f"script:{script}", LLMSettings()), ScriptedLLM)
    with pytest.raises(ConfigError, match=r"missing\.txt"):
        make_llm_from_spec(f"script:{tmp_path / 'missing.txt'}", LLMSettings())
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        make_llm_from_spec("openai:gpt-4o-mini", LLMSettings())
    llm = make_llm_from_spec("openai:gpt-4o-mini", LLMSettings(api_key="k"))
    assert isinstance(llm, OpenAIChatLLM) and llm.model == "gpt-4o-mini"
    local = make_llm_from_spec("local", LLMSettings(), local_base_url="http://127.0.0.1:5/v1")
    assert isinstance(local, OpenAIChatLLM)


# --- the bundled llama.cpp server (slow) ------------------------------------------------------


@pytest.fixture(scope="module")
def local_server():
    from agent.adapters.llm.llama_server import LocalLLMServer

    server = LocalLLMServer(n_parallel=2)
    server.start()
    server.warm(LLMSettings().system_prompt)
    yield server
    server.stop()


def _slots(base_url: str) -> list[dict]:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/slots", timeout=5) as r:
        return json.loads(r.read())


@pytest.mark.slow
async def test_local_server_streams_a_reply(local_server) -> None:
    assert local_server.base_url.startswith("http://127.0.0.1:")
    llm = OpenAIChatLLM(
        model="local", base_url=local_server.base_url, reply=ReplySettings(max_tokens=30)
    )
    try:
        deltas = await collect(
            llm.stream(
                [
                    {"role": "system", "content": LLMSettings().system_prompt},
                    user("What is the capital of France?"),
                ]
            )
        )
    finally:
        await llm.aclose()
    assert len(deltas) > 1
    assert "paris" in "".join(deltas).lower()


@pytest.mark.slow
async def test_closing_the_stream_stops_generation_on_the_local_server(local_server) -> None:
    max_tokens = 300
    llm = OpenAIChatLLM(
        model="local", base_url=local_server.base_url, reply=ReplySettings(max_tokens=max_tokens)
    )
    stream = llm.stream([user("Count from one to two hundred in words, one per line.")])
    for _ in range(3):
        await anext(stream)
    await stream.aclose()
    deadline = time.monotonic() + 30
    last_busy = None
    while busy := [
        s for s in await asyncio.to_thread(_slots, local_server.base_url) if s["is_processing"]
    ]:
        last_busy = busy[0]
        assert time.monotonic() < deadline, "the server kept generating after aclose"
        await asyncio.sleep(0.02)
    await llm.aclose()
    if last_busy is not None:  # stopped early, not by running out of tokens
        assert last_busy["next_token"][0]["n_decoded"] < max_tokens // 2


@pytest.mark.slow
def test_local_llm_child_process_serves_and_stops() -> None:
    from agent.adapters.llm.llama_server import LocalLLMProcess

    child = LocalLLMProcess(n_parallel=1)
    base_url = child.start()
    try:
        assert base_url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5) as r:
            assert json.loads(r.read())["status"] == "ok"
    finally:
        exit_code = child.stop()
    assert exit_code == 0  # a clean exit on SIGTERM
