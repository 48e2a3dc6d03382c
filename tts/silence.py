"""Silence at the edges of synthesized speech: 5 ms frames whose RMS is below SILENCE_DBFS."""

from __future__ import annotations

import numpy as np

SILENCE_DBFS = -40.0  # frame RMS below this (of float audio in [-1, 1]) is silence


def trim_silence(audio: np.ndarray, rate: int, *, keep_ms: float) -> np.ndarray:
    """Cut leading and trailing silence down to `keep_ms` (5 ms frames, RMS threshold)."""
    frame, active = _voiced_frames(audio, rate)
    if active.size == 0:
        return audio[:0]
    keep = int(rate * keep_ms / 1000)
    start = max(0, active[0] * frame - keep)
    end = min(audio.size, (active[-1] + 1) * frame + keep)
    return audio[start:end]


def trim_leading_silence(pcm: np.ndarray, rate: int, *, keep_ms: float) -> np.ndarray:
    """int16 speech with its leading silence cut down to `keep_ms` (the trailing kept)."""
    frame, active = _voiced_frames(pcm.astype(np.float32) / 32768, rate)
    if active.size == 0:
        return pcm
    return pcm[max(0, active[0] * frame - int(rate * keep_ms / 1000)) :]


def _voiced_frames(audio: np.ndarray, rate: int) -> tuple[int, np.ndarray]:
    """The length of a 5 ms frame, and the indices of the frames louder than silence."""
    frame = rate * 5 // 1000
    n = audio.size // frame
    if n == 0:
        return frame, np.zeros(0, np.int64)
    rms = np.sqrt(np.mean(np.square(audio[: n * frame].reshape(n, frame), dtype=np.float64), 1))
    return frame, np.flatnonzero(rms > 10 ** (SILENCE_DBFS / 20))
