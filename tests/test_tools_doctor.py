"""`voxroom doctor`'s tools rows: one per MCP server and Python module, ok when it lists its
tools, FAIL with the reason when it cannot."""

from __future__ import annotations

import sys
from pathlib import Path

from agent.apps.doctor import FAIL, OK, SKIP, Doctor
from agent.config import MCPServerSettings, Settings, ToolsSettings

SERVER = Path(__file__).parent / "mcp_servers" / "weather_server.py"


async def test_each_tool_source_gets_a_row() -> None:
    tools = ToolsSettings(
        mcp=(
            MCPServerSettings(
                name="weather", command=(sys.executable, str(SERVER)), allow=("get_weather", "pid")
            ),
            MCPServerSettings(name="calendar", command=("/nonexistent/calendar-mcp",)),
        ),
        python=("tests.tool_modules.kitchen", "tests.tool_modules.broken"),
    )
    rows = await Doctor(Settings(tools=tools), only={"tools"}, timeout_s=30).run()
    by_name = {row.name: row for row in rows}
    assert list(by_name) == [
        "tools mcp:weather (stdio)",
        "tools mcp:calendar (stdio)",
        "tools python:tests.tool_modules.kitchen",
        "tools python:tests.tool_modules.broken",
    ]
    weather = by_name["tools mcp:weather (stdio)"]
    assert (weather.status, weather.detail) == (OK, "2 tool(s): get_weather, pid")
    calendar = by_name["tools mcp:calendar (stdio)"]
    assert calendar.status == FAIL
    assert calendar.detail == (
        "cannot run ['/nonexistent/calendar-mcp']: No such file or directory"
    )
    kitchen = by_name["tools python:tests.tool_modules.kitchen"]
    assert (kitchen.status, kitchen.detail) == (OK, "3 tool(s): recipe, set_timer, pantry")
    broken = by_name["tools python:tests.tool_modules.broken"]
    assert broken.status == FAIL and "the recipe database is not configured" in broken.detail


async def test_no_tools_configured_is_a_skipped_row() -> None:
    [row] = await Doctor(Settings(), only={"tools"}).run()
    assert (row.name, row.status) == ("tools", SKIP)
