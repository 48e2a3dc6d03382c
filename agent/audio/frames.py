"""Whatever audio a client sends, the turn engine gets 20 ms frames of 16 kHz mono int16.

Clients (browsers, SIP gateways, the desktop bridge, a buggy SDK) can send frames at another
rate, with two or more channels, of odd lengths, as floats with NaN or samples past full
scale, or simply malformed (a length that is not a whole number of samples per channel).
`FrameGuard.push` repairs what can be repaired (resample, downmix, re-frame, NaN -> 0, clip)
and drops what cannot (a nonsense rate or channel count), so that nothing a client sends can
raise inside the session. Each kind of fix is counted (`fixes`, and the Prometheus counter
`voxroom_input_fixes_total{kind}`) and logged once when it first happens, then at most once
per `log_every_s` with the count since the last line: a misbehaving client must not flood the
log at 50 frames a second.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from agent.engines import FRAME_MS, FRAME_SAMPLES, INPUT_RATE

log = logging.getLogger("voxroom.input")

MIN_RATE, MAX_RATE = 8_000, 192_000
MAX_CHANNELS = 32

# The kinds of fix, as counted and logged.
RATE = "rate"  # resampled to 16 kHz
CHANNELS = "channels"  # downmixed to mono
LENGTH = "length"  # not a 20 ms frame: re-framed
DTYPE = "dtype"  # not int16 or float: converted
NAN = "nan"  # NaN or infinite float samples set to 0 / full scale
CLIPPED = "clipped"  # float samples past full scale clipped
MALFORMED = "malformed"  # not a whole number of samples per channel: the tail dropped
INVALID = "invalid"  # a rate or channel count that makes no sense: the frame dropped


@functools.cache
def _prometheus_counter() -> Any:
    from prometheus_client import Counter as PromCounter

    return PromCounter(
        "voxroom_input_fixes", "Input audio frames repaired or dropped, by kind of fix", ["kind"]
    )


def count_in_prometheus(kind: str) -> None:
    _prometheus_counter().labels(kind=kind).inc()


class FrameRechunker:
    """Cuts int16 audio into exact 20 ms frames whatever block size it arrives in."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, np.int16)

    def push(self, pcm: np.ndarray) -> list[np.ndarray]:
        self._buf = np.concatenate([self._buf, pcm])
        n = len(self._buf) // FRAME_SAMPLES
        frames = [self._buf[i * FRAME_SAMPLES : (i + 1) * FRAME_SAMPLES] for i in range(n)]
        self._buf = self._buf[n * FRAME_SAMPLES :]
        return frames


class FrameGuard:
    """Repairs and re-frames one participant's audio. Keeps state between calls (resampler
    history, a partial frame), so use one per audio stream."""

    def __init__(
        self,
        *,
        log_every_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        count: Callable[[str], None] = count_in_prometheus,
    ) -> None:
        self.fixes: Counter[str] = Counter()
        self._count = count
        self._log_every_s = log_every_s
        self._clock = clock
        self._logged_at: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()
        self._resampler: Any = None
        self._resampler_rate = INPUT_RATE
        self._rechunk = FrameRechunker()

    def push(
        self, data: np.ndarray | bytes | memoryview, sample_rate: int, num_channels: int
    ) -> list[np.ndarray]:
        """One frame as the client sent it (interleaved samples; bytes are int16) -> zero or
        more FRAME_SAMPLES-long int16 frames at INPUT_RATE, mono."""
        if not (MIN_RATE <= sample_rate <= MAX_RATE and 1 <= num_channels <= MAX_CHANNELS):
            self._fix(INVALID, f"{sample_rate} Hz, {num_channels} channels: frame dropped")
            return []
        if not isinstance(data, np.ndarray):
            data = np.frombuffer(data, dtype=np.int16)
        data = data.reshape(-1)
        if data.dtype == np.int16 and sample_rate == INPUT_RATE and num_channels == 1:
            if len(data) != FRAME_SAMPLES:
                self._fix(LENGTH, f"{len(data)} samples is not a {FRAME_MS} ms frame")
            return self._frames(data)  # the usual case: at most re-framed, samples untouched
        x = self._to_float(data)
        if len(x) % num_channels:
            self._fix(MALFORMED, f"{len(x)} samples for {num_channels} channels")
            x = x[: len(x) - len(x) % num_channels]
        if num_channels > 1:
            self._fix(CHANNELS, f"{num_channels} channels downmixed to mono")
            x = x.reshape(-1, num_channels).mean(axis=1)
        if len(x) != sample_rate * FRAME_MS // 1000:
            self._fix(LENGTH, f"{len(x)} samples at {sample_rate} Hz is not a {FRAME_MS} ms frame")
        if sample_rate != INPUT_RATE:
            self._fix(RATE, f"{sample_rate} Hz resampled to {INPUT_RATE} Hz")
            x = self._resample(x, sample_rate)
        elif self._resampler is not None:
            self._resampler = None  # back to the native rate: the old history is stale
        return self._frames(np.round(x * 32767.0).astype(np.int16))

    def _frames(self, pcm: np.ndarray) -> list[np.ndarray]:
        return self._rechunk.push(pcm)

    def _to_float(self, a: np.ndarray) -> np.ndarray:
        """Samples as float32 in [-1, 1]."""
        if a.dtype == np.int16:
            return a.astype(np.float32) / 32768.0
        if np.issubdtype(a.dtype, np.floating):
            x = a.astype(np.float32)
            finite = np.isfinite(x)
            if not finite.all():
                self._fix(NAN, f"{int((~finite).sum())} NaN or infinite samples")
                x = np.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0)
            if np.abs(x).max(initial=0.0) > 1.0:
                self._fix(CLIPPED, "float samples past full scale clipped")
                x = np.clip(x, -1.0, 1.0)
            return x
        if np.issubdtype(a.dtype, np.integer):
            self._fix(DTYPE, f"{a.dtype} samples converted")
            info = np.iinfo(a.dtype)
            half = (int(info.max) - int(info.min) + 1) / 2  # unsigned PCM is centred on half
            return ((a.astype(np.float64) - (int(info.min) + half)) / half).astype(np.float32)
        self._fix(DTYPE, f"{a.dtype} samples cannot be audio: treated as silence")
        return np.zeros(len(a), np.float32)

    def _resample(self, x: np.ndarray, rate: int) -> np.ndarray:
        import soxr

        if self._resampler is None or self._resampler_rate != rate:
            self._resampler = soxr.ResampleStream(rate, INPUT_RATE, 1, dtype="float32")
            self._resampler_rate = rate
        return self._resampler.resample_chunk(np.ascontiguousarray(x, np.float32))

    def _fix(self, kind: str, detail: str) -> None:
        self.fixes[kind] += 1
        self._count(kind)
        self._unlogged[kind] += 1
        now = self._clock()
        last = self._logged_at.get(kind)
        if last is None or now - last >= self._log_every_s:
            n, self._unlogged[kind] = self._unlogged[kind], 0
            self._logged_at[kind] = now
            log.warning(
                "input audio fixed (%s, %d frame(s) since last report): %s", kind, n, detail
            )
