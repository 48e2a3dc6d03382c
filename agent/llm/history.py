"""The chat history sent to the LLM, shaped for prefix caches: the fixed system prompt first,
then the session context, then the turns, the new question last. Old turns are dropped from
the front when the history outgrows its budget (tokens estimated from characters)."""

from __future__ import annotations

from dataclasses import dataclass, field

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

    def messages(self, pending_user: str | None = None) -> list[ChatMessage]:
        system = self.system_prompt + (f"\n\n{self.context}" if self.context else "")
        msgs: list[ChatMessage] = [{"role": "system", "content": system}, *self.turns]
        if pending_user is not None:
            msgs.append({"role": "user", "content": pending_user})
        return msgs

    def _trim(self) -> None:
        budget = self.max_tokens * CHARS_PER_TOKEN
        while len(self.turns) > 2 and sum(len(m["content"]) for m in self.turns) > budget:
            # Drop a whole user/assistant exchange so roles stay alternating.
            del self.turns[:2]
