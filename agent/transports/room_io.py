"""Room input and output: what a voice job reads from its LiveKit room and writes into it, for
the voice agent (agent.transports.room_session), the copilot (agent.copilot.room) and direct
mode (agent.transports.direct, which carries the same room protocol over a data channel).

In: the dispatch's and the room's metadata, its voxroom keys checked (`read_metadata`), and
the mode they ask for (`requested_mode`); a participant's audio into an engine, each frame
repaired by agent.audio.frames (`push_frames`), from a track (`track_audio`: the copilot's
meeting audio) or from the user's microphone, or a phone caller's one track, followed across
republishes (`listen_to_participant`).
Out: the agent's voice through `LiveKitAudioSink` on an AudioSource, and its state and both
sides' transcripts through `RoomPublisher` (the `lk.agent.state` attribute, `lk.transcription`
text streams, each turn's latencies on `voxroom.metrics`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.engines import INPUT_RATE
from agent.events import (
    AudioStart,
    StateChanged,
    Transcript,
    TtsChunk,
    Turn,
    TurnRetracted,
    VoiceEvent,
)
from agent.protocol import (
    ATTR_AGENT_STATE,
    DOCUMENT_KEYS,
    KEY_CANDIDATE,
    KEY_MODE,
    MODES,
    TOPIC_METRICS,
    TOPIC_TRANSCRIPTION,
    transcription_attributes,
    turn_metrics_message,
)

if TYPE_CHECKING:
    from livekit import rtc

    from agent.audio.frames import FrameGuard

log = logging.getLogger(__name__)

OUTPUT_RATE = 48_000
SOURCE_QUEUE_MS = 200  # the agent's AudioSource: room for three 60 ms frames
# How long an attribute update waits for the server's answer: one signalling round trip.
ATTRIBUTES_ANSWER_S = 1.0


async def set_attributes(participant: rtc.LocalParticipant, attributes: dict[str, str]) -> None:
    """`participant.set_attributes`, waiting at most ATTRIBUTES_ANSWER_S for the server's answer.

    The Rust SDK under livekit 1.1.21 sends the update, then starts waiting for the answer: an
    answer that arrives in between is dropped, and the call sits out its 5 s timeout and raises,
    though the server applied the update and the room saw it. So no answer in time is taken for
    an update sent; a refusal (the server's answer) still raises."""
    call = asyncio.ensure_future(participant.set_attributes(attributes))
    try:
        answered, _ = await asyncio.wait({call}, timeout=ATTRIBUTES_ANSWER_S)
    finally:
        if not call.done():
            call.cancel()  # the update went out; only the wait for its answer ends
    if answered:
        call.result()
    else:
        log.debug("no answer to the attributes %s: taken as set", sorted(attributes))


def parse_metadata(text: str | None) -> dict[str, Any]:
    """A metadata string as a JSON object; anything else (empty, not JSON, not an object) is
    no metadata."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def read_metadata(text: str | None, where: str, *, warn: bool = True) -> dict[str, Any]:
    """The dispatch's or the room's metadata with its voxroom keys checked: malformed JSON, an
    unknown mode or a key of the wrong type is dropped, with a warning naming it (`warn`)."""

    def problem(message: str, *args: object) -> None:
        if warn:
            log.warning("%s metadata: " + message, where, *args)

    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        problem("not a JSON object, ignored (the voice assistant runs): %.80r", text)
        return {}
    mode = value.get(KEY_MODE)
    if mode is not None and mode not in MODES:
        problem(
            "unknown %s %r (known: %s), ignored: the voice assistant runs",
            KEY_MODE,
            mode,
            ", ".join(MODES),
        )
        del value[KEY_MODE]
    for key in (KEY_CANDIDATE, *DOCUMENT_KEYS):
        if key in value and not (isinstance(value[key], str) and value[key]):
            problem("%s must be a non-empty string, ignored: %.80r", key, value[key])
            del value[key]
    return value


def requested_mode(job_metadata: str, room: rtc.Room) -> str:
    """ "copilot" when the dispatch, the room or a participant (the bridge) asks for it, else
    "voice". Bad dispatch or room metadata is logged and ignored (see `read_metadata`)."""
    sources = [
        read_metadata(job_metadata, "dispatch"),
        read_metadata(room.metadata, "room"),
        *(parse_metadata(p.metadata) for p in room.remote_participants.values()),
    ]
    if any(s.get(KEY_MODE) == "copilot" for s in sources):
        return "copilot"
    return "voice"


def track_audio(track: rtc.Track) -> rtc.AudioStream:
    """`track`'s audio as the engines take it (16 kHz mono, 20 ms frames), its frame events
    routed to it alone (agent.transports.ffi_router)."""
    from livekit import rtc

    from agent.transports.ffi_router import bind_audio_stream

    stream = rtc.AudioStream(track, sample_rate=INPUT_RATE, num_channels=1, frame_size_ms=20)
    bind_audio_stream(stream)
    return stream


def participant_audio(
    participant: rtc.RemoteParticipant, source: rtc.TrackSource.ValueType
) -> rtc.AudioStream:
    """The audio of `participant`'s track from `source`, as `track_audio` gives it; the stream
    waits for such a track to be subscribed."""
    from livekit import rtc

    from agent.transports.ffi_router import bind_audio_stream

    stream = rtc.AudioStream.from_participant(
        participant=participant,
        track_source=source,
        sample_rate=INPUT_RATE,
        num_channels=1,
        frame_size_ms=20,
    )
    bind_audio_stream(stream)
    return stream


async def push_frames(
    stream: rtc.AudioStream,
    guard: FrameGuard,
    push: Callable[[np.ndarray], None],
) -> None:
    """Every frame of `stream` into `push` (an engine's `push_frame`) until the stream ends.
    Any rate, channel count or frame size, NaN or clipping is fixed and counted by `guard`
    (agent.audio.frames: one guard per participant's audio), so the engine gets 20 ms frames at
    16 kHz. The stream is closed however this ends: its end, an error, or cancellation (the
    track unsubscribed, the participant gone)."""
    try:
        async for event in stream:
            frame = event.frame
            for pcm in guard.push(frame.data, frame.sample_rate, frame.num_channels):
                push(pcm)
    finally:
        await stream.aclose()


async def listen_to_participant(
    participant: rtc.RemoteParticipant,
    push: Callable[[np.ndarray], None],
    publisher: RoomPublisher,
) -> None:
    """Feed the user's microphone to `push`; follow the track across unpublish/republish. The
    publisher learns the track's id (its transcripts name it)."""
    from livekit import rtc

    from agent.audio.frames import FrameGuard

    guard = FrameGuard()
    while True:
        source = heard_source(participant)
        stream = participant_audio(participant, source)
        for pub in participant.track_publications.values():
            if pub.kind == rtc.TrackKind.KIND_AUDIO and pub.source == source:
                publisher.user_track_id = pub.sid
        await push_frames(stream, guard, push)
        await asyncio.sleep(0.1)  # the track ended; wait for it to come back


def heard_source(participant: rtc.RemoteParticipant) -> rtc.TrackSource.ValueType:
    """The source of the user's track the agent listens to: a browser's (or any client's)
    microphone; for a phone caller, its one audio track whatever its source: livekit-sip
    publishes the caller's audio with none set (unknown), named after the participant."""
    from livekit import rtc

    from agent.transports.phone_call import is_sip

    if not is_sip(participant):
        return rtc.TrackSource.SOURCE_MICROPHONE
    published = [
        p.source
        for p in participant.track_publications.values()
        if p.kind == rtc.TrackKind.KIND_AUDIO
    ]
    return published[0] if published else rtc.TrackSource.SOURCE_UNKNOWN


class LiveKitAudioSink:
    """An `AudioSink` on a LiveKit AudioSource: clearing it silences the listener at once (what
    is left is the network), however much is queued. Frames go through
    `agent.transports.ffi_router`, so a worker's sessions do not wake each other up with every
    frame."""

    # Each write is a round trip through the native runtime (a request, its answer, a wake-up):
    # 60 ms frames make a third of the 20 ms ones. The source queues up to SOURCE_QUEUE_MS, so
    # the next frame is written well before the queue runs dry, even on a busy event loop.
    frame_ms = 60

    def __init__(self, source: rtc.AudioSource) -> None:
        self._source = source
        self.sample_rate = source.sample_rate
        self._queued_s = 0.0  # at `_since`, drained in real time by the source
        self._since = time.monotonic()

    async def write(self, pcm: np.ndarray) -> None:
        from livekit import rtc

        from agent.transports.ffi_router import capture_frame

        frame = rtc.AudioFrame(
            data=pcm.tobytes(),
            sample_rate=self.sample_rate,
            num_channels=1,
            samples_per_channel=len(pcm),
        )
        await capture_frame(self._source, frame)
        self._queued_s = self._queued() + len(pcm) / self.sample_rate
        self._since = time.monotonic()

    def clear(self) -> int:
        dropped = self.queued_samples()
        self._source.clear_queue()
        self._queued_s = 0.0
        return dropped

    def queued_samples(self) -> int:
        return int(self._queued() * self.sample_rate)

    def _queued(self) -> float:
        return max(0.0, self._queued_s - (time.monotonic() - self._since))


class RoomPublisher:
    """Publishes the engine's events to the room off the audio path (the engine's callbacks
    only enqueue): the transcripts and each turn's latencies in order, the state at once."""

    def __init__(self, room: rtc.Room, user_identity: str) -> None:
        self._room = room
        self._user = user_identity
        self._queue: asyncio.Queue[VoiceEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.user_track_id = ""
        self.agent_track_id = ""
        self._user_segment = 0
        self._agent_chunks: dict[int, list[str]] = {}
        self._audible: int | None = None  # reply whose voice is being heard
        self._state_call: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="room-publisher")

    def on_event(self, event: VoiceEvent) -> None:
        if isinstance(event, StateChanged):
            self._publish_state(event.state.name.lower())
        else:
            self._queue.put_nowait(event)

    def _publish_state(self, state: str) -> None:
        """The state goes out at once, not behind the transcripts, and the newest wins: a newer
        state does not wait on the answer to the one before (as LiveKit Agents does)."""
        if self._state_call is not None:
            self._state_call.cancel()
        self._state_call = asyncio.create_task(self._set_state(state), name="room-state")

    async def _set_state(self, state: str) -> None:
        try:
            await set_attributes(self._room.local_participant, {ATTR_AGENT_STATE: state})
        except Exception as e:  # a failed publish must not stop the conversation
            log.warning("publishing the state %s failed: %s", state, e)

    async def aclose(self) -> None:
        await self._queue.join()
        if self._state_call is not None:
            await asyncio.gather(self._state_call, return_exceptions=True)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._publish(event)
            except Exception as e:  # a failed publish must not stop the conversation
                log.warning("publishing %s failed: %s", event.kind, e)
            finally:
                self._queue.task_done()

    async def _publish(self, event: VoiceEvent) -> None:
        match event:
            case Transcript(text=text, final=final):
                seg = f"user-{self._user_segment}"
                if final:
                    self._user_segment += 1
                await self._send(text, seg, final, self.user_track_id, self._user)
            case TurnRetracted() if self._user_segment > 0:
                # The user went on: the merged turn's transcript replaces the retracted one's.
                self._user_segment -= 1
            case TtsChunk(text=text, reply_id=rid):
                self._agent_chunks.setdefault(rid, []).append(text)
                if rid == self._audible:
                    await self._send_agent(rid, final=False)
            case AudioStart(reply_id=rid):
                self._audible = rid
                await self._send_agent(rid, final=False)
            case Turn():
                if self._audible is not None:
                    rid, self._audible = self._audible, None
                    text = event.heard_text if event.interrupted else event.agent_text
                    self._agent_chunks[rid] = [text]
                    await self._send_agent(rid, final=True)
                    self._agent_chunks.clear()
                await self._send_metrics(event)

    async def _send_metrics(self, turn: Turn) -> None:
        """The finished turn's latencies, to the user it served only (the page's readout)."""
        await self._room.local_participant.send_text(
            turn_metrics_message(turn.interrupted, turn.latency_ms),
            topic=TOPIC_METRICS,
            destination_identities=[self._user],
        )

    async def _send_agent(self, rid: int, *, final: bool) -> None:
        text = " ".join(self._agent_chunks.get(rid, []))
        await self._send(
            text, f"agent-{rid}", final, self.agent_track_id, self._room.local_participant.identity
        )

    async def _send(self, text: str, segment: str, final: bool, track_id: str, sender: str) -> None:
        writer = await self._room.local_participant.stream_text(
            topic=TOPIC_TRANSCRIPTION,
            attributes=transcription_attributes(segment, final=final, track_id=track_id),
            sender_identity=sender,
        )
        await writer.write(text)
        await writer.aclose()
