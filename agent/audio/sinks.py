"""Where the agent's voice goes: a LiveKit track, or a WAV timeline in `voxroom simulate`.

A sink plays audio in real time. `write` returns once the frame is queued; the sink keeps at
most a few tens of milliseconds queued, so `clear` silences the listener almost at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np


class AudioSink(Protocol):
    sample_rate: int
    frame_ms: int
    """Length of the frames the playout writes: short where each write is cheap, longer where
    each one costs a round trip (a LiveKit source)."""

    async def write(self, pcm: np.ndarray) -> None:
        """Queue one frame (int16 mono); waits while the queue is full (real-time pacing)."""
        ...

    def clear(self) -> int:
        """Drop everything queued and not yet played; returns the number of samples dropped."""
        ...

    def queued_samples(self) -> int: ...


class TimelineSink:
    """Plays onto an in-memory timeline, paced by the clock, as a sound card would: each frame
    starts where the previous one ends, or now if the output has been idle."""

    frame_ms = 20

    def __init__(
        self,
        sample_rate: int,
        t0: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_queue_s: float = 0.04,
    ) -> None:
        self.sample_rate = sample_rate
        self._t0 = t0
        self._clock = clock
        self._max_queue = int(max_queue_s * sample_rate)
        self._end = 0  # timeline sample where queued audio ends
        self._pieces: list[tuple[int, np.ndarray]] = []

    def _now_sample(self) -> int:
        return int((self._clock() - self._t0) * self.sample_rate)

    async def write(self, pcm: np.ndarray) -> None:
        # Pacing, not waiting for a condition: the queue drains with the clock.
        while (wait := self.queued_samples() + len(pcm) - self._max_queue) > 0:  # noqa: ASYNC110
            await asyncio.sleep(wait / self.sample_rate)
        start = max(self._end, self._now_sample())
        self._pieces.append((start, pcm.copy()))
        self._end = start + len(pcm)

    def clear(self) -> int:
        now = self._now_sample()
        dropped = max(0, self._end - now)
        kept: list[tuple[int, np.ndarray]] = []
        for start, pcm in self._pieces:
            if start >= now:
                continue
            kept.append((start, pcm[: max(0, now - start)]))
        self._pieces = kept
        self._end = min(self._end, now)
        return dropped

    def queued_samples(self) -> int:
        return max(0, self._end - self._now_sample())

    def forget_played(self) -> None:
        """Drop the audio already played (render() then starts with silence there): a long
        run keeps only what is still queued, as a sound card does."""
        now = self._now_sample()
        self._pieces = [(start, pcm) for start, pcm in self._pieces if start + len(pcm) > now]

    def render(self, n_samples: int) -> np.ndarray:
        """The timeline from t0, `n_samples` long, silence where nothing played."""
        out = np.zeros(n_samples, dtype=np.int16)
        for start, pcm in self._pieces:
            if start >= n_samples:
                continue
            seg = pcm[: n_samples - start]
            out[start : start + len(seg)] = seg
        return out
