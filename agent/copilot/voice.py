"""Spoken copilot answers, off by default.

The candidate turns speech on or off with a text message on `voxroom.copilot.control`:
{"speak": true} or {"speak": false}. While it is on, every answer shown is also spoken by
Piper, as it is written, through the reply pipeline the voice agent uses too
(agent.pipeline.reply: chunker, TTS, playout); agent.copilot.room publishes the voice as a
track only the candidate may subscribe to. An answer that is superseded, fails, is withdrawn
(shown before its question ended, and the question went on) or is shown while speech is being
turned off falls silent at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator, Sequence

from agent.copilot.answers import AnswerSink
from agent.engines import ChatMessage, TextToSpeech, ToolCall, ToolSpec
from agent.events import ToolCalled, TtsChunk
from agent.pipeline.playout import Playout
from agent.pipeline.reply import ReplyPipeline
from tts.chunker import make_chunker

log = logging.getLogger(__name__)

MAX_CONTROL_CHARS = 1000


def parse_control(text: str) -> bool | None:
    """The `speak` switch of a control message; None (ignored) for anything else."""
    if len(text) > MAX_CONTROL_CHARS:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("speak"), bool):
        return value["speak"]
    return None


class AnswerText:
    """One answer's text as it is written, in the shape of a `LanguageModel` stream: the reply
    pipeline speaks it as it would speak an LLM's reply."""

    def __init__(self) -> None:
        self._deltas: asyncio.Queue[str | None] = asyncio.Queue()

    def push(self, delta: str) -> None:
        self._deltas.put_nowait(delta)

    def end(self) -> None:
        self._deltas.put_nowait(None)

    async def stream(
        self, messages: list[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> AsyncGenerator[str | ToolCall, None]:
        # An answer's text, as written: never a tool call (the pipeline offers it none).
        while (delta := await self._deltas.get()) is not None:
            yield delta


class SpokenAnswerSink:
    """An `AnswerSink` that shows every answer through `shown` and, while a playout is set,
    also speaks it."""

    def __init__(self, shown: AnswerSink, tts: TextToSpeech) -> None:
        self._shown = shown
        self._tts = tts
        self._playout: Playout | None = None
        self._texts: dict[int, AnswerText] = {}  # answers being written and spoken
        self._pipelines: dict[int, tuple[ReplyPipeline, Playout]] = {}  # until silenced

    @property
    def speaking(self) -> bool:
        return self._playout is not None

    async def speak_through(self, playout: Playout | None) -> None:
        """Speak the answers opened from now on through `playout`; None stops speaking, the
        answer being spoken included."""
        self._playout = playout
        if playout is None:
            await self._silence(list(self._pipelines))

    async def open(self, answer_id: int, question: str) -> None:
        await self._shown.open(answer_id, question)
        playout = self._playout
        if playout is None:
            return
        await self._silence(list(self._pipelines))  # one voice at a time: the newest answer
        text = AnswerText()
        pipeline = ReplyPipeline(
            answer_id,
            [],
            llm=text,
            tts=self._tts,
            playout=playout,
            chunker=make_chunker(),
            on_event=self._on_chunk,
            on_failed=self._on_failed,
            confirmed=True,
        )
        pipeline.start()
        playout.confirm(answer_id)  # answers are opened only once their question is final
        self._texts[answer_id] = text
        self._pipelines[answer_id] = (pipeline, playout)

    async def write(self, answer_id: int, text: str) -> None:
        await self._shown.write(answer_id, text)
        if (spoken := self._texts.get(answer_id)) is not None:
            spoken.push(text)

    async def close(self, answer_id: int, status: str) -> None:
        await self._shown.close(answer_id, status)
        spoken = self._texts.pop(answer_id, None)
        if spoken is None:
            return
        if status == "complete":
            spoken.end()  # the pipeline speaks the rest, then ends
        else:
            await self._silence([answer_id])

    async def aclose(self) -> None:
        await self.speak_through(None)

    async def _silence(self, answer_ids: list[int]) -> None:
        for answer_id in answer_ids:
            self._texts.pop(answer_id, None)
            speech = self._pipelines.pop(answer_id, None)
            if speech is not None:
                pipeline, playout = speech
                await pipeline.cancel()
                playout.cancel(answer_id)  # what is queued for the listener too

    def _on_chunk(self, chunk: TtsChunk | ToolCalled) -> None:
        if isinstance(chunk, TtsChunk):  # no tools are offered: nothing else comes
            log.debug("speaking answer %d: %r", chunk.reply_id, chunk.text)

    def _on_failed(self, answer_id: int, why: str) -> None:
        log.warning("speaking answer %d failed: %s", answer_id, why)
        self._texts.pop(answer_id, None)
