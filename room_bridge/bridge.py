"""The bridge: captured audio published into a LiveKit room, kept there across disconnects.

Tracks: "meeting-audio" (the computer's output) and, with `--mic`, "user-mic". Both are
published with the MICROPHONE source: voxroom's join tokens grant only that source
(agent/transports/tokens.py), and the copilot tells the meeting apart from the user by track name;
it listens to the meeting of a bridge whose token names its candidate (create_bridge_token).

Connection: `rtc.Room` resumes by itself after transient failures ("reconnecting" /
"reconnected"). After a full disconnect (the server restarted, the participant was removed,
the network was gone too long) the bridge joins again with a fresh token, backing off from
0.5 s to 10 s, and publishes its tracks again; capture never stops meanwhile (frames
captured while not connected are dropped, not queued, so nothing arrives late).
"""

from __future__ import annotations

import array
import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.engines import FRAME_SAMPLES, INPUT_RATE
from agent.protocol import BRIDGE_MIC_TRACK, MEETING_TRACK
from room_bridge.capture import LoopbackCapture
from room_bridge.echo_gate import EchoGate
from room_bridge.frames import now_ms
from room_bridge.levels import LevelMeter

if TYPE_CHECKING:
    from livekit import rtc

    from room_bridge.agent_player import AgentPlayer

log = logging.getLogger(__name__)

# The AudioSource's own queue, and the most queued audio a frame may find: a frame that
# would wait longer is dropped, so a stall never turns into lasting delay.
SOURCE_QUEUE_MS = 100
MAX_QUEUED_S = 0.06


class BridgeError(RuntimeError):
    """The bridge cannot go on (another participant took its identity)."""


def backoff_s(attempt: int) -> float:
    """Wait before join attempt `attempt` (0 = the first retry): 0.5, 1, 2, 4, 8, 10, 10..."""
    return min(10.0, 0.5 * 2**attempt)


@dataclass
class TrackStats:
    published: int = 0
    dropped: int = 0  # captured while not connected, or the source's queue was full
    # (frames the capture queue dropped because the loop lagged: LoopbackCapture.queue)
    # Per published frame: its oldest sample entering the capture callback -> capture_frame
    # returned (ms).
    latency_ms: array.array = field(default_factory=lambda: array.array("f"))
    meter: LevelMeter = field(default_factory=LevelMeter)

    def latency_summary(self, last: int | None = None) -> dict[str, float | int | None]:
        xs = np.asarray(self.latency_ms[-last:] if last else self.latency_ms, dtype=float)
        if xs.size == 0:
            return {"n": 0, "p50": None, "p95": None, "p99": None, "max": None}
        p50, p95, p99 = np.percentile(xs, [50, 95, 99])
        return {
            "n": int(xs.size),
            "p50": round(p50, 2),
            "p95": round(p95, 2),
            "p99": round(p99, 2),
            "max": round(float(xs.max()), 2),
        }


@dataclass(frozen=True)
class BridgeStatus:
    state: str  # connecting | connected | reconnecting | waiting Ns (<reason>)
    levels_dbfs: dict[str, float]  # per track, the meter's current value
    gate_muting: bool
    latency_p50_ms: float | None  # meeting track, recent frames
    published: int
    dropped: int


class RoomBridge:
    """Publishes `meeting` (and `mic`) into the room at `url`; `token_source` gives a join
    token for each (re)join. `run()` returns only on cancellation or a BridgeError."""

    def __init__(
        self,
        url: str,
        token_source: Callable[[], str],
        meeting: LoopbackCapture,
        *,
        mic: LoopbackCapture | None = None,
        gate: EchoGate | None = None,
        player: AgentPlayer | None = None,
    ) -> None:
        self.url = url
        self._token_source = token_source
        self._captures = {MEETING_TRACK: meeting}
        if mic is not None:
            self._captures[BRIDGE_MIC_TRACK] = mic
        self.gate = gate
        self._player = player
        self.stats = {name: TrackStats() for name in self._captures}
        self._sources: dict[str, rtc.AudioSource] = {}
        self._play_tasks: dict[str, asyncio.Task[None]] = {}
        self.state = "connecting"
        self.joins = 0  # successful joins, the first included
        self.room: rtc.Room | None = None

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._stay_connected(), name="bridge-connection")
            for name, capture in self._captures.items():
                tasks.create_task(self._pump(name, capture), name=f"bridge-{name}")

    # ---- the room -----------------------------------------------------------------------

    async def _stay_connected(self) -> None:
        from livekit import rtc

        attempt = 0
        while True:
            room, gone = self._new_room()
            try:
                self._set_state("connecting")
                await room.connect(
                    self.url,
                    self._token_source(),
                    rtc.RoomOptions(auto_subscribe=self._player is not None),
                )
                await self._publish(room)
            except asyncio.CancelledError:
                await self._leave(room)
                raise
            except Exception as e:
                await self._leave(room)
                delay = backoff_s(attempt)
                attempt += 1
                log.warning("joining %s failed (%s); retrying in %.1f s", self.url, e, delay)
                self._set_state(f"waiting {delay:.1f} s ({e})")
                await asyncio.sleep(delay)
                continue
            self.room = room
            self.joins += 1
            attempt = 0
            self._set_state("connected")
            log.info(
                "publishing %s into room %s as %s",
                ", ".join(self._captures),
                room.name,
                room.local_participant.identity,
            )
            try:
                reason = await gone
            finally:
                await self._leave(room)
            if reason == rtc.DisconnectReason.DUPLICATE_IDENTITY:
                raise BridgeError("another participant joined with this identity; stopping")
            delay = backoff_s(0)
            log.warning(
                "disconnected (%s); joining again in %.1f s",
                rtc.DisconnectReason.Name(reason),
                delay,
            )
            self._set_state(f"waiting {delay:.1f} s (disconnected)")
            await asyncio.sleep(delay)
            attempt = 1

    def _new_room(self) -> tuple[rtc.Room, asyncio.Future[rtc.DisconnectReason.ValueType]]:
        """A Room, and a future that gets the DisconnectReason when it is disconnected."""
        from livekit import rtc

        room = rtc.Room()
        gone: asyncio.Future[rtc.DisconnectReason.ValueType] = (
            asyncio.get_running_loop().create_future()
        )

        def disconnected(reason: rtc.DisconnectReason.ValueType) -> None:
            if not gone.done():
                gone.set_result(reason)

        room.on("disconnected", disconnected)
        room.on("reconnecting", lambda: self._set_state("reconnecting"))
        room.on("reconnected", lambda: self._set_state("connected"))
        if self._player is not None:
            room.on("track_subscribed", self._on_track_subscribed)
            room.on("track_unsubscribed", self._on_track_unsubscribed)
        return room, gone

    async def _publish(self, room: rtc.Room) -> None:
        from livekit import rtc

        for name in self._captures:
            source = rtc.AudioSource(INPUT_RATE, 1, queue_size_ms=SOURCE_QUEUE_MS)
            self._sources[name] = source  # from now on _leave closes it, published or not
            track = rtc.LocalAudioTrack.create_audio_track(name, source)
            options = rtc.TrackPublishOptions(source=rtc.TrackSource.SOURCE_MICROPHONE)
            await room.local_participant.publish_track(track, options)

    async def _leave(self, room: rtc.Room) -> None:
        """Stop publishing into `room` and disconnect from it (if still connected)."""
        sources, self._sources = self._sources, {}
        self.room = None
        for task in self._play_tasks.values():
            task.cancel()
        await asyncio.gather(*self._play_tasks.values(), return_exceptions=True)
        self._play_tasks.clear()
        try:
            await room.disconnect()
        except Exception as e:  # already gone: nothing to close
            log.debug("disconnect: %s", e)
        for source in sources.values():
            await source.aclose()

    def _set_state(self, state: str) -> None:
        self.state = state

    def _on_track_subscribed(
        self, track: rtc.Track, pub: rtc.RemoteTrackPublication, participant: rtc.RemoteParticipant
    ) -> None:
        from livekit import rtc

        if participant.kind != rtc.ParticipantKind.PARTICIPANT_KIND_AGENT:
            return
        if track.kind != rtc.TrackKind.KIND_AUDIO or self._player is None:
            return
        log.info("playing %s's track %s", participant.identity, pub.name)
        self._play_tasks[pub.sid] = asyncio.create_task(self._player.play(track))

    def _on_track_unsubscribed(self, _track: Any, pub: rtc.RemoteTrackPublication, _p: Any) -> None:
        task = self._play_tasks.pop(pub.sid, None)
        if task is not None:
            task.cancel()

    # ---- the audio ----------------------------------------------------------------------

    async def _pump(self, name: str, capture: LoopbackCapture) -> None:
        from livekit import rtc

        stats = self.stats[name]
        async for frame in capture:
            if self.gate is not None:
                frame = self.gate.apply(frame)
            stats.meter.update(frame.pcm, frame.t_ms)
            source = self._sources.get(name)
            if source is None or source.queued_duration > MAX_QUEUED_S:
                stats.dropped += 1
                continue
            audio = rtc.AudioFrame(frame.pcm.tobytes(), INPUT_RATE, 1, FRAME_SAMPLES)
            try:
                await source.capture_frame(audio)
            except Exception as e:  # the source closed under us: a disconnect is under way
                log.debug("capture_frame on %s: %s", name, e)
                stats.dropped += 1
                continue
            stats.latency_ms.append(now_ms() - frame.t_ms)
            stats.published += 1
            if stats.published == 1:
                log.info("%s: first frame published", name)

    def summary(self) -> dict[str, Any]:
        """What happened since the start, for the log line at exit."""
        tracks = {
            name: {
                "published": s.published,
                "dropped_unpublished": s.dropped,
                "dropped_late": self._captures[name].queue.dropped,
                "capture_to_publish_ms": s.latency_summary(),
            }
            for name, s in self.stats.items()
        }
        summary: dict[str, Any] = {"joins": self.joins, "tracks": tracks}
        if self.gate is not None:
            summary["echo_gate_muted_frames"] = self.gate.muted_frames
        if self._player is not None:
            summary["agent_played_ms"] = round(self._player.played_ms)
        return summary

    def status(self) -> BridgeStatus:
        t = now_ms()
        meeting = self.stats[MEETING_TRACK]
        return BridgeStatus(
            state=self.state,
            levels_dbfs={name: s.meter.value(t) for name, s in self.stats.items()},
            gate_muting=self.gate is not None and self.gate.is_muted(t),
            latency_p50_ms=meeting.latency_summary(last=250)["p50"],
            published=sum(s.published for s in self.stats.values()),
            dropped=sum(s.dropped for s in self.stats.values()),
        )
