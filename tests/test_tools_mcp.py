"""MCP servers as tool sources, against a real server written with the `mcp` SDK
(tests/mcp_servers/weather_server.py) over stdio and over Streamable HTTP on loopback: listing,
readOnlyHint, the allow list, calls from another event loop than the registry's, a caller's
cancellation reaching the server, bad results bounded, and servers that cannot start or die."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.adapters.tools.base import ToolContext
from agent.adapters.tools.registry import ToolRegistry
from agent.adapters.tools.toolbox import Toolbox
from agent.config import ConfigError, MCPServerSettings, ProfileTable, Settings, ToolsSettings
from agent.engines import ToolCall

SERVER = Path(__file__).parent / "mcp_servers" / "weather_server.py"
CTX = ToolContext(room="room-1", user_identity="caller")
FAST_RECONNECT = (0.05, 0.5)


def stdio(name: str = "weather", *args: str, **kwargs: object) -> MCPServerSettings:
    return MCPServerSettings(name=name, command=(sys.executable, str(SERVER), *args), **kwargs)  # type: ignore[arg-type]


def started(*servers: MCPServerSettings) -> ToolRegistry:
    registry = ToolRegistry(ToolsSettings(mcp=servers), reconnect_backoff_s=FAST_RECONNECT)
    registry.start()
    return registry


@pytest.fixture
def weather() -> Iterator[ToolRegistry]:
    registry = started(stdio())
    yield registry
    registry.close()


@pytest.fixture
def http_url() -> Iterator[str]:
    server = subprocess.Popen(
        [sys.executable, str(SERVER), "--http"], stdout=subprocess.PIPE, text=True
    )
    try:
        port = server.stdout.readline().strip()  # type: ignore[union-attr]
        assert port, f"the HTTP server exited with {server.wait()}"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        server.wait()


async def call(box: Toolbox, name: str, arguments: str = "{}") -> str:
    outcome = await box.run(ToolCall(f"call-{name}", name, arguments), CTX)
    return outcome.content


def test_the_tools_are_listed_with_readonlyhint(weather: ToolRegistry) -> None:
    status = weather.status()["mcp:weather"]
    assert status.ok and status.detail == ""
    assert {"get_weather", "book_table", "send_email", "hang", "crash"} <= set(status.tools)
    box = weather.toolbox(["mcp:weather"])
    assert box.read_only("get_weather")  # readOnlyHint: true
    assert not box.read_only("send_email")  # readOnlyHint: false
    assert not box.read_only("book_table")  # no annotation: it may act
    spec = next(s for s in box.specs if s.name == "get_weather")
    assert spec.description == "The weather in a city right now."
    assert spec.parameters["properties"]["city"]["type"] == "string"
    assert spec.parameters["required"] == ["city"]


async def test_a_call_from_the_session_s_loop_runs_on_the_registry_s(weather: ToolRegistry) -> None:
    box = weather.toolbox(["get_weather", "current_time"])
    assert box.names == ["get_weather", "current_time"]
    assert await call(box, "get_weather", '{"city": "Oslo"}') == "Oslo: 12 degrees, light rain"
    # A second event loop (another job of the worker) calls the same server.
    other = await asyncio.to_thread(
        asyncio.run, call(weather.toolbox(["get_weather"]), "get_weather", '{"city": "Rome"}')
    )
    assert other == "Rome: 12 degrees, light rain"


def test_the_allow_list_filters_a_server_s_tools() -> None:
    registry = started(stdio(allow=("get_weather", "no_such_tool")))
    try:
        assert registry.status()["mcp:weather"].tools == ("get_weather",)
        assert registry.toolbox(["mcp:weather"]).names == ["get_weather"]
        assert registry.toolbox(["book_table"]).names == []  # not allowed: never offered
    finally:
        registry.close()


async def test_bad_results_reach_the_llm_as_short_bounded_text(weather: ToolRegistry) -> None:
    box = weather.toolbox(["mcp:weather"])
    failed = await box.run(ToolCall("1", "fail", "{}"), CTX)
    assert not failed.ok and "the weather service is down" in failed.content
    assert await call(box, "chart") == "[image content]"
    flood = await box.run(ToolCall("2", "megabytes", "{}"), CTX)
    assert flood.ok and len(flood.content) == box.max_result_chars + len(" [truncated]")
    bad_args = await box.run(ToolCall("3", "get_weather", '{"town": "Oslo"}'), CTX)
    assert not bad_args.ok and "city" in bad_args.content  # the server's validation error


async def cancel_the_hanging_call(box: Toolbox) -> None:
    """Cancel `hang` once the server runs it; the server must hear of it."""
    hanging = asyncio.create_task(call(box, "hang"))
    assert await call(box, "wait_started") == "started"
    hanging.cancel()
    with pytest.raises(asyncio.CancelledError):
        await hanging
    assert await call(box, "wait_cancelled") == "cancelled"


async def test_cancelling_the_caller_cancels_the_call_on_the_stdio_server(
    weather: ToolRegistry,
) -> None:
    await cancel_the_hanging_call(weather.toolbox(["mcp:weather"]))


async def test_cancelling_the_caller_cancels_the_call_on_the_http_server(http_url: str) -> None:
    registry = started(MCPServerSettings(name="weather", url=http_url))
    try:
        box = registry.toolbox(["mcp:weather"])
        assert await call(box, "get_weather", '{"city": "Oslo"}') == "Oslo: 12 degrees, light rain"
        assert box.read_only("get_weather") and not box.read_only("book_table")
        await cancel_the_hanging_call(box)
    finally:
        registry.close()


async def test_a_call_past_its_time_limit_is_cancelled_on_the_server(weather: ToolRegistry) -> None:
    box = weather.toolbox(["hang", "wait_cancelled"])
    hang, wait = box.get("hang"), box.get("wait_cancelled")
    assert hang is not None and wait is not None
    impatient = Toolbox([replace(hang, timeout_s=0.2), wait])
    timed_out = await impatient.run(ToolCall("1", "hang", "{}"), CTX)
    assert not timed_out.ok and timed_out.content == "Error: hang did not answer within 0.2 s."
    assert await call(impatient, "wait_cancelled") == "cancelled"


async def test_a_new_tool_the_server_announces_is_listed(weather: ToolRegistry) -> None:
    assert "surprise" not in weather.available()
    assert (
        await call(weather.toolbox(["add_tool"]), "add_tool", '{"name": "surprise"}')
        == "added surprise"
    )
    assert await asyncio.to_thread(weather.wait_for, lambda: "surprise" in weather.available(), 30)
    assert await call(weather.toolbox(["surprise"]), "surprise") == "surprise ran"


async def test_a_server_that_dies_costs_its_calls_and_comes_back(tmp_path: Path) -> None:
    refuse = tmp_path / "refuse"
    registry = started(stdio("weather", "--refuse-if", str(refuse)))
    try:
        box = registry.toolbox(["get_weather", "crash", "current_time"])
        refuse.touch()  # once dead, it cannot come back until this is gone
        died = await box.run(ToolCall("1", "crash", "{}"), CTX)
        assert not died.ok
        assert died.error == (
            "MCPToolError: MCP server 'weather' closed the connection during the call"
        )

        def refused() -> bool:
            return "refusing to start" in registry.status()["mcp:weather"].detail

        assert await asyncio.to_thread(registry.wait_for, refused, 30)
        down = await box.run(ToolCall("2", "get_weather", '{"city": "Oslo"}'), CTX)
        assert not down.ok and "MCP server 'weather' is not connected" in down.content
        assert "refusing to start" in down.content
        assert (await box.run(ToolCall("3", "current_time", "{}"), CTX)).ok  # the rest serves

        refuse.unlink()
        assert await asyncio.to_thread(
            registry.wait_for, lambda: registry.status()["mcp:weather"].ok, 30
        )
        assert "get_weather" in registry.status()["mcp:weather"].tools
        assert await call(box, "get_weather", '{"city": "Oslo"}') == "Oslo: 12 degrees, light rain"
    finally:
        registry.close()


@pytest.mark.parametrize(
    ("server", "reason"),
    [
        (
            MCPServerSettings(
                name="broken",
                command=(
                    sys.executable,
                    "-c",
                    "import sys; print('WEATHER_KEY is not set', file=sys.stderr); sys.exit(3)",
                ),
            ),
            r"Connection closed \(stderr: WEATHER_KEY is not set\)",
        ),
        (
            MCPServerSettings(name="broken", command=("/nonexistent/mcp-server",)),
            r"cannot run \['/nonexistent/mcp-server'\]: No such file or directory",
        ),
        (
            MCPServerSettings(
                name="broken",
                command=(sys.executable, "-c", "import time; time.sleep(60)"),
                timeout_s=1,
            ),
            r"no answer within 1 s",
        ),
    ],
    ids=["exits", "missing", "silent"],
)
def test_a_server_that_cannot_start_is_a_clear_error_and_the_rest_serve(
    server: MCPServerSettings, reason: str
) -> None:
    broken_and_the_rest_serve(server, reason)


def test_an_http_server_that_refuses_is_a_clear_error_and_the_rest_serve(
    dead_port: int,
) -> None:
    broken_and_the_rest_serve(
        MCPServerSettings(name="broken", url=f"http://127.0.0.1:{dead_port}/mcp"),
        r"http://127\.0\.0\.1:\d+/mcp: ConnectError",
    )


def broken_and_the_rest_serve(server: MCPServerSettings, reason: str) -> None:
    registry = started(server, stdio())
    try:
        status = registry.status()
        assert not status["mcp:broken"].ok and status["mcp:broken"].tools == ()
        assert re.search(reason, status["mcp:broken"].detail), status["mcp:broken"].detail
        assert status["mcp:weather"].ok
        assert registry.toolbox(["mcp:broken", "get_weather"]).names == ["get_weather"]
    finally:
        registry.close()


def test_two_servers_offering_one_name_is_a_configuration_error() -> None:
    registry = ToolRegistry(
        ToolsSettings(
            mcp=(stdio("a", allow=("get_weather",)), stdio("b", allow=("get_weather", "pid")))
        )
    )
    with pytest.raises(
        ConfigError,
        match=r"mcp:b and mcp:a both offer 'get_weather' \(rename "
        r"one, or leave it out of its MCP server's allow",
    ):
        registry.start()


def test_profiles_are_checked_against_the_listed_tools(weather: ToolRegistry) -> None:
    settings = Settings(
        tools=weather.settings,
        profiles={"concierge": ProfileTable(tools=("get_weather", "mcp:weather", "current_time"))},
    )
    weather.check_profiles(settings)
    wrong = replace(settings, profiles={"concierge": ProfileTable(tools=("get_wether",))})
    with pytest.raises(
        ConfigError,
        match=r"\[profiles\.concierge\]: unknown tool\(s\) "
        r"\['get_wether'\]",
    ):
        weather.check_profiles(wrong)
    # The profile's selection is all the session gets.
    box = weather.toolbox(settings.profile("concierge").tools)
    assert "current_time" in box.names and "end_conversation" not in box.names
