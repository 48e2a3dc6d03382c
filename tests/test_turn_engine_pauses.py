"""A user who pauses to think, through the turn engine with the bundled Whisper on espeak-ng
speech: not cut off by a filler the STT leaves out, and every word before and after the pause
reaches the LLM.

The engine's clock is the audio fed to it (one frame, 20 ms), and each transcription and score
it asks for takes a fixed number of frames (`Pacer`): whatever the machine's load, the
turn-taking decisions are the same on every run. The LLM (a scripted
double that records what it is asked), the TTS (a tone per word) and the end-of-turn model (a
double that scores what reads complete as complete, as the text model does) are doubles.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.adapters.llm.history import ChatHistory
from agent.audio.sinks import TimelineSink
from agent.engines import FRAME_SAMPLES, INPUT_RATE, ChatMessage
from agent.events import (
    AudioStart,
    Backchannel,
    FalseInterruption,
    PlaybackPaused,
    Transcript,
    VoiceEvent,
)
from agent.testing.scripted_llm import ScriptedLLM
from agent.voice.engine import TurnEngine
from bench.corpus import quiet_gaps
from bench.turn_corpus import spoken_with_pause
from state_machine.similarity import normalize_words, trails_off
from state_machine.states import AgentState
from tests.test_turn_engine import ToneTTS

FRAME_S = FRAME_SAMPLES / INPUT_RATE
SETTLE_S = 60.0  # bound on waiting for one decode: a hung STT fails the test, never hangs it


class RecordingLLM(ScriptedLLM):
    """TEST DOUBLE: the scripted LLM, keeping every request's messages."""

    def __init__(self) -> None:
        super().__init__(["Here is what I would suggest."])
        self.requests: list[list[ChatMessage]] = []

    async def stream(self, messages: list[ChatMessage], tools: Any = ()) -> Any:
        self.requests.append([dict(m) for m in messages])  # type: ignore[misc]
        async for piece in super().stream(messages, tools):
            yield piece


class ReadsCompleteDetector:
    """TEST DOUBLE of agent.adapters.turn_detector.TurnDetector: what reads complete is complete
    (0.9), an ending on a filler or a conjunction is not (0.0), as the text model scores them.
    It hears nothing of the voice."""

    name = "reads-complete"

    def load(self) -> None:
        pass

    def warm(self, text: str) -> None:
        pass

    async def score(self, text: str, pcm: np.ndarray) -> float:
        return 0.0 if trails_off(text) else 0.9


class FrameClock:
    """The engine's clock: the audio fed so far."""

    def __init__(self) -> None:
        self.frames = 0

    def __call__(self) -> float:
        return self.frames * FRAME_S


class Pacer:
    """Makes the engine's transcriptions take `stt_frames` of audio and its scores
    `score_frames`, whatever the machine's load: a request made at frame i is awaited before
    frame i + n is fed. A confirmed answer begins in no audio time."""

    def __init__(
        self,
        engine: TurnEngine,
        events: list[VoiceEvent],
        *,
        stt_frames: int = 10,
        score_frames: int = 3,
    ) -> None:
        self.engine, self.events = engine, events
        self.changed = asyncio.Event()  # set by every event: a candidate, a score, audio
        self.stt_frames, self.score_frames = stt_frames, score_frames
        self.due: dict[str, tuple[int, int]] = {}  # request -> (utterance id, frame)

    def on_event(self, event: VoiceEvent) -> None:
        self.events.append(event)
        self.changed.set()

    async def after_frame(self, frame: int) -> None:
        async with asyncio.timeout(SETTLE_S):
            while self._busy(frame):
                self.changed.clear()
                await self.changed.wait()

    def _busy(self, frame: int) -> bool:
        m = self.engine.machine
        utt = m._utt
        waits = [  # both kept up to date, each frame
            self._waits(
                "candidate",
                utt,
                utt is not None and utt.candidate_in_flight,
                self.stt_frames,
                frame,
            ),
            self._waits(
                "score", utt, utt is not None and utt.scoring is not None, self.score_frames, frame
            ),
        ]
        return any(waits) or (
            m.state is AgentState.THINKING
            and not any(isinstance(e, AudioStart) for e in self.events[-1:])
        )

    def _waits(self, what: str, utt: Any, in_flight: bool, frames: int, frame: int) -> bool:
        """A request in flight since frame i is awaited from frame i + `frames` on."""
        if not in_flight:
            self.due.pop(what, None)
            return False
        if self.due.get(what, (None, 0))[0] != utt.id:
            self.due[what] = (utt.id, frame + frames)
        return frame >= self.due[what][1]


def converse(pcm: np.ndarray, stt: Any) -> tuple[list[VoiceEvent], RecordingLLM, TurnEngine]:
    async def main() -> tuple[list[VoiceEvent], RecordingLLM, TurnEngine]:
        clock, events, llm = FrameClock(), [], RecordingLLM()
        pacer: Pacer | None = None
        engine = TurnEngine(
            stt=stt,
            llm=llm,
            tts=ToneTTS(),
            sink=TimelineSink(16_000, 0.0, clock=clock),
            history=ChatHistory("system"),
            clock=clock,
            partials="off",
            on_event=lambda e: pacer.on_event(e) if pacer else events.append(e),
            turn_detector=ReadsCompleteDetector(),
        )
        pacer = Pacer(engine, events)
        await engine.start()
        padded = np.concatenate(
            [np.zeros(INPUT_RATE // 2, np.int16), pcm, np.zeros(3 * INPUT_RATE, np.int16)]
        )
        for i in range(len(padded) // FRAME_SAMPLES):
            clock.frames += 1
            engine.push_frame(padded[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES])
            await pacer.after_frame(clock.frames)
        await engine.aclose()
        return events, llm, engine

    return asyncio.run(main())


def second_half_at(pcm: np.ndarray) -> float:
    """When the speech after the pause starts, on the engine's clock (0.5 s of lead)."""
    _, end = max(quiet_gaps(pcm, 0.15), key=lambda g: g[1] - g[0])
    return 0.5 + end / INPUT_RATE


def finals(events: list[VoiceEvent]) -> list[Transcript]:
    return [e for e in events if isinstance(e, Transcript) and e.final]


def asked(llm: RecordingLLM) -> list[str]:
    """The user messages of the last request: what the answer heard was an answer to."""
    return [str(m["content"]) for m in llm.requests[-1] if m["role"] == "user"]


@pytest.fixture(scope="module")
def speech_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speech")


@pytest.mark.slow
def test_a_filler_before_a_one_second_pause_is_not_cut_off(
    whisper_stt: Any, speech_dir: Path
) -> None:
    # Whisper writes "Could you recommend the film for tonight?" for the words before the
    # "uh", which reads complete.
    pcm = asyncio.run(
        spoken_with_pause(
            "Could you recommend a film for tonight, uh",
            1.0,
            "something funny?",
            "espeak-en-us",
            speech_dir,
        )
    )
    events, llm, _ = converse(pcm, whisper_stt)
    [final] = finals(events)  # one turn, committed after the words that went on
    assert final.t > second_half_at(pcm)
    words = normalize_words(" ".join(asked(llm)))
    assert {"recommend", "film", "tonight", "something", "funny"} <= set(words)
    assert len(asked(llm)) == 1


@pytest.mark.slow
def test_words_after_a_pause_the_answer_began_in_reach_the_llm_with_those_before(
    whisper_stt: Any, speech_dir: Path
) -> None:
    # "Can you tell me a story?" reads complete: the agent answers in the 1.2 s pause, and
    # the user goes on over its first words.
    pcm = asyncio.run(
        spoken_with_pause(
            "Can you tell me a story",
            1.2,
            "about a dragon and a princess?",
            "espeak-en-us",
            speech_dir,
        )
    )
    events, llm, engine = converse(pcm, whisper_stt)
    first_audio = next(e.t for e in events if isinstance(e, AudioStart))
    assert first_audio < second_half_at(pcm)  # it did answer inside the pause
    words = normalize_words(" ".join(asked(llm)))
    assert {"tell", "story", "dragon", "princess"} <= set(words)
    assert len(asked(llm)) == 1  # one question, asked whole
    user_turns = [m["content"] for m in engine.history.messages() if m["role"] == "user"]
    assert len(user_turns) == 1 and "dragon" in normalize_words(str(user_turns[0]))


@pytest.mark.slow
def test_a_filler_as_the_answer_begins_stops_it_for_the_rest_of_the_question(
    whisper_stt: Any, speech_dir: Path
) -> None:
    # Piper pauses 0.3 s at the comma before the "um", and "I want to cook something
    # tonight" reads complete: the answer begins in that pause, as the "um" does.
    pcm = asyncio.run(
        spoken_with_pause(
            "I want to cook something tonight, um", 0.8, "maybe with fish?", "piper-joe", speech_dir
        )
    )
    events, llm, _ = converse(pcm, whisper_stt)
    first_audio = next(e.t for e in events if isinstance(e, AudioStart))
    assert first_audio < second_half_at(pcm) - 0.8  # it did answer in the comma's pause
    # Stopped for the "um", and not played on through the thinking pause after it.
    assert any(isinstance(e, PlaybackPaused) and e.t < first_audio + 0.3 for e in events)
    assert not any(isinstance(e, FalseInterruption | Backchannel) for e in events)
    words = normalize_words(" ".join(asked(llm)))
    assert {"cook", "tonight", "fish"} <= set(words)
    assert len(asked(llm)) == 1  # one question, asked whole
