"""The agent acts only on the audio of the participant it serves (real livekit-server, real
`voxroom agent` worker with the scripted LLM test double).

A third participant in the room, publishing a microphone and asking questions, must not be
answered: the agent's state stays "listening" and it says nothing. The served user is then
answered as usual (the agent was listening all along). A participant who reaches an empty room
before the user must not be served in the user's place when the room's metadata names the user.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from agent.ops.livekit_server import LiveKitServer
from agent.protocol import KEY_USER
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_join_token
from bench.measure import wait_until
from bench.room_client import RoomUser
from bench.speech import RATE, espeak, last_voiced_sample, with_silence
from tests.agent_process import scripted_agent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPLY = "It is noon."
QUESTION = "What time is it?"
IGNORED_WAIT_S = 6.0  # the agent would be thinking within ~1 s if it had heard the question


def see_agent_already_there(user: RoomUser) -> None:
    """RoomUser learns of the agent from participant_connected; an agent already in the room
    when the user joins is read from the room instead."""
    from livekit import rtc

    for p in user.room.remote_participants.values():
        if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
            user.agent_identity = p.identity
            if state := p.attributes.get("lk.agent.state"):
                user.states.append((time.monotonic(), state))


def joining(server: LiveKitServer, room: str, identity: str, **token: Any) -> RoomUser:
    """A RoomUser about to join `room` as `identity`; `token` as create_join_token takes it."""
    return RoomUser(
        server.url, create_join_token(server.livekit_settings(), room, identity, **token)
    )


async def say(user: RoomUser, text: str) -> float:
    """Say `text` in real time with the mic left open afterwards; returns when its last voiced
    sample was said (not the end of espeak-ng's trailing silence: an answer started on a
    partial transcript can be heard before that)."""
    speech = espeak(text)
    pcm = with_silence(speech, 0.3, 0.0)
    [end] = await user.speak(pcm, marks=[int(0.3 * RATE) + last_voiced_sample(speech) - 1])
    assert end is not None
    return end


async def test_a_third_participant_is_not_answered(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    async with scripted_agent(livekit_server, tmp_path / "worker.log", ScriptedLLM([REPLY])):
        user = joining(livekit_server, "third-party", "user-1")
        intruder = joining(livekit_server, "third-party", "intruder", dispatch_agent=False)
        await user.connect()
        try:
            await user.wait_for_state("listening", after=0, timeout_s=180)
            await intruder.connect()
            user_mic = asyncio.create_task(user.silence(60))
            said = await say(intruder, QUESTION)
            await asyncio.sleep(IGNORED_WAIT_S)
            states = [s for t, s in user.states if t > said - 3]
            assert "thinking" not in states and "speaking" not in states, user.states
            agent = user.agent_identity
            assert agent is not None and user.final_texts(agent) == []
            assert intruder.first_audio_after(said) is None  # not a word to anyone

            user_mic.cancel()
            await asyncio.gather(user_mic, return_exceptions=True)
            asked = await say(user, QUESTION)
            user_mic = asyncio.create_task(user.silence(30))
            await user.wait_for_state("speaking", after=asked, timeout_s=30)
            await user.wait_for_state("listening", after=asked, timeout_s=30)
            assert await user.wait_for_finals(agent, 1, timeout_s=10) == [REPLY]
            user_mic.cancel()
            await asyncio.gather(user_mic, return_exceptions=True)
        finally:
            await intruder.close()
            await user.close()


async def test_the_participant_named_in_the_metadata_is_served_even_if_not_first(
    livekit_server: LiveKitServer, tmp_path: Path
) -> None:
    served = json.dumps({KEY_USER: "user-1"})
    async with scripted_agent(livekit_server, tmp_path / "worker.log", ScriptedLLM([REPLY])):
        # The early participant's token carries the dispatch (and the room's metadata
        # names user-1, as an operator's backend would set it).
        early = joining(livekit_server, "named-user", "early-bird", dispatch_metadata=served)
        user = joining(livekit_server, "named-user", "user-1", dispatch_agent=False)
        await early.connect()
        try:
            # The agent joins and waits for user-1, the user its dispatch names.
            assert await wait_until(lambda: early.agent_identity is not None, 180)
            await user.connect()
            see_agent_already_there(user)
            await user.wait_for_state("listening", after=0, timeout_s=180)
            said = await say(early, QUESTION)
            await asyncio.sleep(IGNORED_WAIT_S)
            assert "thinking" not in [s for t, s in user.states if t > said - 3]
            asked = await say(user, QUESTION)
            user_mic = asyncio.create_task(user.silence(30))
            await user.wait_for_state("speaking", after=asked, timeout_s=30)
            user_mic.cancel()
            await asyncio.gather(user_mic, return_exceptions=True)
        finally:
            await user.close()
            await early.close()
