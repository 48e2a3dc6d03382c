"""Captured audio as 20 ms frames of 16 kHz mono int16, with the time each one was captured.

A capture back-end hands its device blocks (any rate, any channel count) to a
`FrameAssembler` on the audio thread, and the frames it returns to a `FrameQueue`, which
the event loop iterates.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass

import numpy as np

from agent.audio.frames import FrameRechunker
from agent.drop_oldest import DropOldestQueue
from agent.engines import FRAME_SAMPLES, INPUT_RATE

# soxr's low-quality preset looks ~6 ms ahead when going from 48 kHz to 16 kHz (HQ: ~21 ms)
# and still keeps the whole speech band clean. That lookahead makes each frame wait for the
# next device block, so resampled capture uses short blocks (capture.block_ms).
RESAMPLE_QUALITY = "LQ"


def now_ms() -> float:
    return time.monotonic() * 1000.0


@dataclass(frozen=True)
class CapturedFrame:
    pcm: np.ndarray  # FRAME_SAMPLES int16, mono, INPUT_RATE
    # Monotonic ms at which the device callback holding this frame's newest sample was
    # entered: where the bridge's own latency starts.
    t_ms: float


class FrameAssembler:
    """Device blocks -> 20 ms frames: mix down to mono, resample with soxr, cut exactly.

    Not thread-safe: one audio thread pushes. Each frame is stamped with the arrival time
    of the block that held its newest sample (soxr keeps output sample j aligned with input
    sample j * in_rate / out_rate, so the origin of every output sample is known): from
    there on, any wait is the bridge's doing. Waiting for the rest of a frame is not: no
    20 ms frame can leave before its last sample exists.
    """

    def __init__(self, in_rate: int, in_channels: int) -> None:
        if in_rate <= 0 or in_channels <= 0:
            raise ValueError(f"bad device format: {in_rate} Hz, {in_channels} channels")
        self.in_rate = in_rate
        self.in_channels = in_channels
        self._resampler = None
        if in_rate != INPUT_RATE:
            import soxr

            self._resampler = soxr.ResampleStream(
                in_rate, INPUT_RATE, 1, dtype="float32", quality=RESAMPLE_QUALITY
            )
        self._rechunk = FrameRechunker()
        self._in_total = 0  # input samples (per channel) pushed so far
        self._out_total = 0  # output samples emitted in whole frames so far
        self._blocks: collections.deque[tuple[int, float]] = collections.deque()  # (start, t_ms)

    def push(self, block: np.ndarray, t_ms: float) -> list[CapturedFrame]:
        """One device block, shape (n,) or (n, channels), int16 or float in [-1, 1]."""
        mono = _to_mono_float(block, self.in_channels)
        if mono.size == 0:
            return []
        self._blocks.append((self._in_total, t_ms))
        self._in_total += mono.size
        if self._resampler is not None:
            mono = self._resampler.resample_chunk(mono)
        pcm = np.clip(np.rint(mono * 32768.0), -32768, 32767).astype(np.int16)
        frames = []
        for chunk in self._rechunk.push(pcm):
            frames.append(CapturedFrame(chunk.copy(), self._newest_origin()))
            self._out_total += FRAME_SAMPLES
        return frames

    def _newest_origin(self) -> float:
        """Arrival time of the block holding the input sample of the frame's last output."""
        last_input = (self._out_total + FRAME_SAMPLES - 1) * self.in_rate // INPUT_RATE
        while len(self._blocks) > 1 and self._blocks[1][0] <= last_input:
            self._blocks.popleft()
        return self._blocks[0][1]


def _to_mono_float(block: np.ndarray, channels: int) -> np.ndarray:
    data = np.asarray(block)
    if data.dtype == np.int16:
        data = data.astype(np.float32) / 32768.0
    else:
        data = data.astype(np.float32, copy=False)
    if data.ndim == 1:
        data = data.reshape(-1, channels) if channels > 1 else data
    if data.ndim == 2:
        if data.shape[1] != channels:
            raise ValueError(f"expected {channels} channels, got a block of shape {data.shape}")
        data = data.mean(axis=1, dtype=np.float32) if channels > 1 else data[:, 0]
    return np.ascontiguousarray(data)


class FrameQueue(DropOldestQueue[CapturedFrame]):
    """Frames from an audio thread to the event loop; iterating yields them in order.

    Bounded: when the consumer falls behind (a stalled loop, a burst from the device after
    a hiccup) the oldest frames are dropped, so the delay never grows past `max_frames`.
    `close(error)` ends the iteration with `error` (the device went away, the helper process
    died).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, max_frames: int = 5) -> None:
        super().__init__(max_frames)
        self._loop = loop

    def put_threadsafe(self, frames: list[CapturedFrame]) -> None:
        """From the audio thread: never blocks."""
        if frames:
            self._loop.call_soon_threadsafe(self.put, frames)

    def fail_threadsafe(self, error: BaseException) -> None:
        self._loop.call_soon_threadsafe(self.close, error)
