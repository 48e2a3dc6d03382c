"""Tool calls in the reply loop, in virtual time: the turn engine with the scripted LLM double
calling tools of a Toolbox (each a small async function here), real VAD on espeak-ng speech.

What a voice user would notice: the answer uses the tool's result; a slow tool gets a spoken
filler instead of silence; a barge-in cancels the call; a tool that changes something never
runs on a speculative start, only once on the confirmed turn; a broken tool gets a short spoken
apology; and the history keeps the calls and results for the next turn."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from agent.adapters.llm.history import ChatHistory
from agent.adapters.tools.base import Tool, ToolContext
from agent.adapters.tools.toolbox import Toolbox
from agent.engines import INPUT_RATE, ChatMessage, ToolCall, ToolSpec
from agent.pipeline.tool_round import (
    CANCELLED_RESULT,
    FILLER_AFTER_S,
    FILLER_TEXTS,
    TOOL_APOLOGY,
)
from agent.testing.scripted_llm import ScriptedLLM, ScriptedToolTurn
from bench.speech import espeak, last_voiced_sample
from tests.test_turn_engine import FakeSTT, ScriptedTurnDetector, ToneTTS, converse, of

WEATHER = ScriptedToolTurn(
    tool="get_weather", arguments={"city": "Oslo"}, answer="In Oslo it is {result} right now."
)


class RecordingTool:
    """An async tool function that records each call's start and end (loop time) and can be
    slow, fail, or return something odd."""

    def __init__(
        self,
        result: Any = "sunny and twelve degrees",
        *,
        delay_s: float = 0.0,
        error: Exception | None = None,
    ) -> None:
        self.result, self.delay_s, self.error = result, delay_s, error
        self.started: list[float] = []
        self.finished: list[float] = []
        self.cancelled = 0

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> Any:
        loop = asyncio.get_running_loop()
        self.started.append(loop.time())
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.error is not None:
            raise self.error
        self.finished.append(loop.time())
        return self.result


def weather_tool(fn: RecordingTool, *, read_only: bool = True, timeout_s: float = 5.0) -> Tool:
    spec = ToolSpec(
        "get_weather",
        "The weather in a city now.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    return Tool(spec, read_only=read_only, timeout_s=timeout_s, source="test", invoke=fn)


def speech_then_silence(
    *texts_and_pauses: str | float, tail_s: float = 5.0
) -> tuple[np.ndarray, float]:
    """espeak-ng speech and silences in order; returns the audio and the end of the last
    voice (s)."""
    parts: list[np.ndarray] = [np.zeros(INPUT_RATE // 2, np.int16)]
    end = 0.0
    for item in texts_and_pauses:
        if isinstance(item, str):
            speech = espeak(item)
            end = (sum(len(p) for p in parts) + last_voiced_sample(speech)) / INPUT_RATE
            parts.append(speech)
        else:
            parts.append(np.zeros(int(item * INPUT_RATE), np.int16))
    parts.append(np.zeros(int(tail_s * INPUT_RATE), np.int16))
    return np.concatenate(parts), end


@pytest.fixture(scope="module")
def question() -> tuple[np.ndarray, float]:
    return speech_then_silence("What is the weather in Oslo right now?")


def test_the_answer_uses_the_tools_result_and_the_history_keeps_the_call(question) -> None:
    pcm, _ = question
    fn = RecordingTool()
    history = ChatHistory("system")
    events = converse(
        pcm,
        FakeSTT(),
        llm=ScriptedLLM([WEATHER], sleep=asyncio.sleep),
        history=history,
        toolbox=Toolbox([weather_tool(fn)]),
    )

    [turn] = of(events, "turn")
    assert turn["agent_text"] == "In Oslo it is sunny and twelve degrees right now."
    assert not turn["interrupted"] and len(fn.started) == 1
    call, result = turn["tool_messages"]
    assert call["role"] == "assistant"
    assert call["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert result == {
        "role": "tool",
        "tool_call_id": call["tool_calls"][0]["id"],
        "content": "sunny and twelve degrees",
    }
    # The next turn's prompt: the question, the call, its result, then what was heard.
    assert [m["role"] for m in history.turns] == ["user", "assistant", "tool", "assistant"]
    [called] = of(events, "tool_called")
    assert called["name"] == "get_weather" and called["ok"]


def test_a_slow_tool_gets_a_spoken_filler_instead_of_silence() -> None:
    pcm, _ = speech_then_silence("What is the weather in Oslo right now?", tail_s=10.0)
    fn = RecordingTool(delay_s=3.0)
    tts = ToneTTS()
    events = converse(
        pcm,
        FakeSTT(),
        tts=tts,
        llm=ScriptedLLM([WEATHER], sleep=asyncio.sleep),
        toolbox=Toolbox([weather_tool(fn)]),
    )

    [started] = of(events, "reply_started")
    [audio] = of(events, "audio_start")
    # The call comes after the scripted 150 ms; the filler FILLER_AFTER_S after the call.
    assert audio["t"] == pytest.approx(started["t"] + 0.15 + FILLER_AFTER_S, abs=0.05)
    [turn] = of(events, "turn")
    # The filler was heard but is not part of the answer or the history.
    assert (
        turn["heard_text"]
        == turn["agent_text"]
        == ("In Oslo it is sunny and twelve degrees right now.")
    )
    assert set(FILLER_TEXTS) <= set(tts.texts)  # prepared at start
    # Nothing stalled the reply while the tool worked: it was never cut as "stalled".
    assert not of(events, "reply_cancelled")


def test_a_barge_in_cancels_a_running_tool_and_the_history_says_so() -> None:
    pcm, _ = speech_then_silence(
        "What is the weather in Oslo right now?",
        2.0,
        "No wait, tell me about Bergen instead please.",
    )
    fn = RecordingTool(delay_s=10.0)
    history = ChatHistory("system")
    events = converse(
        pcm,
        FakeSTT(),
        llm=ScriptedLLM([WEATHER, "Bergen is rainy."], sleep=asyncio.sleep),
        history=history,
        toolbox=Toolbox([weather_tool(fn, timeout_s=30)]),
    )

    assert fn.cancelled == 1 and not fn.finished
    first = of(events, "turn")[0]
    assert first["interrupted"]
    assert first["tool_messages"][1]["content"] == CANCELLED_RESULT
    assert of(events, "barge_in")


class ToolCallLog:
    """Wraps the scripted LLM double: records each reply's request (whether it was offered
    tools) and the calls it made."""

    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm
        self.calls: list[ToolCall] = []
        self.offered: list[list[str]] = []

    async def stream(self, messages: list[ChatMessage], tools: Any = ()) -> Any:
        self.offered.append([t.name for t in tools])
        async for delta in self.llm.stream(messages, tools):
            if isinstance(delta, ToolCall):
                self.calls.append(delta)
            yield delta


@pytest.mark.parametrize("read_only", [False, True])
def test_a_speculative_start_never_runs_a_side_effect(read_only: bool) -> None:
    """The user pauses mid-request (an unfinished score keeps the turn open); the speculative
    reply calls the tool; the user goes on, the speculation is dropped; the confirmed turn
    calls it again. A tool that changes something ran once, after the turn was confirmed; a
    read-only one may have run for the speculation too."""
    pcm, _ = speech_then_silence("Book me a table", 0.5, "for two at eight tonight.")
    fn = RecordingTool("booked")
    log = ToolCallLog(
        ScriptedLLM(
            [ScriptedToolTurn(tool="get_weather", answer="Done: {result}.")], sleep=asyncio.sleep
        )
    )
    events = converse(
        pcm,
        FakeSTT(),
        llm=log,
        detector=ScriptedTurnDetector(0.0),
        toolbox=Toolbox([weather_tool(fn, read_only=read_only)]),
    )

    speculative = [e for e in of(events, "reply_started") if e["speculative"]]
    assert speculative, "the pause started a speculative reply"
    assert len(log.calls) >= 2, "the speculative reply made its call before it was dropped"
    cancelled = of(events, "reply_cancelled")
    assert cancelled and cancelled[0]["reply_id"] == speculative[0]["reply_id"]
    [turn] = of(events, "turn")
    assert turn["agent_text"] == "Done: booked."
    if read_only:
        assert len(fn.started) == len(log.calls)  # each call ran, the speculation's too
    else:
        # Two calls were made and one ran: the speculation's never did.
        assert len(fn.started) == 1


def test_a_tool_with_side_effects_runs_once_on_the_confirmed_turn(question) -> None:
    pcm, _ = question
    fn = RecordingTool("booked")
    events = converse(
        pcm,
        FakeSTT(),
        llm=ScriptedLLM([WEATHER], sleep=asyncio.sleep),
        toolbox=Toolbox([weather_tool(fn, read_only=False)]),
    )
    assert len(fn.started) == 1
    [turn] = of(events, "turn")
    assert turn["agent_text"] == "In Oslo it is booked right now."


@pytest.mark.parametrize(
    "fn",
    [
        RecordingTool(error=RuntimeError("the weather service is down")),
        RecordingTool(delay_s=60.0),  # past its 2 s timeout
        RecordingTool(result={"not": "text"}),
    ],
    ids=["raises", "hangs", "garbage"],
)
def test_a_broken_tool_gets_a_short_spoken_apology(question, fn: RecordingTool, caplog) -> None:
    pcm, _ = question
    events = converse(
        pcm,
        FakeSTT(),
        llm=ScriptedLLM([WEATHER], sleep=asyncio.sleep),
        toolbox=Toolbox([weather_tool(fn, timeout_s=2.0)]),
    )
    [turn] = of(events, "turn")
    assert turn["agent_text"] == turn["heard_text"] == TOOL_APOLOGY
    [called] = of(events, "tool_called")
    assert not called["ok"]
    assert turn["tool_messages"][1]["content"].startswith("Error:")
    assert "tool get_weather failed" in caplog.text


def test_an_oversized_result_reaches_the_llm_bounded(question) -> None:
    pcm, _ = question
    fn = RecordingTool("x" * 5_000_000)
    box = Toolbox([weather_tool(fn)], max_result_chars=1000)
    seen: list[list[ChatMessage]] = []

    class Recording(ScriptedLLM):
        def stream(self, messages: list[ChatMessage], tools: Any = ()) -> Any:
            seen.append(messages)
            return super().stream(messages, tools)

    converse(pcm, FakeSTT(), llm=Recording([WEATHER], sleep=asyncio.sleep), toolbox=box)
    result = seen[-1][-1]
    assert result["role"] == "tool" and len(result["content"]) <= 1000 + len(" [truncated]")


def test_no_toolbox_offers_no_tools(question) -> None:
    pcm, _ = question
    log = ToolCallLog(ScriptedLLM([WEATHER], sleep=asyncio.sleep))
    events = converse(pcm, FakeSTT(), llm=log)
    assert log.offered and all(o == [] for o in log.offered)
    [turn] = of(events, "turn")
    assert turn["agent_text"] == WEATHER.without_tool


class SlowToAnswerLLM(ScriptedLLM):
    """The scripted LLM double, taking `answer_delay_s` more to start reading a tool's result
    (a small local model on a busy machine)."""

    def __init__(self, *args: Any, answer_delay_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.answer_delay_s = answer_delay_s

    async def stream(self, messages: list[ChatMessage], tools: Any = ()) -> Any:
        if messages[-1]["role"] == "tool":
            await asyncio.sleep(self.answer_delay_s)
        async for delta in super().stream(messages, tools):
            yield delta


def test_fillers_go_on_while_the_llm_reads_a_tools_result() -> None:
    """A fast tool, then 6 s before the LLM's answer starts: the listener hears fillers, not
    silence; the reply is neither given up on nor cut as stalled."""
    pcm, _ = speech_then_silence("What is the weather in Oslo right now?", tail_s=12.0)
    llm = SlowToAnswerLLM([WEATHER], sleep=asyncio.sleep, answer_delay_s=6.0)
    events = converse(pcm, FakeSTT(), llm=llm, toolbox=Toolbox([weather_tool(RecordingTool())]))
    [turn] = of(events, "turn")
    assert (
        turn["agent_text"]
        == turn["heard_text"]
        == ("In Oslo it is sunny and twelve degrees right now.")
    )
    assert not of(events, "reply_cancelled")
    assert of(events, "audio_start")[0]["t"] < of(events, "tool_called")[0]["t"] + 1.0


class RepeatingLLM(ScriptedLLM):
    """The scripted LLM double as a small model behaves: it answers a tool's result by calling
    the same tool again."""

    async def stream(self, messages: list[ChatMessage], tools: Any = ()) -> Any:
        await asyncio.sleep(0.15)
        yield ToolCall(f"call_{len(messages)}", "get_weather", '{"city": "Oslo"}')


def test_a_model_that_repeats_its_call_is_answered_with_the_tools_result(question) -> None:
    pcm, _ = question
    fn = RecordingTool("Oslo: sunny and twelve degrees")
    events = converse(
        pcm, FakeSTT(), llm=RepeatingLLM(["unused"]), toolbox=Toolbox([weather_tool(fn)])
    )
    [turn] = of(events, "turn")
    assert len(fn.started) == 1  # the repeated call did not run again
    assert turn["agent_text"] == turn["heard_text"] == "Oslo: sunny and twelve degrees"
