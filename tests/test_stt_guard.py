"""agent.adapters.stt.guard: a failing STT stream's push()/discard() never raise, and are
logged once per utterance."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from agent.adapters.stt.guard import GuardedSTTStream


class BrokenStream:
    """TEST DOUBLE for an STTStream: push() and discard() fail while `broken`, else count."""

    def __init__(self) -> None:
        self.broken = True
        self.pushed = 0
        self.discarded = 0

    def push(self, pcm: np.ndarray) -> None:
        if self.broken:
            raise RuntimeError("decoder died")
        self.pushed += 1

    def discard(self) -> None:
        if self.broken:
            raise RuntimeError("decoder died")
        self.discarded += 1


FRAME = np.zeros(320, np.int16)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agent.adapters.stt.guard"]


def test_a_failing_stream_is_logged_once_per_utterance(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING)
    guard = GuardedSTTStream(BrokenStream())  # type: ignore[arg-type]
    for _ in range(50):
        guard.push(FRAME)
    guard.discard()
    assert warnings(caplog) == ["STT push failed: RuntimeError: decoder died"]
    guard.new_utterance()  # its own discard fails too: logged once for the new utterance
    guard.push(FRAME)
    assert warnings(caplog) == [
        "STT push failed: RuntimeError: decoder died",
        "STT discard failed: RuntimeError: decoder died",
    ]


def test_a_working_stream_gets_every_call(caplog: pytest.LogCaptureFixture):
    stream = BrokenStream()
    stream.broken = False
    guard = GuardedSTTStream(stream)  # type: ignore[arg-type]
    guard.new_utterance()
    guard.push(FRAME)
    guard.push(FRAME)
    guard.discard()
    assert (stream.pushed, stream.discarded) == (2, 2)
    assert guard.stream is stream
    assert warnings(caplog) == []
