"""Tool calls out of a streamed chat completion, in both forms servers send them.

- `StreamedToolCalls`: OpenAI's `tool_calls` deltas (a call's id and name first, its arguments
  in pieces, several calls told apart by index), put together into whole `ToolCall`s.
- `ToolCallsInText`: a model that writes its call as text instead (the bundled 0.5B Qwen
  writes `{"name": ..., "arguments": ...}`, bare or in `<tool_call>` tags, and llama.cpp
  passes it on as content). A reply that starts like JSON or a tag is held back, never spoken,
  until the stream ends; the whole objects in it that name an offered tool become calls (one
  cut off by the token limit is dropped). Held text with no such call is spoken after all,
  unless it names a tool (a call gone wrong is not speech). Spoken replies do not start with
  `{` or `<`, so nothing else waits. Such a model goes on writing calls after its first (the
  same one again, others it was not asked for), so the first whole call ends the response.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Collection
from typing import Any

from agent.engines import ToolCall

_HELD_STARTS = ("{", "<", "`")
_WRAPPERS = re.compile(r"</?tool_call>|```(?:json)?")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


class StreamedToolCalls:
    """Collects `choices[0].delta.tool_calls` pieces; `calls()` once the stream ended."""

    def __init__(self) -> None:
        self._parts: dict[int, dict[str, str]] = {}

    def add(self, deltas: Any) -> None:
        for d in deltas:
            part = self._parts.setdefault(d.index or 0, {"id": "", "name": "", "arguments": ""})
            if d.id:
                part["id"] = d.id
            if d.function is not None:
                part["name"] += d.function.name or ""
                part["arguments"] += d.function.arguments or ""

    def calls(self) -> list[ToolCall]:
        return [
            ToolCall(p["id"] or new_call_id(), p["name"], p["arguments"] or "{}")
            for _, p in sorted(self._parts.items())
            if p["name"]
        ]


class ToolCallsInText:
    """Text deltas in, text deltas out, with calls written as text taken out (see above)."""

    def __init__(self, tool_names: Collection[str]) -> None:
        self._names = set(tool_names)
        self._held = ""
        self._passing = False  # decided: this reply is text
        self.complete = False  # a whole call was written: the response may end here

    def push(self, delta: str) -> str:
        """What may be spoken now."""
        if self._passing:
            return delta
        self._held += delta
        start = self._held.lstrip()
        if not start or start.startswith(_HELD_STARTS):
            if "}" in delta and self._parse(self._held):
                self.complete = True
            return ""
        self._passing = True
        out, self._held = self._held, ""
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """At the end of the stream: the held text still to speak, or the calls it held."""
        held, self._held = self._held, ""
        if not held:
            return "", []
        if calls := self._parse(held):
            return "", calls[:1]
        if any(f'"{name}"' in held for name in self._names):
            return "", []
        return held, []

    def _parse(self, text: str) -> list[ToolCall]:
        text = _WRAPPERS.sub(" ", text).strip()
        decoder = json.JSONDecoder()
        calls: list[ToolCall] = []
        while text:
            try:
                obj, end = decoder.raw_decode(text)
            except json.JSONDecodeError:
                break  # not JSON, or cut off by the token limit
            if isinstance(obj, dict) and obj.get("name") in self._names:
                args = obj.get("arguments", obj.get("parameters", {}))
                calls.append(
                    ToolCall(
                        new_call_id(),
                        obj["name"],
                        args if isinstance(args, str) else json.dumps(args),
                    )
                )
            text = text[end:].strip()
        return calls
