"""`voxroom bench phone-band`'s pieces: the lines and the front end, on espeak-ng speech."""

from __future__ import annotations

import numpy as np

from agent.engines import INPUT_RATE
from bench.corpus import trim, voiced_span
from bench.phone_band import front_end, lines
from bench.speech import espeak, with_silence


def _share(pcm: np.ndarray, lo: float, hi: float) -> float:
    """The share of `pcm`'s power between `lo` and `hi` Hz."""
    power = np.abs(np.fft.rfft(pcm.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(pcm), 1 / INPUT_RATE)
    return float(power[(freqs >= lo) & (freqs < hi)].sum() / power.sum())


def test_each_line_keeps_the_length_and_takes_away_more() -> None:
    pcm = trim(espeak("What is the capital of Australia?"))
    carried = [carry(pcm) for carry in lines().values()]
    assert all(abs(len(c) - len(pcm)) <= 2 and c.dtype == np.int16 for c in carried)
    highs = [_share(c, 4000, INPUT_RATE) for c in carried]
    lows = [_share(c, 0, 200) for c in carried]
    assert highs[0] > 0.001 and max(highs[1:]) < 1e-6  # nothing above 4 kHz on a line
    assert lows[1] > 0.01 and max(lows[2:]) < lows[1] / 10  # the band-pass takes the lows


def test_the_front_end_finds_the_onset_of_the_first_word() -> None:
    pcm = with_silence(trim(espeak("Tell me a joke about computers.")), 0.5, 0.5)
    voiced, onset = front_end(pcm)
    first = voiced_span(pcm)[0] / INPUT_RATE
    assert onset is not None and first - 0.02 <= onset < first + 0.3  # 20 ms frames
    assert len(voiced) == len(pcm) // (INPUT_RATE // 50) and any(voiced)
    assert not any(voiced[:20])  # the leading silence
