"""Audio levels for the terminal meter: RMS in dBFS, a decaying peak hold, a text bar."""

from __future__ import annotations

import math

import numpy as np

FLOOR_DBFS = -90.0
FULL_SCALE = 32768.0


def level_dbfs(pcm: np.ndarray) -> float:
    """RMS level of int16 samples relative to full scale (a full-scale sine is -3.01 dBFS)."""
    if pcm.size == 0:
        return FLOOR_DBFS
    rms = math.sqrt(float(np.mean(np.square(pcm.astype(np.float64)))))
    if rms <= 0.0:
        return FLOOR_DBFS
    return max(FLOOR_DBFS, 20.0 * math.log10(rms / FULL_SCALE))


class LevelMeter:
    """Follows rises at once and falls at `decay_db_per_s`, like a VU meter's needle, so a
    refresh a few times a second still shows the loudest recent frame."""

    def __init__(self, decay_db_per_s: float = 30.0) -> None:
        self._decay = decay_db_per_s
        self._db = FLOOR_DBFS
        self._t_ms: float | None = None

    def update(self, pcm: np.ndarray, t_ms: float) -> float:
        db = level_dbfs(pcm)
        held = self.value(t_ms)
        self._db, self._t_ms = max(db, held), t_ms
        return self._db

    def value(self, t_ms: float) -> float:
        if self._t_ms is None:
            return FLOOR_DBFS
        fallen = self._db - self._decay * max(0.0, t_ms - self._t_ms) / 1000.0
        return max(FLOOR_DBFS, fallen)


def meter_bar(db: float, width: int = 20, low_db: float = -60.0) -> str:
    """`[#####.....]`: `low_db` and below is empty, 0 dBFS is full."""
    fraction = min(1.0, max(0.0, (db - low_db) / -low_db))
    filled = round(fraction * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"
