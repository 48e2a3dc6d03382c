"""The copilot engine in virtual time (tests/virtual_time.py), with test doubles for the
engines around it: a VAD that hears any non-zero frame, an STT that answers from a script
after a fixed delay, the ScriptedLLM (recording the prompts it gets), and a sink that records
what the candidate would see and when. Plus the pure endpointer on its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import numpy as np
import pytest

from agent.copilot_engine import (
    COPILOT_SYSTEM_PROMPT,
    FAILED_ANSWER,
    CopilotEngine,
    CopilotOptions,
    QuestionEndpointer,
    copilot_messages,
    prefix_steps,
)
from agent.engines import FRAME_SAMPLES, ChatMessage
from agent.llm_scripted import ScriptedLLM
from state_machine import actions as A
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
    """TEST DOUBLE: the transcript of an utterance is the script's text for the longest
    duration of voiced audio it contains, after `delay_s`."""

    script: list[tuple[float, str]]  # (seconds of speech, what has been said by then)
    delay_s: float = 0.2
    calls: int = 0

    async def transcribe(self, pcm: np.ndarray) -> str:
        self.calls += 1
        voiced_s = np.count_nonzero(pcm.reshape(-1, FRAME_SAMPLES).any(axis=1)) * FRAME_S
        await asyncio.sleep(self.delay_s)
        said = [text for seconds, text in self.script if seconds <= voiced_s + 1e-6]
        return said[-1] if said else ""


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


@dataclass
class Piece:
    chunk_id: int
    source: str
    text: str


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
    events: list[tuple[str, dict]]


def run_copilot(
    timeline: list[tuple[str, float]],
    stt: ScriptedSTT,
    llm: object,
    *,
    options: CopilotOptions | None = None,
    context: FixedContext | None = None,
    tail_s: float = 3.0,
    close_at: float | None = None,
) -> Run:
    """Feed `timeline` ("speech" | "silence", seconds) frame by frame in virtual time, then
    silence for `tail_s` (or close the engine at `close_at`)."""

    async def main() -> Run:
        loop = asyncio.get_running_loop()
        sink = RecordingSink()
        events: list[tuple[str, dict]] = []
        engine = CopilotEngine(stt=stt, llm=llm, sink=sink, context=context, options=options,
                               vad=AnyNonZeroVAD(), clock=loop.time,
                               on_event=lambda k, d: events.append((k, d)))
        await engine.start()
        speech_ends = []
        for kind, seconds in [*timeline, ("silence", tail_s)]:
            for _ in range(round(seconds / FRAME_S)):
                await asyncio.sleep(FRAME_S)
                if close_at is not None and loop.time() >= close_at:
                    break
                engine.push_frame(VOICED if kind == "speech" else SILENT)
            if kind == "speech":
                speech_ends.append(loop.time())
        await engine.aclose()
        return Run(engine, sink, llm, speech_ends, events)

    return run_virtual(main())


def kinds(events: list[tuple[str, dict]], kind: str) -> list[dict]:
    return [d for k, d in events if k == kind]


# ---- the engine -----------------------------------------------------------------------------


def test_a_complete_question_is_answered_speculatively_and_shown_right_after_its_end():
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
    # starts at once and the cued endpoint (300 ms) confirms it; first words 100 ms later.
    assert record.started_at - speech_end == pytest.approx(0.26, abs=0.021)
    assert record.committed_at - speech_end == pytest.approx(0.30, abs=0.021)
    first = run.sink.first_write_at(aid) - speech_end
    assert first == pytest.approx(0.36, abs=0.021)
    assert record.latency_ms()["first_words"] == pytest.approx(first * 1000, abs=0.5)
    assert len(llm.requests) == 1


def test_a_speculative_answer_is_never_shown_before_the_endpoint():
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
    stt = ScriptedSTT([(1.0, "Tell me about a time when"),
                       (2.0, "Tell me about a time when you disagreed with your manager.")])
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


@pytest.mark.parametrize("gap_s", [1.5, 30.0])
def test_a_statement_before_a_question_is_its_context_while_recent(gap_s: float):
    class ByTimeSTT(ScriptedSTT):
        """TEST DOUBLE: the statement before the second utterance starts, then the question."""

        async def transcribe(self, pcm: np.ndarray) -> str:
            await asyncio.sleep(self.delay_s)
            if asyncio.get_running_loop().time() < 1.0 + gap_s:
                return "I see you worked at Northwind Bank."
            return "What did you do there?"

    llm = RecordingLLM([ANSWER], ttft_ms=100)
    run = run_copilot([("speech", 1.0), ("silence", gap_s), ("speech", 1.0)],
                      ByTimeSTT([]), llm)

    [(_, question)] = run.sink.opened()
    assert question == "What did you do there?"
    [dropped] = kinds(run.events, "not_a_question")
    assert dropped["text"] == "I see you worked at Northwind Bank."
    prompt = llm.requests[-1][-1]["content"]
    if gap_s < CopilotOptions().preamble_keep_s:
        assert prompt == "Interviewer: I see you worked at Northwind Bank. What did you do there?"
    else:
        assert prompt == "Interviewer: What did you do there?"


def test_the_prompt_is_system_then_document_pieces_in_document_order_then_the_question():
    context = FixedContext([Piece(7, "resume", "Mentored four engineers."),
                            Piece(2, "job", "Lead three teams.")])
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER])
    run_copilot([("speech", 1.0)], stt, llm, context=context)

    assert context.questions == ["Have you mentored anyone?"]
    [messages] = llm.requests
    assert messages == copilot_messages(COPILOT_SYSTEM_PROMPT, context.pieces,
                                        "Have you mentored anyone?")
    assert messages[0] == {"role": "system", "content": COPILOT_SYSTEM_PROMPT}
    assert messages[1]["content"] == (
        "From the candidate's documents:\n- (job) Lead three teams.\n"
        "- (resume) Mentored four engineers.\n\nInterviewer: Have you mentored anyone?")


THREE_PIECES = [Piece(7, "resume", "Mentored four engineers."),
                Piece(2, "job", "Lead three teams."),
                Piece(9, "resume", "Speaks German.")]
EVERY_PIECE = ("From the candidate's documents:\n- (job) Lead three teams.\n"
               "- (resume) Mentored four engineers.\n- (resume) Speaks German.\n\n")


def _warmed_run(context: FixedContext, options: CopilotOptions | None = None) -> RecordingLLM:
    """Warm one engine's prefix, then ask it a question; returns the LLM with both requests."""
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        engine = CopilotEngine(stt=stt, llm=llm, sink=RecordingSink(), context=context,
                               options=options, vad=AnyNonZeroVAD(), clock=loop.time)
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
    return llm


def test_once_warm_every_piece_is_the_same_prompt_prefix_for_every_question():
    context = FixedContext(THREE_PIECES)
    llm = _warmed_run(context)

    assert context.questions == []  # no search: every piece
    [_, system_only], [_, warming], [_, asked] = llm.requests
    assert llm.closed_early == 2  # the warm-up's requests stop at their first token
    assert system_only["content"] == "Interviewer: Hello."
    assert warming["content"] == EVERY_PIECE + "Interviewer: Hello."
    assert asked["content"] == EVERY_PIECE + "Interviewer: Have you mentored anyone?"


def test_a_warm_up_grows_the_prefix_a_few_pieces_at_a_time_in_document_order():
    pieces = [Piece(i, "resume", "x" * 200) for i in (5, 1, 4, 2, 3)]
    steps = prefix_steps(pieces, 400)
    assert [[p.chunk_id for p in step] for step in steps] == [
        [], [1, 2], [1, 2, 3, 4], [1, 2, 3, 4, 5]]
    assert prefix_steps([], 400) == [[]]


def test_before_the_warm_up_a_prompt_carries_only_the_nearest_pieces():
    context = FixedContext(THREE_PIECES)
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER])
    run_copilot([("speech", 1.0)], stt, llm, context=context)  # never warmed

    assert context.questions == ["Have you mentored anyone?"]
    [[_, asked]] = llm.requests
    assert asked["content"] == ("From the candidate's documents:\n- (job) Lead three teams.\n"
                                "- (resume) Mentored four engineers.\n\n"
                                "Interviewer: Have you mentored anyone?")


def test_documents_over_the_prefix_limit_are_searched_even_when_warm():
    context = FixedContext(THREE_PIECES)
    llm = _warmed_run(context, CopilotOptions(stable_prefix_max_chars=40))

    assert context.questions == ["Have you mentored anyone?"]
    [_, warming], [_, asked] = llm.requests
    assert warming["content"] == "Interviewer: Hello."  # the system prompt alone
    assert "German" not in asked["content"]


def test_a_warm_up_waits_while_an_answer_is_on_its_way():
    context = FixedContext([Piece(i, "resume", f"Fact {i}. " + "x" * 290) for i in range(6)])
    stt = ScriptedSTT([(1.0, "Have you mentored anyone?")])
    llm = RecordingLLM([ANSWER], ttft_ms=1000, words_per_s=10)

    async def main() -> CopilotEngine:
        loop = asyncio.get_running_loop()
        engine = CopilotEngine(stt=stt, llm=llm, sink=RecordingSink(), context=context,
                               vad=AnyNonZeroVAD(), clock=loop.time)
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
        async def transcribe(self, pcm: np.ndarray) -> str:
            await asyncio.sleep(self.delay_s)
            voiced = np.count_nonzero(pcm.reshape(-1, FRAME_SAMPLES).any(axis=1)) * FRAME_S
            return texts[1.0] if voiced < 1.5 else texts[2.0]

    long_answer = " ".join(["word"] * 60)  # 6 s at 10 words/s
    llm = RecordingLLM([long_answer], ttft_ms=100, words_per_s=10)
    run = run_copilot([("speech", 1.0), ("silence", 1.0), ("speech", 2.0)], ByLength([]), llm,
                      tail_s=8.0)

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


def test_answers_stop_after_three_lines():
    six = "".join(f"- line {i}\n" for i in range(6))
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    run = run_copilot([("speech", 1.0)], stt, RecordingLLM([six], words_per_s=50))
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == "".join(f"- line {i}\n" for i in range(3))
    assert run.engine.answers[0].status == "complete"


def test_a_long_answer_stops_at_the_first_sentence_end_past_the_word_limit():
    rambling = ("I am a backend engineer with eight years of Go. I own services end to end "
                "and I measure before I change anything. I also mentor people.")
    stt = ScriptedSTT([(1.0, "Tell me about yourself.")])
    run = run_copilot([("speech", 1.0)], stt, RecordingLLM([rambling], words_per_s=50),
                      options=CopilotOptions(max_answer_words=12))
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid).rstrip() == ("I am a backend engineer with eight years of Go. I own "
                                           "services end to end and I measure before I change "
                                           "anything.")
    assert run.engine.answers[0].status == "complete"


def test_a_failed_llm_shows_a_short_notice_instead_of_nothing():
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    run = run_copilot([("speech", 1.0)], stt, FailingLLM())
    [(aid, _)] = run.sink.opened()
    assert run.sink.text(aid) == FAILED_ANSWER
    assert run.sink.status(aid) == "failed"


def test_closing_mid_answer_cancels_it_and_closes_its_stream():
    stt = ScriptedSTT([(1.0, "What are your strengths?")])
    llm = RecordingLLM([" ".join(["word"] * 100)], words_per_s=10)
    run = run_copilot([("speech", 1.0)], stt, llm, tail_s=3.0, close_at=2.5)
    [(aid, _)] = run.sink.opened()
    assert run.sink.status(aid) == "cancelled"
    assert llm.closed_early == 1
    assert run.engine.idle


def test_silence_and_noise_alone_ask_nothing():
    stt = ScriptedSTT([(0.5, "[music]")])
    llm = RecordingLLM([ANSWER])
    run = run_copilot([("speech", 0.5)], stt, llm)
    assert run.sink.events == [] and llm.requests == []


# ---- the endpointer alone -------------------------------------------------------------------


def _frames(ep: QuestionEndpointer, voiced: bool, start: float, seconds: float) -> list[A.Action]:
    out = []
    for i in range(1, round(seconds / FRAME_S) + 1):
        out += ep.on_frame(voiced, round(start + i * FRAME_S, 6))
    return out


def test_endpointer_restarts_the_answer_when_the_final_question_differs():
    ep = QuestionEndpointer()
    out = _frames(ep, True, 0.0, 1.0)
    [open_] = [a for a in out if isinstance(a, A.OpenUtterance)]
    out = _frames(ep, False, 1.0, 0.06)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    # A candidate without a cue: the speculative start waits for 250 ms of silence.
    out = ep.on_candidate(req.utterance_id, "What was the hardest bug", 1.0, 1.1)
    assert not [a for a in out if isinstance(a, A.StartReply)]
    out = _frames(ep, False, 1.1, 0.16)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    assert spec.speculative and spec.user_text == "What was the hardest bug"
    # Speech again: the speculative answer goes; then a new candidate with other words.
    out = _frames(ep, True, 1.26, 0.3)
    assert A.CancelReply(spec.reply_id, "the interviewer went on") in out
    out = _frames(ep, False, 1.56, 0.06)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    out = ep.on_candidate(req.utterance_id, "What was the hardest bug you fixed?", 1.56, 1.7)
    [final] = [a for a in out if isinstance(a, A.StartReply)]
    assert final.user_text == "What was the hardest bug you fixed?"
    assert open_.utterance_id == req.utterance_id
    out = _frames(ep, False, 1.7, 0.2)
    assert A.ConfirmReply(final.reply_id) in out
    assert A.CommitUserTurn(final.user_text, req.utterance_id) in out


def test_endpointer_keeps_a_nearly_identical_speculative_answer():
    ep = QuestionEndpointer(CopilotOptions(endpoint_silence_cued_s=0.5))
    _frames(ep, True, 0.0, 1.0)
    out = _frames(ep, False, 1.0, 0.06)
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    out = ep.on_candidate(req.utterance_id, "What is your biggest weakness?", 1.0, 1.2)
    [spec] = [a for a in out if isinstance(a, A.StartReply)]
    out = _frames(ep, False, 1.2, 0.4)
    assert A.ConfirmReply(spec.reply_id) in out
    assert not [a for a in out if isinstance(a, A.StartReply | A.CancelReply)]
    [kept] = [a for a in out if isinstance(a, A.Notify) and a.type == "speculative"]
    assert kept.data["kept"] is True


def test_endpointer_waits_for_a_fresh_transcript_at_the_endpoint():
    # The decode is slower than the endpoint: the turn ends when the transcript arrives.
    ep = QuestionEndpointer(CopilotOptions(speculative_start=False))
    _frames(ep, True, 0.0, 1.0)
    out = _frames(ep, False, 1.0, 1.0)
    assert len([a for a in out if isinstance(a, A.RequestCandidate)]) == 1
    assert [a.type for a in out if isinstance(a, A.Notify)] == ["speech_end"]
    assert not [a for a in out if isinstance(a, A.ConfirmReply)]
    [req] = [a for a in out if isinstance(a, A.RequestCandidate)]
    out = ep.on_candidate(req.utterance_id, "Where did you study?", 1.0, 2.2)
    [start] = [a for a in out if isinstance(a, A.StartReply)]
    assert not start.speculative
    assert A.ConfirmReply(start.reply_id) in out
