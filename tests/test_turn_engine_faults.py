"""The turn engine (agent/voice/engine.py) in virtual time with test doubles, under faults.

The real TurnEngine, Playout, ReplyPipeline, chunker, webrtcvad and state machine run on a
VirtualTimeLoop (tests/virtual_time.py); the user is a timeline of buzzing "speech" (webrtcvad
calls a harmonic buzz voiced) with the words each stretch stands for; the engines around
them are test doubles: `TimelineSTT` (answers with the words of the speech it was given),
`ToneTTS` (a tone 0.25 s per word), and ScriptedLLM or a faulty LLM. The agent's voice lands
on a TimelineSink, so what the user would hear, and when, is measured exactly.

The property here: after any cancel (barge-in, a speculative start thrown away, a retract,
the canned fallback) no task of the cancelled reply is still running, checked against
asyncio.all_tasks() with the task tree recorded by a task factory.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.adapters.llm.history import ChatHistory
from agent.audio.sinks import TimelineSink
from agent.engines import FRAME_SAMPLES, INPUT_RATE, ChatMessage, Transcript
from agent.events import ReplyCancelled, VoiceEvent, event_json
from agent.pipeline.playout import DUCK_GAIN
from agent.testing.scripted_llm import ScriptedLLM
from agent.voice.engine import TurnEngine
from state_machine.options import TurnOptions
from tests.stt_stream_double import STTStreamDouble
from tests.virtual_time import VirtualTimeLoop

FRAME_S = FRAME_SAMPLES / INPUT_RATE
RATE = INPUT_RATE  # the agent's voice is rendered at 16 kHz too
TONE_S_PER_WORD = 0.25


def buzz(n: int, *, amplitude: float = 8000.0, offset: int = 0) -> np.ndarray:
    """A harmonic buzz at 130 Hz: webrtcvad (and the energy gate) call it voiced."""
    t = (np.arange(n) + offset) / INPUT_RATE
    sig = sum(np.sin(2 * np.pi * 130 * k * t) / k for k in range(1, 20))
    return (sig / 2.0 * amplitude / 1.6).astype(np.int16)


SILENCE = np.zeros(FRAME_SAMPLES, np.int16)


@dataclass(frozen=True)
class Said:
    """The user speaking `text` from `start` to `end` (seconds of virtual time)."""

    start: float
    end: float
    text: str


def speech_input(said: list[Said]) -> Callable[[float], np.ndarray]:
    """The user's microphone: buzz while speaking, digital silence otherwise. `t` is the time
    at the end of the frame."""

    def frame(t: float) -> np.ndarray:
        mid = t - FRAME_S / 2
        if any(s.start <= mid < s.end for s in said):
            return buzz(FRAME_SAMPLES, offset=round(mid * INPUT_RATE))
        return SILENCE

    return frame


class TimelineSTT:
    """STT TEST DOUBLE (agent.engines.SpeechToText with its stream): a flush answers, after
    `delay_s`, with the words of every stretch of the timeline that the pushed audio reaches
    into. `fail()` may return an exception to raise from flush instead (a dead provider)."""

    def __init__(
        self,
        said: list[Said],
        *,
        delay_s: float = 0.2,
        fail: Callable[[], Exception | None] = lambda: None,
    ) -> None:
        self.said = said
        self.delay_s = delay_s
        self.fail = fail
        self.flushes = 0
        self.clock: Callable[[], float] = lambda: asyncio.get_running_loop().time()

    def stream(self) -> TimelineSTTStream:
        return TimelineSTTStream(self)


class TimelineSTTStream(STTStreamDouble):
    def __init__(self, stt: TimelineSTT) -> None:
        self.stt = stt
        self.samples = 0
        self.last_push = 0.0
        self.closed = asyncio.Event()

    def push(self, pcm: np.ndarray) -> None:
        self.samples += len(pcm)
        self.last_push = self.stt.clock()

    async def flush(self) -> str:
        end = self.last_push
        start = end - self.samples / INPUT_RATE
        self.stt.flushes += 1
        await asyncio.sleep(self.stt.delay_s)
        if (e := self.stt.fail()) is not None:
            raise e
        return " ".join(s.text for s in self.stt.said if s.start < end and s.end > start)

    def discard(self) -> None:
        self.samples = 0

    async def partials(self) -> AsyncIterator[Transcript]:
        await self.closed.wait()
        return
        yield  # an async generator with no partials

    def set_paused(self, paused: bool) -> None:
        pass

    async def aclose(self) -> None:
        self.closed.set()


class ToneTTS:
    """TTS TEST DOUBLE: a 440 Hz tone, TONE_S_PER_WORD per word, after a short synthesis
    delay. `fail(text)` may return an exception to raise instead."""

    sample_rate = RATE

    def __init__(self, *, fail: Callable[[str], Exception | None] = lambda _t: None) -> None:
        self.fail = fail
        self.texts: list[str] = []

    async def synthesize(
        self, text: str, *, left_context: str = "", right_context: str = ""
    ) -> np.ndarray:
        await asyncio.sleep(0.02 + 0.005 * len(text.split()))
        if (e := self.fail(text)) is not None:
            raise e
        self.texts.append(text)
        n = int(max(1, len(text.split())) * TONE_S_PER_WORD * RATE)
        return (np.sin(2 * np.pi * 440 * np.arange(n) / RATE) * 6000).astype(np.int16)


class StalledLLM:
    """LLM TEST DOUBLE that never produces a token (a provider that accepted the request and
    hangs)."""

    async def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        await asyncio.sleep(3600)
        yield ""


class TaskTree:
    """A task factory that remembers which task created which, so that the tasks belonging to
    one reply (its own and everything spawned under it) can be found later."""

    def __init__(self) -> None:
        self.parent: dict[asyncio.Task[Any], asyncio.Task[Any] | None] = {}

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
            parent = asyncio.current_task(loop) if loop.is_running() else None
            task = asyncio.Task(coro, loop=loop, **kw)
            self.parent[task] = parent
            return task

        loop.set_task_factory(factory)

    def descends_from(self, task: asyncio.Task[Any], names: set[str]) -> bool:
        node: asyncio.Task[Any] | None = task
        while node is not None:
            if node.get_name() in names:
                return True
            if _is_root(node):
                return False
            node = self.parent.get(node)
        return False

    def alive_under(self, names: set[str]) -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if not t.done() and self.descends_from(t, names)]


# Tasks that a reply's code spawns but that belong to something else: the canned phrase that
# replaces a failed reply (a reply of its own) and this harness's own checks.
_ROOT_COROUTINES = {"TurnEngine._play_canned", "_converse.<locals>.check_cancelled"}


def _is_root(task: asyncio.Task[Any]) -> bool:
    return getattr(task.get_coro(), "__qualname__", "") in _ROOT_COROUTINES


@dataclass
class Conversation:
    """What happened in one run: the engine's events, its turns, the agent's voice."""

    events: list[dict[str, Any]]  # as JSON (agent.events.event_json)
    turns: list[dict[str, Any]]
    voice: np.ndarray
    leaks: list[str] = field(default_factory=list)  # cancelled replies with live tasks
    leftover_tasks: list[str] = field(default_factory=list)  # after aclose
    errors: list[str] = field(default_factory=list)  # exceptions nobody retrieved

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def states(self) -> list[str]:
        return [d["state"] for d in self.of("state")]

    def audible(self, *, threshold: int = 300) -> list[tuple[float, float]]:
        """Intervals (s) where the agent's voice was non-silent, gaps under 50 ms merged."""
        loud = np.abs(self.voice.astype(np.int32)) > threshold
        idx = np.flatnonzero(loud)
        if idx.size == 0:
            return []
        breaks = np.flatnonzero(np.diff(idx) > int(0.05 * RATE))
        starts = np.concatenate([[idx[0]], idx[breaks + 1]])
        ends = np.concatenate([idx[breaks], [idx[-1]]])
        return [(s / RATE, (e + 1) / RATE) for s, e in zip(starts, ends, strict=True)]

    def silence_after(self, t: float) -> float | None:
        """Seconds from `t` to the first agent sound after it (None: the agent never spoke)."""
        later = [s for s, _ in self.audible() if s >= t - 1e-9]
        return None if not later else later[0] - t


def converse(
    said: list[Said],
    *,
    until_s: float,
    llm: Any = None,
    stt: Any = None,
    tts: Any = None,
    options: TurnOptions | None = None,
    mic: Callable[[float], np.ndarray] | None = None,
    push: Callable[[TurnEngine, np.ndarray], None] | None = None,
    replies: list[str] | None = None,
    real_time: bool = False,
    finally_: Callable[[], Awaitable[None]] | None = None,
) -> Conversation:
    """Run a TurnEngine for `until_s` of virtual time (or real time, for engines that talk
    over sockets) with the user saying `said` (or the frames `mic(t)` gives), and collect what
    happened. Times are seconds from the start of the run. `finally_` runs on the same loop
    before it closes: connections an engine opened are bound to that loop."""
    loop = asyncio.new_event_loop() if real_time else VirtualTimeLoop()
    tree = TaskTree()
    tree.install(loop)
    errors: list[str] = []
    loop.set_exception_handler(lambda _l, ctx: errors.append(str(ctx.get("exception"))))
    try:
        return loop.run_until_complete(
            _converse(
                said,
                until_s,
                tree,
                errors,
                llm=llm or ScriptedLLM(replies or ["It is noon."], ttft_ms=150, words_per_s=15),
                stt=stt or TimelineSTT(said),
                tts=tts or ToneTTS(),
                options=options,
                mic=mic or speech_input(said),
                push=push or TurnEngine.push_frame,
            )
        )
    finally:
        if finally_ is not None:
            loop.run_until_complete(finally_())
        loop.close()


async def _converse(
    said: list[Said],
    until_s: float,
    tree: TaskTree,
    errors: list[str],
    *,
    llm: Any,
    stt: Any,
    tts: Any,
    options: TurnOptions | None,
    mic: Callable[[float], np.ndarray],
    push: Callable[[TurnEngine, np.ndarray], None],
) -> Conversation:
    loop = asyncio.get_running_loop()
    origin = loop.time()

    def clock() -> float:
        return loop.time() - origin

    if isinstance(stt, TimelineSTT):
        stt.clock = clock
    events: list[dict[str, Any]] = []
    checks: list[asyncio.Task[None]] = []
    leaks: list[str] = []

    async def check_cancelled(rid: int) -> None:
        # ReplyPipeline.cancel runs in a task the engine spawns: give it a few loop turns.
        await asyncio.sleep(0.05)
        alive = tree.alive_under({f"reply-{rid}", f"tts-{rid}"})
        if alive:
            leaks.append(f"reply {rid}: {[t.get_name() for t in alive]}")

    def on_event(event: VoiceEvent) -> None:
        events.append(event_json(event))
        if isinstance(event, ReplyCancelled):
            checks.append(loop.create_task(check_cancelled(event.reply_id), name="leak-check"))

    sink = TimelineSink(RATE, 0.0, clock=clock)
    engine = TurnEngine(
        stt=stt,
        llm=llm,
        tts=tts,
        sink=sink,
        history=ChatHistory("test"),
        options=options,
        on_event=on_event,
        clock=clock,
    )
    await engine.start()
    events.clear()  # the filler was synthesized before the user's first frame
    i = math.ceil(clock() / FRAME_S)  # frames end at multiples of 20 ms
    try:
        while (t := (i + 1) * FRAME_S) <= until_s:
            await asyncio.sleep(max(0.0, t - clock()))
            push(engine, mic(t))
            i += 1
    finally:
        await engine.aclose()
        await asyncio.gather(*checks)
    await asyncio.sleep(0)
    leftover = [t.get_name() for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    # A task that died of an exception nobody looked at (asyncio would only log it at GC).
    errors += [
        f"{t.get_name()}: {t.exception()!r}"
        for t in tree.parent
        if t.done() and not t.cancelled() and getattr(t, "_log_traceback", False)
    ]
    return Conversation(
        events,
        [t.as_event() for t in engine.turns],
        sink.render(int(until_s * RATE)),
        leaks,
        leftover,
        errors,
    )


# ---- the property: cancels leave nothing running ------------------------------------------

utterance = st.tuples(
    st.floats(0.05, 2.5),  # pause before it (s)
    st.floats(0.1, 1.8),  # its length (s)
    st.sampled_from(
        [
            "what time is it?",
            "tell me about the",
            "stop, what is the date?",
            "[coughs]",
            "",
            "in Tokyo?",
            "and then",
        ]
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(utterance, min_size=1, max_size=5),
    st.floats(0.0, 1.5),  # LLM time to first token (s)
    st.integers(1, 30),  # words in each reply
)
def test_no_task_of_a_cancelled_reply_outlives_its_cancel(
    script: list[tuple[float, float, str]], ttft_s: float, reply_words: int
) -> None:
    said, t = [], 0.5
    for pause, length, text in script:
        t += pause
        said.append(Said(round(t, 2), round(t + length, 2), text))
        t += length
    reply = " ".join(["word"] * reply_words) + "."
    conv = converse(
        said, until_s=t + 12.0, llm=ScriptedLLM([reply], ttft_ms=ttft_s * 1000, words_per_s=12)
    )
    assert conv.leaks == []
    assert conv.leftover_tasks == []
    assert conv.errors == []
    states = conv.states()
    assert not states or states[-1] == "LISTENING"  # settled at the end


LONG_REPLY = (
    "It is noon, and the sun is high, so it is time for lunch, and the cafe down "
    "the street is open, and they serve a very good soup on Mondays."
)


class LeakyLLM:
    """LLM TEST DOUBLE with a bug: it starts a helper task it never cancels. The harness must
    see that task outlive the reply's cancel (the property is not vacuous)."""

    async def stream(self, messages: list[ChatMessage]) -> AsyncIterator[str]:
        asyncio.get_running_loop().create_task(asyncio.sleep(60), name="forgotten")
        for word in LONG_REPLY.split():
            await asyncio.sleep(0.05)
            yield word + " "


def test_the_harness_sees_a_task_left_behind_by_a_cancelled_reply() -> None:
    said = [Said(0.5, 1.5, "what time is it?"), Said(3.0, 4.0, "stop, what is the date?")]
    conv = converse(said, until_s=8.0, llm=LeakyLLM())
    assert conv.leaks and "forgotten" in conv.leaks[0]


def _peak(voice: np.ndarray, a: float, b: float) -> int:
    return int(np.abs(voice[int(a * RATE) : int(b * RATE)].astype(np.int32)).max())


def test_a_barge_in_ducks_the_reply_at_once_then_cancels_all_of_it() -> None:
    said = [Said(0.5, 1.5, "what time is it?"), Said(3.0, 4.0, "stop, what is the date?")]
    long_reply = LONG_REPLY
    conv = converse(said, until_s=16.0, replies=[long_reply, "It is Monday."])
    [cancel] = conv.of("reply_cancelled")
    assert cancel["reason"] == "barge-in"
    assert conv.leaks == [] and conv.leftover_tasks == [] and conv.errors == []
    [ducked] = conv.of("playback_ducked")
    [paused] = conv.of("playback_paused")
    # Ducked 2 voiced frames in (the VAD may take one more frame of the onset, depending on
    # where the frames fall); quieter once the frame in flight (frames need not start on the
    # 20 ms grid) and the 5 ms ramp are out,
    # silent from the frame after the pause that "stop," brought.
    assert ducked["t"] <= 3.0 + 0.06 + 1e-3 < paused["t"]
    loud = _peak(conv.voice, 2.5, 3.0)
    quiet = _peak(conv.voice, ducked["t"] + 0.045, paused["t"])  # 2 frames and the ramp
    assert quiet <= DUCK_GAIN * loud + 1
    first, *rest = conv.audible()
    assert first[1] <= paused["t"] + 0.04 + 1e-3  # the frame in flight, off the 20 ms grid
    assert [t["interrupted"] for t in conv.turns] == [True, False]
    assert conv.turns[1]["user_text"] == "stop, what is the date?"
    assert rest  # the interruption was answered


def test_a_barge_in_that_pauses_at_once_cancels_the_whole_reply() -> None:
    said = [Said(0.5, 1.5, "what time is it?"), Said(3.0, 4.0, "stop, what is the date?")]
    conv = converse(
        said, until_s=16.0, replies=[LONG_REPLY, "It is Monday."], options=TurnOptions(duck=False)
    )
    [cancel] = conv.of("reply_cancelled")
    assert cancel["reason"] == "barge-in" and conv.of("playback_ducked") == []
    assert conv.leaks == [] and conv.leftover_tasks == [] and conv.errors == []
    first, *rest = conv.audible()
    # Paused 2 voiced frames in (or one more, as above), + the frame in flight.
    assert first[1] <= 3.0 + 0.06 + 0.02 + 1e-3
    assert [t["interrupted"] for t in conv.turns] == [True, False] and rest


def test_a_stalled_llm_is_cut_by_the_thinking_timeout_with_the_canned_phrase() -> None:
    said = [Said(0.5, 1.5, "what time is it?")]
    conv = converse(said, until_s=14.0, llm=StalledLLM())
    [filler, canned] = conv.audible()
    speech_end = 1.5
    assert 2.2 <= filler[0] - speech_end <= 2.6  # "let me think" after ~2 s of THINKING
    assert 8.2 <= canned[0] - speech_end <= 8.6  # the canned apology at thinking_timeout_s
    assert conv.leaks == [] and conv.leftover_tasks == []
    [turn] = conv.turns
    assert turn["user_text"] == "what time is it?" and turn["interrupted"]
    assert conv.states()[-1] == "LISTENING"


def test_a_cough_while_the_agent_thinks_does_not_lose_the_question() -> None:
    said = [Said(0.5, 1.5, "what time is it?"), Said(2.2, 2.6, "")]  # a cough, no words
    conv = converse(said, until_s=10.0, llm=ScriptedLLM(["It is noon."], ttft_ms=1000))
    assert conv.silence_after(2.6) is not None  # the question gets an answer...
    assert any("what time is it?" in t["user_text"] and t["heard_text"] for t in conv.turns)
