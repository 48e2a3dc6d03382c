"""Talking over the agent, end to end through a real livekit-server: a backchannel ("mm hmm")
must not silence the answer, a real interruption must stop it and be answered.

The test user asks a question with a long scripted answer, keeps its microphone open, and
about a second into the answer says something over it (espeak-ng speech); it records the
agent's audio as it arrives.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import numpy as np
import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.pipeline.playout import DUCK_GAIN
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_join_token
from bench.room_client import RoomUser
from bench.speech import RATE, espeak, last_voiced_sample, with_silence
from tests.agent_process import scripted_agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QUESTION = "Can you tell me about the history of Rome?"
# One sentence with no commas: Piper says it without pauses between its words, so a silence
# in it is the agent's doing.
ANSWER = (
    "Rome grew from a small village of farmers and shepherds on the hills beside the "
    "river Tiber into the capital of an empire that ruled the lands all around the "
    "Mediterranean Sea for more than four hundred years."
)
INTERRUPTION = "Wait, stop, tell me about Lisbon instead."
SECOND_ANSWER = "Of course, Lisbon is the capital of Portugal."
OVER_AFTER_S = 1.0  # into the answer, the user speaks over it
BLOCK_S = 0.010
# int16 peak of a 10 ms block that holds the agent's voice: the bench's threshold (300) at the
# ducked volume, so that the soft sounds of a ducked word are not taken for silence.
AUDIBLE = round(300 * DUCK_GAIN)


class OpenMic:
    """The user's microphone kept open (silence) between what it says, as in a browser."""

    def __init__(self, user: RoomUser) -> None:
        self.user = user
        self._next: asyncio.Queue[tuple[np.ndarray, asyncio.Future[float | None]]] = asyncio.Queue()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            try:
                pcm, done = self._next.get_nowait()
            except asyncio.QueueEmpty:
                await self.user.silence(0.04)
                continue
            onset = int(np.flatnonzero(np.abs(pcm.astype(np.int32)) > 500)[0])
            [t] = await self.user.speak(pcm, marks=[onset])
            done.set_result(t)

    async def say(self, pcm: np.ndarray) -> float:
        """Says `pcm`; returns when its first voiced sample left the microphone."""
        done: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self._next.put_nowait((pcm, done))
        t = await done
        assert t is not None
        return t

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def loud_blocks(user: RoomUser) -> np.ndarray:
    """Arrival times of the agent's audible 10 ms blocks at the user, sorted."""
    block = round(RATE * BLOCK_S)
    times: list[np.ndarray] = []
    for at, pcm in user.audio:
        n = len(pcm) // block
        peaks = np.abs(pcm[: n * block].astype(np.int32)).reshape(n, block).max(axis=1)
        times.append(at + np.flatnonzero(peaks > AUDIBLE) * BLOCK_S)
    return np.sort(np.concatenate(times)) if times else np.zeros(0)


def longest_silence(loud: np.ndarray, a: float, b: float) -> float:
    """The longest stretch between `a` and `b` with no audible block."""
    inside = loud[(loud >= a) & (loud <= b)]
    edges = np.concatenate([[a], inside, [b]])
    return float(np.diff(edges).max() - BLOCK_S)


def level(user: RoomUser, a: float, b: float) -> float:
    """RMS of the agent's audio that arrived between `a` and `b`."""
    parts = [pcm for at, pcm in user.audio if a <= at < b]
    x = np.concatenate(parts).astype(np.float64) if parts else np.zeros(1)
    return float(np.sqrt(np.mean(x**2)))


async def ask_then_say_over(
    server: LiveKitServer, room: str, over: str
) -> tuple[RoomUser, float, float]:
    """Asks QUESTION, says `over` OVER_AFTER_S into the answer; returns the user, when the
    answer was first heard and when `over` began."""
    token = create_join_token(server.livekit_settings(), room, "user-1")
    user = RoomUser(server.url, token)
    await user.connect()
    await user.wait_for_state("listening", after=0, timeout_s=120)
    mic = OpenMic(user)
    try:
        question = espeak(QUESTION)
        await mic.say(with_silence(question, 0.3, 0.0))
        asked = time.monotonic()
        deadline = asked + 20
        while (first := user.first_audio_after(asked - 5)) is None:
            assert time.monotonic() < deadline, "no answer"
            await asyncio.sleep(0.01)
        await asyncio.sleep(max(0.0, first + OVER_AFTER_S - time.monotonic()))
        onset = await mic.say(espeak(over))
        await asyncio.sleep(3.0)
    finally:
        await mic.close()
    return user, first, onset


def worker_events(log: Path) -> list[str]:
    """The kinds of the voice events the worker logged, in order."""
    kinds = []
    for line in log.read_text().splitlines():
        if "voxroom.turns" in line and "{" in line:
            kinds.append(json.loads(line[line.index("{") :])["event"])
    return kinds


async def test_a_backchannel_never_silences_the_answer(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    llm = ScriptedLLM([ANSWER, "Sorry, shall I go on?"])
    async with scripted_agent(livekit_server, tmp_path / "worker.log", llm):
        # "Okay.": espeak-ng's "Mm hmm." is heard by Whisper tiny.en as words now and then,
        # which makes it an interruption; the bench measures the hums.
        user, first, onset = await ask_then_say_over(livekit_server, "e2e-backchannel", "Okay.")
        try:
            assert user.agent_identity is not None
            finals = await user.wait_for_finals(user.agent_identity, 1, timeout_s=30)
            assert finals == [ANSWER]  # heard whole, once
            kinds = worker_events(tmp_path / "worker.log")
            assert "playback_ducked" in kinds and "backchannel" in kinds, kinds
            assert "playback_paused" not in kinds and "barge_in" not in kinds, kinds
            # At the listener: no silence longer than 150 ms, or than the answer's own
            # (a pause between words heard where no one spoke over it).
            loud = loud_blocks(user)
            silence = longest_silence(loud, onset, onset + 1.5)
            own = max(
                longest_silence(loud, first + 0.2, onset - 0.05),
                longest_silence(loud, onset + 2.0, onset + 4.0),
            )
            print(
                f"\nlongest silence from the backchannel on: {silence * 1000:.0f} ms "
                f"(the answer's own elsewhere: {own * 1000:.0f} ms)"
            )
            assert silence <= max(0.150, own), f"silent for {silence * 1000:.0f} ms"
            assert len(user.final_texts("user-1")) == 1  # "mm hmm" was no turn
            # It gave way: quieter while the sound was judged, then full volume again.
            before = level(user, onset - 0.5, onset)
            ducked = min(level(user, onset + t, onset + t + 0.2) for t in (0.2, 0.3, 0.4))
            after = max(level(user, onset + t, onset + t + 0.3) for t in (1.2, 1.5, 1.8))
            assert ducked < 0.5 * before and after > 0.5 * before, (before, ducked, after)
        finally:
            await user.close()


async def test_an_interruption_stops_the_answer_and_is_answered(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    # Replies by what the user said: "Wait, stop," may end at its comma and be merged with the
    # rest when the user goes on, which changes how many user turns there are.
    llm = ScriptedLLM(
        [ANSWER, SECOND_ANSWER], by_text={QUESTION: ANSWER, INTERRUPTION: SECOND_ANSWER}
    )
    async with scripted_agent(livekit_server, tmp_path / "worker.log", llm):
        user, _first, onset = await ask_then_say_over(
            livekit_server, "e2e-interruption", INTERRUPTION
        )
        try:
            loud = loud_blocks(user)
            said = len(espeak(INTERRUPTION)) / RATE
            spoken_end = onset + last_voiced_sample(espeak(INTERRUPTION)) / RATE
            # Silent (for longer than a pause between words) before the user finished.
            quiet = [
                t
                for t in np.arange(onset, onset + said, BLOCK_S)
                if longest_silence(loud, t, t + 0.5) >= 0.49
            ]
            assert quiet and quiet[0] < spoken_end, "the agent talked over the interruption"
            print(f"\nstopped {(quiet[0] - onset) * 1000:.0f} ms after the interruption began")
            assert user.agent_identity is not None
            finals = await user.wait_for_finals(user.agent_identity, 2, timeout_s=10)
            assert finals[1] == SECOND_ANSWER
            heard = finals[0].split()  # what the user heard of the first answer: a beginning
            assert 0 < len(heard) < len(ANSWER.split()), finals[0]
            assert ANSWER.split()[: len(heard) - 1] == heard[:-1], finals[0]
        finally:
            await user.close()
