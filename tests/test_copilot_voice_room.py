"""Spoken copilot answers through a real livekit-server: the copilot session runs in this
process (as a worker's job would) with the real VAD and Piper, a test-double STT and LLM; a
"bridge" participant publishes an espeak question as `meeting-audio`; the candidate turns
speech on and hears the answer on the agent's "copilot-voice" track; a third participant in
the room may neither subscribe to that voice nor read the answer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import numpy as np
from livekit import api, rtc

from agent.copilot.room import CopilotSession
from agent.engines import Transcript
from agent.ops.livekit_server import LiveKitServer
from agent.protocol import (
    ATTR_SPEAK,
    COPILOT_VOICE_TRACK,
    MEETING_TRACK,
    TOPIC_COPILOT,
    TOPIC_COPILOT_CONTROL,
)
from agent.testing.scripted_llm import ScriptedLLM
from agent.transports.tokens import create_bridge_token, create_join_token
from bench.measure import require
from bench.speech import RATE, espeak, with_silence
from tests.marks import LIVEKIT_INTEGRATION

pytestmark = LIVEKIT_INTEGRATION

QUESTION = "Where did you go to university?"
REPLY = "- I studied at the Technical University of Munich.\n- Computer science, in 2017.\n"


class FixedSTT:
    """TEST DOUBLE of agent.engines.SpeechToText: every utterance is the question (a stream
    without partials)."""

    def stream(self) -> FixedSTT:
        return self

    def push(self, pcm: np.ndarray) -> None:
        pass

    async def flush(self) -> str:
        await asyncio.sleep(0.05)
        return QUESTION

    def discard(self) -> None:
        pass

    async def partials(self) -> AsyncIterator[Transcript]:
        return
        yield

    def set_paused(self, paused: bool) -> None:
        pass

    async def aclose(self) -> None:
        pass


class UnitEmbedder:
    """TEST DOUBLE: the same unit vector for every text (no documents are sent here)."""

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 384), np.float32)
        out[:, 0] = 1.0
        return out


def _agent_token(server: LiveKitServer, room: str) -> str:
    grants = api.VideoGrants(
        room_join=True,
        room=room,
        can_publish=True,
        can_subscribe=True,
        can_publish_data=True,
        can_update_own_metadata=True,
    )
    return (
        api.AccessToken(server.api_key, server.api_secret)
        .with_identity("copilot-agent")
        .with_kind("agent")
        .with_grants(grants)
        .to_jwt()
    )


class Listener:
    """A participant that records the audio energy and the answers that reach it."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.room = rtc.Room()
        self.voiced_frames = 0
        self.voice_subscribed = False
        self.answers: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.room.on("track_subscribed", self._on_track)

    async def join(self, server: LiveKitServer, room: str) -> None:
        self.room.register_text_stream_handler(TOPIC_COPILOT, self._on_answer)
        token = create_join_token(
            server.livekit_settings(), room, self.identity, dispatch_agent=False
        )
        await self.room.connect(server.url, token)

    def _on_track(
        self, track: rtc.Track, pub: rtc.RemoteTrackPublication, _p: rtc.RemoteParticipant
    ) -> None:
        if pub.name == COPILOT_VOICE_TRACK:
            self.voice_subscribed = True
            self._spawn(self._record(track))

    async def _record(self, track: rtc.Track) -> None:
        async for event in rtc.AudioStream(track, sample_rate=48_000, num_channels=1):
            if np.abs(np.frombuffer(event.frame.data, np.int16)).max(initial=0) > 500:
                self.voiced_frames += 1

    def _on_answer(self, reader: rtc.TextStreamReader, _sender: str) -> None:
        async def read() -> None:
            self.answers.append(await reader.read_all())

        self._spawn(read())

    def _spawn(self, coro: object) -> None:
        task = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def leave(self) -> None:
        await self.room.disconnect()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _play_question(room: rtc.Room) -> None:
    """Publish `meeting-audio` and speak the question into it in real time."""
    source = rtc.AudioSource(RATE, 1)
    track = rtc.LocalAudioTrack.create_audio_track(MEETING_TRACK, source)
    await room.local_participant.publish_track(
        track, rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
    )
    pcm = with_silence(espeak(QUESTION), 0.5, 2.0)
    frame = RATE // 50
    for i in range(0, len(pcm) - frame + 1, frame):
        await source.capture_frame(rtc.AudioFrame(pcm[i : i + frame].tobytes(), RATE, 1, frame))


async def test_the_candidate_alone_hears_the_answer_once_speech_is_on(
    livekit_server: LiveKitServer,
) -> None:
    from agent.adapters.providers import load_tts
    from agent.transports.room_io import OUTPUT_RATE

    tts = await asyncio.to_thread(load_tts, OUTPUT_RATE)
    room_name = "copilot-voice"
    agent_room = rtc.Room()
    await agent_room.connect(livekit_server.url, _agent_token(livekit_server, room_name))
    candidate, intruder = Listener("candidate"), Listener("intruder")
    bridge = rtc.Room()
    await intruder.join(livekit_server, room_name)  # first in: not the candidate all the same
    await candidate.join(livekit_server, room_name)
    session = CopilotSession(
        agent_room,
        stt=FixedSTT(),
        llm=ScriptedLLM([REPLY], ttft_ms=80, words_per_s=20),
        embedder=UnitEmbedder(),
        tts=tts,
        job_metadata=json.dumps({"voxroom.mode": "copilot", "voxroom.candidate": "candidate"}),
    )
    run = asyncio.create_task(session.run())
    try:
        await require(lambda: session.engine is not None, 30, "the session never started")
        agent = candidate.room.remote_participants["copilot-agent"]
        assert agent.attributes.get(ATTR_SPEAK) in (None, "false")
        # The intruder cannot turn speech on for anyone...
        await intruder.room.local_participant.send_text(
            json.dumps({"speak": True}), topic=TOPIC_COPILOT_CONTROL
        )
        await asyncio.sleep(1.0)  # time for a wrongly accepted request to show
        assert agent.attributes.get(ATTR_SPEAK) in (None, "false")
        # ...the candidate can.
        await candidate.room.local_participant.send_text(
            json.dumps({"speak": True}),
            topic=TOPIC_COPILOT_CONTROL,
            destination_identities=["copilot-agent"],
        )
        await require(lambda: agent.attributes.get(ATTR_SPEAK) == "true", 10, "speech not on")
        await require(lambda: candidate.voice_subscribed, 10, "the candidate got no voice track")

        bridge_token = create_bridge_token(
            livekit_server.livekit_settings(), room_name, "meeting-bridge-test", "candidate"
        )
        await bridge.connect(livekit_server.url, bridge_token)
        await _play_question(bridge)
        await require(lambda: candidate.answers, 30, "no written answer")
        await require(lambda: candidate.voiced_frames > 50, 30, "the answer was not heard")
        await asyncio.sleep(1.0)

        assert [a.strip() for a in candidate.answers] == [REPLY.strip()]
        assert intruder.answers == []
        assert not intruder.voice_subscribed and intruder.voiced_frames == 0
        publication = next(
            p
            for p in intruder.room.remote_participants["copilot-agent"].track_publications.values()
            if p.name == COPILOT_VOICE_TRACK
        )
        assert not publication.subscribed  # visible to everyone, hearable by the candidate only
        assert session.engine.answers[0].status == "complete"
    finally:
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        for room in (bridge, agent_room):
            await room.disconnect()
        await candidate.leave()
        await intruder.leave()
