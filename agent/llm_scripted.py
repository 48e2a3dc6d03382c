"""ScriptedLLM: a TEST DOUBLE for `agent.engines.LanguageModel` that replies from a script.

Used by tests and by `voxroom simulate --llm script:PATH`, so that runs of the voice pipeline
are repeatable and cost no CPU for generation. It is not a language model.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from agent.engines import ChatMessage

_WORD_WITH_SPACE = re.compile(r"\S+\s*")


class ScriptedLLM:
    """Streams scripted replies word by word at a steady pace.

    The reply is chosen by the number of user messages in `messages`: the i-th user turn gets
    reply i, cycling when the script is shorter than the conversation. Choosing by the history
    (not by a call counter) makes a call that is cancelled before speaking, such as a discarded
    speculative start, leave the next reply unchanged.

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
    ) -> None:
        self.replies = [r.strip() for r in replies if r.strip()]
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
        user_turns = sum(1 for m in messages if m.get("role") == "user")
        if user_turns == 0:
            raise ValueError("ScriptedLLM: the messages contain no user turn")
        return self.replies[(user_turns - 1) % len(self.replies)]

    async def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        words = _WORD_WITH_SPACE.findall(self.reply_for(messages))
        await self._sleep(self.ttft_s)
        for i, word in enumerate(words):
            if i:
                await self._sleep(self.word_interval_s)
            yield word
