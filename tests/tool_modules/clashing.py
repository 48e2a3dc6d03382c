"""A tools module whose tool has a built-in's name."""

from agent.adapters.tools.python_tools import tool


@tool
def current_time() -> str:
    """The time, by another source."""
    return "noon"
