"""Python functions as tools (@tool, the JSON schema from hints and docstring, ToolContext
injected, sync in a thread and async awaited), the modules of tools.python, and the
built-ins."""

from __future__ import annotations

import re
import threading
from datetime import datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

import pytest

from agent.adapters.tools.base import ToolContext
from agent.adapters.tools.python_tools import module_tools, python_tool, tool
from agent.adapters.tools.registry import ToolRegistry
from agent.adapters.tools.schema import describe_function, parse_docstring
from agent.adapters.tools.toolbox import Toolbox
from agent.config import ConfigError, ToolsSettings
from agent.engines import ToolCall
from tests.tool_modules import kitchen

CTX = ToolContext(room="kitchen-room", user_identity="cook")


def test_the_schema_comes_from_hints_defaults_and_docstring() -> None:
    def plan(
        city: str,
        days: int,
        budget: float | None,
        tags: list[str],
        extras: dict[str, int],
        mode: Literal["fast", "slow"] = "fast",
        strict: bool = False,
    ) -> str:
        """Plan a trip.

        More words that are not the description.

        Args:
            city: Where to go.
            days (int): How long, in days,
                at least one.
            mode: How to travel.

        Returns:
            The plan.
        """
        return ""

    description, schema = describe_function(plan)
    assert description == "Plan a trip."
    assert schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "Where to go."},
            "days": {"type": "integer", "description": "How long, in days, at least one."},
            "budget": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "extras": {"type": "object", "additionalProperties": {"type": "integer"}},
            "mode": {
                "type": "string",
                "enum": ["fast", "slow"],
                "default": "fast",
                "description": "How to travel.",
            },
            "strict": {"type": "boolean", "default": False},
        },
        "required": ["city", "days", "tags", "extras"],  # Optional and defaulted are not
    }


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda x: x, r"parameter 'x' has no type hint"),
        (lambda *a: a, r"\*a cannot be a tool's argument"),
    ],
)
def test_what_has_no_schema_is_a_clear_error(fn: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        describe_function(fn)


def test_types_json_cannot_carry_are_refused() -> None:
    def when(at: datetime) -> str:
        return ""

    def either(x: int | str) -> str:
        return ""

    with pytest.raises(TypeError, match=r"when\(at\): .*datetime.* has no JSON schema"):
        describe_function(when)
    with pytest.raises(TypeError, match=r"only Optional\[X\] unions"):
        describe_function(either)


def test_a_docstring_without_args_is_its_description() -> None:
    assert parse_docstring("One line.\n\nMore.") == ("One line.", {})
    assert parse_docstring("") == ("", {})


def test_module_tools_are_the_decorated_functions_of_the_module() -> None:
    tools = {t.name: t for t in module_tools("tests.tool_modules.kitchen", default_timeout_s=7)}
    assert sorted(tools) == ["pantry", "recipe", "set_timer"]  # `name=` renames start_timer
    assert tools["recipe"].read_only and not tools["set_timer"].read_only
    assert (tools["recipe"].timeout_s, tools["set_timer"].timeout_s) == (7, 2.5)
    assert tools["recipe"].source == "python:tests.tool_modules.kitchen"
    assert tools["recipe"].spec.description == "A short recipe for a dish."
    # The context is injected, not asked of the LLM.
    assert set(tools["set_timer"].spec.parameters["properties"]) == {"minutes", "label"}
    assert tools["set_timer"].spec.parameters["required"] == ["minutes"]


async def test_sync_tools_run_in_a_thread_and_async_ones_get_the_context() -> None:
    tools = {t.name: t for t in module_tools("tests.tool_modules.kitchen", default_timeout_s=7)}
    said = await tools["recipe"].invoke({"dish": "pancakes"}, CTX)
    assert said.startswith("pancakes for 2 (any); cooked on thread ")
    assert not said.endswith(threading.current_thread().name)  # not on the event loop's thread
    kitchen.TIMERS.clear()
    assert await tools["set_timer"].invoke({"minutes": 10}, CTX) == "timer set for 10 minutes"
    assert kitchen.TIMERS == [("kitchen-room", 10, "")]
    assert await tools["pantry"].invoke({}, CTX) == '{"eggs": 6, "flour_g": 500}'


def test_a_module_that_cannot_be_imported_is_a_clear_error() -> None:
    with pytest.raises(
        ImportError,
        match=r"cannot import tools module "
        r"'tests.tool_modules.broken': RuntimeError: the "
        r"recipe database is not configured",
    ):
        module_tools("tests.tool_modules.broken", default_timeout_s=1)
    with pytest.raises(ImportError, match=r"'no_such_pkg.tools': ModuleNotFoundError"):
        module_tools("no_such_pkg.tools", default_timeout_s=1)


def test_the_registry_records_a_broken_module_and_serves_the_others() -> None:
    registry = ToolRegistry(
        ToolsSettings(python=("tests.tool_modules.kitchen", "tests.tool_modules.broken"))
    )
    status = registry.start()
    assert status["python:tests.tool_modules.kitchen"].ok
    broken = status["python:tests.tool_modules.broken"]
    assert not broken.ok and "the recipe database is not configured" in broken.detail
    assert registry.toolbox(["recipe", "current_time"]).names == ["recipe", "current_time"]


def test_a_python_tool_with_a_builtin_s_name_is_a_clash() -> None:
    registry = ToolRegistry(ToolsSettings(python=("tests.tool_modules.clashing",)))
    with pytest.raises(
        ConfigError,
        match=r"python:tests\.tool_modules\.clashing and builtin "
        r"both offer 'current_time'",
    ):
        registry.start()


async def test_a_tool_s_failure_and_odd_results_reach_the_llm_bounded() -> None:
    @tool
    def explode() -> str:
        """Fails."""
        raise KeyError("no such recipe")

    @tool
    def nothing() -> None:
        """Acts, returns nothing."""

    @tool
    def flood() -> str:
        """Far too much."""
        return "y" * 1_000_000

    box = Toolbox(
        [
            python_tool(f, source="python:test", default_timeout_s=5)
            for f in (explode, nothing, flood)
        ],
        max_result_chars=100,
    )
    failed = await box.run(ToolCall("1", "explode", "{}"), CTX)
    assert not failed.ok and failed.content == "Error: explode failed: 'no such recipe'"
    assert (await box.run(ToolCall("2", "nothing", "{}"), CTX)).content == "Done."
    flooded = await box.run(ToolCall("3", "flood", "{}"), CTX)
    assert flooded.ok and flooded.content == "y" * 100 + " [truncated]"


async def test_current_time_tells_the_date_time_and_weekday_in_a_zone() -> None:
    registry = ToolRegistry(ToolsSettings())
    registry.start()
    box = registry.toolbox(["current_time"])
    assert box.read_only("current_time")
    before = datetime.now(ZoneInfo("Asia/Tokyo"))
    said = (await box.run(ToolCall("1", "current_time", '{"timezone": "Asia/Tokyo"}'), CTX)).content
    after = datetime.now(ZoneInfo("Asia/Tokyo"))
    assert said.endswith("(Asia/Tokyo)")
    assert any(said.startswith(f"{t:%A %d %B %Y, %H:%M}") for t in (before, after))
    bad = await box.run(ToolCall("2", "current_time", '{"timezone": "Mars/Olympus"}'), CTX)
    assert not bad.ok and "unknown time zone 'Mars/Olympus'" in bad.content
    local = (await box.run(ToolCall("3", "current_time", "{}"), CTX)).content
    assert re.match(r"^\w+day \d\d \w+ \d{4}, \d\d:\d\d \(.+\)$", local)


async def test_end_conversation_asks_the_session_to_end() -> None:
    ended: list[str] = []
    ctx = ToolContext(room="r", user_identity="u", end_conversation=ended.append)
    registry = ToolRegistry(ToolsSettings())
    registry.start()
    box = registry.toolbox(["end_conversation"])
    assert not box.read_only("end_conversation")
    assert box.specs[0].parameters["properties"].keys() == {"reason"}
    done = await box.run(ToolCall("1", "end_conversation", '{"reason": "user said bye"}'), ctx)
    assert done.ok and ended == ["user said bye"]


def test_builtins_are_offered_only_when_named() -> None:
    registry = ToolRegistry(ToolsSettings())
    registry.start()
    assert registry.toolbox([]).names == []
    assert registry.available() == {
        "current_time",
        "end_conversation",
        "end_call",
        "transfer_call",
        "send_digits",
    }
