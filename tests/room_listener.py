"""A participant that listens to the meeting audio in a LiveKit room, for the bridge's tests."""

from __future__ import annotations

import asyncio

import numpy as np
from livekit import rtc

from agent.engines import INPUT_RATE
from agent.ops.livekit_server import LiveKitServer
from agent.protocol import MEETING_TRACK
from agent.transports.tokens import create_join_token


class MeetingListener:
    """Joins a room as "listener" and reads each subscription of the `meeting-audio` track
    (the first is 0, a track published again is the next) as 16 kHz mono int16 frames, which
    it hands to `_heard`."""

    def __init__(self) -> None:
        self.room = rtc.Room()
        self.subscriptions = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def join(self, server: LiveKitServer, room: str) -> None:
        self.room.on("track_subscribed", self._on_track)
        token = create_join_token(server.livekit_settings(), room, "listener", dispatch_agent=False)
        await self.room.connect(server.url, token)

    def _subscribed(self, subscription: int) -> None:
        """The track was subscribed to (again)."""

    def _heard(self, subscription: int, pcm: np.ndarray) -> None:
        raise NotImplementedError

    def _on_track(self, track: rtc.Track, pub: rtc.RemoteTrackPublication, _p: object) -> None:
        if pub.name == MEETING_TRACK:
            subscription = self.subscriptions
            self.subscriptions += 1
            self._subscribed(subscription)
            self._tasks.add(asyncio.create_task(self._read(track, subscription)))

    async def _read(self, track: rtc.Track, subscription: int) -> None:
        async for event in rtc.AudioStream(track, sample_rate=INPUT_RATE, num_channels=1):
            self._heard(subscription, np.frombuffer(event.frame.data, np.int16))

    async def leave(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.room.disconnect()
