"""The tools voxroom brings: a profile offers one only when it names it.

Each is a `@tool` function of this module; a new one is one more function here. The phone
call's (`end_call`, `transfer_call`, `send_digits`) act through ToolContext.call and say so
when the user is not a caller.
"""

from __future__ import annotations

import sys
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.adapters.tools.base import PhoneLine, Tool, ToolContext
from agent.adapters.tools.python_tools import marked_tools, tool

SOURCE = "builtin"
TRANSFER_TIMEOUT_S = 60.0  # the destination rings before the SIP service says how it went


@tool(read_only=True)
def current_time(timezone: str = "") -> str:
    """The current date, time and weekday.

    Args:
        timezone: Only when the user names a place: its IANA time zone (Area/City). Leave it
            empty for the local time.
    """
    try:
        zone = ZoneInfo(timezone) if timezone else None
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(
            f"unknown time zone {timezone!r}; use an IANA name like Europe/Oslo"
        ) from e
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


def _call(ctx: ToolContext) -> PhoneLine:
    if ctx.call is None:
        raise ValueError("this conversation is not a phone call")
    return ctx.call


@tool
def end_call(ctx: ToolContext, reason: str = "") -> str:
    """Hang up the phone call, after saying goodbye, when the caller is done.

    Args:
        reason: Why the call ends, in a few words.
    """
    _call(ctx)
    ctx.end_conversation(reason or "the assistant hung up")
    return "The call will be hung up after this reply; say goodbye."


@tool(timeout_s=TRANSFER_TIMEOUT_S)
async def transfer_call(ctx: ToolContext, destination: str) -> str:
    """Transfer the phone call to a person or another line, when the caller asks for one
    that your instructions name.

    Args:
        destination: The destination's name as your instructions give it, e.g. sales.
    """
    await _call(ctx).transfer(destination)
    return f"The call was transferred to {destination}; the caller is no longer on the line."


@tool
async def send_digits(ctx: ToolContext, digits: str) -> str:
    """Press keys on the phone's keypad (DTMF), e.g. to choose in a phone menu.

    Args:
        digits: The keys in order: 0-9, * and #, e.g. 1 or 4321#.
    """
    await _call(ctx).send_digits(digits)
    return f"Sent {digits}."


def builtin_tools(default_timeout_s: float) -> list[Tool]:
    return marked_tools(sys.modules[__name__], source=SOURCE, default_timeout_s=default_timeout_s)
