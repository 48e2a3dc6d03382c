"""Direct mode (`voxroom demo --direct`): the browser talks to the agent over WebRTC, with no
LiveKit server, through aiortc. One process, one conversation at a time.

`POST /api/direct/offer` takes the browser's SDP offer `{"sdp", "type": "offer"}` (ICE
candidates gathered, no trickle) and answers `{"sdp", "type": "answer", "identity",
"agent_identity"}`. A new offer replaces the conversation before it (a reloaded page must
not wait for the old connection to time out).

The same TurnEngine runs as in a LiveKit room: the browser's microphone, resampled to 16 kHz
and cut into 20 ms frames, goes into `push_frame`; the agent's voice is a 48 kHz aiortc track
fed by `DirectAudioSink`; the agent's state and both transcripts travel on the page's data
channel as the same attribute changes and `lk.transcription` text streams a LiveKit room
carries (RoomPublisher, over `DataChannelParticipant`), as JSON messages:

    {"type": "attributes", "attributes": {"lk.agent.state": "listening"}}
    {"type": "text", "id": "DS_1", "topic": "lk.transcription", "sender": "agent",
     "attributes": {"lk.segment_id": "...", "lk.transcription_final": "true"}, "text": "..."}

Each finished turn also sends its latencies on the `voxroom.metrics` topic.
"""

from __future__ import annotations

import asyncio
import fractions
import itertools
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

from agent.audio.frames import FrameRechunker
from agent.engines import INPUT_RATE, LanguageModel, SpeechToText, TextToSpeech
from agent.protocol import DIRECT_CHANNEL_LABEL
from agent.transports.room_io import OUTPUT_RATE, RoomPublisher
from agent.transports.web_server import (
    WebSettings,
    build_web_app,
    error_response,
    guarded,
    read_json_object,
)
from state_machine.options import TurnOptions

if TYPE_CHECKING:
    import av
    from aiortc import RTCPeerConnection

    from agent.adapters.turn_detector import TurnDetector

log = logging.getLogger(__name__)

USER_IDENTITY = "you"
AGENT_IDENTITY = "agent"
OUTPUT_FRAME_MS = 20
MAX_SDP_CHARS = 64_000


class DirectAudioSink:
    """An `AudioSink` whose audio the agent's WebRTC track reads in real time. At most
    `max_queue_ms` wait here, so clearing it silences the listener almost at once."""

    frame_ms = OUTPUT_FRAME_MS

    def __init__(self, sample_rate: int = OUTPUT_RATE, max_queue_ms: int = 60) -> None:
        self.sample_rate = sample_rate
        self._max_queue = sample_rate * max_queue_ms // 1000
        self._pieces: deque[np.ndarray] = deque()
        self._queued = 0
        self._space = asyncio.Event()

    async def write(self, pcm: np.ndarray) -> None:
        # An empty queue takes any frame, so a frame longer than the queue cannot wait forever.
        while self._queued and self._queued + len(pcm) > self._max_queue:
            self._space.clear()
            await self._space.wait()
        self._pieces.append(pcm.astype(np.int16, copy=True))
        self._queued += len(pcm)

    def clear(self) -> int:
        dropped = self._queued
        self._pieces.clear()
        self._queued = 0
        self._space.set()
        return dropped

    def queued_samples(self) -> int:
        return self._queued

    def read(self, n: int) -> np.ndarray:
        """The next `n` samples to play: what is queued, then silence."""
        out = np.zeros(n, np.int16)
        filled = 0
        while filled < n and self._pieces:
            piece = self._pieces[0]
            take = min(n - filled, len(piece))
            out[filled : filled + take] = piece[:take]
            filled += take
            if take == len(piece):
                self._pieces.popleft()
            else:
                self._pieces[0] = piece[take:]
        self._queued -= filled
        self._space.set()
        return out


def agent_voice_track(
    sink: DirectAudioSink,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
):
    """An aiortc audio track that plays `sink` in real time, 20 ms a frame (silence between
    replies, so the browser's jitter buffer stays primed)."""
    import av
    from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

    rate = sink.sample_rate
    samples = rate * OUTPUT_FRAME_MS // 1000
    time_base = fractions.Fraction(1, rate)

    class AgentVoiceTrack(MediaStreamTrack):
        kind = "audio"

        def __init__(self) -> None:
            super().__init__()
            self._start: float | None = None
            self._pts = 0

        async def recv(self) -> av.AudioFrame:
            if self.readyState != "live":
                raise MediaStreamError
            if self._start is None:
                self._start = clock()
            else:
                self._pts += samples
                # Paced by the schedule, not by the last call: a late call catches up.
                await sleep(max(0.0, self._start + self._pts / rate - clock()))
            pcm = sink.read(samples)
            frame = av.AudioFrame.from_ndarray(pcm.reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = rate
            frame.pts = self._pts
            frame.time_base = time_base
            return frame

    return AgentVoiceTrack()


class InboundAudio:
    """The browser's decoded audio (any rate and layout aiortc gives) as the engine's 20 ms,
    16 kHz mono int16 frames."""

    def __init__(self) -> None:
        import av

        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=INPUT_RATE)
        self._rechunk = FrameRechunker()

    def push(self, frame: av.AudioFrame) -> list[np.ndarray]:
        frames: list[np.ndarray] = []
        for out in self._resampler.resample(frame):
            frames += self._rechunk.push(out.to_ndarray().reshape(-1).astype(np.int16))
        return frames


class DataChannelParticipant:
    """The part of a LiveKit local participant that RoomPublisher uses (attributes and text
    streams), carried as JSON messages on a data channel. Messages sent before the channel
    opens wait for it; after it closes they are dropped."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self._channel: Any = None
        self._pending: list[str] = []
        self._ids = itertools.count(1)

    def attach(self, channel: Any) -> None:
        self._channel = channel
        if channel.readyState == "open":
            self._flush()
        else:
            channel.on("open", self._flush)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for message in pending:
            self._channel.send(message)

    def send(self, message: dict[str, Any]) -> None:
        text = json.dumps(message)
        channel = self._channel
        if channel is None or channel.readyState == "connecting":
            self._pending.append(text)
        elif channel.readyState == "open":
            channel.send(text)

    async def send_text(
        self,
        text: str,
        *,
        topic: str,
        attributes: dict[str, str] | None = None,
        destination_identities: list[str] | None = None,
        sender_identity: str | None = None,
    ) -> None:
        """One whole text stream, as `rtc.LocalParticipant.send_text` sends it (the channel has
        one peer, so every destination is that peer)."""
        self.send(
            {
                "type": "text",
                "id": f"DS_{next(self._ids)}",
                "topic": topic,
                "sender": sender_identity or self.identity,
                "attributes": attributes or {},
                "text": text,
            }
        )

    async def set_attributes(self, attributes: dict[str, str]) -> None:
        self.send({"type": "attributes", "attributes": attributes})

    async def stream_text(
        self,
        *,
        topic: str,
        attributes: dict[str, str] | None = None,
        sender_identity: str | None = None,
    ) -> _TextStreamWriter:
        return _TextStreamWriter(self, topic, attributes, sender_identity)


class _TextStreamWriter:
    """Collects a text stream and sends it whole on close (a data channel message is small
    and ordered; splitting it would buy nothing)."""

    def __init__(
        self,
        participant: DataChannelParticipant,
        topic: str,
        attributes: dict[str, str] | None,
        sender: str | None,
    ) -> None:
        self._participant = participant
        self._topic = topic
        self._attributes = attributes
        self._sender = sender
        self._parts: list[str] = []

    async def write(self, text: str) -> None:
        self._parts.append(text)

    async def aclose(self) -> None:
        await self._participant.send_text(
            "".join(self._parts),
            topic=self._topic,
            attributes=self._attributes,
            sender_identity=self._sender,
        )


class DataChannelRoom:
    """Stands in for the `rtc.Room` RoomPublisher publishes into."""

    def __init__(self, participant: DataChannelParticipant) -> None:
        self.local_participant = participant


class OfferError(ValueError):
    """The browser's offer cannot make a conversation; the message says why."""


class DirectSession:
    """One conversation: a peer connection, its turn engine and its publisher."""

    def __init__(self, agent: DirectAgent) -> None:
        self._agent = agent
        self.pc: RTCPeerConnection | None = None
        self.closed = asyncio.Event()
        self._engine: Any = None
        self._publisher: RoomPublisher | None = None
        self._ready = asyncio.Event()  # the engine runs: audio may flow into it
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing: asyncio.Task[None] | None = None

    async def answer(self, sdp: str, kind: str) -> dict[str, str]:
        """The SDP answer to the browser's offer; OfferError when the offer is unusable."""
        from aiortc import RTCPeerConnection, RTCSessionDescription
        from aiortc.exceptions import InvalidAccessError, InvalidStateError

        participant = DataChannelParticipant(AGENT_IDENTITY)
        pc = self.pc = RTCPeerConnection()

        @pc.on("datachannel")
        def on_datachannel(channel: Any) -> None:
            if channel.label == DIRECT_CHANNEL_LABEL:
                participant.attach(channel)

        @pc.on("track")
        def on_track(track: Any) -> None:
            if track.kind == "audio":
                self._spawn(self._listen(track))

        @pc.on("connectionstatechange")
        def on_state() -> None:
            log.info("direct session: connection %s", pc.connectionState)
            if pc.connectionState in ("failed", "closed"):
                self.close_soon()

        # The offer first: a useless one costs no engine start.
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type=kind))
        except (ValueError, InvalidAccessError, InvalidStateError) as e:
            raise OfferError(str(e)) from e
        if not any(t.kind == "audio" for t in pc.getTransceivers()):
            raise OfferError("it has no audio")

        sink = DirectAudioSink(self._agent.tts.sample_rate)
        await self._start_engine(participant, sink)
        pc.addTrack(agent_voice_track(sink))
        await pc.setLocalDescription(await pc.createAnswer())  # gathers the ICE candidates
        local = pc.localDescription
        return {"sdp": local.sdp, "type": local.type}

    async def _start_engine(
        self, participant: DataChannelParticipant, sink: DirectAudioSink
    ) -> None:
        from agent.adapters.llm.history import ChatHistory
        from agent.voice.engine import TurnEngine

        agent = self._agent
        # DataChannelRoom has the part of rtc.Room the publisher uses (its local participant).
        room = DataChannelRoom(participant)
        publisher = RoomPublisher(room, USER_IDENTITY)  # type: ignore[arg-type]  # see above

        self._engine = TurnEngine(
            stt=agent.stt,
            llm=agent.llm,
            tts=agent.tts,
            sink=sink,
            history=ChatHistory(agent.system_prompt),
            on_event=publisher.on_event,
            options=agent.turn_options,
            turn_detector=agent.turn_detector,
        )
        self._publisher = publisher
        publisher.start()
        await self._engine.start()
        self._ready.set()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen(self, track: Any) -> None:
        from aiortc.mediastreams import MediaStreamError

        await self._ready.wait()
        inbound = InboundAudio()
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return  # the browser's track ended
            for pcm in inbound.push(frame):
                self._engine.push_frame(pcm)

    def close_soon(self) -> None:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self.aclose())

    async def aclose(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._engine is not None:
            await self._engine.aclose()
            log.info("direct session ended after %d turns", len(self._engine.turns))
        if self._publisher is not None:
            await self._publisher.aclose()
        if self.pc is not None:
            await self.pc.close()


class DirectAgent:
    """The agent of direct mode: loaded engines, and the one conversation they serve."""

    def __init__(
        self,
        *,
        stt: SpeechToText,
        llm: LanguageModel,
        tts: TextToSpeech,
        system_prompt: str,
        turn_detector: TurnDetector | None = None,
        barge_in: str = "duck",
    ) -> None:
        self.stt, self.llm, self.tts = stt, llm, tts
        self.system_prompt = system_prompt
        self.turn_detector = turn_detector
        self.turn_options = TurnOptions(duck=barge_in == "duck")
        self.session: DirectSession | None = None
        self._lock = asyncio.Lock()

    async def handle_offer(self, request: web.Request) -> web.StreamResponse:
        body = await read_json_object(request)
        if isinstance(body, web.Response):
            return body
        sdp, kind = body.get("sdp"), body.get("type")
        if kind != "offer" or not isinstance(sdp, str) or not 0 < len(sdp) <= MAX_SDP_CHARS:
            return error_response(
                400, 'The request must be {"sdp": <an SDP offer>, "type": "offer"}.'
            )
        async with self._lock:  # one conversation: a new offer replaces the current one
            if self.session is not None:
                await self.session.aclose()
            session = self.session = DirectSession(self)
            try:
                answer = await session.answer(sdp, kind)
            except OfferError as e:
                await session.aclose()
                self.session = None
                return error_response(400, f"The browser's WebRTC offer was not usable: {e}.")
        return web.json_response(
            {**answer, "identity": USER_IDENTITY, "agent_identity": AGENT_IDENTITY},
            headers={"Cache-Control": "no-store"},
        )

    async def aclose(self) -> None:
        async with self._lock:
            if self.session is not None:
                await self.session.aclose()
                self.session = None


def create_direct_web_app(
    agent: DirectAgent, *, static_dir: Path, web_settings: WebSettings | None = None
) -> web.Application:
    """The page and `POST /api/direct/offer`; closing the app ends the conversation."""
    app = build_web_app(
        static_dir=static_dir,
        web_settings=web_settings or WebSettings(),
        mode="direct",
        api=[web.post("/api/direct/offer", guarded(agent.handle_offer))],
    )

    async def close_agent(_app: web.Application) -> None:
        await agent.aclose()

    app.on_cleanup.append(close_agent)
    return app
