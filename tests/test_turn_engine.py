"""The turn engine with its streaming STT, in virtual time (tests/virtual_time.py): real VAD on
espeak-ng speech, and test doubles for the STT stream (FakeSTTStream), the LLM (ScriptedLLM)
and the TTS (a tone per word), so every time is exact and repeatable."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from agent.adapters.llm.history import ChatHistory
from agent.audio.sinks import TimelineSink
from agent.engines import FRAME_SAMPLES, INPUT_RATE, Transcript
from agent.events import event_json
from agent.testing.scripted_llm import ScriptedLLM
from agent.voice.engine import TurnEngine
from bench.speech import espeak, last_voiced_sample
from state_machine.endpointing import EndpointOptions
from state_machine.machine import CANNED_APOLOGY
from state_machine.options import TurnOptions
from tests.stt_stream_double import STTStreamDouble
from tests.virtual_time import run_virtual

OUT_RATE = 16_000
FRAME_S = FRAME_SAMPLES / INPUT_RATE
QUESTION = "What is the capital of France?"
REPLY = "The capital of France is Paris, on the river Seine."
UNFINISHED_S = EndpointOptions().silence_unfinished_s


class FakeSTTStream(STTStreamDouble):
    """TEST DOUBLE of agent.engines.STTStream: 'transcribes' the question once a second of
    audio was pushed, after `flush_s`; a partial every `partial_every` frames unless paused."""

    def __init__(self, owner: FakeSTT) -> None:
        self.owner = owner
        self.samples = 0
        self.paused = False
        self.queue: asyncio.Queue[Transcript | None] = asyncio.Queue()

    def push(self, pcm: np.ndarray) -> None:
        if self.owner.push_error is not None:
            raise self.owner.push_error
        self.samples += len(pcm)
        frames = self.samples // FRAME_SAMPLES
        if not self.paused and frames % self.owner.partial_every == 0:
            self.queue.put_nowait(Transcript(self.owner.partial_text(frames), final=False))

    async def flush(self) -> str:
        self.owner.flushes += 1
        heard = self.samples
        await asyncio.sleep(self.owner.flush_s)
        if self.owner.flush_error is not None:
            raise self.owner.flush_error
        return QUESTION if heard >= INPUT_RATE else "What"

    def discard(self) -> None:
        self.owner.discards += 1
        self.samples = 0

    async def partials(self) -> AsyncIterator[Transcript]:
        while (item := await self.queue.get()) is not None:
            yield item

    def set_paused(self, paused: bool) -> None:
        self.paused = paused
        self.owner.paused_log.append(paused)

    async def aclose(self) -> None:
        self.queue.put_nowait(None)


class FakeSTT:
    def __init__(
        self,
        *,
        flush_s: float = 0.1,
        partial_every: int = 25,
        partial_text: Any = lambda frames: f"partial at {frames} frames",
    ) -> None:
        self.flush_s, self.partial_every = flush_s, partial_every
        self.partial_text = partial_text  # frames pushed -> the partial then
        self.flushes = self.discards = 0
        self.paused_log: list[bool] = []
        self.push_error: Exception | None = None
        self.flush_error: Exception | None = None

    def stream(self) -> FakeSTTStream:
        return FakeSTTStream(self)

    async def transcribe(self, pcm: np.ndarray) -> str:
        raise AssertionError("the turn engine transcribes through its stream")


class ToneTTS:
    """TEST DOUBLE of agent.engines.TextToSpeech: 200 ms of tone per word, after `delay_s`."""

    sample_rate = OUT_RATE

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.texts: list[str] = []
        self.right_contexts: list[str] = []

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        await asyncio.sleep(self.delay_s)
        self.texts.append(text)
        self.right_contexts.append(right_context)
        n = int(0.2 * OUT_RATE) * max(1, len(text.split()))
        return (3000 * np.sin(np.arange(n) * 0.05)).astype(np.int16)


@pytest.fixture(scope="module")
def question_pcm() -> tuple[np.ndarray, float]:
    speech = espeak(QUESTION)
    lead = INPUT_RATE // 2
    pcm = np.concatenate([np.zeros(lead, np.int16), speech, np.zeros(INPUT_RATE * 4, np.int16)])
    return pcm, (lead + last_voiced_sample(speech)) / INPUT_RATE


class ScriptedTurnDetector:
    """TEST DOUBLE of agent.adapters.turn_detector.TurnDetector: a fixed score after
    `delay_s` (or an error), recording what it was asked."""

    name = "scripted"

    def __init__(
        self, score: float, *, delay_s: float = 0.05, error: Exception | None = None
    ) -> None:
        self.value, self.delay_s, self.error = score, delay_s, error
        self.asked: list[tuple[str, int]] = []  # (text, samples of audio)
        self.warmed: list[str] = []  # partials read ahead
        self.reads_ahead: float | None = None  # the score of a partial read ahead, if any

    def load(self) -> None:
        pass

    def warm(self, text: str) -> Future[float] | None:
        self.warmed.append(text)
        if self.reads_ahead is None:
            return None
        read: Future[float] = Future()
        read.set_result(self.reads_ahead)
        return read

    async def score(self, text: str, pcm: np.ndarray) -> float:
        self.asked.append((text, pcm.size))
        await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        return self.value


def converse(
    pcm: np.ndarray,
    stt: FakeSTT,
    partials: str = "listening",
    *,
    tts: ToneTTS | None = None,
    reply: str = REPLY,
    llm: Any = None,
    detector: Any = None,
    typed: tuple[tuple[float, str], ...] = (),
    history: ChatHistory | None = None,
    **engine_args: Any,
) -> list[dict[str, Any]]:
    """Feed `pcm` frame by frame in virtual time, and each `typed` (t, text) as a typed
    message at t; the events with t relative to the input. `engine_args`: more of
    TurnEngine's arguments (a toolbox)."""

    async def main() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        events: list[dict[str, Any]] = []
        engine = TurnEngine(
            stt=stt,
            llm=llm or ScriptedLLM([reply], sleep=asyncio.sleep),
            tts=tts or ToneTTS(),
            sink=TimelineSink(OUT_RATE, 0.0, clock=loop.time),
            history=history or ChatHistory("system"),
            clock=loop.time,
            partials=partials,
            on_event=lambda event: events.append(event_json(event)),
            turn_detector=detector,
            **engine_args,
        )
        await engine.start()
        t0 = loop.time()
        to_type = sorted(typed)
        for i in range(len(pcm) // FRAME_SAMPLES):
            await asyncio.sleep(max(0.0, t0 + (i + 1) * FRAME_S - loop.time()))
            while to_type and to_type[0][0] <= (i + 1) * FRAME_S + 1e-9:
                engine.push_text(to_type.pop(0)[1])
            engine.push_frame(pcm[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
        await engine.aclose()
        leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        assert not leftover, leftover
        return [{**e, "t": round(e["t"] - t0, 3)} for e in events]

    return run_virtual(main())


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def test_partials_while_speaking_then_a_candidate_that_is_answered(question_pcm) -> None:
    pcm, speech_end = question_pcm
    stt = FakeSTT()
    events = converse(pcm, stt)

    assert [e["state"] for e in of(events, "state")] == [
        "LISTENING",
        "THINKING",
        "SPEAKING",
        "LISTENING",
    ]
    partials = [e for e in of(events, "transcript") if e["text"].startswith("partial")]
    thinking = next(e["t"] for e in of(events, "state") if e["state"] == "THINKING")
    assert partials[0]["t"] < speech_end and all(e["t"] <= thinking for e in partials)
    [final] = [e for e in of(events, "transcript") if e["final"]]
    assert final["text"] == QUESTION
    # The candidate: asked at 60 ms of silence, ready flush_s later; the question is complete,
    # so the reply starts at once; then 150 ms to the first word and two more words at 15/s.
    [started] = of(events, "reply_started")
    assert started["t"] == pytest.approx(speech_end + 0.06 + 0.1, abs=FRAME_S + 0.001)
    [audio] = of(events, "audio_start")
    assert audio["t"] == pytest.approx(started["t"] + 0.15 + 2 / 15, abs=FRAME_S + 0.001)
    [turn] = of(events, "turn")
    assert turn["user_text"] == QUESTION and turn["agent_text"] == REPLY
    # Partial decoding is paused while the agent thinks and speaks, and resumed after.
    assert stt.paused_log == [False, True, True, False]
    assert stt.discards >= 2  # the utterance's opening, and the turn taken


@pytest.mark.parametrize(("score", "silence_s"), [(0.9, 0.06 + 0.1 + 0.05), (0.0, UNFINISHED_S)])
def test_the_endpoint_follows_the_turn_detector(question_pcm, score, silence_s) -> None:
    pcm, speech_end = question_pcm
    detector = ScriptedTurnDetector(score)
    events = converse(pcm, FakeSTT(), detector=detector)
    # The candidate (60 ms of silence + flush_s) is scored with the utterance's audio, from
    # its pre-roll on; complete: the turn ends when the score comes, unfinished: at the bound.
    [(text, samples)] = detector.asked
    assert text == QUESTION and samples >= (speech_end - 0.5) * INPUT_RATE
    [score_event] = of(events, "turn_score")
    assert score_event["score"] == score
    assert detector.warmed and detector.warmed[0].startswith("partial at")  # read ahead
    thinking = next(e["t"] for e in of(events, "state") if e["state"] == "THINKING")
    assert thinking == pytest.approx(speech_end + silence_s, abs=FRAME_S + 0.001)
    assert [e["agent_text"] for e in of(events, "turn")] == [REPLY]


def test_a_failing_turn_detector_falls_back_to_the_text_cue(
    question_pcm, caplog: pytest.LogCaptureFixture
) -> None:
    pcm, speech_end = question_pcm
    detector = ScriptedTurnDetector(0.9, error=RuntimeError("model gone"))
    with caplog.at_level(logging.WARNING, logger="agent.adapters.turn_detector"):
        events = converse(pcm, FakeSTT(), detector=detector)
    assert "turn detector failed: RuntimeError: model gone" in caplog.text
    thinking = next(e["t"] for e in of(events, "state") if e["state"] == "THINKING")
    cued = TurnOptions().endpoint.silence_cued_s  # the question ends with "?"
    assert thinking == pytest.approx(speech_end + cued, abs=FRAME_S + 0.001)
    assert [e["agent_text"] for e in of(events, "turn")] == [REPLY]


def test_partials_off_gives_no_partials_but_the_same_answer(question_pcm) -> None:
    pcm, _ = question_pcm
    stt = FakeSTT()
    events = converse(pcm, stt, partials="off")
    assert not [e for e in of(events, "transcript") if e["text"].startswith("partial")]
    assert stt.paused_log[0] is True and all(stt.paused_log)
    assert [e["agent_text"] for e in of(events, "turn")] == [REPLY]


def test_partials_always_never_pauses(question_pcm) -> None:
    pcm, _ = question_pcm
    stt = FakeSTT()
    converse(pcm, stt, partials="always")
    assert not any(stt.paused_log)


def test_a_failing_stt_is_logged_and_apologized_for(
    question_pcm, caplog: pytest.LogCaptureFixture
) -> None:
    pcm, _ = question_pcm
    stt = FakeSTT()
    stt.flush_error = ConnectionError("STT went away")
    stt.push_error = ConnectionError("STT went away")
    with caplog.at_level(logging.WARNING, logger="agent.voice.engine"):
        events = converse(pcm, stt)
    assert not of(events, "reply_started")  # nothing understood, nothing answered...
    assert [e["text"] for e in of(events, "tts_chunk")] == [CANNED_APOLOGY]  # ...but not mute
    assert [e["state"] for e in of(events, "state")] == [
        "LISTENING",
        "THINKING",
        "SPEAKING",
        "LISTENING",
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("STT push failed" in m for m in messages) == 1  # once per utterance
    assert any("transcription failed" in m for m in messages)


def test_the_first_chunk_is_synthesized_while_its_lookahead_arrives(question_pcm) -> None:
    pcm, _ = question_pcm
    tts = ToneTTS(delay_s=0.1)
    events = converse(pcm, FakeSTT(), tts=tts)
    [started] = of(events, "reply_started")
    [audio] = of(events, "audio_start")
    # Words at 150 ms and then every 1/15 s. The guess "The" is made as "capital" arrives
    # (217 ms), said with it as its right context; its 100 ms of synthesis ends at 317 ms,
    # after the chunk went out at the 3rd word (283 ms), and the audio starts then, not when
    # "The" synthesized again would be ready (383 ms).
    assert audio["t"] == pytest.approx(started["t"] + 0.15 + 1 / 15 + 0.1, abs=FRAME_S + 0.001)
    # [0] the filler, [1] the apology (made at start); "The" made once, not twice.
    assert tts.texts[2:4] == ["The", "capital of"]
    assert tts.right_contexts[2:4] == ["capital", ""]


def test_the_second_chunk_is_ready_before_the_first_word_has_been_said(question_pcm) -> None:
    pcm, _ = question_pcm
    events = converse(pcm, FakeSTT(), tts=ToneTTS())
    [audio] = of(events, "audio_start")
    first, second = of(events, "tts_chunk")[:2]
    # "The" (200 ms of tone) starts at the 3rd word; "capital of" goes out on the same
    # lookahead rule at the 5th (133 ms later), not at a grown chunk's cut, so the voice does
    # not run dry after one word.
    assert (first["text"], second["text"]) == ("The", "capital of")
    assert second["t"] == pytest.approx(audio["t"] + 2 / 15, abs=FRAME_S + 0.001)
    assert second["t"] < audio["t"] + 0.2


class DeltaLLM:
    """TEST DOUBLE of agent.engines.LanguageModel: fixed deltas, the first after 150 ms and
    then one every 1/15 s (as a real LLM's tokens, a word may come in pieces)."""

    def __init__(self, deltas: list[str]) -> None:
        self.deltas = deltas

    async def stream(self, messages: list[Any]) -> Any:
        await asyncio.sleep(0.15)
        for i, delta in enumerate(self.deltas):
            if i:
                await asyncio.sleep(1 / 15)
            yield delta


def test_a_first_word_in_pieces_is_guessed_once_it_is_complete(question_pcm) -> None:
    pcm, _ = question_pcm
    tts = ToneTTS(delay_s=0.1)
    llm = DeltaLLM(["Th", "e", " cap", "ital", " of", " France", " is", " Paris."])
    events = converse(pcm, FakeSTT(), tts=tts, llm=llm)
    [started] = of(events, "reply_started")
    [audio] = of(events, "audio_start")
    # "The" is guessed as " cap" begins (283 ms), with "cap" as its right context, and is
    # ready at 383 ms; the chunk goes out at " of" (417 ms) and uses it, not a second
    # synthesis (which would start the audio at 517 ms).
    assert tts.texts[2:4] == ["The", "capital of"]
    assert tts.right_contexts[2] == "cap"
    assert audio["t"] == pytest.approx(started["t"] + 0.15 + 4 / 15, abs=FRAME_S + 0.001)


def test_a_wrong_guess_for_the_first_chunk_is_dropped(question_pcm) -> None:
    pcm, _ = question_pcm
    tts = ToneTTS(delay_s=0.1)
    reply = "J. R. R. Tolkien wrote The Hobbit."
    events = converse(pcm, FakeSTT(), tts=tts, reply=reply)
    # The guess "J." was made, but initials bind to the name: "J. R. R. Tolkien" goes first,
    # said with its lookahead as its right context.
    assert tts.texts[2:4] == ["J.", "J. R. R. Tolkien"]
    assert tts.right_contexts[3] == "wrote The"
    assert of(events, "tts_chunk")[0]["text"] == "J. R. R. Tolkien"
    [turn] = of(events, "turn")
    assert turn["heard_text"] == reply


def test_a_reply_cut_off_by_the_end_of_the_session_is_kept_as_heard(question_pcm) -> None:
    pcm, speech_end = question_pcm
    cut = int((speech_end + 1.5) * INPUT_RATE)  # the session ends while the agent speaks
    events = converse(pcm[:cut], FakeSTT())
    assert of(events, "audio_start") and not of(events, "reply_done")
    (cancelled,) = of(events, "reply_cancelled")
    assert cancelled["reason"] == "session closed"
    (turn,) = of(events, "turn")
    assert turn["interrupted"] and turn["user_text"] == QUESTION
    assert turn["agent_text"] == REPLY
    heard = turn["heard_text"].split()
    assert heard and heard == REPLY.split()[: len(heard)] and len(heard) < len(REPLY.split())


TYPED = "What is the weather in Oslo?"


def test_a_typed_message_is_answered_and_recorded_as_a_turn() -> None:
    history = ChatHistory("system")
    events = converse(
        np.zeros(INPUT_RATE * 5, np.int16), FakeSTT(), typed=((1.0, TYPED),), history=history
    )
    [final] = [e for e in of(events, "transcript") if e["final"]]
    assert final["text"] == TYPED and final["t"] == pytest.approx(1.0, abs=0.021)
    [start] = of(events, "reply_started")
    assert not start["speculative"]
    [turn] = of(events, "turn")
    assert turn["user_text"] == TYPED and turn["agent_text"] == REPLY
    assert not turn["interrupted"] and turn["heard_text"] == REPLY
    # Latency counts from the message, not from an earlier turn's speech.
    assert 0 < turn["latency_ms"]["voice_to_voice"] < 1000
    assert history.turns == [
        {"role": "user", "content": TYPED},
        {"role": "assistant", "content": REPLY},
    ]


def test_a_typed_message_while_the_agent_speaks_cuts_its_answer(question_pcm) -> None:
    pcm, speech_end = question_pcm
    history = ChatHistory("system")
    answer = "It is sunny in Oslo."
    events = converse(
        pcm,
        FakeSTT(),
        llm=ScriptedLLM([REPLY, answer], sleep=asyncio.sleep),
        typed=((speech_end + 1.5, TYPED),),
        history=history,
    )
    first_audio = of(events, "audio_start")[0]["t"]
    assert first_audio < speech_end + 1.5  # it was speaking when the message came
    cancelled = [e for e in of(events, "reply_cancelled") if e["reason"] == "typed message"]
    assert len(cancelled) == 1
    first, second = of(events, "turn")
    assert first["user_text"] == QUESTION and first["interrupted"]
    heard = first["heard_text"].split()
    assert heard and heard == REPLY.split()[: len(heard)] and len(heard) < len(REPLY.split())
    assert second["user_text"] == TYPED and second["agent_text"] == answer
    assert not second["interrupted"]
    assert [m["content"] for m in history.turns] == [QUESTION, first["heard_text"], TYPED, answer]


def test_a_phone_caller_is_heard_from_the_first_word_at_a_phone_lines_level() -> None:
    # A caller 20 dB under the corpus's level, over the phone line: the browser's energy gate
    # starts the speech too late for the pre-roll to hold the first word; the phone line's
    # does not (agent/adapters/stt/phone_band.py).
    from bench.listen_corpus import phone_line

    question = espeak("Could you remind me to call my mother tomorrow?", voice="en-029")
    said = phone_line(np.round(question * 0.1).astype(np.int16))
    lead = INPUT_RATE // 2
    pcm = np.concatenate([np.zeros(lead, np.int16), said, np.zeros(INPUT_RATE * 4, np.int16)])
    first_word = (lead + np.flatnonzero(np.abs(said.astype(np.int32)) > 50)[0]) / INPUT_RATE
    pre_roll = TurnOptions().pre_roll_s

    def onset(**engine_args: Any) -> float:
        return of(converse(pcm, FakeSTT(), **engine_args), "speech_start")[0]["t"]

    assert onset() - pre_roll > first_word
    assert onset(phone_line=True) - pre_roll < first_word


def _whole_question_early() -> FakeSTT:
    """Partials that hold the whole question from the 50th frame (1 s) on."""
    return FakeSTT(
        partial_every=10, partial_text=lambda frames: QUESTION if frames >= 50 else "What is"
    )


def _reading_ahead(score: float) -> ScriptedTurnDetector:
    """A detector whose candidates score 0.9 and whose partials score `score`."""
    detector = ScriptedTurnDetector(0.9)
    detector.reads_ahead = score
    return detector


def test_a_partial_the_model_reads_as_complete_starts_the_answer_before_the_speech_ends(
    question_pcm,
) -> None:
    pcm, speech_end = question_pcm
    # The whole question is in the partials from the first second of audio on (its last word
    # is still being said), and the end-of-turn model reads it as complete.
    events = converse(pcm, _whole_question_early(), detector=_reading_ahead(0.9))
    [started] = of(events, "reply_started")
    assert started["speculative"] and started["t"] < speech_end
    thinking = next(e["t"] for e in of(events, "state") if e["state"] == "THINKING")
    [audio] = of(events, "audio_start")
    # Its first chunk was ready before the endpoint: heard the moment the turn is confirmed.
    assert audio["t"] == pytest.approx(thinking, abs=FRAME_S + 0.001)
    [turn] = of(events, "turn")
    assert turn["user_text"] == QUESTION and turn["agent_text"] == REPLY


def test_a_partial_the_model_reads_as_unfinished_is_cancelled_unheard(question_pcm) -> None:
    pcm, speech_end = question_pcm
    events = converse(pcm, _whole_question_early(), detector=_reading_ahead(0.001))
    early = {e["reply_id"] for e in of(events, "reply_started") if e["t"] < speech_end}
    assert early  # started on the words, before the model read them
    cancelled = {e["reply_id"]: e["reason"] for e in of(events, "reply_cancelled")}
    assert all(cancelled.get(rid) == "partial read as unfinished" for rid in early)
    [audio] = of(events, "audio_start")
    heard = next(e for e in of(events, "reply_started") if e["reply_id"] == audio["reply_id"])
    assert heard["t"] > speech_end  # on the pause's candidate


def test_an_unconfirmed_reply_synthesizes_its_first_two_chunks_and_waits() -> None:
    from agent.pipeline.playout import Playout
    from agent.pipeline.reply import ReplyPipeline
    from tts.chunker import make_chunker

    async def main() -> tuple[list[str], list[str]]:
        loop = asyncio.get_running_loop()
        tts = ToneTTS()
        playout = Playout(TimelineSink(OUT_RATE, 0.0, clock=loop.time), clock=loop.time)
        reply = ReplyPipeline(
            7,
            [{"role": "user", "content": QUESTION}],
            llm=ScriptedLLM([REPLY], sleep=asyncio.sleep),
            tts=tts,
            playout=playout,
            chunker=make_chunker(),
            on_event=lambda _e: None,
            on_failed=lambda _rid, _why: None,
            clock=loop.time,
        )
        reply.start()
        await asyncio.sleep(3.0)  # the whole reply has been generated by now
        unconfirmed = list(tts.texts)
        reply.confirm()
        await asyncio.sleep(1.0)
        await reply.cancel()
        return unconfirmed, tts.texts

    unconfirmed, confirmed = run_virtual(main())
    # Ready for the endpoint, with what follows the first chunk, and no more.
    assert unconfirmed == ["The", "capital of"]
    assert confirmed == ["The", "capital of", "France is Paris,", "on the river Seine."]
