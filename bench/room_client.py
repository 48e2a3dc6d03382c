"""A user in a LiveKit room, as a program: publishes speech from a microphone track in real
time, types messages (`lk.chat`), and records the agent's audio as it arrives, its
`lk.agent.state` attribute, the `lk.transcription` text streams and the `lk.chat` messages sent
to it, each with the monotonic time it was seen. `voxroom bench`
talks to the agent through it, and so do the end-to-end tests. `CopilotClient` is the
copilot's candidate (or anyone else in its room): documents out, answers and receipts in."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from livekit import rtc

from agent.protocol import (
    ATTR_AGENT_STATE,
    ATTR_ANSWER_STATUS,
    ATTR_CONTEXT_NAME,
    ATTR_SEGMENT_ID,
    ATTR_TRANSCRIPTION_FINAL,
    TOPIC_CHAT,
    TOPIC_CONTEXT,
    TOPIC_CONTEXT_STATUS,
    TOPIC_COPILOT,
    TOPIC_TRANSCRIPTION,
)
from agent.timeouts import finish_within
from agent.transports.ffi_router import bind_audio_stream
from agent.transports.room_io import LiveKitAudioSink

RATE = 16_000
FRAME = RATE // 50  # 20 ms
MIC_LEAD_S = 0.060
"""How far ahead of its play-out the microphone's audio is written, as a sound card's buffer
holds some (within the source's `queue_size_ms`). Written just in time, a wake-up of the
bench's event loop a few milliseconds late left the source empty for a 10 ms tick, and the
track without audio for that moment; `RoomUser.underruns` counts what is left of that."""
UNDERRUN_S = 0.010  # the source plays 10 ms at a time: a frame this late found it empty
LEAVE_TIMEOUT_S = 10.0
"""`close()` waits this long for each of its steps: a load test's step ends with many users
leaving at once, and one whose disconnect never finished hung a whole run."""

log = logging.getLogger(__name__)


@dataclass
class Transcription:
    t: float
    sender: str
    text: str
    attributes: dict[str, str]

    @property
    def final(self) -> bool:
        return self.attributes.get(ATTR_TRANSCRIPTION_FINAL) == "true"


async def _read_transcription(
    reader: rtc.TextStreamReader, sender: str, into: list[Transcription]
) -> None:
    text = await reader.read_all()
    into.append(Transcription(time.monotonic(), sender, text, dict(reader.info.attributes or {})))


@dataclass
class RoomUser:
    url: str
    token: str
    room: rtc.Room = field(default_factory=rtc.Room)
    audio: list[tuple[float, np.ndarray]] = field(default_factory=list)
    states: list[tuple[float, str]] = field(default_factory=list)
    transcripts: list[Transcription] = field(default_factory=list)
    chat: list[Transcription] = field(default_factory=list)  # `lk.chat` messages to this user
    agent_identity: str | None = None
    underruns: int = 0
    """Frames written after the microphone's source had run dry (see MIC_LEAD_S)."""
    _due: float = field(default=0.0, init=False, repr=False)  # when the next frame plays out
    _speaking: bool = field(default=False, init=False, repr=False)
    track_name: str = "mic"  # the copilot listens to a bridge's "meeting-audio" instead
    # A browser's microphone; livekit-sip publishes a caller's audio with no source set
    # (bench/sip_caller.py).
    track_source: rtc.TrackSource.ValueType = rtc.TrackSource.SOURCE_MICROPHONE
    # What the line does to the voice on its way (None: nothing), e.g. a phone call's band.
    line: Callable[[np.ndarray], np.ndarray] | None = None

    async def connect(self) -> None:
        # Before connecting: an agent already in the room is subscribed to during connect().
        self._tasks: set[asyncio.Task[None]] = set()
        self.room.on("track_subscribed", self._on_track)
        self.room.on("participant_attributes_changed", self._on_attributes)
        self.room.on("participant_connected", self._on_participant)
        self.room.register_text_stream_handler(TOPIC_TRANSCRIPTION, self._on_text)
        self.room.register_text_stream_handler(TOPIC_CHAT, self._on_chat)
        await self.room.connect(self.url, self.token)
        self._source = rtc.AudioSource(RATE, 1, queue_size_ms=100)
        self._mic = LiveKitAudioSink(self._source)  # many users in one process: routed frames
        track = rtc.LocalAudioTrack.create_audio_track(self.track_name, self._source)
        opts = rtc.TrackPublishOptions(source=self.track_source)
        await self.room.local_participant.publish_track(track, opts)

    async def close(self) -> None:
        await _leave(self.room, self._tasks)

    # ---- speaking -------------------------------------------------------------------------

    async def speak(self, pcm: np.ndarray, *, marks: Sequence[int] = ()) -> list[float | None]:
        """Send `pcm` (16 kHz int16) in real time; returns, for each sample index in `marks`,
        when that sample left the microphone (monotonic seconds; None past the end)."""
        if self._speaking:  # two at once would interleave their frames on the one track
            raise RuntimeError("this user is already speaking: speak() calls must not overlap")
        self._speaking = True
        try:
            if self.line is not None:  # the same length: `marks` index the voice as said
                carried = self.line(pcm)[: len(pcm)]
                pcm = np.pad(carried, (0, len(pcm) - len(carried)))
            return await self._speak(pcm, marks)
        finally:
            self._speaking = False

    async def _speak(self, pcm: np.ndarray, marks: Sequence[int]) -> list[float | None]:
        sent: list[float | None] = [None] * len(marks)
        self._due = max(self._due, time.monotonic())
        n = -(-len(pcm) // FRAME)
        for i in range(n):
            chunk = np.zeros(FRAME, np.int16)
            part = pcm[i * FRAME : (i + 1) * FRAME]
            chunk[: len(part)] = part
            now = time.monotonic()
            if now > self._due + UNDERRUN_S:
                self.underruns += 1
            self._due = max(self._due, now)
            await self._mic.write(chunk)
            for k, mark in enumerate(marks):
                if i * FRAME <= mark < (i + 1) * FRAME:
                    sent[k] = self._due + (mark - i * FRAME) / RATE
            self._due += FRAME / RATE
            await asyncio.sleep(max(0.0, self._due - MIC_LEAD_S - time.monotonic()))
        return sent

    async def silence(self, seconds: float) -> None:
        await self.speak(np.zeros(int(seconds * RATE), np.int16))

    async def type(self, text: str) -> float:
        """Send `text` as a typed message (`lk.chat`) to the agent (to the room while no agent
        is known); returns when it was sent."""
        to = [self.agent_identity] if self.agent_identity else None
        await self.room.local_participant.send_text(
            text, topic=TOPIC_CHAT, destination_identities=to
        )
        return time.monotonic()

    # ---- listening ------------------------------------------------------------------------

    def _on_participant(self, p: rtc.RemoteParticipant) -> None:
        if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
            self.agent_identity = p.identity
            if state := p.attributes.get(ATTR_AGENT_STATE):
                self.states.append((time.monotonic(), state))

    def _on_attributes(self, changed: dict[str, str], p: rtc.Participant) -> None:
        if ATTR_AGENT_STATE in changed:
            self.states.append((time.monotonic(), changed[ATTR_AGENT_STATE]))

    def _on_track(
        self, track: rtc.Track, _pub: rtc.RemoteTrackPublication, p: rtc.RemoteParticipant
    ) -> None:
        if track.kind == rtc.TrackKind.KIND_AUDIO:
            task = asyncio.create_task(self._record(track))
            self._tasks.add(task)

    async def _record(self, track: rtc.Track) -> None:
        stream = rtc.AudioStream(track, sample_rate=RATE, num_channels=1)
        bind_audio_stream(stream)
        async for ev in stream:
            self.audio.append((time.monotonic(), np.frombuffer(ev.frame.data, np.int16).copy()))

    def _on_text(self, reader: rtc.TextStreamReader, sender: str) -> None:
        task = asyncio.create_task(_read_transcription(reader, sender, self.transcripts))
        self._tasks.add(task)

    def _on_chat(self, reader: rtc.TextStreamReader, sender: str) -> None:
        task = asyncio.create_task(_read_transcription(reader, sender, self.chat))
        self._tasks.add(task)

    # ---- reading what happened ------------------------------------------------------------

    def first_audio_after(self, t: float, *, threshold: int = 300) -> float | None:
        """Arrival time of the first agent frame after `t` with a sample above `threshold`."""
        for at, pcm in self.audio:
            if at > t and pcm.size and int(np.abs(pcm.astype(np.int32)).max()) > threshold:
                return at
        return None

    def agent_audio(self, since: float) -> np.ndarray:
        chunks = [pcm for at, pcm in self.audio if at > since]
        return np.concatenate(chunks) if chunks else np.zeros(0, np.int16)

    def final_texts(self, sender: str) -> list[str]:
        """`sender`'s final transcripts, one per segment in the order the segments began: a
        later stream for a segment replaces its text, as LiveKit's clients show it (a turn
        the speaker went on with is published again, whole, under the same segment)."""
        by_segment: dict[str, str] = {}
        for i, t in enumerate(self.transcripts):
            if t.final and t.sender == sender:
                by_segment[t.attributes.get(ATTR_SEGMENT_ID) or f"stream-{i}"] = t.text
        return list(by_segment.values())

    async def wait_for_finals(self, sender: str, count: int, *, timeout_s: float) -> list[str]:
        """`sender`'s final transcripts once there are `count` of them (the last text stream
        of a turn can arrive after the agent's state has changed)."""
        deadline = time.monotonic() + timeout_s
        while len(finals := self.final_texts(sender)) < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{len(finals)} of {count} final transcripts from {sender!r}")
            await asyncio.sleep(0.02)
        return finals

    async def wait_for_state(self, state: str, *, after: float, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for t, s in self.states:
                if t > after and s == state:
                    return t
            await asyncio.sleep(0.02)
        raise TimeoutError(f"agent never reached {state!r}; states seen: {self.states}")


async def _leave(room: rtc.Room, readers: set[asyncio.Task[None]]) -> None:
    """Disconnect, then stop the tasks reading what the room sent; each step bounded."""
    await _within(room.disconnect(), f"leaving room {room.name}")
    for task in list(readers):
        task.cancel()
    await _within(
        asyncio.gather(*readers, return_exceptions=True), f"the readers of room {room.name}"
    )


async def _within(step: Awaitable[object], what: str) -> None:
    """Await a teardown `step` for at most LEAVE_TIMEOUT_S; a step that overruns or fails is
    logged and left behind."""
    task = asyncio.ensure_future(step)
    if not await finish_within(task, LEAVE_TIMEOUT_S):
        log.warning("%s: not done after %.0f s; going on", what, LEAVE_TIMEOUT_S)
    elif not task.cancelled() and (error := task.exception()) is not None:
        log.warning("%s: %s: %s", what, type(error).__name__, error)


@dataclass
class CopilotAnswer:
    """One copilot answer as its client receives it (agent.copilot.room: a text stream per
    answer)."""

    attributes: dict[str, str]
    chunks: list[tuple[float, str]] = field(default_factory=list)  # (arrival, delta)
    done_at: float | None = None

    @property
    def text(self) -> str:
        return "".join(c for _, c in self.chunks)

    @property
    def first_words_at(self) -> float | None:
        """When the text first held a letter or digit (not just the "- " of a bullet)."""
        text = ""
        for t, chunk in self.chunks:
            text += chunk
            if any(c.isalnum() for c in text):
                return t
        return None


def kept_answers(answers: list[CopilotAnswer]) -> list[CopilotAnswer]:
    """The answers not withdrawn: one shown before its question ended, that the interviewer
    went on from, answered part of the question (the whole question's answer follows)."""
    return [a for a in answers if a.attributes.get(ATTR_ANSWER_STATUS) != "withdrawn"]


class CopilotClient:
    """Someone in a copilot room who sends documents to the agent and reads the answers,
    document receipts and transcripts (of what the agent heard) sent to them. It subscribes
    to no audio."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.room = rtc.Room()
        self.answers: list[CopilotAnswer] = []
        self.receipts: list[dict] = []
        self.transcripts: list[Transcription] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def join(self, url: str, token: str) -> None:

        self.room.register_text_stream_handler(TOPIC_COPILOT, self._on_answer)
        self.room.register_text_stream_handler(TOPIC_CONTEXT_STATUS, self._on_receipt)
        self.room.register_text_stream_handler(TOPIC_TRANSCRIPTION, self._on_transcript)
        await self.room.connect(url, token, rtc.RoomOptions(auto_subscribe=False))

    def agent(self) -> rtc.RemoteParticipant | None:
        return next(
            (
                p
                for p in self.room.remote_participants.values()
                if p.kind == rtc.ParticipantKind.PARTICIPANT_KIND_AGENT
            ),
            None,
        )

    async def send_document(self, to: str, name: str, text: str) -> None:

        await self.room.local_participant.send_text(
            text,
            topic=TOPIC_CONTEXT,
            destination_identities=[to],
            attributes={ATTR_CONTEXT_NAME: name},
        )

    async def leave(self) -> None:
        await _leave(self.room, self._tasks)

    def _on_answer(self, reader: rtc.TextStreamReader, _sender: str) -> None:
        answer = CopilotAnswer(dict(reader.info.attributes or {}))
        self.answers.append(answer)

        async def read() -> None:
            async for chunk in reader:
                answer.chunks.append((time.monotonic(), chunk))
            answer.attributes = dict(reader.info.attributes or {})  # with the closing ones
            answer.done_at = time.monotonic()

        self._spawn(read())

    def _on_transcript(self, reader: rtc.TextStreamReader, sender: str) -> None:
        self._spawn(_read_transcription(reader, sender, self.transcripts))

    def _on_receipt(self, reader: rtc.TextStreamReader, _sender: str) -> None:
        async def read() -> None:
            self.receipts.append(json.loads(await reader.read_all()))

        self._spawn(read())

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
