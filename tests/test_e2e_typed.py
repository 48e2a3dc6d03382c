"""Typed messages end to end: a user types to a real `voxroom agent` worker (dispatched by a
real livekit-server, the scripted LLM test double behind it) on LiveKit's `lk.chat` topic, and
the answer is spoken and shown; a message typed while the agent speaks cuts it off; another
participant's messages are ignored; an oversized message and a flood are refused with a reply,
and the agent goes on working."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_join_token
from agent.transports.typed_input import MAX_TYPED_CHARS, TYPED_BURST, TYPED_PER_MIN
from bench.measure import require
from bench.room_client import RoomUser
from bench.wer import wer
from tests.agent_process import scripted_agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FRANCE = "What is the capital of France?"
FRANCE_REPLY = (
    "The capital of France is Paris. It is a beautiful old city on the river Seine, "
    "with wide avenues, old bridges, many museums and a famous iron tower."
)
OSLO = "What is the weather in Oslo?"
# As long as test_e2e_livekit's spoken reply, so that the word error rate at the listener is
# judged over as many words: with 8, Whisper tiny mishearing 3 of them in the Opus audio that
# follows the cut reply ("called in" for "cold and") failed a fresh-clone run.
OSLO_REPLY = (
    "In Oslo today the weather is cold and sunny, with a light wind from the north "
    "and a clear sky tonight."
)
OTHER_REPLY = "Okay."


def scripted() -> ScriptedLLM:
    return ScriptedLLM([OTHER_REPLY], by_text={FRANCE: FRANCE_REPLY, OSLO: OSLO_REPLY})


async def joined(
    server: LiveKitServer, room: str, identity: str, *, dispatch: bool = True
) -> RoomUser:
    user = RoomUser(
        server.url,
        create_join_token(server.livekit_settings(), room, identity, dispatch_agent=dispatch),
    )
    await user.connect()
    return user


async def test_typed_messages_are_answered_in_voice_and_text_and_interrupt(
    livekit_server: LiveKitServer, tmp_path: Path, whisper_stt: Any
) -> None:
    async with scripted_agent(livekit_server, tmp_path / "worker.log", scripted()):
        user = await joined(livekit_server, "typed-e2e", "user-1")
        mic = asyncio.create_task(user.silence(120))  # the mic stays open, as in a browser
        try:
            await user.wait_for_state("listening", after=0, timeout_s=120)
            agent = user.agent_identity
            assert agent is not None
            t_france = await user.type(FRANCE)
            t_speaking = await user.wait_for_state("speaking", after=t_france, timeout_s=30)
            # Typed while the agent speaks: the answer stops, the new question is answered.
            await require(
                lambda: user.first_audio_after(t_speaking + 1.0) is not None,
                10,
                "the agent's voice while it speaks",
            )
            t_oslo = await user.type(OSLO)
            t_thinking = await user.wait_for_state("thinking", after=t_oslo, timeout_s=10)
            t_second = await user.wait_for_state("speaking", after=t_thinking, timeout_s=30)
            t_done = await user.wait_for_state("listening", after=t_second, timeout_s=30)
            cut, answer = await user.wait_for_finals(agent, 2, timeout_s=10)
            heard = cut.split()
            assert heard == FRANCE_REPLY.split()[: len(heard)], cut
            assert len(heard) < len(FRANCE_REPLY.split()), cut  # cut off, not played out
            assert answer == OSLO_REPLY  # shown
            # Shown as the user's turns, as a spoken question is (the page reads these).
            assert user.final_texts("user-1") == [FRANCE, OSLO]
            said = await whisper_stt.transcribe(user.agent_audio(t_thinking))  # spoken
            assert wer(OSLO_REPLY, said) <= 0.25, f"heard {said!r} for {OSLO_REPLY!r}"
            states = [s for t, s in user.states if t_france < t <= t_done]
            assert states == ["thinking", "speaking", "thinking", "speaking", "listening"]
        finally:
            mic.cancel()
            await user.close()


async def test_intruders_long_messages_and_floods_never_steer_the_agent(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    async with scripted_agent(livekit_server, log, scripted()):
        user = await joined(livekit_server, "typed-refused", "user-1")
        intruder = await joined(livekit_server, "typed-refused", "intruder", dispatch=False)
        mic = asyncio.create_task(user.silence(120))
        try:
            await user.wait_for_state("listening", after=0, timeout_s=120)
            agent = user.agent_identity
            assert agent is not None
            intruder.agent_identity = agent
            start = time.monotonic()
            await intruder.type(FRANCE)
            await require(
                lambda: "typed message from intruder ignored" in log.read_text(),
                15,
                "the worker to ignore the intruder",
            )
            await user.type("x" * 200_000)  # 200 kB
            await require(lambda: user.chat, 15, "the refusal of the long message")
            assert f"longer than {MAX_TYPED_CHARS} characters" in user.chat[0].text
            assert user.chat[0].sender == agent
            assert intruder.chat == []
            assert [s for t, s in user.states if t > start] == []  # nothing was answered

            flood = 12
            for i in range(flood):
                await user.type(f"Message number {i}.")
            # The long message took a token of the burst; a token comes back every 3 s.
            await require(lambda: len(user.chat) > flood - TYPED_BURST, 15, "the refusals")
            refusals = [c.text for c in user.chat[1:]]
            assert all("too many messages" in r for r in refusals), refusals
            # The agent still works: once it has answered and a token is back, it answers.
            t_flood = await user.wait_for_state("speaking", after=start, timeout_s=30)
            await user.wait_for_state("listening", after=t_flood, timeout_s=30)
            await asyncio.sleep(60 / TYPED_PER_MIN)  # the bucket's refill: one message's worth
            t_oslo = await user.type(OSLO)
            t_speaking = await user.wait_for_state("speaking", after=t_oslo, timeout_s=30)
            await user.wait_for_state("listening", after=t_speaking, timeout_s=30)
            finals = await user.wait_for_finals(agent, 2, timeout_s=10)
            assert finals[-1] == OSLO_REPLY
            assert user.first_audio_after(t_oslo) is not None
            assert "x" * 100 not in log.read_text()  # never forwarded, nor logged
        finally:
            mic.cancel()
            await user.close()
            await intruder.close()
