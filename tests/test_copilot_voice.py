"""Spoken copilot answers (agent.copilot.voice) in virtual time: the control message, speech off
by default, an answer spoken as it is written through the reply pipeline and the playout, and
silence at once when an answer is superseded or speech is turned off. The session's side:
only the candidate may turn speech on, and a worker without TTS says so."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import pytest

from agent.audio.sinks import TimelineSink
from agent.copilot.room import CopilotSession
from agent.copilot.voice import SpokenAnswerSink, parse_control
from agent.pipeline.playout import Playout
from agent.protocol import ATTR_SPEAK
from tests.virtual_time import run_virtual

RATE = 48_000
WORD_S = 0.25  # the double's speech per word


@dataclass
class WordTTS:
    """TEST DOUBLE: a constant tone, WORD_S per word, after 20 ms of "synthesis"."""

    sample_rate: int = RATE
    texts: list[str] = field(default_factory=list)

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        self.texts.append(text)
        await asyncio.sleep(0.02)
        return np.full(int(len(text.split()) * WORD_S * RATE), 1000, np.int16)


@dataclass
class ShownSink:
    """TEST DOUBLE: the candidate's screen (what the wrapped LiveKitAnswerSink would send)."""

    calls: list[tuple[str, int, str]] = field(default_factory=list)

    async def open(self, answer_id: int, question: str) -> None:
        self.calls.append(("open", answer_id, question))

    async def write(self, answer_id: int, text: str) -> None:
        self.calls.append(("write", answer_id, text))

    async def close(self, answer_id: int, status: str) -> None:
        self.calls.append(("close", answer_id, status))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _voiced_s(timeline: TimelineSink, until_s: float) -> float:
    """Seconds of the timeline, from 0 to `until_s`, that carry sound."""
    return float(np.count_nonzero(timeline.render(int(until_s * RATE)))) / RATE


async def _speaking() -> tuple[WordTTS, TimelineSink, Playout, SpokenAnswerSink]:
    """A sink with speech on, speaking through a started playout onto a timeline."""
    clock = asyncio.get_running_loop().time
    tts = WordTTS()
    timeline = TimelineSink(RATE, 0.0, clock=clock)
    playout = Playout(timeline, clock=clock)
    playout.start()
    sink = SpokenAnswerSink(ShownSink(), tts)
    await sink.speak_through(playout)
    return tts, timeline, playout, sink


ANSWER = [
    "- I studied at TU Munich.\n",
    "- A master's in computer science, ",
    "finished in 2017.\n",
]


def test_the_control_message_switches_speech_and_nothing_else_does() -> None:
    assert parse_control('{"speak": true}') is True
    assert parse_control('{"speak": false}') is False
    for ignored in (
        '{"speak": "yes"}',
        '{"speak": 1}',
        "{}",
        "[true]",
        "speak",
        "",
        '{"speak": true, "x": "' + "y" * 2000 + '"}',
    ):
        assert parse_control(ignored) is None, ignored


def test_speech_is_off_by_default_and_the_answer_is_still_shown() -> None:
    async def main() -> tuple[ShownSink, WordTTS]:
        shown, tts = ShownSink(), WordTTS()
        sink = SpokenAnswerSink(shown, tts)
        assert not sink.speaking
        await sink.open(1, "Where did you study?")
        for delta in ANSWER:
            await sink.write(1, delta)
        await sink.close(1, "complete")
        await asyncio.sleep(2)
        return shown, tts

    shown, tts = run_virtual(main())
    assert tts.texts == []
    assert [c for c in shown.calls if c[0] == "write"] == [("write", 1, d) for d in ANSWER]
    assert shown.calls[-1] == ("close", 1, "complete")


def test_with_speech_on_the_answer_is_spoken_as_it_is_written() -> None:
    async def main() -> tuple[WordTTS, float, float]:
        loop = asyncio.get_running_loop()
        tts, timeline, playout, sink = await _speaking()
        await sink.open(1, "Where did you study?")
        await sink.write(1, ANSWER[0])
        await asyncio.sleep(0.5)  # the rest of the answer is still being written...
        first_sound = _voiced_s(timeline, loop.time())  # ...and its start is heard already
        for delta in ANSWER[1:]:
            await sink.write(1, delta)
        await sink.close(1, "complete")
        await asyncio.sleep(6)
        await playout.aclose()
        return tts, first_sound, _voiced_s(timeline, loop.time())

    tts, first_sound, voiced = run_virtual(main())
    assert first_sound > 0
    spoken = " ".join(tts.texts)
    assert "-" not in spoken  # the bullets are for the eye
    assert _words(spoken) == _words("".join(ANSWER))
    assert voiced == pytest.approx(len(_words(spoken)) * WORD_S, abs=0.3)


@pytest.mark.parametrize("how", ["superseded", "speech off"])
def test_a_superseded_answer_or_speech_turned_off_falls_silent_at_once(how: str) -> None:
    async def main() -> tuple[float, float, WordTTS]:
        loop = asyncio.get_running_loop()
        tts, timeline, playout, sink = await _speaking()
        await sink.open(1, "Tell me about yourself.")
        await sink.write(1, "- " + " ".join(["word"] * 40) + ".\n")  # ~10 s of speech
        await asyncio.sleep(1.0)
        if how == "superseded":
            await sink.close(1, "cancelled")
        else:
            await sink.speak_through(None)
        stopped_at = loop.time()
        await asyncio.sleep(3)
        await playout.aclose()
        heard = _voiced_s(timeline, loop.time())
        return heard, stopped_at, tts

    heard, stopped_at, tts = run_virtual(main())
    assert tts.texts  # it was speaking
    assert 0.5 < heard <= stopped_at + 0.1  # nothing after the stop but what was queued


def test_a_new_answer_cuts_the_voice_of_the_one_before() -> None:
    async def main() -> tuple[list[str], TimelineSink, float]:
        loop = asyncio.get_running_loop()
        tts, timeline, playout, sink = await _speaking()
        await sink.open(1, "First?")
        await sink.write(1, "- " + " ".join(["one"] * 40) + ".\n")
        await sink.close(1, "complete")  # written, but far from spoken
        await asyncio.sleep(1.0)
        second_at = loop.time()
        await sink.open(2, "Second?")
        await sink.write(2, "- Two words.\n")
        await sink.close(2, "complete")
        await asyncio.sleep(5)
        await playout.aclose()
        return tts.texts, timeline, second_at

    texts, timeline, second_at = run_virtual(main())
    assert "Two words." in texts
    total = _voiced_s(timeline, 8.0)
    assert total < second_at + 0.1 + 2 * WORD_S + 0.2  # the first answer's rest was dropped


# ---- the session's side ------------------------------------------------------------------------


class Reader:
    """TEST DOUBLE: a text stream reader with its chunks."""

    def __init__(self, *chunks: str) -> None:
        self._chunks = chunks

    def __aiter__(self):
        return self._iter()

    async def _iter(self):
        for chunk in self._chunks:
            yield chunk


class LocalParticipant:
    """TEST DOUBLE: records attribute changes and refuses to publish anything."""

    def __init__(self) -> None:
        self.attributes: list[dict[str, str]] = []

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        self.attributes.append(attributes)

    async def publish_track(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may be published here")

    async def set_track_subscription_permissions(self, **kwargs: object) -> None:
        raise AssertionError("nothing may be published here")


def _session(tts: object) -> tuple[CopilotSession, LocalParticipant]:
    local = LocalParticipant()
    room = SimpleNamespace(metadata="", local_participant=local)
    session = CopilotSession(room, stt=None, llm=None, embedder=None, tts=tts)  # type: ignore[arg-type]
    session.candidate = "candidate"
    return session, local


async def test_only_the_candidate_may_turn_speech_on() -> None:
    session, local = _session(WordTTS())
    session.sink = SpokenAnswerSink(ShownSink(), WordTTS())
    await session._receive_control(Reader('{"speak": true}'), "intruder")  # type: ignore[arg-type]
    await session._receive_control(Reader("{not json"), "candidate")  # type: ignore[arg-type]
    assert local.attributes == []
    assert not session.sink.speaking


async def test_a_worker_without_tts_says_speech_is_unavailable() -> None:
    session, local = _session(None)
    session.sink = ShownSink()
    await session._receive_control(Reader('{"spe', 'ak": true}'), "candidate")  # type: ignore[arg-type]
    assert local.attributes == [{ATTR_SPEAK: "unavailable"}]
