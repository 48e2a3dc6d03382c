"""One reply: LLM deltas -> text chunker -> TTS -> playout, every stage streaming.

The LLM and TTS run concurrently: a chunk goes to TTS as soon as the chunker releases it, while
the LLM keeps generating. When the session offers tools, the LLM may call them instead of (or
after) speaking: the calls run (agent/pipeline/tool_round.py), their results go back to the LLM and
it goes on, for at most MAX_TOOL_ROUNDS rounds. Cancelling the reply closes the LLM stream (the
HTTP request ends), cancels the running calls and the pending synthesis, and leaves nothing
running.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from agent.engines import ChatMessage, LanguageModel, TextToSpeech, ToolCall, ToolSpec
from agent.events import ToolCalled, TtsChunk
from agent.pipeline.playout import Playout
from agent.pipeline.tool_round import (
    MAX_TOOL_ROUNDS,
    TOOL_APOLOGY,
    SilenceFiller,
    ToolRound,
    ToolSession,
)
from tts.chunker import FirstGuess, TextChunker
from tts.silence import trim_leading_silence

log = logging.getLogger(__name__)

# A tool's result said as the answer (when the LLM would not answer from it) only when it is
# this short: a sentence, not a document read aloud.
MAX_SAID_RESULT_CHARS = 300
# Silence kept before the answer's first sound: the TTS keeps some at each chunk's edges (the
# pause between chunks), which before the first one only delays it.
FIRST_LEAD_MS = 5.0
# Chunks synthesized before the turn is confirmed: the first, heard at the endpoint, and the
# one after it, which must be ready before the first (two words, ~0.6 s) has played.
UNCONFIRMED_CHUNKS = 2


@dataclass
class ReplyTimings:
    started: float
    llm_first_token: float | None = None
    first_chunk: float | None = None
    tts_first_audio: float | None = None


class ReplyPipeline:
    def __init__(
        self,
        reply_id: int,
        messages: list[ChatMessage],
        *,
        llm: LanguageModel,
        tts: TextToSpeech,
        playout: Playout,
        chunker: TextChunker,
        on_event: Callable[[TtsChunk | ToolCalled], None],
        on_failed: Callable[[int, str], None],
        clock: Callable[[], float] = time.monotonic,
        tools: ToolSession | None = None,
        confirmed: bool = False,
        on_progress: Callable[[int], None] = lambda _rid: None,
    ) -> None:
        self.reply_id = reply_id
        self._messages = messages
        self._llm = llm
        self._tts = tts
        self._playout = playout
        self._chunker = chunker
        self._on_event = on_event
        self._on_failed = on_failed
        self._clock = clock
        self.timings = ReplyTimings(started=clock())
        self.text = ""  # the LLM's text so far, as generated
        self.spoken: list[str] = []  # the chunks handed to the playout, in order
        self._tools = tools
        self._on_progress = on_progress  # a tool call started or ended: not stuck
        # Set once the turn is confirmed: a call with side effects waits for it.
        self._confirmed = asyncio.Event()
        if confirmed:
            self._confirmed.set()
        self._rounds: list[tuple[str, ToolRound]] = []  # (the text before the calls, the calls)
        self._filler = (
            None
            if tools is None
            else SilenceFiller(
                tools,
                confirmed=self._confirmed,
                say=lambda text, pcm: playout.append(reply_id, text, pcm, filler=True),
                unplayed_s=lambda: playout.unplayed_s(reply_id),
            )
        )
        self._task: asyncio.Task[None] | None = None
        # The first chunk's audio, started on the chunker's guess while its lookahead words
        # are still arriving (~130 ms sooner at 15 words/s); used only if the guess was right.
        self._early: tuple[str, asyncio.Task[np.ndarray]] | None = None
        self._first_right = ""  # the first chunk's right context (`_emit_chunk`)

    def start(self) -> None:
        self._playout.begin_reply(self.reply_id)
        self._task = asyncio.create_task(self._run(), name=f"reply-{self.reply_id}")

    async def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def confirm(self) -> None:
        """The user's turn is confirmed: the reply may be heard and its calls may act."""
        self._confirmed.set()

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def tool_messages(self) -> list[ChatMessage]:
        """The tool exchange of this reply for the history: each round's assistant message
        with its calls, then a result for every call (a call cut by the user says so)."""
        out: list[ChatMessage] = []
        for text, round_ in self._rounds:
            out.append(round_.assistant_message(text))
            out += round_.result_messages()
        return out

    async def _run(self) -> None:
        chunks: asyncio.Queue[str | None] = asyncio.Queue()
        synth = asyncio.create_task(self._synthesize(chunks), name=f"tts-{self.reply_id}")
        try:
            await self._run_stages(chunks, synth)
        finally:
            if self._filler is not None:
                await self._filler.stop()
            await self._drop_early()  # a guess never used: the reply ended or was cut

    async def _run_stages(
        self, chunks: asyncio.Queue[str | None], synth: asyncio.Task[None]
    ) -> None:
        try:
            try:
                await self._generate(chunks)
            except Exception:
                if not self.spoken:
                    raise
                # Cut after it began to speak: finish the words that arrived, then report.
                self._end_chunks(chunks)
                await synth
                raise
            await synth
            self._playout.finish(self.reply_id)
        except asyncio.CancelledError:
            synth.cancel()
            await asyncio.gather(synth, return_exceptions=True)
            raise
        except Exception as e:  # a provider failed: the engine falls back, the session lives
            synth.cancel()
            await asyncio.gather(synth, return_exceptions=True)
            log.warning("reply %d failed: %s: %s", self.reply_id, type(e).__name__, e)
            self._playout.finish(self.reply_id)
            self._on_failed(self.reply_id, f"{type(e).__name__}: {e}")

    async def _generate(self, chunks: asyncio.Queue[str | None]) -> None:
        messages = list(self._messages)
        specs = self._tools.toolbox.specs if self._tools is not None else []
        called: set[tuple[str, str]] = set()
        for round_no in range(MAX_TOOL_ROUNDS + 1):
            text, calls = await self._generate_round(messages, chunks, specs)
            if not calls:
                break
            fresh = list({c.key(): c for c in calls}.values())  # one call of each
            if any(c.key() in called for c in calls) or round_no == MAX_TOOL_ROUNDS:
                # It is looping (a small model calls again instead of answering from the
                # result, and then calls more it was not asked for): none of it runs, and the
                # answer is what the tools said.
                await self._say(self._last_results() or TOOL_APOLOGY, chunks)
                break
            assert self._tools is not None and self._filler is not None
            called |= {c.key() for c in fresh}
            for chunk in self._chunker.flush():  # words said before the calls, heard now
                self._emit_chunk(chunk, chunks)
            round_ = ToolRound(self._tools, fresh, confirmed=self._confirmed)
            self._rounds.append((text, round_))
            self._filler.start()  # until the reply's next words
            self._on_progress(self.reply_id)
            await round_.run()
            self._on_progress(self.reply_id)
            for outcome in round_.outcomes:
                self._on_event(
                    ToolCalled(
                        self._clock(),
                        self.reply_id,
                        outcome.call.name,
                        outcome.ok,
                        round(outcome.duration_s * 1000, 1),
                    )
                )
            if round_.failed:
                await self._say(TOOL_APOLOGY, chunks)
                break
            messages += [round_.assistant_message(text), *round_.result_messages()]
        self._end_chunks(chunks)
        if not self._chunker.spoken_text.strip():  # empty, or only emoji and markup
            raise RuntimeError("the LLM returned nothing to say")

    def _last_results(self) -> str:
        """What the last round's calls returned, said as it is (short, and not JSON)."""
        if not self._rounds:
            return ""
        results = [o.content for o in self._rounds[-1][1].outcomes if o.ok]
        said = " ".join(r.strip() for r in results if not r.lstrip().startswith(("{", "[")))
        return said if len(said) <= MAX_SAID_RESULT_CHARS else ""

    async def _say(self, text: str, chunks: asyncio.Queue[str | None]) -> None:
        """Words of the reply that come from voxroom, not from the LLM."""
        if self._filler is not None:
            await self._filler.stop()
        self.text += text
        for chunk in self._chunker.push(text):
            self._emit_chunk(chunk, chunks)

    async def _generate_round(
        self,
        messages: list[ChatMessage],
        chunks: asyncio.Queue[str | None],
        specs: list[ToolSpec],
    ) -> tuple[str, list[ToolCall]]:
        """One LLM response, offered `specs`: its text goes to the chunker as it comes; returns
        that text and the tool calls it made."""
        # An LLM that takes no tools is never asked with them.
        stream = self._llm.stream(messages, specs) if specs else self._llm.stream(messages)
        text = ""
        calls: list[ToolCall] = []
        try:
            async for delta in stream:
                if not delta:
                    continue
                if self.timings.llm_first_token is None:
                    self.timings.llm_first_token = self._clock()
                if isinstance(delta, ToolCall):
                    calls.append(delta)
                    continue
                if self._filler is not None:
                    await self._filler.stop()
                text += delta
                self.text += delta
                for chunk in self._chunker.push(delta):
                    self._emit_chunk(chunk, chunks)
                if self.timings.first_chunk is None:
                    await self._guess_early(self._chunker.provisional_first())
        finally:
            await stream.aclose()
        return text, calls

    def _end_chunks(self, chunks: asyncio.Queue[str | None]) -> None:
        for chunk in self._chunker.flush():
            self._emit_chunk(chunk, chunks)
        chunks.put_nowait(None)

    async def _guess_early(self, guess: FirstGuess | None) -> None:
        """Synthesize the chunker's guess of the first chunk, said with the words after it;
        a guess that changed replaces the one in progress."""
        if guess is None or (self._early is not None and self._early[0] == guess.text):
            return
        await self._drop_early()
        task = asyncio.create_task(
            self._tts.synthesize(guess.text, right_context=guess.right_context),
            name=f"tts-{self.reply_id}-early",
        )
        self._early = (guess.text, task)

    async def _drop_early(self) -> None:
        early, self._early = self._early, None
        if early is not None:
            early[1].cancel()
            await asyncio.gather(early[1], return_exceptions=True)

    async def _first_audio(self, chunk: str) -> np.ndarray | None:
        """The early audio if it was made for exactly this chunk, else None (and dropped)."""
        if self._early is None or self._early[0] != chunk:
            await self._drop_early()
            return None
        task = self._early[1]
        self._early = None
        return await task

    def _emit_chunk(self, chunk: str, chunks: asyncio.Queue[str | None]) -> None:
        if self.timings.first_chunk is None:
            self.timings.first_chunk = self._clock()
            # Its lookahead words: the first chunk (often one word) is said as the start of
            # its sentence, not as a sentence of its own.
            self._first_right = self._chunker.pending_text
        chunks.put_nowait(chunk)

    async def _synthesize(self, chunks: asyncio.Queue[str | None]) -> None:
        previous = ""
        made = 0
        while (chunk := await chunks.get()) is not None:
            if made >= UNCONFIRMED_CHUNKS:
                # An unconfirmed (speculative) reply has its first chunks ready for the endpoint
                # and synthesizes no more: most are cancelled, and TTS shares the STT's cores.
                await self._confirmed.wait()
            made += 1
            pcm = None if previous else await self._first_audio(chunk)
            if pcm is None:
                right = "" if previous else self._first_right
                pcm = await self._tts.synthesize(chunk, left_context=previous, right_context=right)
            if not previous:  # the answer's first sound starts at once, not after a pause
                pcm = trim_leading_silence(pcm, self._tts.sample_rate, keep_ms=FIRST_LEAD_MS)
            if self.timings.tts_first_audio is None:
                self.timings.tts_first_audio = self._clock()
            self._on_event(TtsChunk(self._clock(), chunk, self.reply_id))
            self._playout.append(self.reply_id, chunk, pcm)
            self.spoken.append(chunk)
            previous = chunk
