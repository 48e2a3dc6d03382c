"""Real speech for the benchmark corpora and the tests: sentences spoken by espeak-ng (Debian)
at 16 kHz mono int16."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

RATE = 16_000


def espeak(
    text: str, *, voice: str = "en-us", words_per_min: int = 160, ssml: bool = False
) -> np.ndarray:
    """`text` spoken by espeak-ng, resampled to 16 kHz mono int16; with `ssml`, `text` is SSML
    (espeak-ng -m), e.g. a `<break time="600ms"/>` inside a sentence."""
    import soundfile as sf
    import soxr

    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is not installed (make sysdeps installs it)")
    with tempfile.TemporaryDirectory() as d:
        wav = Path(d) / "speech.wav"
        markup = ["-m"] if ssml else []
        subprocess.run(
            ["espeak-ng", *markup, "-v", voice, "-s", str(words_per_min), "-w", str(wav), text],
            check=True,
            capture_output=True,
        )
        audio, rate = sf.read(str(wav), dtype="float32")
    if rate != RATE:
        audio = soxr.resample(audio, rate, RATE)
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


def last_voiced_sample(pcm: np.ndarray, *, threshold: int = 500) -> int:
    """Index just past the last sample louder than `threshold` (the end of speech)."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > threshold)
    return int(loud[-1]) + 1 if loud.size else 0


def with_silence(pcm: np.ndarray, before_s: float, after_s: float) -> np.ndarray:
    z = lambda s: np.zeros(int(s * RATE), np.int16)  # noqa: E731
    return np.concatenate([z(before_s), pcm, z(after_s)])
