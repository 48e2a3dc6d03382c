"""RoomBridge against a real livekit-server, fed by a test double capture (a tone in real
time): it publishes, joins again after a full disconnect, stops for a duplicate identity,
keeps retrying an unreachable server, and cancels cleanly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import numpy as np
import pytest
from livekit import api, rtc

from agent.config import LiveKitSettings
from agent.engines import FRAME_SAMPLES, INPUT_RATE
from agent.ops.livekit_server import LiveKitServer
from agent.protocol import MEETING_TRACK
from agent.transports.tokens import create_join_token
from room_bridge.bridge import BridgeError, RoomBridge
from room_bridge.frames import CapturedFrame, FrameQueue, now_ms
from tests.marks import LIVEKIT_INTEGRATION
from tests.room_listener import MeetingListener

pytestmark = LIVEKIT_INTEGRATION


class ToneCaptureDouble:
    """Test double for a LoopbackCapture: a 440 Hz tone as 20 ms frames in real time."""

    label = "tone (test double)"

    def __init__(self) -> None:
        self.queue = FrameQueue(asyncio.get_running_loop(), max_frames=5)
        self._task = asyncio.create_task(self._produce())
        self.closed = False

    async def _produce(self) -> None:
        t = np.arange(FRAME_SAMPLES) / INPUT_RATE
        start, i = time.monotonic(), 0
        while True:
            phase = 2 * np.pi * 440 * i * FRAME_SAMPLES / INPUT_RATE
            pcm = (8000 * np.sin(2 * np.pi * 440 * t + phase)).astype(np.int16)
            self.queue.put([CapturedFrame(pcm, now_ms())])
            i += 1
            await asyncio.sleep(max(0.0, start + i * 0.02 - time.monotonic()))

    def __aiter__(self):
        return self.queue.__aiter__()

    async def aclose(self) -> None:
        self.closed = True
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.queue.close()


class Listener(MeetingListener):
    """Counts loud frames of the meeting audio per subscription."""

    def __init__(self) -> None:
        super().__init__()
        self.loud_frames: list[int] = []  # one counter per subscription of the track

    def _subscribed(self, subscription: int) -> None:
        self.loud_frames.append(0)

    def _heard(self, subscription: int, pcm: np.ndarray) -> None:
        if np.abs(pcm).max() > 4000:
            self.loud_frames[subscription] += 1

    async def wait_for_audio(self, subscription: int, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if len(self.loud_frames) > subscription and self.loud_frames[subscription] > 10:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no audio on subscription {subscription}: {self.loud_frames}")


async def eventually(condition: Callable[[], bool], timeout_s: float) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"not true within {timeout_s} s")


def bridge_for(server: LiveKitServer, room: str, capture: ToneCaptureDouble) -> RoomBridge:
    def token() -> str:
        return create_join_token(server.livekit_settings(), room, "bridge", dispatch_agent=False)

    return RoomBridge(server.url, token, capture)


async def test_rejoins_after_being_removed_from_the_room(livekit_server: LiveKitServer):
    room = "bridge-rejoin"
    listener = Listener()
    await listener.join(livekit_server, room)
    capture = ToneCaptureDouble()
    bridge = bridge_for(livekit_server, room, capture)
    task = asyncio.create_task(bridge.run())
    try:
        await listener.wait_for_audio(0)
        assert bridge.state == "connected" and bridge.joins == 1
        stats = bridge.stats[MEETING_TRACK]
        published_first, dropped_first = stats.published, stats.dropped
        async with api.LiveKitAPI(
            livekit_server.http_url, livekit_server.api_key, livekit_server.api_secret
        ) as lk:
            await lk.room.remove_participant(
                api.RoomParticipantIdentity(room=room, identity="bridge")
            )
        await listener.wait_for_audio(1)  # published again, on a new subscription
        assert bridge.joins == 2 and bridge.state == "connected"
        # The tone kept flowing into the same track's counters: published again after the
        # rejoin, and the frames captured during the 0.5 s wait dropped, not queued.
        assert stats.published > published_first
        assert stats.dropped > dropped_first
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await capture.aclose()
        await listener.leave()
    assert bridge.room is None  # left the room on cancellation


async def test_stops_when_another_participant_takes_its_identity(livekit_server: LiveKitServer):
    room = "bridge-duplicate"
    capture = ToneCaptureDouble()
    bridge = bridge_for(livekit_server, room, capture)
    task = asyncio.create_task(bridge.run())
    try:
        await eventually(lambda: bridge.joins == 1, 15)
        impostor = rtc.Room()
        await impostor.connect(
            livekit_server.url,
            create_join_token(
                livekit_server.livekit_settings(), room, "bridge", dispatch_agent=False
            ),
        )
        with pytest.raises(ExceptionGroup) as info:
            await asyncio.wait_for(task, 10)
        assert info.group_contains(BridgeError)
        await impostor.disconnect()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await capture.aclose()


async def test_keeps_retrying_an_unreachable_server_and_cancels_cleanly():
    capture = ToneCaptureDouble()
    tokens = 0

    def token() -> str:
        nonlocal tokens
        tokens += 1
        return create_join_token(LiveKitSettings(), "r", "bridge", dispatch_agent=False)

    bridge = RoomBridge("ws://127.0.0.1:9", token, capture)  # discard port: nothing listens
    task = asyncio.create_task(bridge.run())
    try:
        await eventually(lambda: tokens >= 3, 20)  # a fresh token per attempt
        assert bridge.state.startswith(("waiting", "connecting"))
        assert bridge.joins == 0 and bridge.stats[MEETING_TRACK].dropped > 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await capture.aclose()
    assert task.cancelled()
