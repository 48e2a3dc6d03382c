"""The one loop that takes a participant's audio into an engine (agent/transports/room_io.py,
`push_frames`): frames of any shape arrive guarded, as 20 ms at 16 kHz, and the stream is
closed however the loop ends: its end, a failing engine, or cancellation (what the voice
session and the copilot do when the track is unsubscribed or the participant leaves)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from livekit import rtc

from agent.audio.frames import FrameGuard
from agent.engines import FRAME_SAMPLES
from agent.transports.room_io import push_frames


class AudioStreamDouble:
    """TEST DOUBLE for an `rtc.AudioStream`: yields the frame events put in `events` until a
    None; says when the loop waits for the next one, and whether it was closed."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[rtc.AudioFrameEvent | None] = asyncio.Queue()
        self.waiting = asyncio.Event()
        self.closed = False

    def __aiter__(self) -> AudioStreamDouble:
        return self

    async def __anext__(self) -> rtc.AudioFrameEvent:
        self.waiting.set()
        event = await self.events.get()
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        self.closed = True


def _stereo_48k(ms: int, value: int) -> rtc.AudioFrameEvent:
    samples = 48 * ms
    pcm = np.full(samples * 2, value, dtype=np.int16)
    return rtc.AudioFrameEvent(rtc.AudioFrame(pcm.tobytes(), 48_000, 2, samples))


async def test_frames_of_any_shape_reach_the_engine_as_20_ms_at_16_khz() -> None:
    stream, pushed = AudioStreamDouble(), []
    events = [_stereo_48k(10, 1000) for _ in range(10)]  # 100 ms of 10 ms stereo at 48 kHz
    for event in events:
        stream.events.put_nowait(event)
    stream.events.put_nowait(None)
    guard = FrameGuard()
    await push_frames(stream, guard, pushed.append)  # type: ignore[arg-type]
    # What one guard makes of the same frames, all of it: nothing dropped, nothing added.
    alone = FrameGuard()
    expected = [
        f
        for e in events
        for f in alone.push(e.frame.data, e.frame.sample_rate, e.frame.num_channels)
    ]
    assert len(pushed) == len(expected) >= 3
    assert all(np.array_equal(a, b) for a, b in zip(pushed, expected, strict=True))
    assert all(f.dtype == np.int16 and f.shape == (FRAME_SAMPLES,) for f in pushed)
    assert guard.fixes["rate"] > 0 and guard.fixes["channels"] > 0
    assert stream.closed


async def test_cancelling_the_loop_closes_the_stream() -> None:
    stream, pushed = AudioStreamDouble(), []
    for _ in range(3):
        stream.events.put_nowait(_stereo_48k(20, 1000))
    task = asyncio.create_task(push_frames(stream, FrameGuard(), pushed.append))  # type: ignore[arg-type]
    while stream.events.qsize() or not stream.waiting.is_set():
        # Until every frame is taken and the loop waits for the next one.
        stream.waiting.clear()
        await stream.waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stream.closed and pushed  # what came before the cancellation reached the engine


async def test_an_engine_that_raises_still_closes_the_stream() -> None:
    stream = AudioStreamDouble()
    for _ in range(3):  # 60 ms: past the resampler's delay, a frame reaches the engine
        stream.events.put_nowait(_stereo_48k(20, 1000))
    stream.events.put_nowait(None)

    def engine_fails(_pcm: np.ndarray) -> None:
        raise RuntimeError("engine gone")

    with pytest.raises(RuntimeError, match="engine gone"):
        await push_frames(stream, FrameGuard(), engine_fails)  # type: ignore[arg-type]
    assert stream.closed
