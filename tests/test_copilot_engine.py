"""The copilot engine in virtual time (tests/virtual_time.py), with test doubles for the
engines around it: a VAD that hears any non-zero frame, a streaming STT that answers from a
script after a fixed delay, the ScriptedLLM (recording the prompts it gets), a prefill client
that records what it reads ahead, and a sink that records what the candidate would see and
when. (The pure endpointer on its own: tests/test_question_endpointing.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from agent.adapters.llm.prefill import PrefillResult
from agent.copilot.answers import FAILED_ANSWER, answer_end, looping
from agent.copilot.engine import CopilotEngine
from agent.copilot.events import CopilotEvent, Warm
from agent.copilot.prompts import COPILOT_SYSTEM_PROMPT, copilot_messages, prefix_steps
from agent.engines import FRAME_SAMPLES, ChatMessage, Transcript
from agent.events import event_json
from agent.testing.scripted_llm import ScriptedLLM
from state_machine.options import CopilotOptions
from tests.stt_stream_double import STTStreamDouble
from tests.test_turn_engine import ScriptedTurnDetector
from tests.virtual_time import run_virtual

FRAME_S = 0.02
VOICED = np.full(FRAME_SAMPLES, 1000, np.int16)
SILENT = np.zeros(FRAME_SAMPLES, np.int16)
ANSWER = "- I push for measurements first.\n- Then we agree on a short prototype."


# ---- test doubles ---------------------------------------------------------------------------


class AnyNonZeroVAD:
    """TEST DOUBLE: a frame is speech when any sample is non-zero."""

    def is_speech(self, pcm: np.ndarray) -> bool:
        return bool(np.any(pcm))


@dataclass
class ScriptedSTT:
    """TEST DOUBLE: a streaming STT whose transcript of an utterance is the script's text for
    the longest duration of voiced audio pushed, `delay_s` after a flush(); while not paused,
    each script entry is also a partial `delay_s` after the voiced audio reaches it, and an
    entry reached while paused is one `delay_s` after the pause ends (as Whisper then decodes
    what it has)."""

    script: list[tuple[float, str]]  # (seconds of speech, what has been said by then)
    delay_s: float = 0.2
    partials: bool = True
    calls: int = 0  # flushes
    streams: list[ScriptedSTTStream] = field(default_factory=list)

    def stream(self) -> ScriptedSTTStream:
        self.streams.append(ScriptedSTTStream(self))
        return self.streams[-1]

    def said(self, voiced_s: float) -> str:
        said = [text for seconds, text in self.script if seconds <= voiced_s + 1e-6]
        return said[-1] if said else ""

    async def decode(self, voiced_s: float) -> str:
        await asyncio.sleep(self.delay_s)
        return self.said(voiced_s)


class ScriptedSTTStream(STTStreamDouble):
    """TEST DOUBLE: one stream of ScriptedSTT."""

    def __init__(self, stt: ScriptedSTT) -> None:
        self.stt = stt
        self.voiced_frames = 0
        self.paused = False
        self.pause_times: list[tuple[float, bool]] = []  # (loop time, paused)
        self.missed = False  # a script entry was reached while paused
        self.closed = False
        self._queue: asyncio.Queue[Transcript | None] = asyncio.Queue()
        self._timers: list[asyncio.TimerHandle] = []

    def push(self, pcm: np.ndarray) -> None:
        if not pcm.any():
            return
        self.voiced_frames += 1
        voiced_s = self.voiced_frames * FRAME_S
        at_entry = any(abs(s - voiced_s) < 1e-6 for s, _ in self.stt.script)
        if self.stt.partials and at_entry:
            if self.paused:
                self.missed = True
            else:
                self._decode_partial()

    def _decode_partial(self) -> None:
        partial = Transcript(self.stt.said(self.voiced_frames * FRAME_S), final=False)
        self._timers.append(
            asyncio.get_running_loop().call_later(self.stt.delay_s, self._queue.put_nowait, partial)
        )

    async def flush(self) -> str:
        self.stt.calls += 1
        return await self.stt.decode(self.voiced_frames * FRAME_S)

    def discard(self) -> None:
        self.voiced_frames = 0
        self.missed = False
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    async def partials(self) -> AsyncIterator[Transcript]:
        while (item := await self._queue.get()) is not None:
            yield item

    @property
    def pauses(self) -> list[bool]:
        return [paused for _, paused in self.pause_times]

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self.pause_times.append((asyncio.get_running_loop().time(), paused))
        if not paused and self.missed and self.stt.partials:
            self.missed = False
            self._decode_partial()

    async def aclose(self) -> None:
        self.discard()
        self.closed = True
        self._queue.put_nowait(None)


class RecordingLLM(ScriptedLLM):
    """TEST DOUBLE: ScriptedLLM that records the messages of every request, and whether its
    stream was closed early."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.requests: list[list[ChatMessage]] = []
        self.closed_early = 0
        self.open_streams = 0
        self.most_open = 0  # the most requests open at once
        self.times: list[tuple[float, float]] = []  # (opened, closed), loop time
        self.spans: list[tuple[float, float, str]] = []  # (opened, closed, the user's text)

    async def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        self.requests.append(messages)
        opened = asyncio.get_running_loop().time()
        self.open_streams += 1
        self.most_open = max(self.most_open, self.open_streams)
        finished = False
        try:
            async for word in super().stream(messages):
                yield word
            finished = True
        finally:
            self.open_streams -= 1
            closed = asyncio.get_running_loop().time()
            self.times.append((opened, closed))
            self.spans.append((opened, closed, messages[-1]["content"]))
            if not finished:
                self.closed_early += 1


class FailingLLM:
    """TEST DOUBLE: every request fails after 100 ms."""

    async def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        await asyncio.sleep(0.1)
        raise ConnectionError("refused")
        yield ""  # an async generator


@dataclass
class RecordingSink:
    """TEST DOUBLE: what the candidate's screen gets, with virtual times."""

    events: list[tuple[float, str, int, str]] = field(default_factory=list)

    def _log(self, kind: str, answer_id: int, value: str) -> None:
        self.events.append((asyncio.get_running_loop().time(), kind, answer_id, value))

    async def open(self, answer_id: int, question: str) -> None:
        self._log("open", answer_id, question)

    async def write(self, answer_id: int, text: str) -> None:
        self._log("write", answer_id, text)

    async def close(self, answer_id: int, status: str) -> None:
        self._log("close", answer_id, status)

    def text(self, answer_id: int) -> str:
        return "".join(v for _, k, i, v in self.events if k == "write" and i == answer_id)

    def opened(self) -> list[tuple[int, str]]:
        return [(i, v) for _, k, i, v in self.events if k == "open"]

    def status(self, answer_id: int) -> str:
        [status] = [v for _, k, i, v in self.events if k == "close" and i == answer_id]
        return status

    def first_write_at(self, answer_id: int) -> float:
        return min(t for t, k, i, _ in self.events if k == "write" and i == answer_id)


class RecordingPrefill:
    """TEST DOUBLE for the read-ahead of agent.adapters.llm.prefill.CopilotLlamaClient: each request
    takes `seconds`; records (opened, closed, question, messages, finished) per request, in
    loop time."""

    def __init__(self, seconds: float = 0.1, *, fail: bool = False) -> None:
        self.seconds = seconds
        self.fail = fail
        self.requests: list[tuple[float, float, str, list[ChatMessage], bool]] = []
        self.open = 0
        self.most_open = 0

    async def prefill(self, messages: list[ChatMessage], question: str) -> PrefillResult:
        loop = asyncio.get_running_loop()
        opened, finished = loop.time(), False
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(self.seconds)
            if self.fail:
                raise ConnectionError("refused")
            finished = True
            return PrefillResult(cached=0, read=len(question.split()), ms=self.seconds * 1000)
        finally:
            self.open -= 1
            self.requests.append((opened, loop.time(), question, messages, finished))

    def questions(self) -> list[str]:
        return [q for _, _, q, _, _ in self.requests]


@dataclass
class Piece:
    chunk_id: int
    source: str
    text: str
    distance: float = 0.0


class FixedContext:
    """TEST DOUBLE for the context index: the same pieces for every question."""

    def __init__(self, pieces: list[Piece]) -> None:
        self.pieces = pieces
        self.questions: list[str] = []

    async def search_async(self, question: str, k: int = 3) -> list[Piece]:
        self.questions.append(question)
        return self.pieces[:k]

    async def pieces_async(self) -> list[Piece]:
        return self.pieces


# ---- the harness ----------------------------------------------------------------------------


@dataclass
class Run:
    engine: CopilotEngine
    sink: RecordingSink
    llm: object
    speech_ends: list[float]
    events: list[dict]  # as JSON (agent.events.event_json)


def copilot_engine(
    stt: ScriptedSTT, llm: object, *, sink: RecordingSink | None = None, **kw: Any
) -> CopilotEngine:
    """An engine on the doubles (a new `RecordingSink` unless given), in the running loop's
    time; `kw`: the rest of `CopilotEngine`'s arguments."""
    return CopilotEngine(
        stt=stt,
        llm=llm,
        sink=sink if sink is not None else RecordingSink(),
        vad=AnyNonZeroVAD(),
        clock=asyncio.get_running_loop().time,
        **kw,
    )


def run_copilot(
    timeline: list[tuple[str, float]],
    stt: ScriptedSTT,
    llm: object,
    *,
    options: CopilotOptions | None = None,
    context: FixedContext | None = None,
    tail_s: float = 3.0,
    close_at: float | None = None,
    prefill: RecordingPrefill | None = None,
    warm: bool = False,
    turn_detector: object = None,
) -> Run:
    """Feed `timeline` ("speech" | "silence", seconds) frame by frame in virtual time, then
    silence for `tail_s` (or close the engine at `close_at`, in timeline time). `warm`: warm
    the prompt prefix first (the timeline starts after it)."""

    async def main() -> Run:
        loop = asyncio.get_running_loop()
        sink = RecordingSink()
        events: list[dict] = []
        engine = copilot_engine(
            stt,
            llm,
            sink=sink,
            context=context,
            options=options,
            on_event=lambda e: events.append(event_json(e)),
            prefill=prefill,
            turn_detector=turn_detector,
        )
        await engine.start()
        if warm:
            await engine.warm()
        t0 = loop.time()
        speech_ends = []
        for kind, seconds in [*timeline, ("silence", tail_s)]:
            for _ in range(round(seconds / FRAME_S)):
                await asyncio.sleep(FRAME_S)
                if close_at is not None and loop.time() - t0 >= close_at:
                    break
                engine.push_frame(VOICED if kind == "speech" else SILENT)
            if kind == "speech":
                speech_ends.append(loop.time())
        await engine.aclose()
        return Run(engine, sink, llm, speech_ends, events)

    return run_virtual(main())


def kinds(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["type"] == kind]


# ---- the engine -----------------------------------------------------------------------------


def test_a_complete_question_is_answered_speculatively_and_shown_before_its_end():
    stt = ScriptedSTT([(1.5, "What is your biggest weakness?")], delay_s=0.2)
    llm = RecordingLLM([ANSWER], ttft_ms=100, words_per_s=20)
    run = run_copilot([("silence", 0.5), ("speech", 1.5)], stt, llm)

    [(aid, question)] = run.sink.opened()
    assert question == "What is your biggest weakness?"
    assert run.sink.text(aid) == ANSWER
    assert run.sink.status(aid) == "complete"
    [record] = run.engine.answers
    assert record.speculative and record.status == "complete"
    speech_end = run.speech_ends[0]
    assert record.speech_end == pytest.approx(speech_end)
    # candidate after 60 ms of silence, decoded in 200 ms: a complete question, so the answer
    # starts at once, and goes on the screen at once (past the 200 ms to show it); its first
    # words come at 360 ms, before the cued endpoint (400 ms) confirms it.
    assert record.started_at - speech_end == pytest.approx(0.26, abs=0.021)
    [shown] = kinds(run.events, "answer_shown")
    assert shown["answer_id"] == aid
    assert [t for t, k, i, _ in run.sink.events if k == "open" and i == aid] == [
        pytest.approx(record.started_at, abs=0.021)
    ]
    assert record.committed_at - speech_end == pytest.approx(0.40, abs=0.021)
    first = run.sink.first_write_at(aid) - speech_end
    assert first == pytest.approx(0.36, abs=0.021)
    assert record.latency_ms()["first_words"] == pytest.approx(first * 1000, abs=0.5)
    assert len(llm.requests) == 1


def test_without_an_early_show_the_answer_waits_for_the_endpoint():
    stt = ScriptedSTT([(1.5, "What is your biggest weakness?")], delay_s=0.2)
    llm = RecordingLLM([ANSWER], ttft_ms=100, words_per_s=20)
    options = CopilotOptions(show_after_s=None)
    run = run_copilot([("silence", 0.5), ("speech", 1.5)], stt, llm, options=options)

    [record] = run.engine.answers
    assert not kinds(run.events, "answer_shown")
    first = run.sink.first_write_at(record.answer_id) - run.speech_ends[0]
    assert first == pytest.approx(record.committed_at - run.speech_ends[0], abs=0.021)
    assert first == pytest.approx(0.40, abs=0.021)


class TimedTurnDetector(ScriptedTurnDetector):
    """TEST DOUBLE: ScriptedTurnDetector that records when each score starts (loop time)."""

    def __init__(self, score: float, **kw: Any) -> None:
        super().__init__(score, **kw)
        self.started: list[float] = []

    async def score(self, text: str, pcm: np.ndarray) -> float:
        self.started.append(asyncio.get_running_loop().time())
        return await super().score(text, pcm)


@pytest.mark.parametrize(
    ("ttft_ms", "hold_s", "score_after_s"),
    [
        (100, 0.3, 0.36),  # held until the answer's first token
        (1000, 0.3, 0.56),  # a slow first token holds it no longer than `score_hold_s`
        (100, None, 0.26),  # not held: scored with the answer's start
    ],
)
def test_a_turn_score_waits_for_the_first_token_of_the_answer_reading_its_prompt(
    ttft_ms: int, hold_s: float | None, score_after_s: float
):
    """On two cores the end-of-turn model slowed the LLM's prompt read, which the first words
    wait on; the endpoint needs the score only later."""
    stt = ScriptedSTT([(1.5, "What is your biggest weakness?")], delay_s=0.2)
    llm = RecordingLLM([ANSWER], ttft_ms=ttft_ms, words_per_s=20)
    detector = TimedTurnDetector(0.9, delay_s=0.02)
    options = CopilotOptions(score_hold_s=hold_s)
    run = run_copilot(
        [("silence", 0.5), ("speech", 1.5)], stt, llm, options=options, turn_detector=detector
    )

    speech_end = run.speech_ends[0]
    [record] = run.engine.answers
    assert record.started_at - speech_end == pytest.approx(0.26, abs=0.021)
    [started] = detector.started
    assert started - speech_end == pytest.approx(score_after_s, abs=0.021)
    assert detector.asked[0][0] == "What is your biggest weakness?"
    # the score (complete) still ends the question at the cued 0.4 s, or once it comes
    ended = max(0.40, score_after_s + 0.02)
    assert record.committed_at - speech_end == pytest.approx(ended, abs=0.021)


def test_a_turn_score_with_no_answer_reading_runs_at_once():
    stt = ScriptedSTT([(1.0, "Can you walk me through your last project")], delay_s=0.05)
    llm = RecordingLLM([ANSWER], ttft_ms=100, words_per_s=20)
    detector = TimedTurnDetector(0.9, delay_s=0.02)
    run = run_copilot([("silence", 0.5), ("speech", 1.0)], stt, llm, turn_detector=detector)

    # not a complete question: no answer starts at the pause, the score runs with the
    # candidate (after 60 ms of silence, decoded in 50 ms)
    assert detector.started[0] - run.speech_ends[0] == pytest.approx(0.11, abs=0.021)


@dataclass
class QuestionTunedSTT(ScriptedSTT):
    """TEST DOUBLE: a ScriptedSTT with a question tuning (agent/adapters/stt/questions.py)
    that hears by another script."""

    tuned: ScriptedSTT | None = None

    def for_questions(self) -> ScriptedSTT:
        assert self.tuned is not None
        return self.tuned


def test_questions_are_heard_through_the_stt_s_question_tuning():
    tuned = ScriptedSTT([(1.5, "What is your biggest weakness?")])
    stt = QuestionTunedSTT([(1.5, "What is your big west mess?")], tuned=tuned)
    run = run_copilot([("silence", 0.5), ("speech", 1.5)], stt, RecordingLLM([ANSWER]))

    [(_, question)] = run.sink.opened()
    assert question == "What is your biggest weakness?"
    assert tuned.streams and not stt.streams


def test_the_answer_to_a_question_that_does_not_look_complete_waits_for_the_endpoint():
    # A fast LLM finishes the whole answer before the endpoint: it is held, then shown at once.
    stt = ScriptedSTT([(1.0, "Can you walk me through your last project")], delay_s=0.05)
    llm = RecordingLLM(["- The payments rewrite."], ttft_ms=10, words_per_s=1000)
    run = run_copilot([("speech", 1.0)], stt, llm)

    [record] = run.engine.answers
    speech_end = run.speech_ends[0]
    # no end punctuation: not a complete question, so the long endpoint (700 ms) applies,
    # while the speculative start came at 250 ms of silence.
    assert record.started_at - speech_end == pytest.approx(0.26, abs=0.021)
    assert record.committed_at - speech_end == pytest.approx(0.70, abs=0.021)
    writes = [(t, v) for t, k, _, v in run.sink.events if k == "write"]
    assert writes == [(pytest.approx(record.committed_at), "- The payments rewrite.")]


def test_a_pause_inside_a_question_cancels_the_speculative_answer_and_answers_the_whole():
    stt = ScriptedSTT(
        [
            (1.0, "Tell me about a time when"),
            (2.0, "Tell me about a time when you disagreed with your manager."),
        ]
    )
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    run = run_copilot([("speech", 1.0), ("silence", 0.5), ("speech", 1.0)], stt, llm)

    [(aid, question)] = run.sink.opened()
    assert question == "Tell me about a time when you disagreed with your manager."
    assert run.sink.status(aid) == "complete"
    cancelled = kinds(run.events, "answer_cancelled")
    assert [c["reason"] for c in cancelled] == ["the interviewer went on"]
    assert llm.closed_early == 1  # the speculative request was closed, not left running
    assert [m[-1]["content"] for m in llm.requests] == [
        "Interviewer: Tell me about a time when",
        "Interviewer: Tell me about a time when you disagreed with your manager.",
    ]


def _comma_question(pause_s: float) -> Run:
    stt = ScriptedSTT(
        [
            (1.0, "Where did you go to university?"),
            (2.0, "Where did you go to university, and what did you study?"),
        ],
        delay_s=0.05,
    )
    llm = RecordingLLM([ANSWER], ttft_ms=10, words_per_s=1000)
    return run_copilot([("speech", 1.0), ("silence", pause_s), ("speech", 1.0)], stt, llm)


def test_a_comma_pause_after_a_complete_looking_half_does_not_end_the_question():
    # "Where did you go to university, and what did you study?": the first half is a whole
    # question, and the comma's pause (a quick decode hears it well inside it) ends nothing.
    run = _comma_question(pause_s=0.3)

    # The half was answered speculatively and shown after 0.2 s of the pause; the interviewer
    # went on, so that answer was withdrawn, and the whole question answered once.
    [(half, half_question), (aid, question)] = run.sink.opened()
    assert half_question == "Where did you go to university?"
    assert run.sink.text(half) == ANSWER
    assert run.sink.status(half) == "withdrawn"
    assert question == "Where did you go to university, and what did you study?"
    assert run.sink.status(aid) == "complete"
    assert [c["reason"] for c in kinds(run.events, "answer_cancelled")] == [
        "the interviewer went on"
    ]
    [record] = run.engine.answers
    assert record.answer_id == aid and record.question == question


def test_a_pause_shorter_than_the_show_withdraws_nothing():
    # The same question with a comma's pause of 0.16 s: the half's answer is never shown.
    run = _comma_question(pause_s=0.16)

    [(aid, question)] = run.sink.opened()
    assert question == "Where did you go to university, and what did you study?"
    assert run.sink.status(aid) == "complete"


def test_a_transcript_asked_at_a_pause_is_not_waited_for_once_the_question_goes_on():
    # The pause's decode (400 ms) would end after the question does; it is dropped when the
    # interviewer goes on, so the end of the question asks for its own at once.
    stt = ScriptedSTT([(1.0, "Where did you"), (1.2, "Where did you study?")], delay_s=0.4)
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    run = run_copilot([("speech", 1.0), ("silence", 0.1), ("speech", 0.2)], stt, llm)

    [record] = run.engine.answers
    assert record.question == "Where did you study?"
    assert record.started_at - run.speech_ends[-1] == pytest.approx(0.46, abs=0.021)
    assert [d["text"] for d in kinds(run.events, "transcript")] == [
        "Where did you study?",
        "Where did you study?",
    ]  # the candidate, then the final


@pytest.mark.parametrize("gap_s", [1.5, 30.0])
def test_a_statement_before_a_question_is_its_context_while_recent(gap_s: float):
    class ByTimeSTT(ScriptedSTT):
        """TEST DOUBLE: the statement before the second utterance starts, then the question."""

        async def decode(self, voiced_s: float) -> str:
            await asyncio.sleep(self.delay_s)
            if asyncio.get_running_loop().time() < 1.0 + gap_s:
                return "I see you worked at Northwind Bank."
            return "What did you do there?"

    llm = RecordingLLM([ANSWER], ttft_ms=100)
    run = run_copilot([("speech", 1.0), ("silence", gap_s), ("speech", 1.0)], ByTimeSTT([]), llm)

    [(_, question)] = run.sink.opened()
    assert question == "What did you do there?"
    [dropped] = kinds(run.events, "not_a_question")
    assert dropped["text"] == "I see you worked at Northwind Bank."
    prompt = llm.requests[-1][-1]["content"]
    if gap_s < CopilotOptions().preamble_keep_s:
        assert prompt == "Interviewer: I see you worked at Northwind Bank. What did you do there?"
    else:
        assert prompt == "Interviewer: What did you do there?"
    # What was heard of each utterance, the question without its preamble (the candidate's
    # transcript shows both, one after the other).
    [final] = [d for d in kinds(run.events, "transcript") if d["final"]]
    assert final["heard"] == "What did you do there?"
    assert final["utterance_id"] > dropped["utterance_id"]


def test_the_prompt_is_system_then_document_pieces_in_document_order_then_the_question():
    context = FixedContext(
        [
            Piece(7, "resume", "Mentored four engineers; agreed a prototype."),
            Piece(2, "job", "Lead three teams."),
        ]
    )
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER])
    run_copilot([("speech", 1.0)], stt, llm, context=context)

    assert context.questions == ["Have you mentored anyone?"]
    [messages] = llm.requests
    assert messages == copilot_messages(
        COPILOT_SYSTEM_PROMPT, context.pieces, "Have you mentored anyone?"
    )
    assert messages[0] == {"role": "system", "content": COPILOT_SYSTEM_PROMPT}
    assert messages[1]["content"] == (
        "My resume:\n- Mentored four engineers; agreed a prototype.\n\n"
        "From its description: Lead three teams.\n\nInterviewer: Have you mentored anyone?"
    )


THREE_PIECES = [
    Piece(7, "resume", "Mentored four engineers; agreed a prototype."),
    Piece(2, "job", "Lead three teams."),
    Piece(9, "resume", "Speaks German."),
]
EVERY_PIECE = (
    "My resume:\n- Mentored four engineers; agreed a prototype.\n- Speaks German.\n\n"
    "From its description: Lead three teams.\n\n"
)


def _warmed_run(
    context: FixedContext, options: CopilotOptions | None = None
) -> tuple[RecordingLLM, list[dict]]:
    """Warm one engine's prefix twice, then ask it a question; returns the LLM with its
    requests, and what each warm-up told."""
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER])
    told: list[dict] = []

    def on_event(event: CopilotEvent) -> None:
        if isinstance(event, Warm):
            told.append({"pieces": event.pieces, "documents_fit": event.documents_fit})

    async def main() -> None:
        engine = copilot_engine(stt, llm, context=context, options=options, on_event=on_event)
        await engine.start()
        await engine.warm()
        await engine.warm()  # nothing new: no second request
        for _ in range(50):
            await asyncio.sleep(FRAME_S)
            engine.push_frame(VOICED)
        for _ in range(150):
            await asyncio.sleep(FRAME_S)
            engine.push_frame(SILENT)
        await engine.aclose()

    run_virtual(main())
    return llm, told


def test_once_warm_every_piece_is_the_same_prompt_prefix_for_every_question():
    context = FixedContext(THREE_PIECES)
    llm, told = _warmed_run(context)

    assert told == [{"pieces": 3, "documents_fit": True}] * 2
    # every piece is in the prompt; the search for the guard waits for the first token
    assert context.questions == ["Have you mentored anyone?"]
    [_, system_only], [_, warming], [_, asked] = llm.requests
    assert llm.closed_early == 2  # the warm-up's requests stop at their first token
    assert system_only["content"] == "Interviewer: Hello."
    assert warming["content"] == EVERY_PIECE + "Interviewer: Hello."
    assert asked["content"] == EVERY_PIECE + "Interviewer: Have you mentored anyone?"


def test_a_warm_up_grows_the_prefix_a_few_pieces_at_a_time_in_document_order():
    pieces = [Piece(i, "resume", "x" * 200) for i in (5, 1, 4, 2, 3)]
    steps = prefix_steps(pieces, 400)
    assert [[p.chunk_id for p in step] for step in steps] == [
        [],
        [1, 2],
        [1, 2, 3, 4],
        [1, 2, 3, 4, 5],
    ]
    assert prefix_steps([], 400) == [[]]


def test_before_the_warm_up_a_prompt_carries_only_the_nearest_pieces():
    context = FixedContext(THREE_PIECES)
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER])
    run_copilot(
        [("speech", 1.0)],
        stt,
        llm,
        context=context,  # never warmed
        options=CopilotOptions(context_pieces=1),
    )

    assert context.questions == ["Have you mentored anyone?"]
    [[_, asked]] = llm.requests
    assert asked["content"] == (
        "My resume:\n- Mentored four engineers; agreed a prototype.\n\n"
        "From its description: Lead three teams.\n\n"
        "Interviewer: Have you mentored anyone?"
    )


def test_documents_over_the_prefix_limit_are_searched_even_when_warm():
    context = FixedContext(THREE_PIECES)
    llm, told = _warmed_run(context, CopilotOptions(stable_prefix_max_chars=40, context_pieces=1))

    # Told each time, so that a client stops waiting for the pieces to be read.
    assert told == [{"pieces": 0, "documents_fit": False}] * 2
    assert context.questions == ["Have you mentored anyone?"]
    [_, warming], [_, asked] = llm.requests
    assert warming["content"] == "Interviewer: Hello."  # the system prompt alone
    assert "German" not in asked["content"]


def test_a_warm_up_waits_while_an_answer_is_on_its_way():
    context = FixedContext([Piece(i, "resume", f"Fact {i}. " + "x" * 290) for i in range(6)])
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER], ttft_ms=1000, words_per_s=10)

    async def main() -> CopilotEngine:
        engine = copilot_engine(stt, llm, context=context)
        await engine.start()
        warm = asyncio.create_task(engine.warm())  # 4 steps of ~1 s each
        for frame in [VOICED] * 50 + [SILENT] * 400:  # a question at 1 s of the warm-up
            await asyncio.sleep(FRAME_S)
            engine.push_frame(frame)
        await warm
        await engine.aclose()
        return engine

    engine = run_virtual(main())
    [(asked_at, answered_at, asked)] = [s for s in llm.spans if "mentored" in s[2]]
    warm_opens = [opened for opened, _, text in llm.spans if text.endswith("Hello.")]
    assert len(warm_opens) == len(prefix_steps(context.pieces, 300)) == 4
    assert not [t for t in warm_opens if asked_at <= t < answered_at]
    assert "Fact 5" not in asked  # not warm yet: the nearest pieces only
    assert engine._warm_ids is not None and len(engine._warm_ids) == 6


def test_a_new_question_supersedes_an_unfinished_answer():
    texts = {1.0: "What is your biggest weakness?", 2.0: "Why do you want this job?"}

    class ByLength(ScriptedSTT):
        async def decode(self, voiced_s: float) -> str:
            await asyncio.sleep(self.delay_s)
            return texts[1.0] if voiced_s < 1.5 else texts[2.0]

    long_answer = " ".join(f"word{i}" for i in range(40))  # 4 s at 10 words/s, not cut
    llm = RecordingLLM([long_answer], ttft_ms=100, words_per_s=10)
    run = run_copilot(
        [("speech", 1.0), ("silence", 1.0), ("speech", 2.0)], ByLength([]), llm, tail_s=8.0
    )

    (first, q1), (second, q2) = run.sink.opened()
    assert (q1, q2) == (texts[1.0], texts[2.0])
    assert run.sink.status(first) == "cancelled"
    assert run.sink.status(second) == "complete"
    assert run.sink.text(second) == long_answer
    assert 0 < len(run.sink.text(first)) < len(long_answer)
    # The older request was closed before the newer one was sent: one LLM slot (the one with
    # the cached prompt prefix) serves them in turn.
    assert llm.most_open == 1
    (_, first_closed), (second_opened, _) = llm.times
    assert second_opened - first_closed >= CopilotOptions().llm_release_s - 1e-6


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("Me: I push for measurements first.", "I push for measurements first."),
        ("Me:I push for measurements first.", "I push for measurements first."),
        ("My first step is measurement.", "My first step is measurement."),
        ("Me and my team measure first.", "Me and my team measure first."),
    ],
)
def test_a_chat_model_s_speaker_label_never_reaches_the_screen(written: str, shown: str):
    """Through an OpenAI-compatible chat model the prompt's dialogue ("Interviewer: ...")
    led the bundled model to begin answers with "Me:"; the label is held back and dropped."""
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    run = run_copilot([("speech", 1.0)], stt, RecordingLLM([written], words_per_s=50))
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == shown  # every write: nothing of the label was on screen


def test_answers_stop_after_three_lines():
    six = "".join(f"- line {i}\n" for i in range(6))
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    run = run_copilot([("speech", 1.0)], stt, RecordingLLM([six], words_per_s=50))
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == "".join(f"- line {i}\n" for i in range(3))
    assert run.engine.answers[0].status == "complete"


def test_a_long_answer_stops_at_the_first_sentence_end_past_the_word_limit():
    rambling = (
        "I am a backend engineer with eight years of Go. I own services end to end "
        "and I measure before I change anything. I also mentor people."
    )
    stt = ScriptedSTT([(1.0, "Tell me about yourself.")])
    run = run_copilot(
        [("speech", 1.0)],
        stt,
        RecordingLLM([rambling], words_per_s=50),
        options=CopilotOptions(max_answer_words=12),
    )
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid).rstrip() == (
        "I am a backend engineer with eight years of Go. I own "
        "services end to end and I measure before I change "
        "anything."
    )
    assert run.engine.answers[0].status == "complete"


def test_an_answer_that_never_ends_a_sentence_stops_at_the_hard_word_limit():
    run_on = " ".join(f"word{i}" for i in range(100))
    stt = ScriptedSTT([(1.0, "Tell me about an outage.")])
    llm = RecordingLLM([run_on], words_per_s=50)
    run = run_copilot(
        [("speech", 1.0)],
        stt,
        llm,
        options=CopilotOptions(max_answer_words=12, answer_word_limit=20),
    )
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid).split() == run_on.split()[:20]
    assert run.engine.answers[0].status == "complete"
    assert llm.closed_early == 1  # the server stops generating too


def test_the_hard_word_limit_keeps_the_last_word_whole():
    options = CopilotOptions(max_answer_words=12, answer_word_limit=4)
    # the fourth word may still grow ("account" + "ants"): nothing is cut until a fifth begins
    assert answer_end("We ran the account", options) is None
    assert answer_end("We ran the accountants, and", options) == "We ran the accountants,"
    # a bullet's dash is no word
    assert answer_end("- We ran the\n- accountants", options) is None


def test_an_answer_caught_in_a_loop_stops_at_the_third_repeat():
    loop = "It started when " + "caused by a full disk outage " * 40  # as the model once did
    stt = ScriptedSTT([(1.0, "Tell me about an outage.")])
    llm = RecordingLLM([loop], words_per_s=50)
    run = run_copilot([("speech", 1.0)], stt, llm)
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid).split() == loop.split()[: 3 + 3 * 6]
    assert llm.closed_early == 1


@pytest.mark.parametrize(
    ("text", "loops"),
    [
        (
            "caused by a full disk outage caused by a full disk outage "
            "caused by a full disk outage",
            True,
        ),
        ("ha ha ha ha ha ha", True),
        ("caused by a full disk outage caused by a full disk outage", False),  # twice is fine
        ("Go, Python, PostgreSQL, Redis, Kafka, Kubernetes, Terraform, Prometheus, gRPC.", False),
        ("I measure, I change, I measure again.", False),
    ],
)
def test_a_loop_is_a_phrase_three_times_in_a_row(text: str, loops: bool) -> None:
    assert looping(text.split()) is loops


def test_a_failed_llm_shows_a_short_notice_instead_of_nothing():
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    run = run_copilot([("speech", 1.0)], stt, FailingLLM())
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == FAILED_ANSWER
    assert run.sink.status(aid) == "failed"


def test_closing_mid_answer_cancels_it_and_closes_its_stream():
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    llm = RecordingLLM([" ".join(f"word{i}" for i in range(100))], words_per_s=10)
    run = run_copilot([("speech", 1.0)], stt, llm, tail_s=3.0, close_at=2.5)
    [(aid, _)] = run.sink.opened()
    assert run.sink.status(aid) == "cancelled"
    assert llm.closed_early == 1
    assert run.engine.idle


def test_a_dead_stt_asks_nothing_and_is_logged_once_per_utterance(
    caplog: pytest.LogCaptureFixture,
):
    class DeadStream(ScriptedSTTStream):
        def push(self, pcm: np.ndarray) -> None:
            raise RuntimeError("decoder died")

        def discard(self) -> None:
            raise RuntimeError("decoder died")

        async def aclose(self) -> None:
            self.closed = True

    class DeadSTT(ScriptedSTT):
        def stream(self) -> ScriptedSTTStream:
            self.streams.append(DeadStream(self))
            return self.streams[-1]

    stt = DeadSTT([(1.0, "What are your strengths?")])
    llm = RecordingLLM([ANSWER])
    run = run_copilot([("speech", 1.0), ("silence", 1.0), ("speech", 1.0)], stt, llm)

    # Two utterances, their frames pushed and discarded: each logs its first failure only.
    failures = [r.getMessage() for r in caplog.records if r.name == "agent.adapters.stt.guard"]
    assert failures == ["STT discard failed: RuntimeError: decoder died"] * 2
    assert llm.requests == [] and run.engine.idle


def test_silence_and_noise_alone_ask_nothing():
    stt = ScriptedSTT([(0.5, "[music]")])
    llm = RecordingLLM([ANSWER])
    run = run_copilot([("speech", 0.5)], stt, llm)
    assert run.sink.events == [] and llm.requests == []


# ---- reading the question ahead (prefill) ---------------------------------------------------

GROWING = [
    (0.4, "Tell me"),
    (0.8, "Tell me about a..."),
    (1.2, "Tell me about a time you?"),
    (1.6, "Tell me about a time you failed."),
]


def _after_warm_up(llm: RecordingLLM) -> list[tuple[float, float, str]]:
    return [s for s in llm.spans if not s[2].endswith("Hello.")]


def _paused_at(stream: ScriptedSTTStream, t: float) -> bool:
    """Whether `stream` was paused at loop time `t` (its last pause change at or before it)."""
    changes = [paused for at, paused in stream.pause_times if at <= t + 1e-9]
    return bool(changes) and changes[-1]


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] - 1e-9 and b[0] < a[1] - 1e-9


def test_the_question_is_read_ahead_as_its_partials_grow_and_the_answer_continues_it():
    context = FixedContext(THREE_PIECES)
    stt = ScriptedSTT(GROWING, delay_s=0.2)
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    prefill = RecordingPrefill(0.1)
    run = run_copilot([("speech", 1.6)], stt, llm, context=context, prefill=prefill, warm=True)

    # Partials come 0.2 s after their audio, read without their last word (often cut off)
    # and end punctuation; the last (at the pause) is not read ahead: the candidate and the
    # answer come next and must not wait behind it.
    # Once the answer is done, the prompt up to the next question (the documents and this
    # exchange, "") is read while the interviewer is quiet.
    assert prefill.questions() == ["Tell", "Tell me about", "Tell me about a time", ""]
    question = "Tell me about a time you failed."
    *ahead, (_, _, _, head_messages, _) = prefill.requests
    for _, _, partial, messages, finished in ahead:
        assert finished
        assert messages == copilot_messages(COPILOT_SYSTEM_PROMPT, context.pieces, partial)
    assert head_messages == copilot_messages(
        COPILOT_SYSTEM_PROMPT, context.pieces, "", (question, ANSWER)
    )
    [(_, _, asked)] = _after_warm_up(llm)
    assert asked == EVERY_PIECE + "Interviewer: " + question
    assert asked.startswith(EVERY_PIECE + "Interviewer: " + prefill.questions()[-2])
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == ANSWER
    assert [e["question"] for e in kinds(run.events, "prefill")] == prefill.questions()
    # Partials pause while a read-ahead or the answer is on its way (they would share the
    # cores), then go on.
    stream = stt.streams[0]
    assert all(_paused_at(stream, opened) for opened, *_ in prefill.requests)
    assert _paused_at(stream, run.engine.answers[0].started_at)
    assert stream.pauses[-1] is False


def test_never_two_requests_in_flight_and_no_partial_is_decoded_during_one():
    context = FixedContext(THREE_PIECES)
    stt = ScriptedSTT(
        [(0.4 * i, " ".join(["word"] * i)) for i in range(1, 7)] + [(2.8, "Why words?")],
        delay_s=0.1,
    )
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    prefill = RecordingPrefill(0.9)  # slower than the partials (every 0.4 s)
    run_copilot([("speech", 2.8)], stt, llm, context=context, prefill=prefill, warm=True)

    # Partials at 0.5 and 0.9 s, one word more each (read without the last one): the second
    # is read at once (0.9-1.8 s), and no partial is decoded meanwhile (the third and fourth
    # are skipped); when it returns, the words so far (four) are decoded and read (1.9-2.8 s).
    # (then, the answer done, the prompt up to the next question: "")
    assert prefill.questions() == ["word", "word word word", ""]
    assert prefill.most_open == 1
    assert all(_paused_at(stt.streams[0], opened) for opened, *_ in prefill.requests)
    spans = [(o, c) for o, c, question, *_ in prefill.requests if question]
    [(asked_at, _, asked)] = _after_warm_up(llm)
    assert asked.endswith("Interviewer: Why words?")
    # The answer's request waits for the prefill in flight: it then gets the warm slot.
    assert asked_at >= spans[-1][1]
    assert not any(_overlap(s, (o, c)) for s in spans for o, c, _ in llm.spans)


def test_nothing_is_read_ahead_before_the_prefix_is_warm():
    stt = ScriptedSTT(GROWING, delay_s=0.2)
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    prefill = RecordingPrefill(0.1)
    run = run_copilot(
        [("speech", 1.6)], stt, llm, context=FixedContext(THREE_PIECES), prefill=prefill
    )

    assert prefill.requests == []
    [(aid, _)] = run.sink.opened()
    assert run.sink.status(aid) == "complete"


def test_closing_while_reading_ahead_leaves_nothing_running():
    stt = ScriptedSTT(GROWING, delay_s=0.2)
    prefill = RecordingPrefill(5.0)
    run = run_copilot(
        [("speech", 1.6)],
        stt,
        RecordingLLM([ANSWER]),
        context=FixedContext(THREE_PIECES),
        prefill=prefill,
        warm=True,
        close_at=1.0,
    )

    [(_, _, question, _, finished)] = prefill.requests
    assert question == "Tell" and not finished  # cancelled by aclose()
    assert prefill.open == 0
    assert not run.engine._prefill.in_flight
    assert stt.streams[0].closed


def test_a_failing_prefill_stops_after_three_tries_and_answers_still_come():
    stt = ScriptedSTT(
        [(0.4 * i, " ".join(["word"] * i)) for i in range(1, 7)] + [(2.8, "Why words?")],
        delay_s=0.1,
    )
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    prefill = RecordingPrefill(0.05, fail=True)
    run = run_copilot(
        [("speech", 2.8)], stt, llm, context=FixedContext(THREE_PIECES), prefill=prefill, warm=True
    )

    assert len(prefill.requests) == 3
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == ANSWER
    assert stt.streams[0].paused  # no partials once nothing reads them ahead


def test_the_text_heard_at_a_pause_inside_a_question_is_read_ahead_when_it_goes_on():
    stt = ScriptedSTT(
        [
            (1.0, "Tell me about a time when"),
            (2.0, "Tell me about a time when you disagreed with your manager."),
        ],
        partials=False,
    )
    llm = RecordingLLM([ANSWER], ttft_ms=100)
    prefill = RecordingPrefill(0.1)
    run = run_copilot(
        [("speech", 1.0), ("silence", 0.5), ("speech", 1.0)],
        stt,
        llm,
        context=FixedContext(THREE_PIECES),
        prefill=prefill,
        warm=True,
    )

    # The candidate at the pause started a speculative answer; the interviewer went on, so
    # it was closed, and once its slot is free the candidate's text is read ahead, its last
    # word too (said before the pause, not cut off like a partial's). (Once the answer is
    # done, the prompt up to the next question is read: "".)
    [(opened, closed, question, _, _), head] = prefill.requests
    assert question == "Tell me about a time when" and head[2] == ""
    [(_, cancelled_closed, speculative), (asked_at, _, asked)] = _after_warm_up(llm)
    assert speculative.endswith("Interviewer: Tell me about a time when")
    assert opened >= cancelled_closed + CopilotOptions().llm_release_s - 1e-6
    assert opened < run.speech_ends[1] and asked_at >= closed
    assert asked.endswith("Interviewer: Tell me about a time when you disagreed with your manager.")


def test_without_a_prefill_no_partials_are_decoded():
    stt = ScriptedSTT(GROWING, delay_s=0.2)
    run = run_copilot([("speech", 1.6)], stt, RecordingLLM([ANSWER], ttft_ms=100))

    assert stt.streams[0].paused and set(stt.streams[0].pauses) == {True}
    [(aid, _)] = run.sink.opened()
    assert run.sink.status(aid) == "complete"
