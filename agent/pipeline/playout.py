"""Playout of the agent's replies: a small real-time writer between TTS and the audio sink.

It knows which text each sample belongs to, so after a barge-in it can tell what the listener
actually heard. Pausing clears what the sink has queued (the listener hears silence within the
sink's latency, a few tens of ms) and rewinds to the first unheard sample, so a false barge-in
resumes exactly where the listener stopped hearing. Ducking rewinds the same way and plays on
from there, quieter, so the change is heard as soon as a pause would be.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from agent.audio.sinks import AudioSink
from agent.timeouts import finish_within

log = logging.getLogger(__name__)

DUCK_GAIN = 0.2
"""The reply's volume while ducked (-14 dB): clearly giving way, still easy to follow."""
RAMP_S = 0.005  # a change of volume is ramped over this long


@dataclass
class _Chunk:
    text: str
    start: int  # first sample in the reply's own timeline
    pcm: np.ndarray
    # A phrase said while a tool works ("One moment."): heard, but not part of the answer.
    filler: bool = False


@dataclass
class ReplyAudio:
    """One reply's audio, appended chunk by chunk as TTS produces it."""

    reply_id: int
    chunks: list[_Chunk] = field(default_factory=list)
    length: int = 0
    written: int = 0  # samples handed to the sink
    heard: int = 0  # samples that reached the listener (written minus what a clear dropped)
    complete: bool = False  # no more chunks will come
    confirmed: bool = False  # may be heard (not a speculative reply still waiting)
    started: bool = False

    def append(self, text: str, pcm: np.ndarray, *, filler: bool = False) -> None:
        self.chunks.append(_Chunk(text, self.length, pcm, filler))
        self.length += len(pcm)

    def read(self, n: int) -> np.ndarray:
        """Up to n samples from the write position (may cross chunk joins)."""
        out: list[np.ndarray] = []
        pos, end = self.written, min(self.written + n, self.length)
        for c in self.chunks:
            c_end = c.start + len(c.pcm)
            if c_end <= pos or c.start >= end:
                continue
            out.append(c.pcm[max(0, pos - c.start) : end - c.start])
        return np.concatenate(out) if out else np.zeros(0, np.int16)

    def text(self) -> str:
        return " ".join(c.text for c in self.chunks if not c.filler).strip()

    def heard_text(self) -> str:
        """Text of every fully heard chunk, plus the heard share of the chunk cut in the middle
        (words in proportion to samples: Piper speaks at an even pace within a chunk)."""
        words: list[str] = []
        for c in self.chunks:
            c_words = [] if c.filler else c.text.split()
            if self.heard >= c.start + len(c.pcm):
                words += c_words
            elif self.heard > c.start:
                frac = (self.heard - c.start) / max(1, len(c.pcm))
                words += c_words[: int(frac * len(c_words))]
                break
            else:
                break
        return " ".join(words)


class Playout:
    """Writes the current reply (and fillers) to the sink in the sink's frames."""

    def __init__(
        self,
        sink: AudioSink,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_reply_started: Callable[[int, float], None] | None = None,
        on_reply_done: Callable[[int], None] | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> None:
        self.sink = sink
        self.frame = sink.sample_rate * sink.frame_ms // 1000
        self._reply: ReplyAudio | None = None
        self._filler: np.ndarray | None = None
        self._paused = False
        self._gain = 1.0  # the volume asked for (DUCK_GAIN while ducked)
        self._written_gain = 1.0  # the volume of the last sample written: ramps start there
        self._wake = asyncio.Event()
        self._on_started = on_reply_started
        self._on_done = on_reply_done
        self._on_progress = on_progress
        self._task: asyncio.Task[None] | None = None
        self._clock = clock

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="playout")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @property
    def idle(self) -> bool:
        return self._reply is None and self._filler is None and self.sink.queued_samples() == 0

    # ---- control (all synchronous: called from the turn engine's action handlers) --------

    def begin_reply(self, reply_id: int) -> ReplyAudio:
        self._reply = ReplyAudio(reply_id)
        self._gain = self._written_gain = 1.0
        return self._reply

    def reply(self, reply_id: int) -> ReplyAudio | None:
        r = self._reply
        return r if r is not None and r.reply_id == reply_id else None

    def append(self, reply_id: int, text: str, pcm: np.ndarray, *, filler: bool = False) -> None:
        r = self.reply(reply_id)
        if r is not None:
            r.append(text, pcm, filler=filler)
            self._wake.set()

    def unplayed_s(self, reply_id: int) -> float:
        """How long the reply's audio goes on before the listener hears silence (0 for a reply
        that is not current)."""
        r = self.reply(reply_id)
        if r is None:
            return 0.0
        return (r.length - r.written + self.sink.queued_samples()) / self.sink.sample_rate

    def finish(self, reply_id: int) -> None:
        r = self.reply(reply_id)
        if r is not None:
            r.complete = True
            self._wake.set()

    def confirm(self, reply_id: int) -> None:
        r = self.reply(reply_id)
        if r is not None:
            r.confirmed = True
            self._wake.set()

    def play_filler(self, pcm: np.ndarray) -> None:
        self._filler = pcm
        self._wake.set()

    def pause(self) -> None:
        """Stop the listener hearing anything, keeping the reply to resume or cancel."""
        self._paused = True
        self._rewind()

    def duck(self) -> None:
        """Play on at DUCK_GAIN from the first unheard sample."""
        self._gain = DUCK_GAIN
        self._rewind()
        self._wake.set()

    def resume(self) -> None:
        """Play on at full volume (after a pause or a duck)."""
        self._paused = False
        if self._gain != 1.0:
            self._gain = 1.0
            self._rewind()  # the queued quiet audio is written again, at full volume
        self._wake.set()

    def cancel(self, reply_id: int) -> ReplyAudio | None:
        """Drop the reply's unplayed audio; returns it (with `heard`) for truncating history."""
        r = self.reply(reply_id)
        if r is None:
            return None
        self._rewind()
        self._reply = None
        self._filler = None
        self._paused = False
        self._gain = self._written_gain = 1.0
        return r

    def _rewind(self) -> None:
        dropped = self.sink.clear()
        r = self._reply
        if r is not None and r.started:
            r.written = max(0, r.written - dropped)
            r.heard = r.written

    # ---- writer ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            pcm, r = self._next_frame()
            if pcm is None:
                drained = self.sink.queued_samples() == 0
                if (
                    r is not None
                    and r.confirmed
                    and r.complete
                    and r.written >= r.length
                    and drained
                ):
                    r.heard = r.length
                    self._reply = None
                    if self._on_done is not None:
                        self._on_done(r.reply_id)
                    continue
                self._wake.clear()
                # Poll while audio drains from the sink, otherwise sleep until woken.
                timeout = 0.01 if r is not None and r.complete else None
                await finish_within(self._wake.wait(), timeout)
                continue
            if r is not None and not r.started:
                r.started = True
                delay = self.sink.queued_samples() / self.sink.sample_rate
                if self._on_started is not None:
                    self._on_started(r.reply_id, self._clock() + delay)
            await self.sink.write(pcm)
            if r is not None and self._reply is r:
                r.written += len(pcm)
                r.heard = max(r.heard, r.written - self.sink.queued_samples())
                if self._on_progress is not None:
                    self._on_progress(r.reply_id)

    def _next_frame(self) -> tuple[np.ndarray | None, ReplyAudio | None]:
        r = self._reply
        if self._paused:
            return None, r
        if self._filler is not None:
            pcm, rest = self._filler[: self.frame], self._filler[self.frame :]
            self._filler = rest if len(rest) else None
            return self._at_gain(pcm), None
        if r is None or not r.confirmed or r.written >= r.length:
            return None, r
        return self._at_gain(r.read(self.frame)), r

    def _at_gain(self, pcm: np.ndarray) -> np.ndarray:
        """`pcm` at the asked volume, ramped from the last frame's over RAMP_S (a step in
        volume is heard as a click)."""
        if self._gain == self._written_gain == 1.0:
            return pcm
        gain = np.full(len(pcm), self._gain, dtype=np.float32)
        n = min(len(pcm), round(RAMP_S * self.sink.sample_rate))
        gain[:n] = np.linspace(self._written_gain, self._gain, n, endpoint=False)
        self._written_gain = self._gain
        return (pcm.astype(np.float32) * gain).astype(np.int16)
