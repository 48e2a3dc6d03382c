"""The chat history sent to the LLM, shaped for prefix caches: the fixed system prompt first,
then the session context, then the turns, the new question last. A turn is the user's message,
the tool exchange of its reply if it had one (the assistant's calls, their results), and what
the user heard of the answer. Old turns are dropped from the front, whole, when the history
outgrows its budget (tokens estimated from characters)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.engines import ChatMessage

CHARS_PER_TOKEN = 4  # close enough for English with BPE tokenizers; used only for trimming


@dataclass
class ChatHistory:
    system_prompt: str
    context: str = ""
    max_tokens: int = 1500
    turns: list[ChatMessage] = field(default_factory=list)

    def add_user(self, text: str) -> None:
        self.turns.append({"role": "user", "content": text})
        self._trim()

    def remove_last_user(self, text: str) -> None:
        """Drop the last user message (it is merged into the next one)."""
        if self.turns and self.turns[-1] == {"role": "user", "content": text}:
            self.turns.pop()

    def add_assistant(self, text: str) -> None:
        if text:
            self.turns.append({"role": "assistant", "content": text})
            self._trim()

    def add_tool_messages(self, messages: Iterable[ChatMessage]) -> None:
        """A reply's tool exchange, between its user message and its answer."""
        self.turns += messages

    def add_turn(self, turn: Mapping[str, Any]) -> None:
        """A stored turn (the turn store's or the room memory's record)."""
        self.add_user(turn["user_text"])
        self.add_tool_messages(turn.get("tool_messages") or [])
        self.add_assistant(turn["heard_text"])

    def messages(self, pending_user: str | None = None) -> list[ChatMessage]:
        system = self.system_prompt + (f"\n\n{self.context}" if self.context else "")
        msgs: list[ChatMessage] = [{"role": "system", "content": system}, *self.turns]
        if pending_user is not None:
            msgs.append({"role": "user", "content": pending_user})
        return msgs

    def _trim(self) -> None:
        budget = self.max_tokens * CHARS_PER_TOKEN
        while sum(_chars(m) for m in self.turns) > budget:
            # Drop the oldest whole turn (up to the next user message), so that no tool result
            # is left without its call and the history still starts with the user.
            nxt = next((i for i, m in enumerate(self.turns) if i and m["role"] == "user"), None)
            if nxt is None:
                return  # the last turn stays, however long
            del self.turns[:nxt]


def _chars(message: ChatMessage) -> int:
    calls = message.get("tool_calls")
    return len(message.get("content") or "") + (len(json.dumps(calls)) if calls else 0)
