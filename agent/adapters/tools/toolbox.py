"""The tools one session offers its LLM (a profile's selection from the registry), and the one
way a call runs: arguments checked, a time limit, failures turned into a short result the LLM
can speak from, and what reaches the LLM bounded in size."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from agent.adapters.tools.base import Tool, ToolContext, ToolOutcome
from agent.engines import ToolCall, ToolSpec

log = logging.getLogger(__name__)

# What a tool's result may put into the prompt: a small model's context is a few thousand
# tokens, and a megabyte of JSON would push the conversation out of it.
MAX_RESULT_CHARS = 4000


class Toolbox:
    def __init__(self, tools: Iterable[Tool] = (), *, max_result_chars: int = MAX_RESULT_CHARS):
        self._tools = {t.name: t for t in tools}
        self.max_result_chars = max_result_chars

    def __bool__(self) -> bool:
        return bool(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def read_only(self, name: str) -> bool:
        """Whether a call of `name` may run before the turn is confirmed (an unknown tool
        runs nothing, so it may)."""
        tool = self._tools.get(name)
        return tool is None or tool.read_only

    async def run(self, call: ToolCall, ctx: ToolContext) -> ToolOutcome:
        """Run `call`; never raises but CancelledError (a barge-in cancels the call)."""
        started = time.monotonic()

        def outcome(content: str, ok: bool, error: str = "") -> ToolOutcome:
            if error:
                log.warning("tool %s failed: %s", call.name, error)
            return ToolOutcome(call, content, ok, time.monotonic() - started, error)

        tool = self._tools.get(call.name)
        if tool is None:
            return outcome(
                f"Error: there is no tool named {call.name!r}.",
                False,
                f"the LLM called an unknown tool {call.name!r}",
            )
        try:
            args = call.parsed_arguments()
        except ValueError as e:
            return outcome(
                f"Error: the arguments were not valid JSON: {e}",
                False,
                f"invalid arguments {call.arguments[:200]!r}",
            )
        args = _known_arguments(tool, args)
        try:
            async with asyncio.timeout(tool.timeout_s):
                result = await tool.invoke(args, ctx)
        except TimeoutError:
            return outcome(
                f"Error: {call.name} did not answer within {tool.timeout_s:g} s.",
                False,
                f"timed out after {tool.timeout_s:g} s",
            )
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a tool's failure is the turn's to report, not the session's
            return outcome(
                f"Error: {call.name} failed: {_short(str(e) or type(e).__name__)}",
                False,
                f"{type(e).__name__}: {e}",
            )
        if not isinstance(result, str):
            return outcome(
                f"Error: {call.name} returned no text.",
                False,
                f"returned {type(result).__name__}, not text",
            )
        if len(result) > self.max_result_chars:
            log.info(
                "tool %s returned %d characters; the LLM gets the first %d",
                call.name,
                len(result),
                self.max_result_chars,
            )
            result = result[: self.max_result_chars] + " [truncated]"
        return outcome(result, True)


def _known_arguments(tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """`args` without the ones the tool's schema does not name: small models add arguments
    of their own (the bundled one gives the clock a city), which would fail the whole call."""
    props = tool.spec.parameters.get("properties")
    if not isinstance(props, dict) or tool.spec.parameters.get("additionalProperties") is True:
        return args
    if extra := sorted(set(args) - set(props)):
        log.info("tool %s: arguments %s are not in its schema, left out", tool.name, extra)
        return {k: v for k, v in args.items() if k in props}
    return args


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
