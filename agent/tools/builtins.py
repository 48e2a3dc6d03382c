"""The tools voxroom brings: a profile offers one only when it names it.

Each is a `@tool` function of this module; a new one (a phone call's DTMF or transfer, acting
through ToolContext) is one more function here.
"""

from __future__ import annotations

import sys
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.tools.base import Tool, ToolContext
from agent.tools.python_tools import marked_tools, tool

SOURCE = "builtin"


@tool(read_only=True)
def current_time(timezone: str = "") -> str:
    """The current date, time and weekday.

    Args:
        timezone: An IANA time zone such as Europe/Oslo or America/New_York; empty for the
            server's local time.
    """
    try:
        zone = ZoneInfo(timezone) if timezone else None
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"unknown time zone {timezone!r}; use an IANA name like "
                         "Europe/Oslo") from e
    now = datetime.now(zone).astimezone(zone)
    where = timezone or now.tzname() or "local time"
    return f"{now:%A %d %B %Y, %H:%M} ({where})"


@tool
def end_conversation(ctx: ToolContext, reason: str = "") -> str:
    """End the conversation, after saying goodbye, when the user says they are done.

    Args:
        reason: Why the conversation ends, in a few words.
    """
    ctx.end_conversation(reason or "the assistant ended the conversation")
    return "The conversation will end after this reply; say goodbye."


def builtin_tools(default_timeout_s: float) -> list[Tool]:
    return marked_tools(sys.modules[__name__], source=SOURCE, default_timeout_s=default_timeout_s)
