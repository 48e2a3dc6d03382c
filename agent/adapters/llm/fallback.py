"""A first-token budget per reply: if the primary LLM has produced no text within the budget,
the fallback (the bundled local model, typically) is asked too, and whichever speaks first
answers; the other is closed. A primary that fails before its first token hands over at once.

Never a retry of a streaming call: a retry would double the wait. The switch is reported
through `on_fallback` so metrics and the turn record can say which model answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Sequence

from agent.engines import ChatMessage, LanguageModel, ToolCall, ToolSpec

log = logging.getLogger(__name__)

_DONE = object()
# One model's stream of this request.
Opener = Callable[[LanguageModel], AsyncGenerator[str | ToolCall, None]]


class FallbackLLM:
    def __init__(
        self,
        primary: LanguageModel,
        fallback: LanguageModel,
        *,
        first_token_budget_s: float = 1.0,
        on_fallback: Callable[[str], None] | None = None,
    ) -> None:
        self.primary = primary
        self.fallback = fallback
        self.first_token_budget_s = first_token_budget_s
        self._on_fallback = on_fallback or (lambda _reason: None)

    async def stream(
        self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncGenerator[str | ToolCall, None]:
        """The first model to say something (text or a tool call) answers."""

        def open_stream(llm: LanguageModel) -> AsyncGenerator[str | ToolCall, None]:
            return llm.stream(messages, tools) if tools else llm.stream(messages)

        queues: dict[str, asyncio.Queue[object]] = {"primary": asyncio.Queue()}
        tasks = {
            "primary": asyncio.create_task(_pump(self.primary, open_stream, queues["primary"]))
        }
        try:
            winner, first = await self._first_token(open_stream, queues, tasks)
            for name, task in tasks.items():
                if name != winner:
                    task.cancel()
            if first is _DONE:
                return
            yield first  # type: ignore[misc]  # not _DONE nor an error: a stream item
            while (item := await queues[winner].get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]  # not _DONE nor an error: a stream item
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    async def _first_token(
        self,
        open_stream: Opener,
        queues: dict[str, asyncio.Queue[object]],
        tasks: dict[str, asyncio.Task[None]],
    ) -> tuple[str, object]:
        """The first text (or the end) from whichever model gives it first."""
        getters = {"primary": asyncio.create_task(queues["primary"].get())}
        deadline = asyncio.get_running_loop().time() + self.first_token_budget_s
        try:
            while True:
                timeout = None
                if "fallback" not in tasks:
                    timeout = max(0.0, deadline - asyncio.get_running_loop().time())
                done, _ = await asyncio.wait(
                    getters.values(), timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    self._start_fallback(
                        "primary slow to first token", open_stream, queues, tasks, getters
                    )
                    continue
                for name, getter in list(getters.items()):
                    if getter not in done:
                        continue
                    item = getter.result()
                    if isinstance(item, BaseException):
                        del getters[name]
                        if name == "primary" and "fallback" not in tasks:
                            log.warning("primary LLM failed: %s", item)
                            self._start_fallback(
                                f"primary failed: {item}", open_stream, queues, tasks, getters
                            )
                        elif not getters:
                            raise item
                        continue
                    return name, item
        finally:
            for getter in getters.values():
                getter.cancel()

    def _start_fallback(
        self,
        reason: str,
        open_stream: Opener,
        queues: dict[str, asyncio.Queue[object]],
        tasks: dict[str, asyncio.Task[None]],
        getters: dict[str, asyncio.Task[object]],
    ) -> None:
        self._on_fallback(reason)
        queues["fallback"] = asyncio.Queue()
        tasks["fallback"] = asyncio.create_task(
            _pump(self.fallback, open_stream, queues["fallback"])
        )
        getters["fallback"] = asyncio.create_task(queues["fallback"].get())


async def _pump(llm: LanguageModel, open_stream: Opener, out: asyncio.Queue[object]) -> None:
    """Copy one model's deltas into a queue, ending with _DONE or the exception."""
    stream = open_stream(llm)
    try:
        async for delta in stream:
            if delta:
                out.put_nowait(delta)
        out.put_nowait(_DONE)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # handed to the consumer, which decides
        out.put_nowait(e)
    finally:
        with contextlib.suppress(Exception):
            await stream.aclose()
