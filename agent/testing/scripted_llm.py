"""ScriptedLLM: a TEST DOUBLE for `agent.engines.LanguageModel` that replies from a script.

Used by tests and by `voxroom simulate --llm script:PATH`, so that runs of the voice pipeline
are repeatable and cost no CPU for generation. It is not a language model.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent.engines import ChatMessage
from state_machine.similarity import text_similarity

_WORD_WITH_SPACE = re.compile(r"\S+\s*")
MATCH_SIMILARITY = 0.5  # a last user message this close to a `by_text` key gets its reply


class ScriptedLLM:
    """Streams scripted replies word by word at a steady pace.

    The reply is chosen by the number of user messages in `messages`: the i-th user turn gets
    reply i, cycling when the script is shorter than the conversation. Choosing by the history
    (not by a call counter) makes a call that is cancelled before speaking, such as a discarded
    speculative start, leave the next reply unchanged.

    With `by_text` (what the user says -> the reply to it), the last user message picks the
    reply of the key most like it (word similarity >= MATCH_SIMILARITY, so a transcript with
    a word wrong still matches), and the count is only the fallback: an agent that takes a
    backchannel as a turn, or a paused question as two, does not shift every later reply.

    Each word comes with its following whitespace; the first after `ttft_ms`, the next ones
    every 1/`words_per_s` seconds. `sleep` can be replaced by a virtual-time sleep in tests.
    """

    def __init__(
        self,
        replies: Sequence[str],
        *,
        ttft_ms: float = 150.0,
        words_per_s: float = 15.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        by_text: Mapping[str, str] | None = None,
    ) -> None:
        self.replies = [r.strip() for r in replies if r.strip()]
        self.by_text = {k: v.strip() for k, v in (by_text or {}).items() if k and v.strip()}
        if not self.replies:
            raise ValueError("ScriptedLLM needs at least one non-empty reply")
        if words_per_s <= 0 or ttft_ms < 0:
            raise ValueError("ScriptedLLM needs words_per_s > 0 and ttft_ms >= 0")
        self.ttft_s = ttft_ms / 1000
        self.word_interval_s = 1 / words_per_s
        self._sleep = sleep

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedLLM:
        """One reply per line (UTF-8); blank lines are ignored."""
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        replies = [line for line in lines if line.strip()]
        if not replies:
            raise ValueError(f"{path}: the script has no replies")
        return cls(replies, **kwargs)

    def reply_for(self, messages: list[ChatMessage]) -> str:
        said = [m for m in messages if m.get("role") == "user"]
        if not said:
            raise ValueError("ScriptedLLM: the messages contain no user turn")
        if self.by_text:
            last = message_text(said[-1])
            best = max(self.by_text, key=lambda key: text_similarity(last, key))
            if text_similarity(last, best) >= MATCH_SIMILARITY:
                return self.by_text[best]
        return self.replies[(len(said) - 1) % len(self.replies)]

    async def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        words = _WORD_WITH_SPACE.findall(self.reply_for(messages))
        await self._sleep(self.ttft_s)
        for i, word in enumerate(words):
            if i:
                await self._sleep(self.word_interval_s)
            yield word


def message_text(message: Any) -> str:
    """A chat message's text: a string, or OpenAI's list of content parts (what an OpenAI
    client such as LiveKit Agents' plugin may send to the scripted server)."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
