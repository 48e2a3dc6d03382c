"""Tool calls through the LLM layer: OpenAI's streamed `tool_calls` put together, calls a model
writes as text taken out before they are spoken, the real OpenAI client against the scripted
server double, and the history that keeps a turn's calls with it."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from agent.adapters.llm.history import ChatHistory
from agent.adapters.llm.openai_chat import OpenAIChatLLM
from agent.adapters.llm.tool_calls import StreamedToolCalls, ToolCallsInText
from agent.engines import ToolCall, ToolSpec
from agent.testing.scripted_llm import ScriptedLLM, ScriptedToolTurn
from agent.testing.scripted_llm_server import scripted_llm_server

WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city now.",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)


def _delta(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> Any:
    return SimpleNamespace(
        index=index, id=id, function=SimpleNamespace(name=name, arguments=arguments)
    )


def test_streamed_tool_call_pieces_make_whole_calls() -> None:
    calls = StreamedToolCalls()
    calls.add([_delta(0, id="a", name="get_weather", arguments="")])
    calls.add([_delta(1, id="b", name="current_time", arguments="{}")])
    calls.add([_delta(0, arguments='{"city": ')])
    calls.add([_delta(0, arguments='"Oslo"}')])
    assert calls.calls() == [
        ToolCall("a", "get_weather", '{"city": "Oslo"}'),
        ToolCall("b", "current_time", "{}"),
    ]


def _through(parser: ToolCallsInText, deltas: list[str]) -> tuple[str, str, list[ToolCall]]:
    spoken = "".join(parser.push(d) for d in deltas)
    held, calls = parser.finish()
    return spoken, held, calls


def test_a_call_written_as_text_is_taken_out_never_spoken() -> None:
    for text in [
        '{"name": "get_weather", "arguments": {"city": "Oslo"}}',
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
        '```json\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n```',
    ]:
        deltas = [text[i : i + 3] for i in range(0, len(text), 3)]
        spoken, held, calls = _through(ToolCallsInText(["get_weather"]), deltas)
        assert (spoken, held) == ("", ""), text
        [call] = calls
        assert call.name == "get_weather" and call.parsed_arguments() == {"city": "Oslo"}


def test_the_first_whole_call_in_text_ends_the_response() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Bergen"}}</tool_call>'
    )
    parser = ToolCallsInText(["get_weather"])
    assert parser.push(text[:40]) == "" and not parser.complete
    assert parser.push(text[40:70]) == "" and parser.complete
    parser.push(text[70:])
    _, calls = parser.finish()
    assert [c.parsed_arguments()["city"] for c in calls] == ["Oslo"]


def test_ordinary_words_pass_at_once_and_unknown_json_is_spoken_after_all() -> None:
    parser = ToolCallsInText(["get_weather"])
    assert parser.push("  ") == ""
    assert parser.push("It is") == "  It is"  # decided at the first word: no delay
    assert parser.push(" sunny.") == " sunny."
    assert parser.finish() == ("", [])
    text = '{"name": "launch_rockets", "arguments": {}}'
    assert _through(ToolCallsInText(["get_weather"]), [text]) == ("", text, [])
    assert _through(ToolCallsInText(["get_weather"]), ["{not json"]) == ("", "{not json", [])


async def test_the_openai_client_streams_a_tool_call_and_then_the_answer() -> None:
    turn = ScriptedToolTurn(
        tool="get_weather",
        arguments={"city": "Oslo"},
        answer="It is {result}.",
        preamble="Let me check.",
    )
    requests: list[dict[str, Any]] = []
    async with scripted_llm_server(ScriptedLLM([turn], ttft_ms=0), requests=requests) as url:
        llm = OpenAIChatLLM(model="scripted", base_url=url)
        try:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]
            out = [d async for d in llm.stream(messages, [WEATHER])]
            *words, call = out
            assert "".join(words).strip() == "Let me check."
            assert isinstance(call, ToolCall) and call.name == "get_weather"
            assert call.parsed_arguments() == {"city": "Oslo"}
            assert requests[0]["tools"] == [WEATHER.openai()]
            messages += [
                {"role": "assistant", "content": "Let me check.", "tool_calls": [call.message()]},
                {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
            ]
            answer = [d async for d in llm.stream(messages, [WEATHER])]
            assert "".join(str(d) for d in answer) == "It is sunny."
            assert requests[1]["messages"][-1]["tool_call_id"] == call.id
            # No tools offered: none in the request, and the double says it cannot.
            plain = [d async for d in llm.stream(messages[:1])]
            assert "tools" not in requests[2]
            assert "".join(str(d) for d in plain) == turn.without_tool
        finally:
            await llm.aclose()


def test_the_history_drops_old_turns_whole_with_their_tool_calls() -> None:
    history = ChatHistory("system", max_tokens=60)  # 240 characters
    call = ToolCall("c1", "get_weather", json.dumps({"city": "Oslo"}))
    history.add_turn(
        {
            "user_text": "Weather in Oslo?",
            "heard_text": "Sunny in Oslo.",
            "tool_messages": [
                {"role": "assistant", "content": None, "tool_calls": [call.message()]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny " * 20},
            ],
        }
    )
    assert [m["role"] for m in history.turns] == ["user", "assistant", "tool", "assistant"]
    history.add_user("And tomorrow?" + " please" * 5)
    # Over budget: the first turn goes whole, its call and result with it.
    assert [m["role"] for m in history.turns] == ["user"]
    history.add_assistant("Rain tomorrow. " * 30)
    assert [m["role"] for m in history.turns] == ["user", "assistant"]  # the last turn stays


async def test_arguments_the_schema_does_not_name_are_left_out() -> None:
    from agent.adapters.tools.base import Tool, ToolContext
    from agent.adapters.tools.toolbox import Toolbox

    seen: list[dict[str, Any]] = []

    async def clock(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(args)
        return "noon"

    spec = ToolSpec(
        "current_time",
        "The time.",
        {"type": "object", "properties": {"timezone": {"type": "string"}}},
    )
    box = Toolbox([Tool(spec, read_only=True, timeout_s=1, source="test", invoke=clock)])
    call = ToolCall("c", "current_time", '{"city": "your_city", "timezone": "UTC"}')
    outcome = await box.run(call, ToolContext("room", "user"))
    assert outcome.ok and seen == [{"timezone": "UTC"}]


def test_calls_cut_off_by_the_token_limit_are_dropped_and_never_spoken() -> None:
    one = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    _, held, calls = _through(ToolCallsInText(["get_weather"]), [f"{one}\n{one}\n" + one[:20]])
    assert held == "" and len(calls) == 1
    # No whole call, but a tool named: a call gone wrong, not speech.
    assert _through(ToolCallsInText(["get_weather"]), [one[:30]]) == ("", "", [])
