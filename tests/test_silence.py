"""Silence at the edges of synthesized speech (tts/silence.py)."""

from __future__ import annotations

import numpy as np

from tts.silence import trim_leading_silence


def test_the_leading_silence_is_cut_to_what_is_kept_and_the_rest_stays() -> None:
    rate = 48_000
    tone = (0.3 * 32767 * np.sin(np.arange(rate // 10) * 0.05)).astype(np.int16)
    quiet = np.full(rate * 30 // 1000, 20, np.int16)  # 30 ms below -40 dBFS
    pcm = np.concatenate([quiet, tone, quiet])
    out = trim_leading_silence(pcm, rate, keep_ms=5)
    assert len(out) == len(pcm) - rate * 25 // 1000  # 5 ms of the 30 left before the tone
    assert np.array_equal(out[-len(tone) - len(quiet) :], np.concatenate([tone, quiet]))


def test_all_silence_or_nothing_is_left_as_it_is() -> None:
    quiet = np.zeros(4800, np.int16)
    assert trim_leading_silence(quiet, 48_000, keep_ms=5) is quiet
    empty = np.zeros(0, np.int16)
    assert trim_leading_silence(empty, 48_000, keep_ms=5).size == 0
