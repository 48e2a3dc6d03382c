"""The tool calls of one reply, the voice way: calls that change something wait for the
confirmed turn, the listener hears a short phrase instead of silence while a call works, and
a cancelled reply leaves a history that says which calls never finished."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from agent.adapters.tools.base import ToolContext, ToolOutcome
from agent.adapters.tools.toolbox import Toolbox
from agent.engines import ChatMessage, ToolCall

# Rounds of calls in one reply. A response after the last that still calls, or one that only
# repeats calls already made, is answered with what the tools returned (agent/pipeline/reply.py).
MAX_TOOL_ROUNDS = 3
# A reply still waiting this long after a round of calls began (on the calls, or on the LLM
# reading their results) gets a spoken filler (the design's ~0.7 s).
FILLER_AFTER_S = 0.7
# Silence between one filler's end and the next while the wait goes on: the listener never
# waits more than ~1.5 s with nothing to hear.
SILENCE_BETWEEN_FILLERS_S = 1.2

# Said instead of asking the LLM again when every call of a round failed: a short spoken
# apology, never silence and never the error itself.
TOOL_APOLOGY = "Sorry, I couldn't do that just now."
# Said in turn while a call runs, the last repeating.
FILLER_TEXTS = ("One moment.", "Still working on it.")

CANCELLED_RESULT = "Cancelled: the user interrupted before this call finished."
NOT_RUN_RESULT = "Not run: the user interrupted before the turn was confirmed."


@dataclass(frozen=True)
class ToolSession:
    """What a session's replies need to act: the tools it offers, the context its calls come
    from, and the fillers (text, audio at the TTS's rate), said in turn while a call runs, the
    last one repeating."""

    toolbox: Toolbox
    context: ToolContext
    fillers: Sequence[tuple[str, np.ndarray]]
    sample_rate: int


class ToolRound:
    """One round: the calls the LLM made in one response, run concurrently."""

    def __init__(
        self, session: ToolSession, calls: Sequence[ToolCall], *, confirmed: asyncio.Event
    ) -> None:
        self._session = session
        self.calls = list(calls)
        self._confirmed = confirmed
        self._outcomes: dict[str, ToolOutcome] = {}
        self._started: set[str] = set()

    def assistant_message(self, text: str) -> ChatMessage:
        return {
            "role": "assistant",
            "content": text or None,
            "tool_calls": [c.message() for c in self.calls],
        }

    def result_messages(self) -> list[ChatMessage]:
        """A result for every call, in the order of the calls: what it returned, or that it was
        cancelled or never ran (a reply cut by the user)."""
        out: list[ChatMessage] = []
        for call in self.calls:
            outcome = self._outcomes.get(call.id)
            if outcome is not None:
                out.append(outcome.message())
            else:
                content = CANCELLED_RESULT if call.id in self._started else NOT_RUN_RESULT
                out.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return out

    @property
    def failed(self) -> bool:
        """Every call ended and none succeeded."""
        return len(self._outcomes) == len(self.calls) and not any(
            o.ok for o in self._outcomes.values()
        )

    @property
    def outcomes(self) -> list[ToolOutcome]:
        return [self._outcomes[c.id] for c in self.calls if c.id in self._outcomes]

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._run_one(c), name=f"tool-{c.name}") for c in self.calls]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_one(self, call: ToolCall) -> None:
        toolbox = self._session.toolbox
        if not toolbox.read_only(call.name):
            # A speculative start never acts: this waits for the confirmed turn, and a reply
            # dropped because the user went on is cancelled here, before the call.
            await self._confirmed.wait()
        self._started.add(call.id)
        self._outcomes[call.id] = await toolbox.run(call, self._session.context)


class SilenceFiller:
    """Fillers while the reply waits on its tools (their calls, then the LLM reading their
    results), once the reply may be heard and its audio so far (words said before the calls)
    is over. Started with a round of calls, stopped by the reply's next words."""

    def __init__(
        self,
        session: ToolSession,
        *,
        confirmed: asyncio.Event,
        say: Callable[[str, np.ndarray], None],
        unplayed_s: Callable[[], float],
    ) -> None:
        self._session = session
        self._confirmed = confirmed
        self._say = say
        self._unplayed_s = unplayed_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._fill(), name="tool-filler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _fill(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self._confirmed.wait()
        await asyncio.sleep(max(0.0, FILLER_AFTER_S - (loop.time() - started)))
        fillers = self._session.fillers
        if not fillers:
            return
        said = 0
        while True:
            if (left := self._unplayed_s()) > 0:
                await asyncio.sleep(left + SILENCE_BETWEEN_FILLERS_S)
                continue
            text, pcm = fillers[min(said, len(fillers) - 1)]
            said += 1
            self._say(text, pcm)
            await asyncio.sleep(len(pcm) / self._session.sample_rate + SILENCE_BETWEEN_FILLERS_S)
