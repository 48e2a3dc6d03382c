"""`agent.engines.LanguageModel` over any OpenAI-compatible chat completions endpoint: OpenAI,
a self-hosted server, or the bundled llama.cpp server (agent.adapters.llm.llama_server).

Latency rules from the design: one long-lived client per process (its keep-alive pool saves
the TCP/TLS handshake on every turn), no retries on a streaming call (a retry doubles the
wait; the turn engine degrades instead), a short connect timeout.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from agent.adapters.llm.tool_calls import StreamedToolCalls, ToolCallsInText
from agent.engines import ChatMessage, ToolCall, ToolSpec

if TYPE_CHECKING:  # the SDK loads on the first reply, not with this module
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam


class LLMError(RuntimeError):
    """The LLM request failed (unreachable, refused, timed out); the turn cannot use it."""


@dataclass(frozen=True)
class ReplySettings:
    """How a reply is sampled and how long it may take: the chat client's, and those of the
    copilot's llama.cpp client (agent.adapters.llm.prefill), which takes them over from the chat
    client it stands in for."""

    max_tokens: int = 120
    temperature: float = 0.3
    stop: tuple[str, ...] = ()
    stall_timeout_s: float = 10.0
    """The longest gap between streamed chunks."""
    max_duration_s: float = 30.0
    """The longest the whole reply may take."""


DEFAULT_REPLY = ReplySettings()


class OpenAIChatLLM:
    """Streams chat completions. Create one per process (before the first turn: importing
    the openai package takes about a second) and share it between sessions."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str = "",
        reply: ReplySettings = DEFAULT_REPLY,
        connect_timeout_s: float = 2.0,
    ) -> None:
        import openai

        self.model = model
        self.base_url = base_url
        self.reply = reply
        # The connection pool binds to an event loop on its first request, not here.
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            # Servers that need no key (llama.cpp) still get the header the client insists on.
            api_key=api_key or "no-key",
            max_retries=0,
            # read = the longest gap between streamed chunks; the whole reply is capped below.
            timeout=openai.Timeout(reply.stall_timeout_s, connect=connect_timeout_s),
        )

    async def stream(
        self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncGenerator[str | ToolCall, None]:
        """Text deltas of the reply, then its tool calls (streamed `tool_calls`, or calls the
        model wrote as text: agent.adapters.llm.tool_calls). `aclose()` on the iterator (or
        cancelling the task that iterates it) closes the HTTP response, which makes the server stop
        generating."""
        import openai

        deadline = time.monotonic() + self.reply.max_duration_s
        streamed = StreamedToolCalls()
        in_text = ToolCallsInText([t.name for t in tools]) if tools else None
        try:
            response = await self._client.chat.completions.create(
                model=self.model,
                # The SDK types messages and tools as TypedDicts; ours are dicts of that shape.
                messages=cast("list[ChatCompletionMessageParam]", messages),
                stream=True,
                max_tokens=self.reply.max_tokens,
                temperature=self.reply.temperature,
                stop=list(self.reply.stop) or openai.omit,  # omit: not sent at all
                tools=(
                    cast("list[ChatCompletionToolUnionParam]", [t.openai() for t in tools])
                    if tools
                    else openai.omit
                ),
            )
        except openai.APIError as e:
            raise LLMError(f"{self._where()}: {e}") from e
        try:
            async for chunk in response:
                if chunk.choices:
                    delta = chunk.choices[0].delta
                    if delta.tool_calls:
                        streamed.add(delta.tool_calls)
                    text = delta.content or ""
                    if text and in_text is not None:
                        text = in_text.push(text)
                    if text:
                        yield text
                    if in_text is not None and in_text.complete:
                        break  # closing the response stops the server generating
                if time.monotonic() > deadline:
                    raise LLMError(
                        f"{self._where()}: reply took over {self.reply.max_duration_s} s"
                    )
            calls = streamed.calls()
            if in_text is not None:
                held, written = in_text.finish()
                if held:
                    yield held
                calls += written
            for call in calls:
                yield call
        except openai.APIError as e:
            raise LLMError(f"{self._where()}: {e}") from e
        finally:
            await response.close()

    async def aclose(self) -> None:
        await self._client.close()

    def _where(self) -> str:
        return f"LLM {self.model!r} at {self.base_url or 'the OpenAI API'}"
