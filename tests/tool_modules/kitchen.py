"""Python tools of the tests: `tools.python = ["tests.tool_modules.kitchen"]`."""

from __future__ import annotations

import asyncio
import threading
from typing import Literal

from agent.adapters.tools.base import ToolContext
from agent.adapters.tools.python_tools import tool

TIMERS: list[tuple[str, int, str]] = []  # (room, minutes, label): what set_timer did


@tool(read_only=True)
def recipe(dish: str, servings: int = 2, diet: Literal["any", "vegan"] = "any") -> str:
    """A short recipe for a dish.

    Args:
        dish: The dish, e.g. pancakes.
        servings: How many people eat.
        diet: Food to leave out.
    """
    return f"{dish} for {servings} ({diet}); cooked on thread {threading.current_thread().name}"


@tool(name="set_timer", timeout_s=2.5)
async def start_timer(minutes: int, ctx: ToolContext, label: str | None = None) -> str:
    """Set a kitchen timer."""
    await asyncio.sleep(0)
    TIMERS.append((ctx.room, minutes, label or ""))
    return f"timer set for {minutes} minutes"


@tool
def pantry() -> dict[str, int]:
    """What is in the pantry."""
    return {"eggs": 6, "flour_g": 500}


def not_a_tool() -> str:
    return "plain"
