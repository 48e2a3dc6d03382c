"""The tool benchmarks' plumbing: the spoken tool-use corpus, the scoring of a response
(tool, normalised arguments, no tool when none is needed), the answer checks and the summary;
the tool doubles as a worker's registry loads them. The benchmark runs themselves are not
tests (`voxroom bench tool-use` measures)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from bench import tool_use
from bench.tool_doubles import weather_of, weather_text
from bench.tool_use import (
    ANSWERED,
    NO_CALL,
    REQUESTS,
    RIGHT,
    SILENT,
    TOOLS,
    UNNEEDED_CALL,
    WRONG_ARGUMENTS,
    WRONG_TOOL,
    RequestResult,
    result_facts,
    speakable,
    summary,
    uses_result,
    verdict,
)


def test_the_corpus_has_twenty_requests_half_of_them_for_each_tool_and_none() -> None:
    assert len(REQUESTS) >= 20
    needing = [tool for _, tool, _ in REQUESTS if tool]
    assert len(needing) * 2 == len(REQUESTS)
    assert set(needing) == set(TOOLS)
    assert len({text for text, _, _ in REQUESTS}) == len(REQUESTS)
    # Each request's own arguments are right by the scoring's lights.
    for _, tool, args in REQUESTS:
        if tool:
            assert verdict(tool, args, [(tool, json.dumps(args))], "") == RIGHT


def test_the_registry_offers_the_builtin_clock_and_the_doubles_as_a_worker_would() -> None:
    from agent.adapters.tools.registry import ToolRegistry
    from agent.config import ToolsSettings

    registry = ToolRegistry(ToolsSettings(python=("bench.tool_doubles",)))
    registry.start()
    try:
        toolbox = registry.toolbox(TOOLS)
        assert toolbox.names == list(TOOLS)
        assert toolbox.get("current_time").source == "builtin"  # type: ignore[union-attr]
        assert toolbox.read_only("get_weather") and not toolbox.read_only("set_timer")
        timer = toolbox.get("set_timer")
        assert timer is not None and timer.spec.parameters["required"] == ["minutes"]
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("tool", "expected", "given"),
    [
        ("get_weather", {"city": "paris"}, {"city": "Paris, France"}),
        ("get_weather", {"city": "new york"}, {"city": " New  York "}),
        ("set_timer", {"minutes": 10}, {"minutes": "10"}),
        ("set_timer", {"minutes": 10}, {"minutes": "ten"}),
        ("set_timer", {"minutes": 5}, {"minutes": 5.0}),
        ("current_time", {"timezone": "America/New_York"}, {"timezone": "US/Eastern"}),
        ("current_time", {}, {"timezone": ""}),
        ("current_time", {}, {}),
    ],
)
def test_arguments_said_another_way_are_right(tool: str, expected: dict, given: dict) -> None:
    assert verdict(tool, expected, [(tool, json.dumps(given))], "") == RIGHT


@pytest.mark.parametrize(
    ("tool", "expected", "given"),
    [
        ("get_weather", {"city": "paris"}, {"city": "London"}),
        ("set_timer", {"minutes": 10}, {"minutes": 15}),
        # A zone with another offset, and one asked for nowhere (the user wants local time).
        ("current_time", {"timezone": "America/New_York"}, {"timezone": "EST"}),
        ("current_time", {}, {"timezone": "Europe/Oslo"}),
        # An argument the tool does not take makes the call fail.
        ("current_time", {}, {"timezone": "", "default": ""}),
        ("get_weather", {"city": "oslo"}, {"city": "Oslo", "unit": "C"}),
    ],
)
def test_wrong_or_extra_arguments_are_wrong(tool: str, expected: dict, given: dict) -> None:
    assert verdict(tool, expected, [(tool, json.dumps(given))], "") == WRONG_ARGUMENTS


def test_arguments_the_tool_does_not_take_are_left_out_as_the_toolbox_does() -> None:
    from bench.tool_use import extra_arguments

    call = ("current_time", json.dumps({"timezone": "", "default": ""}))
    assert verdict("current_time", {}, [call], "", takes={"timezone"}) == RIGHT
    oslo = ("get_weather", json.dumps({"city": "Oslo", "unit": "C"}))
    assert verdict("get_weather", {"city": "oslo"}, [oslo], "", takes={"city"}) == RIGHT
    assert extra_arguments(oslo[1], {"city"}) == ["unit"]
    assert extra_arguments("{bad", {"city"}) == []


def test_each_verdict() -> None:
    weather = {"city": "oslo"}
    assert verdict("get_weather", weather, [("current_time", "{}")], "") == WRONG_TOOL
    assert verdict("get_weather", weather, [], "It is sunny in Oslo.") == NO_CALL
    assert verdict("get_weather", weather, [("get_weather", "{not json")], "") == WRONG_ARGUMENTS
    assert verdict("get_weather", weather, [("get_weather", "[1]")], "") == WRONG_ARGUMENTS
    # The first call decides; a second one does not repair it.
    assert (
        verdict(
            "get_weather",
            weather,
            [("current_time", "{}"), ("get_weather", '{"city": "Oslo"}')],
            "",
        )
        == WRONG_TOOL
    )
    assert verdict(None, {}, [], "Jane Austen.") == ANSWERED
    assert verdict(None, {}, [], "  ") == SILENT
    assert verdict(None, {}, [("current_time", "{}")], "") == UNNEEDED_CALL


def test_an_answer_uses_the_result_when_it_says_its_figures_in_digits_or_words() -> None:
    degrees, _ = weather_of("Oslo")
    facts = result_facts("get_weather", weather_text("Oslo"))
    assert uses_result(f"It is {degrees} degrees in Oslo.", facts)
    assert not uses_result(f"It is {degrees + 1} degrees in Oslo.", facts)
    timer = result_facts("set_timer", "A timer for 10 minutes is running.")
    assert uses_result("Your ten minute timer is running.", timer)
    clock = result_facts("current_time", "Friday 04 December 2026, 14:05 (Asia/Tokyo)")
    assert uses_result("It is 2:05 in the afternoon.", clock)
    assert uses_result("It is fourteen oh five.", clock)
    assert not uses_result("It is three o'clock.", clock)
    assert uses_result("Done.", result_facts("get_weather", "no figures here")) is None


def test_an_answer_that_writes_a_call_again_is_not_speakable() -> None:
    assert speakable("It is 12 degrees and sunny in Oslo.")
    assert not speakable('{"name": "get_weather", "arguments": {"city": "Oslo"}}')
    assert not speakable("<tool_call>get_weather</tool_call>")
    assert not speakable("")


def test_the_double_weather_is_the_same_for_the_same_city_and_small() -> None:
    assert weather_of("Oslo") == weather_of(" oslo ") == weather_of("OSLO")
    assert all(0 <= weather_of(c)[0] <= 20 for c in ("Oslo", "Paris", "Madrid", "Lima"))
    assert asyncio.run(_get_weather("Oslo")) == weather_text("Oslo")


async def _get_weather(city: str) -> str:
    from bench.tool_doubles import get_weather

    return await get_weather(city)


def _result(needs: str | None, v: str, **kw: object) -> RequestResult:
    fields: dict[str, object] = {"calls": [], "text": ""} | kw
    return RequestResult("id", "voice", "said", "said", needs, v, **fields)  # type: ignore[arg-type]


def _called(
    tool: str,
    v: str,
    to_call_ms: float,
    *,
    speakable: bool,
    rounds: int,
    source: str = "llm",
    **kw: object,
) -> RequestResult:
    """A request that called `tool` (no arguments) and was answered with its result."""
    return _result(
        tool,
        v,
        calls=[(tool, "{}")],
        to_call_ms=to_call_ms,
        answer_speakable=speakable,
        answer_uses_result=True,
        rounds=rounds,
        answer_source=source,
        **kw,
    )


def test_the_summary_counts_verdicts_per_half_and_per_tool() -> None:
    results = [
        _called("set_timer", RIGHT, 1000.0, speakable=True, rounds=1, answer_first_word_ms=500.0),
        _called("get_weather", WRONG_ARGUMENTS, 3000.0, speakable=False, rounds=2),
        _called("current_time", RIGHT, 1500.0, speakable=True, rounds=1, source="tool result"),
        _result("current_time", NO_CALL, to_first_word_ms=200.0),
        _result(None, ANSWERED, to_first_word_ms=300.0),
        _result(
            None,
            UNNEEDED_CALL,
            calls=[("current_time", "{}")],
            to_call_ms=2000.0,
            failed_call="Error: ...",
        ),
    ]
    s = summary(results)
    assert s["tool_requests"] == {"n": 4, "right": 2, "right_tool": 3}
    assert s["no_tool_requests"] == {"n": 2, "right": 1}
    assert s["per_tool"]["set_timer"] == {"n": 1, "right": 1}
    assert s["per_tool"]["get_weather"] == {"n": 1, "right": 0}
    assert s["answers_after_call"] == {
        "n": 3,
        "speakable": 2,
        "speakable_with_result": 2,
        "called_again": 2,
        "llm_answers": 2,
        "results_said_as_they_are": 1,
        "failed_calls": 1,
    }
    assert s["to_call_ms"]["n"] == 4 and s["to_call_ms"]["p50"] == 1750.0
    # First words are the no-tool requests' only: a tool request's text is not its answer.
    assert s["to_first_word_ms"]["n"] == 1 and s["to_first_word_ms"]["p50"] == 300.0
    text = tool_use.format_report(
        {
            "summary": s,
            "results": [vars(r) for r in results],
            "llm": "x",
            "load_average": {"start": [1.0], "end": [1.0]},
            "machine": {"cpus": 2},
            "date": "d",
        }
    )
    assert "tool requests: 2 of 4 right" in text


def test_select_takes_the_first_of_each_half() -> None:
    reqs = [
        tool_use.ToolRequest(f"t{i}", "v", text, tool, args, np.zeros(1, np.int16))
        for i, (text, tool, args) in enumerate(REQUESTS)
    ]
    chosen = tool_use.select(reqs, 2)
    assert [r.tool is not None for r in chosen] == [True, True, False, False]
    assert tool_use.select(reqs, None) == reqs


def test_the_tools_corpus_has_each_kind_and_scripted_calls_of_the_offered_doubles() -> None:
    from agent.testing.scripted_llm import ScriptedToolTurn
    from bench import tool_doubles
    from bench.tool_corpus import ITEMS, KINDS, OFFERED, TOOL_KINDS, check_kinds, worker_config

    assert {kind for kind, _, _ in ITEMS} == set(KINDS)
    for kind, _, reply in ITEMS:
        assert isinstance(reply, ScriptedToolTurn) == (kind in TOOL_KINDS)
        if isinstance(reply, ScriptedToolTurn):
            assert reply.tool == ("get_forecast" if kind == "slow_tool" else "get_weather")
            assert "{result}" in reply.answer
    assert all(hasattr(tool_doubles, name) for name in OFFERED)
    # The slow double is slow enough for voxroom's filler, the quick one is not.
    from agent.pipeline.tool_round import FILLER_AFTER_S

    assert tool_doubles.WEATHER_DELAY_S < FILLER_AFTER_S < tool_doubles.FORECAST_DELAY_S
    check_kinds(["tool", "no_tool"])
    with pytest.raises(ValueError, match="unknown kind"):
        check_kinds(["tool", "weather"])
    assert 'python = ["bench.tool_doubles"]' in worker_config()


def test_the_worker_config_gives_the_default_profile_the_doubles(tmp_path: Path) -> None:
    from agent.config import load_settings
    from bench.tool_corpus import OFFERED, worker_config

    path = tmp_path / "voxroom.toml"
    path.write_text(worker_config())
    settings = load_settings(path, env={})
    assert settings.tools.python == ("bench.tool_doubles",)
    assert settings.profile("default").tools == OFFERED


def test_the_scripted_llm_calls_the_tool_then_answers_with_its_result() -> None:
    from agent.engines import ToolCall, ToolSpec
    from agent.testing.scripted_llm import ScriptedLLM
    from bench.corpus import scripted_answers, scripted_replies
    from bench.tool_corpus import ITEMS

    kind, text, reply = ITEMS[0]
    assert kind == "tool"
    items = [type("U", (), {"text": text, "answer": reply})()]
    llm = ScriptedLLM(
        scripted_replies(items), by_text=scripted_answers(items), ttft_ms=0, words_per_s=1000
    )
    spec = [ToolSpec("get_weather", "", {"type": "object"})]

    async def reply_to(messages: list[dict]) -> list[object]:
        return [d async for d in llm.stream(messages, spec)]

    first = asyncio.run(reply_to([{"role": "user", "content": text}]))
    assert len(first) == 1 and isinstance(first[0], ToolCall)
    assert json.loads(first[0].arguments) == {"city": "Oslo"}
    answer = asyncio.run(
        reply_to(
            [
                {"role": "user", "content": text},
                {"role": "assistant", "content": None, "tool_calls": [first[0].message()]},
                {"role": "tool", "tool_call_id": first[0].id, "content": weather_text("Oslo")},
            ]
        )
    )
    assert "".join(map(str, answer)).endswith(weather_text("Oslo"))


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * 16_000)) / 16_000
    return (np.sin(2 * np.pi * 300 * t) * 3000).astype(np.int16)


def _quiet(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 16_000), np.int16)


@pytest.mark.parametrize(
    ("parts", "fillers_at", "answer_at"),
    [
        # A filler at 1.0 s, a 0.3 s gap, the answer at 2.0 s.
        ([_quiet(1.0), _tone(0.7), _quiet(0.3), _tone(2.0), _quiet(1.0)], {1.0}, 2.0),
        # Two fillers before the answer.
        (
            [_quiet(0.5), _tone(0.7), _quiet(1.2), _tone(0.9), _quiet(0.3), _tone(1.0)],
            {0.5, 2.4},
            3.6,
        ),
        # No filler: the answer's first chunk, cut off from the rest by a slow synthesis, is the
        # answer all the same.
        ([_quiet(0.5), _tone(0.6), _quiet(0.3), _tone(1.0), _quiet(1.0)], set(), 0.5),
    ],
)
def test_the_answer_itself_starts_after_the_fillers(
    parts: list[np.ndarray], fillers_at: set[float], answer_at: float
) -> None:
    from bench.measure import HeardAudio, ItemResult, measure_answer

    heard = HeardAudio(16_000, [(100.0, np.concatenate(parts))])
    result = ItemResult("i", "v", "tool", {})
    first = heard.first_audible_after(100.0)
    judged: list[tuple[float, float]] = []

    def is_filler(start: float, end: float) -> bool:  # what a stretch says, by its start
        judged.append((start, end))
        return any(abs(start - 100.0 - t) < 0.02 for t in fillers_at)

    measure_answer(result, heard, said=100.0, first=first, is_filler=is_filler)
    assert result.filler_heard is bool(fillers_at)
    assert result.answer_ms == pytest.approx(answer_at * 1000, abs=15)
    assert len(judged) == len(fillers_at) + 1  # up to the first stretch that is no filler
    assert judged[0][1] - judged[0][0] == pytest.approx(parts[1].size / 16_000, abs=0.02)


def test_a_stretch_is_a_filler_by_what_it_says() -> None:
    from bench.livekit_path import FillerEar

    ear = FillerEar(stt=None)
    assert ear.is_filler("One moment.")
    assert ear.is_filler("one moment")
    assert ear.is_filler("Let me think.")
    assert ear.is_filler("Still working on it.")
    assert not ear.is_filler("Here is what the weather service says")
    assert not ear.is_filler("Here is")
    assert not ear.is_filler("")
