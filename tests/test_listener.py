"""The audio front end (agent.pipeline.listener.Listener): what an utterance's stream is given."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np

from agent.engines import FRAME_SAMPLES, Transcript
from agent.pipeline.listener import Listener
from tests.stt_stream_double import STTStreamDouble


class RecordingStream(STTStreamDouble):
    def __init__(self) -> None:
        self.pushed: list[int] = []

    def push(self, pcm: np.ndarray) -> None:
        self.pushed.append(int(pcm[0]))

    def discard(self) -> None:
        self.pushed.clear()

    async def flush(self) -> str:
        return ""


class Loud:
    def is_speech(self, pcm: np.ndarray) -> bool:
        return bool(pcm[0] > 0)


def frame(n: int) -> np.ndarray:
    return np.full(FRAME_SAMPLES, n, dtype=np.int16)


def listening(keep_frames: int, frames: int) -> tuple[Listener, RecordingStream]:
    """A listener that has heard frames 1..`frames` (each frame's samples are its number)."""
    stream = RecordingStream()
    listener = Listener(vad=Loud(), keep_frames=keep_frames, clock=lambda: 0.0)
    listener.start(stream)
    for n in range(1, frames + 1):
        listener.frame(frame(n))
    return listener, stream


def test_an_utterance_opens_with_the_frames_asked_for_then_every_frame_after() -> None:
    listener, stream = listening(keep_frames=30, frames=40)
    listener.open(1, 23)  # the pre-roll before the onset and the frames up to the vote
    listener.frame(frame(41))
    assert stream.pushed == list(range(18, 42))


def test_more_pre_roll_than_is_kept_gives_what_is_kept() -> None:
    listener, stream = listening(keep_frames=5, frames=8)
    listener.open(1, 50)
    assert stream.pushed == [4, 5, 6, 7, 8]


class PartialsStream(RecordingStream):
    """Partials of the open utterance, then a stream that dies."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__()
        self.texts = texts

    async def partials(self) -> AsyncIterator[Transcript]:
        for text in self.texts:
            yield Transcript(text=text, final=False)
        raise RuntimeError("the STT stream died")


async def test_partials_of_the_open_utterance_go_on_and_a_dead_stream_ends_them_quietly() -> None:
    stream = PartialsStream(["what", "", "what time"])
    listener = Listener(vad=Loud(), keep_frames=5, clock=lambda: 0.0)
    listener.start(stream)
    heard: list[str] = []
    await listener.read_partials(heard.append)  # nothing open: nothing is passed on
    assert heard == []
    listener.open(1, 1)
    await listener.read_partials(heard.append)
    assert heard == ["what", "what time"]


class EndHearing:
    """TEST DOUBLE of TurnScorer: records the ends it was asked to hear early."""

    def __init__(self) -> None:
        self.heard: list[tuple[int, float]] = []
        self.dropped = 0

    def new_utterance(self) -> None: ...

    def push(self, pcm: np.ndarray) -> None: ...

    def hear_end(self, uid: int, quiet_s: float) -> None:
        self.heard.append((uid, quiet_s))

    def drop_heard(self) -> None:
        self.dropped += 1


async def test_a_turn_s_candidate_has_the_scorer_hear_its_end_and_going_on_drops_it() -> None:
    scorer = EndHearing()
    listener = Listener(
        vad=Loud(),
        keep_frames=5,
        clock=lambda: 0.0,
        scorer=scorer,  # type: ignore[arg-type]
        end_quiet_s=0.14,
    )
    listener.start(RecordingStream())
    listener.open(1, 1)
    candidates: list[int] = []
    listener.request_candidate(1, lambda uid, *_: candidates.append(uid))  # the agent speaks
    await asyncio.sleep(0)
    listener.request_candidate(1, lambda uid, *_: candidates.append(uid), hear_end=True)
    assert scorer.heard == [(1, 0.14)]
    listener.drop_candidate()
    assert scorer.dropped == 1
    await asyncio.sleep(0)
    assert candidates == [1]  # the second was given up on
