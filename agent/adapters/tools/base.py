"""What a tool is to the reply loop, whatever its source (MCP server, Python function,
built-in): its spec for the LLM, whether it only reads, its time limit, and how to call it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.engines import ToolCall, ToolSpec


class PhoneLine(Protocol):
    """The phone call of a session whose user is a caller (agent/transports/phone_call.py)."""

    @property
    def transfer_targets(self) -> list[str]:
        """The destinations the profile lets the agent transfer to, by name."""
        ...

    async def send_digits(self, digits: str) -> None:
        """Play keypad digits to the caller; ValueError for what is not one."""
        ...

    async def transfer(self, target: str) -> None:
        """Transfer the call to the named destination; ValueError for an unknown name."""
        ...


@dataclass
class ToolContext:
    """The session a call comes from, for the tools that act on it (the built-ins)."""

    room: str
    user_identity: str
    # The served participant's attributes (a phone caller's `sip.*`).
    user_attributes: dict[str, str] = field(default_factory=dict)
    # Ends the conversation once the reply being spoken is over (`reason` goes to the log).
    end_conversation: Callable[[str], None] = lambda _reason: None
    # The phone call when the user is a caller (livekit-sip); None for anyone else. Ending the
    # conversation of a call hangs it up.
    call: PhoneLine | None = None


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    # Reads and changes nothing (MCP `readOnlyHint`; `@tool(read_only=True)`): it may run on a
    # speculative start, whose result is dropped if the user goes on. Any other tool runs only
    # on the confirmed turn, once.
    read_only: bool
    timeout_s: float
    source: str  # "mcp:NAME", "python:MODULE", "builtin"
    # The call itself: the arguments (already an object) -> the text for the LLM. Raises on
    # failure; cancellable (cancelling the awaiting task cancels the call).
    invoke: Callable[[dict[str, Any], ToolContext], Awaitable[str]]

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class ToolOutcome:
    """A finished call: `content` is what the LLM is told (bounded in size; on failure a short
    statement that it failed), `error` the reason for the log."""

    call: ToolCall
    content: str
    ok: bool
    duration_s: float
    error: str = ""

    def message(self) -> dict[str, Any]:
        """The chat message of the result."""
        return {"role": "tool", "tool_call_id": self.call.id, "content": self.content}
