"""The audio front end (agent.voice.listener.Listener): what an utterance's stream is given."""

from __future__ import annotations

import numpy as np

from agent.engines import FRAME_SAMPLES
from agent.voice.listener import Listener
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


def test_an_utterance_opens_with_the_frames_asked_for_then_every_frame_after() -> None:
    stream = RecordingStream()
    listener = Listener(vad=Loud(), keep_frames=30, clock=lambda: 0.0)
    listener.start(stream)
    for n in range(1, 41):
        listener.frame(frame(n))
    listener.open(1, 23)  # the pre-roll before the onset and the frames up to the vote
    listener.frame(frame(41))
    assert stream.pushed == list(range(18, 42))


def test_more_pre_roll_than_is_kept_gives_what_is_kept() -> None:
    stream = RecordingStream()
    listener = Listener(vad=Loud(), keep_frames=5, clock=lambda: 0.0)
    listener.start(stream)
    for n in range(1, 9):
        listener.frame(frame(n))
    listener.open(1, 50)
    assert stream.pushed == [4, 5, 6, 7, 8]
