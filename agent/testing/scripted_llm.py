"""ScriptedLLM: a TEST DOUBLE for `agent.engines.LanguageModel` that replies from a script.

Used by tests and by `voxroom simulate --llm script:PATH`, so that runs of the voice pipeline
are repeatable and cost no CPU for generation. It is not a language model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.engines import ChatMessage, ToolCall, ToolSpec
from state_machine.similarity import text_similarity

_WORD_WITH_SPACE = re.compile(r"\S+\s*")
MATCH_SIMILARITY = 0.5  # a last user message this close to a `by_text` key gets its reply


@dataclass(frozen=True)
class ScriptedToolTurn:
    """A scripted turn that calls a tool: `preamble` (may be empty), then the call; once the
    call's result is in the messages, `answer` with `{result}` replaced by the result's text.
    When the tool is not offered, `without_tool` is the reply."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    answer: str = "{result}"
    preamble: str = ""
    without_tool: str = "Sorry, I can't do that here."


Scripted = str | ScriptedToolTurn


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
    A driver that knows what its user is saying sets `unmatched`, the reply to a message that
    matches no key: a question the STT misheard is then answered as an LLM would answer it,
    at its length, not with another turn's reply.

    Each word comes with its following whitespace; the first after `ttft_ms`, the next ones
    every 1/`words_per_s` seconds. `sleep` can be replaced by a virtual-time sleep in tests.
    """

    def __init__(
        self,
        replies: Sequence[Scripted],
        *,
        ttft_ms: float = 150.0,
        words_per_s: float = 15.0,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        by_text: Mapping[str, Scripted] | None = None,
    ) -> None:
        self.replies = [_clean(r) for r in replies if _clean(r)]
        self.by_text = {k: _clean(v) for k, v in (by_text or {}).items() if k and _clean(v)}
        if not self.replies:
            raise ValueError("ScriptedLLM needs at least one non-empty reply")
        if words_per_s <= 0 or ttft_ms < 0:
            raise ValueError("ScriptedLLM needs words_per_s > 0 and ttft_ms >= 0")
        self.unmatched: Scripted | None = None
        self.ttft_s = ttft_ms / 1000
        self.word_interval_s = 1 / words_per_s
        self._sleep = sleep

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedLLM:
        """One reply per line (UTF-8); blank lines are ignored. A line that is a JSON object is
        a tool turn (`ScriptedToolTurn`'s fields: {"tool": ..., "arguments": {...},
        "answer": "It is {result}."})."""
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        replies = [_parse_line(line) for line in lines if line.strip()]
        if not replies:
            raise ValueError(f"{path}: the script has no replies")
        return cls(replies, **kwargs)

    def reply_for(self, messages: list[ChatMessage]) -> Scripted:
        said = [m for m in messages if m.get("role") == "user"]
        if not said:
            raise ValueError("ScriptedLLM: the messages contain no user turn")
        if self.by_text:
            last = message_text(said[-1])
            best = max(self.by_text, key=lambda key: text_similarity(last, key))
            if text_similarity(last, best) >= MATCH_SIMILARITY:
                return self.by_text[best]
            if self.unmatched is not None:
                return self.unmatched
        return self.replies[(len(said) - 1) % len(self.replies)]

    async def stream(
        self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncGenerator[str | ToolCall, None]:
        reply = self.reply_for(messages)
        call = None
        if isinstance(reply, ScriptedToolTurn):
            result = _result_since_last_user(messages)
            if result is not None:
                text = reply.answer.replace("{result}", result)
            elif reply.tool in {t.name for t in tools}:
                text = reply.preamble
                call = ToolCall(
                    f"call_scripted_{len(messages)}", reply.tool, json.dumps(reply.arguments)
                )
            else:
                text = reply.without_tool
        else:
            text = reply
        await self._sleep(self.ttft_s)
        for i, word in enumerate(_WORD_WITH_SPACE.findall(text)):
            if i:
                await self._sleep(self.word_interval_s)
            yield word
        if call is not None:
            yield call


def _clean(reply: Scripted) -> Scripted:
    return reply.strip() if isinstance(reply, str) else reply


def _parse_line(line: str) -> Scripted:
    if not line.lstrip().startswith("{"):
        return line
    try:
        return ScriptedToolTurn(**json.loads(line))
    except (TypeError, ValueError) as e:
        raise ValueError(f"not a tool turn: {line!r}: {e}") from e


def _result_since_last_user(messages: list[ChatMessage]) -> str | None:
    """The text of the tool results after the last user message (None: no call made yet)."""
    results: list[str] = []
    for m in reversed(messages):
        if m.get("role") == "user":
            break
        if m.get("role") == "tool":
            results.insert(0, message_text(m))
    return " ".join(results) if results else None


def message_text(message: Any) -> str:
    """A chat message's text: a string, or OpenAI's list of content parts (what an OpenAI
    client such as LiveKit Agents' plugin may send to the scripted server)."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
