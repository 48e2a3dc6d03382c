"""The interview copilot's engine: the interviewer's audio in, short written answers out.

LiveKit-independent (agent.copilot.room connects it to a room): 20 ms frames of the meeting audio
go in through `push_frame`; answers come out through an `AnswerSink`, one stream per answer,
written delta by delta.

`CopilotEngine` runs the pure `state_machine.question_endpointing.QuestionEndpointer` (where a
question ends, when an answer starts speculatively) against real engines: VAD, streaming STT,
the context index, the LLM. A speculative answer generates into a buffer; nothing reaches the
sink before the endpointer shows it (a question that looks complete, a moment before its
endpoint) or confirms it, then the buffer goes out at once and the rest as it streams. With a
`Prefiller` (agent.adapters.llm.prefill), the question is read into the LLM's prompt cache
from the STT's partials while it is being asked.

Unlike the voice agent, answering never blocks listening: the interviewer may go on while an
answer streams, and a newer confirmed answer supersedes an unfinished older one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from agent.adapters.llm.prefill import Prefiller, PrefillResult, QuestionPrefill
from agent.adapters.stt.questions import for_questions
from agent.adapters.turn_detector import TurnDetector
from agent.copilot.answers import (
    AnswerRecord,
    AnswerSink,
    ContextSearch,
    LiveAnswer,
    asked,
    check_answer,
    publish_answer,
    relevant_to,
    show_replacement,
    stream_answer,
)
from agent.copilot.context.retrieval import is_job_piece
from agent.copilot.events import (
    AnswerCancelled,
    AnswerDone,
    AnswerShown,
    AnswerStarted,
    CandidateRequested,
    CopilotEvent,
    NotAQuestion,
    Prefill,
    QuestionTranscript,
    UtteranceEnd,
    UtteranceStart,
    Warm,
)
from agent.copilot.prompts import (
    COPILOT_SYSTEM_PROMPT,
    chunk_ids,
    copilot_messages,
    prefix_steps,
    prompt_pieces,
)
from agent.engines import (
    ChatMessage,
    LanguageModel,
    SpeechToText,
    STTStream,
)
from agent.pipeline.listener import VoiceDetector, engine_listener, tick_forever
from state_machine import actions as A
from state_machine import events as E
from state_machine.endpointing import EPS
from state_machine.options import CopilotOptions
from state_machine.question_endpointing import (
    EndpointerAction,
    QuestionEndpointer,
)

log = logging.getLogger(__name__)

EventSink = Callable[[CopilotEvent], None]


class CopilotEngine:
    def __init__(
        self,
        *,
        stt: SpeechToText,
        llm: LanguageModel,
        sink: AnswerSink,
        context: ContextSearch | None = None,
        options: CopilotOptions | None = None,
        system_prompt: str = COPILOT_SYSTEM_PROMPT,
        vad: VoiceDetector | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_event: EventSink | None = None,
        prefill: Prefiller | None = None,
        turn_detector: TurnDetector | None = None,
    ) -> None:
        """`prefill`: reads the question into the LLM's prompt cache while it is being asked
        (agent.adapters.llm.prefill; only for the server behind `llm`, in the layout of `llm`'s
        prompts: the bundled server's `CopilotLlamaClient` is both). `turn_detector`: the
        end-of-turn model whose score sets the question's endpoint silence."""
        options = options or CopilotOptions()
        if turn_detector is not None:
            options = options.scored()
        self.options = options
        self.endpointer = QuestionEndpointer(self.options)
        self._emit: EventSink = on_event or (lambda _e: None)
        self.answers: list[AnswerRecord] = []
        self.context = context
        self._stt, self._llm, self._sink = for_questions(stt), llm, sink
        self._system_prompt = system_prompt
        if vad is None:
            from agent.audio.vad import VoiceActivityDetector

            vad = VoiceActivityDetector()
        self._listener = engine_listener(
            self.options, vad, turn_detector, self._on_turn_score, self._emit, clock=clock
        )
        self._clock = clock
        self._stream: STTStream | None = None
        self._partials: asyncio.Task[None] | None = None
        self._voiced_at = -1e9  # the last voiced frame
        self._speech_end = 0.0
        self._live: dict[int, LiveAnswer] = {}
        self._ticker: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()  # answers cancelled, still closing
        self._score_waits: set[asyncio.Task[None]] = set()  # turn scores held (`_score`)
        self._closed_early_at = -1e9  # when an LLM request was last closed before its end
        self._no_answers = asyncio.Event()  # set while no answer is live: warm-ups may run
        self._no_answers.set()
        self._warm_lock = asyncio.Lock()
        self._warm_ids: tuple[int, ...] | None = None  # the documents' chunks in the cache
        self._previous_question = ""  # the last confirmed one: a follow-up refers to it
        self._exchange: tuple[str, str] | None = None  # the last answered: (question, shown)
        self._head_wanted = False  # the prompt up to the next question may be read now
        self._prefill = (
            None
            if prefill is None
            else QuestionPrefill(
                prefill,
                self._prefill_messages,
                self._prefill_ready,
                on_done=self._prefilled,
                on_flight=self._set_partials,
            )
        )

    async def start(self) -> None:
        self._stream = self._stt.stream()
        self._listener.start(self._stream)
        self._set_partials()
        self._partials = asyncio.create_task(
            self._listener.read_partials(self._offer_prefill), name="copilot-partials"
        )
        self._ticker = asyncio.create_task(
            tick_forever(
                self.options.frame_s,
                self._clock,
                lambda now: self._apply(self.endpointer.tick(now)),
            ),
            name="copilot-timer",
        )

    async def aclose(self) -> None:
        tasks = [t for t in (self._ticker, self._partials) if t is not None]
        tasks += [a.task for a in self._live.values() if a.task is not None]
        tasks += self._score_waits
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._prefill is not None:
            await self._prefill.aclose()
        await self._listener.aclose()
        self._live.clear()
        self._no_answers.set()

    @property
    def idle(self) -> bool:
        """No utterance being heard and no answer on its way."""
        return not self._listener.hearing and not self._live

    def push_frame(self, pcm: np.ndarray) -> None:
        """One 20 ms frame of the interviewer (int16, 16 kHz mono, FRAME_SAMPLES long)."""
        voiced, now = self._listener.frame(pcm)
        if voiced:
            self._voiced_at = now
            if self._prefill is not None:  # text that came during a pause goes out now
                self._prefill.send_waiting()
        self._apply(self.endpointer.on_frame(voiced, now))

    # ---- actions ------------------------------------------------------------------------

    def _apply(self, actions: list[EndpointerAction]) -> None:
        for action in actions:
            self._execute(action)

    def _execute(self, a: EndpointerAction) -> None:
        now = self._clock()
        match a:
            case A.OpenUtterance(utterance_id=uid, pre_roll_s=pre_roll_s):
                self._listener.open(uid, self.options.frames(pre_roll_s))
                self._head_wanted = False
                if self._prefill is not None:
                    self._prefill.restart()
            case A.DiscardUtterance():
                self._listener.close()
            case A.RequestCandidate(utterance_id=uid):
                if uid == self._listener.utterance_id and self._stream is not None:
                    self._emit(CandidateRequested(now, uid))
                self._listener.request_candidate(uid, self._on_candidate)
            case A.ScoreTurn(utterance_id=uid, text=text):
                self._score(uid, text)
            case A.DropCandidate():
                self._listener.drop_candidate()
            case A.StartReply(reply_id=rid, user_text=text, speculative=spec):
                self._start_answer(rid, text, spec, now)
            case A.CancelReply(reply_id=rid, reason=reason):
                self._cancel_answer(rid, reason)
            case A.CommitUserTurn():
                self._listener.close()  # the candidate that ended it was its transcript
            case A.ShowReply(reply_id=rid):
                self._show(rid)
            case A.ConfirmReply(reply_id=rid):
                self._confirm(rid, now)
            case E.SpeechStart(t=onset, utterance_id=uid):
                self._emit(UtteranceStart(now, uid, onset))
            case E.SpeechEnd(t=last_voiced, utterance_id=uid):
                self._speech_end = last_voiced
                self._emit(UtteranceEnd(now, uid, last_voiced))
            case E.Transcript() | E.Speculative() | QuestionTranscript() | NotAQuestion():
                self._emit(a)  # an event, dated by the endpointer: reported as it is

    # ---- transcription ------------------------------------------------------------------

    def _on_candidate(self, uid: int, text: str, covered_until: float, failed: bool) -> None:
        if uid == self._listener.utterance_id:  # at a pause in a question: read ahead if it goes on
            self._offer_prefill(text, at_pause=True)
        self._apply(self.endpointer.on_candidate(uid, text, covered_until, self._clock()))

    def _score(self, uid: int, text: str) -> None:
        """Score the turn now, or after the first token of the answers reading their prompt
        (bounded by `CopilotOptions.score_hold_s`): the two would share the cores."""
        hold = self.options.score_hold_s
        reading = [a for a in self._live.values() if not a.first_token.is_set()]
        if hold is None or not reading:
            self._listener.score(uid, text)
            return
        task = asyncio.get_running_loop().create_task(
            self._score_after(reading, hold, uid, text), name=f"copilot-score-{uid}"
        )
        self._score_waits.add(task)
        task.add_done_callback(self._score_waits.discard)

    async def _score_after(
        self, reading: list[LiveAnswer], hold: float, uid: int, text: str
    ) -> None:
        first = [asyncio.ensure_future(a.first_token.wait()) for a in reading]
        ended = [a.task for a in reading if a.task is not None]  # cancelled: it reads no more
        try:
            await asyncio.wait([*first, *ended], timeout=hold, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in first:
                f.cancel()
        self._listener.score(uid, text)

    def _on_turn_score(self, uid: int, text: str, score: float | None) -> None:
        self._apply(self.endpointer.on_turn_score(uid, text, score, self._clock()))

    def _offer_prefill(self, transcript: str, *, at_pause: bool = False) -> None:
        if self._prefill is not None and self._listener.hearing and transcript.strip():
            question = self.endpointer.question_text(transcript, self._clock())
            self._prefill.offer(question, at_pause=at_pause)

    # ---- reading the question ahead -------------------------------------------------------

    def _prefill_ready(self) -> bool:
        """A prefill request may go out: the interviewer is speaking now, its last frame voiced
        (from the first quiet frame on, the question's transcript and maybe its answer may come
        next, and must neither wait behind a read-ahead nor share the cores with one), the
        prefix is warm, and no other request holds or is about to free the warm slot: a request
        sent meanwhile would go to the other, cold one."""
        o = self.options
        now = self._clock()
        speaking = self._listener.hearing and now - self._voiced_at < o.frame_s + EPS
        quiet_for_head = self._head_wanted and not self._listener.hearing
        return (
            (speaking or quiet_for_head)
            and self._warm_ids is not None
            and self._no_answers.is_set()
            and not self._warm_lock.locked()
            and not self._stopping
            and now >= self._closed_early_at + o.llm_release_s
        )

    async def _prefill_messages(self, question: str) -> list[ChatMessage] | None:
        """The answer prompt for `question`, when its documents are the warm prefix (the
        nearest pieces instead depend on the final question)."""
        every = await self._prompt_pieces()
        if chunk_ids(every) != self._warm_ids:
            return None
        return copilot_messages(self._system_prompt, every, question, self._last_exchange())

    def _last_exchange(self) -> tuple[str, str] | None:
        """The exchange a new question follows: the last confirmed question and the answer
        shown to it, once that answer is done (None before)."""
        exchange = self._exchange
        return exchange if exchange is not None and exchange[0] == self._previous_question else None

    def _read_head(self) -> None:
        """An answer is done: read the next question's prompt up to where the question goes
        (the documents, then this exchange) while the interviewer is quiet, so that the next
        question costs only its own words again."""
        if self._prefill is not None and not self._listener.hearing and not self._live:
            self._head_wanted = True
            self._prefill.read_head()

    def _prefilled(self, question: str, result: PrefillResult) -> None:
        if not question:
            self._head_wanted = False
        self._emit(
            Prefill(self._clock(), question, result.cached, result.read, round(result.ms, 1))
        )

    # ---- answers ------------------------------------------------------------------------

    def _start_answer(self, rid: int, text: str, speculative: bool, now: float) -> None:
        # A new question is the one that matters: older answers stop here, not only once it
        # is confirmed, so that their LLM requests free the slot whose cache holds the prompt
        # prefix (a second, concurrent request would land in a cold slot).
        for other in list(self._live.values()):
            if other.record is not None:
                self._stop(other.id, "superseded")
        answer = LiveAnswer(
            rid,
            text,
            speculative,
            now,
            previous=self._previous_question,
            exchange=self._last_exchange(),
        )
        answer.task = asyncio.get_running_loop().create_task(
            self._run_answer(answer), name=f"copilot-answer-{rid}"
        )
        self._live[rid] = answer
        self._no_answers.clear()
        self._set_partials()
        self._emit(AnswerStarted(self._clock(), rid, speculative))

    def _cancel_answer(self, rid: int, reason: str) -> None:
        self._stop(rid, reason)

    def _stop(self, rid: int, reason: str) -> None:
        answer = self._drop(rid)
        if answer is not None and answer.task is not None:
            answer.task.cancel()
            self._stopping.add(answer.task)
            answer.task.add_done_callback(self._stopped)
        self._emit(AnswerCancelled(self._clock(), rid, reason))

    def _drop(self, rid: int) -> LiveAnswer | None:
        answer = self._live.pop(rid, None)
        if not self._live:
            self._no_answers.set()
            self._set_partials()
        return answer

    def _set_partials(self) -> None:
        """Partials are decoded only to read the question ahead (not once the prefill has
        stopped for failing), and not while a read-ahead or an answer is on its way: the two
        would share the cores, and both come late (a read-ahead that ran into the end of the
        question slowed its final decode and held up its answer). Without them the candidate
        at a pause is one decode of the utterance; with them, a partial decode still running
        then (it cannot be stopped) shares the cores with it, and the endpoint comes later
        (docs/benchmarks.md)."""
        if self._stream is not None:
            reading_ahead = self._prefill is not None and self._prefill.working
            reading_now = self._prefill is not None and self._prefill.in_flight
            self._stream.set_paused(not reading_ahead or reading_now or bool(self._live))

    def _stopped(self, task: asyncio.Task[None]) -> None:
        self._stopping.discard(task)
        self._closed_early_at = self._clock()

    async def _llm_slot_free(self) -> None:
        """Wait until requests closed early are over at the LLM server too. llama.cpp notices
        a closed request only when it writes the next token; until then the slot that holds
        the cached prompt prefix is busy, and a new request would go to the other, cold one
        (which reads the documents again: tens of seconds). A prefill in flight is short (a
        few words of the question) and its slot is free once it returns: it is awaited."""
        if self._prefill is not None:
            await self._prefill.settled()
        await asyncio.gather(*self._stopping, return_exceptions=True)
        wait = self._closed_early_at + self.options.llm_release_s - self._clock()
        if wait > 0:
            await asyncio.sleep(wait)

    def _show(self, rid: int) -> None:
        answer = self._live.get(rid)
        if answer is not None:
            answer.shown.set()
            self._emit(AnswerShown(self._clock(), rid))

    def _confirm(self, rid: int, now: float) -> None:
        answer = self._live.get(rid)
        if answer is None:
            return
        question = asked(answer)
        self._previous_question = question
        answer.record = AnswerRecord(
            rid,
            question,
            speech_end=self._speech_end,
            committed_at=now,
            started_at=answer.started_at,
            speculative=answer.speculative,
        )
        self.answers.append(answer.record)
        answer.shown.set()
        answer.confirmed.set()

    async def _run_answer(self, answer: LiveAnswer) -> None:
        """Shown (before its question's end, or at it), the answer streams to the sink; it
        closes once its question is confirmed, or as withdrawn if it never is."""
        generate = asyncio.create_task(self._generate(answer), name=f"copilot-llm-{answer.id}")
        opened = answered = False
        try:
            await answer.shown.wait()
            await self._sink.open(answer.id, asked(answer))
            opened = True
            status = await publish_answer(self._sink, answer, generate, self._clock)
            await answer.confirmed.wait()
            record = answer.record
            assert record is not None
            record.take_times(answer)
            record.pieces, record.relevant = answer.pieces, answer.relevant
            if answer.replacement:
                await self._sink.close(answer.id, "replaced")
                record.replacement_id = self.endpointer.new_answer_id()
                await show_replacement(self._sink, record, answer)
            else:
                await self._sink.close(answer.id, status)
                record.text = answer.text
            record.done_at = self._clock()
            record.status = status
            self._emit(
                AnswerDone(self._clock(), answer.id, status, record.speech_end, record.latency_ms())
            )
            if status == "complete":
                self._exchange = (record.question, record.text)
                answered = True
        except asyncio.CancelledError:
            if opened:
                record = answer.record
                await self._sink.close(answer.id, "withdrawn" if record is None else "cancelled")
                if record is not None:
                    record.status, record.text = "cancelled", answer.text
                    record.take_times(answer)
            raise
        finally:
            generate.cancel()
            await asyncio.gather(generate, return_exceptions=True)
            self._drop(answer.id)
        if answered:
            await self._llm_slot_free()  # the answer's request may have been cut short
            self._read_head()

    async def _generate(self, answer: LiveAnswer) -> None:
        await self._llm_slot_free()  # this request then gets the slot with the cached prefix
        warm = self.context is not None and chunk_ids(await self._prompt_pieces()) == self._warm_ids
        relevant = asyncio.create_task(
            relevant_to(self.context, answer, self.options.context_pieces, after_first_token=warm)
        )
        try:
            answer.pieces = await self._pieces(relevant)
            messages = copilot_messages(
                self._system_prompt, answer.pieces, answer.text_in, answer.exchange
            )
            if await stream_answer(self._llm, answer, messages, self.options, self._clock):
                self._closed_early_at = self._clock()  # the server stops at its next token
            if not answer.text.strip():  # (and no first token for the search to wait for)
                raise RuntimeError("the LLM returned an empty answer")
            answer.relevant = await relevant
        finally:
            relevant.cancel()
        if self.options.guard and self.context is not None:
            await check_answer(self.context, answer)

    async def _pieces(self, relevant: asyncio.Task[list[Any]]) -> list[Any]:
        """The prompt's pieces (`prompt_pieces`) when they are the warm prompt prefix, else the
        pieces retrieved for the question and the job description's head."""
        if self.context is None:
            return []
        every = await self._prompt_pieces()
        if chunk_ids(every) == self._warm_ids:
            return every
        if not every or self.options.context_pieces <= 0:
            return []
        return [*await relevant, *(p for p in every if is_job_piece(p))]

    async def _prompt_pieces(self) -> list[Any]:
        if self.context is None:
            return []
        return prompt_pieces(await self.context.pieces_async())

    async def warm(self) -> None:
        """Put the prompt prefix every question shares into the LLM's cache: the system prompt
        and the documents, when they fit `stable_prefix_max_chars`. Call it at the start and
        after each new document; until it is done, prompts carry the nearest chunks instead.

        The prefix grows over a few requests, each closed after its first token: each reads
        only what it adds to the one before (a few seconds of prefill with the bundled model,
        inside the client's limit on a reply's duration). llama.cpp serves a request from the
        idle slot whose cache shares the longest prefix with it, so one warm slot serves the
        session. Warm-ups run one at a time."""
        async with self._warm_lock:
            indexed = await self.context.pieces_async() if self.context is not None else []
            every = prompt_pieces(indexed)
            fit = sum(len(p.text) for p in every) <= self.options.stable_prefix_max_chars
            if not fit:
                every = []
            ids = chunk_ids(every)
            if ids != self._warm_ids:
                if not await self._warm_steps(every):
                    return  # the answers still work, from a cold cache
                self._warm_ids = ids
            # Told every time: a client waits for `pieces` to reach what it sent (all of its
            # documents' pieces are in: the prompt holds those it reads), or learns
            # that its documents are too long to ever be the cached prefix.
            self._emit(Warm(self._clock(), len(indexed) if ids else 0, fit))

    async def _warm_steps(self, every: list[Any]) -> bool:
        """Read the prefix with `every` piece into the LLM's cache, a step at a time; False
        when the LLM failed."""
        for pieces in prefix_steps(every, self.options.warm_step_chars):
            # Answers first: two cores cannot read a warm-up step and a question at once in
            # time. Until the prefix is warm, answers carry the nearest pieces.
            await self._no_answers.wait()
            await self._llm_slot_free()  # each step reuses the slot of the one before
            stream = self._llm.stream(copilot_messages(self._system_prompt, pieces, "Hello."))
            try:
                async for _ in stream:
                    break
            except Exception as e:
                log.warning("warming the LLM failed: %s: %s", type(e).__name__, e)
                return False
            finally:
                await stream.aclose()
                self._closed_early_at = self._clock()
        return True
