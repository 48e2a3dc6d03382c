"""The listening corpus of `voxroom bench --corpus listen`: does the agent hear what was said,
on voices and in rooms the latency corpus does not have?

Sixteen questions of bench/corpus.py, each spoken by one of eight voices (VOICES: the bundled
Piper voice; espeak-ng's American, female American, Scottish, Caribbean and female British
English; a fast RP and a fast female American speaker, a slow British one), and each said in
every condition (CONDITIONS), so that a condition's figure differs from the clean one by the
condition alone:

- clean: the voice as synthesized (bench/corpus.py's trimmed, cached speech);
- noise: pink noise at 10, 15 or 20 dB SNR (against the speech's active level), seeded by the
  item, from 0.25 s before the speech to 0.25 s after it;
- phone: a phone line: down to 8 kHz, the 300-3400 Hz telephone band, G.711 mu-law, and back
  up to 16 kHz;
- quiet_start: the first word right after silence: the audio begins with the speech itself
  (from its first sample above -56 dBFS, no silence of its own before it);
- recording: the cuts of the bundled real recording (beckett.wav, bench.corpus.recording_cuts)
  whose words are known (BECKETT), one cut in each half.

A fixed split by question (SPLITS): the first eight questions are the tuning half, the other
eight the held-out half, each voice once per half; no question is in both. Tune on "tune",
report on "held-out".

Speech is cached under .cache/bench as bench/corpus.py's is; the conditions are computed from
it (deterministic, cheap).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.engines import INPUT_RATE
from bench.corpus import (
    CACHE_DIR,
    QUESTIONS,
    RECORDING_ANSWER,
    Utterance,
    cached_speech,
    espeak_name,
    espeak_speech,
    first_of_kinds,
    recording_cuts,
    spoken,
    voiced_span,
)

CONDITIONS = ("clean", "noise", "phone", "quiet_start", "recording")
SPLITS = ("tune", "held-out")
# "espeak-NAME@WPM": espeak-ng voice NAME at WPM words a minute (espeak-ng's default is 160).
VOICES = (
    "piper-joe",
    "espeak-en-us",
    "espeak-en-us+f3",
    "espeak-en-gb-scotland",
    "espeak-en-029",
    "espeak-en-gb+f4@130",
    "espeak-en-gb-x-rp@220",
    "espeak-en-us+f2@210",
)
# Indices into bench.corpus.QUESTIONS: the tuning half, then the held-out half. The held-out
# half has the questions the issue found misheard ("the tallest mountain", the one about cats).
TUNE_QUESTIONS = (0, 3, 6, 10, 14, 18, 22, 26)
HELD_OUT_QUESTIONS = (13, 25, 28, 2, 12, 15, 19, 23)
SNRS_DB = (10.0, 15.0, 20.0)
NOISE_EDGE_S = 0.25  # noise before and after the speech
NOISE_FADE_S = 0.02
PHONE_RATE = 8000
PHONE_BAND_HZ = (300.0, 3400.0)
QUIET_START_FLOOR = 50  # int16 (-56 dBFS): the first sample above it is where speech starts
# beckett.wav's cuts (bench.corpus.recording_cuts splits it at its one long pause) and their
# words, Samuel Beckett's "Worstward Ho" as the recording reads it.
BECKETT = {
    "rec-beckett-0": ("tune", "Ever tried. Ever failed. No matter. Try again."),
    "rec-beckett-1": ("held-out", "Fail again. Fail better."),
}


@dataclass(frozen=True)
class ListenUtterance(Utterance):
    """A corpus utterance with its condition (`kind`), its half of the split, and where the
    speech is in it when a condition (noise) makes the loudness test of `Utterance` wrong."""

    split: str = "tune"
    span: tuple[int, int] | None = None  # (first voiced sample, just past the last)

    @property
    def speech_start(self) -> int:
        return self.span[0] if self.span else super().speech_start

    @property
    def speech_end(self) -> int:
        return self.span[1] if self.span else super().speech_end


def check_split(split: str | None) -> None:
    """ValueError for a split that is not one of SPLITS (None: both halves)."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")


def check_conditions(conditions: Sequence[str] | None) -> None:
    """ValueError naming the conditions that are not CONDITIONS."""
    unknown = set(conditions or ()) - set(CONDITIONS)
    if unknown:
        raise ValueError(f"unknown conditions {sorted(unknown)}; known: {', '.join(CONDITIONS)}")


def split_questions(split: str) -> tuple[int, ...]:
    check_split(split)
    return TUNE_QUESTIONS if split == "tune" else HELD_OUT_QUESTIONS


async def load_listen_corpus(
    cache_dir: Path = CACHE_DIR, *, split: str | None = None, recordings: bool = True
) -> list[ListenUtterance]:
    """The items of `split` (both halves for None), question by question, each question's
    conditions in CONDITIONS order; the recording cuts last."""
    check_split(split)
    items: list[ListenUtterance] = []
    for half in SPLITS if split is None else (split,):
        for j, q in enumerate(split_questions(half)):
            text, answer = QUESTIONS[q]
            voice = VOICES[j % len(VOICES)]
            clean = await listen_speech(text, voice, cache_dir)
            for condition in CONDITIONS[:-1]:
                pcm, span = condition_audio(condition, clean, seed=zlib.crc32(f"{q}".encode()))
                items.append(
                    ListenUtterance(
                        f"{condition}-q{q:02d}-{voice}",
                        voice,
                        text,
                        answer,
                        pcm,
                        kind=condition,
                        split=half,
                        span=span,
                    )
                )
    if recordings:
        for cut in recording_cuts():
            if cut.id in BECKETT and (split is None or BECKETT[cut.id][0] == split):
                half, text = BECKETT[cut.id]
                items.append(
                    ListenUtterance(
                        cut.id,
                        cut.voice,
                        text,
                        RECORDING_ANSWER,
                        cut.pcm,
                        kind="recording",
                        split=half,
                    )
                )
    return items


def select(
    items: Sequence[ListenUtterance],
    conditions: Sequence[str] | None = None,
    per_condition: int | None = None,
) -> list[ListenUtterance]:
    """The items of `conditions` (all for None), at most the first `per_condition` of each."""
    check_conditions(conditions)
    return first_of_kinds(items, conditions, per_condition)


async def listen_speech(text: str, voice: str, cache_dir: Path = CACHE_DIR) -> np.ndarray:
    """`text` said by `voice` (VOICES' form: bench.corpus.spoken's voices, "@WPM" for an
    espeak-ng speed), trimmed, 16 kHz int16; cached."""
    name, _, wpm = voice.partition("@")
    if not wpm:
        return await spoken(text, voice, cache_dir)
    espeak_voice = espeak_name(name)
    return await cached_speech(
        voice, text, lambda: espeak_speech(text, espeak_voice, words_per_min=int(wpm)), cache_dir
    )


def condition_audio(
    condition: str, clean: np.ndarray, *, seed: int
) -> tuple[np.ndarray, tuple[int, int] | None]:
    """`clean` speech in `condition`, and the speech's span in it where the loudness test
    cannot find it (None: it can)."""
    if condition == "clean":
        return clean, None
    if condition == "noise":
        snr = SNRS_DB[seed % len(SNRS_DB)]
        return with_noise(clean, snr, np.random.default_rng(seed))
    if condition == "phone":
        return phone_line(clean), None
    if condition == "quiet_start":
        return quiet_start(clean), None
    raise ValueError(f"no audio for condition {condition!r}")


def pink_noise(n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` samples of pink (1/f power) noise, unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / INPUT_RATE)
    spectrum[1:] /= np.sqrt(freqs[1:])
    spectrum[0] = 0.0
    noise = np.fft.irfft(spectrum, n)
    return noise / np.sqrt(np.mean(noise * noise))


def active_level(pcm: np.ndarray) -> float:
    """RMS of the speech's 20 ms frames within 30 dB of the loudest (its active level, so
    that the pauses inside it do not lower the SNR's reference)."""
    frame = INPUT_RATE // 50
    n = len(pcm) // frame
    x = pcm[: n * frame].astype(np.float64).reshape(n, frame)
    power = np.mean(x * x, axis=1)
    return float(np.sqrt(np.mean(power[power >= power.max() * 1e-3])))


def with_noise(
    clean: np.ndarray, snr_db: float, rng: np.random.Generator
) -> tuple[np.ndarray, tuple[int, int]]:
    """`clean` in pink noise `snr_db` below its active level, the noise from NOISE_EDGE_S
    before to NOISE_EDGE_S after it (faded in and out); and the speech's span."""
    edge = round(NOISE_EDGE_S * INPUT_RATE)
    speech = np.concatenate([np.zeros(edge), clean.astype(np.float64), np.zeros(edge)])
    noise = pink_noise(len(speech), rng) * active_level(clean) / 10 ** (snr_db / 20)
    fade = np.minimum(
        1.0,
        np.minimum(np.arange(len(speech)), np.arange(len(speech))[::-1])
        / (NOISE_FADE_S * INPUT_RATE),
    )
    mixed = np.clip(np.round(speech + noise * fade), -32768, 32767).astype(np.int16)
    start, end = voiced_span(clean)
    return mixed, (edge + start, edge + end)


def phone_line(clean: np.ndarray) -> np.ndarray:
    """`clean` as a phone call carries it: 8 kHz, 300-3400 Hz, mu-law, back to 16 kHz."""
    import soxr
    from scipy.signal import butter, sosfilt

    x = soxr.resample(clean.astype(np.float32) / 32768.0, INPUT_RATE, PHONE_RATE)
    sos = butter(4, PHONE_BAND_HZ, btype="bandpass", fs=PHONE_RATE, output="sos")
    x = mu_law(sosfilt(sos, x))
    y = soxr.resample(x.astype(np.float32), PHONE_RATE, INPUT_RATE)
    return np.clip(np.round(y * 32767), -32768, 32767).astype(np.int16)


def mu_law(x: np.ndarray, mu: int = 255) -> np.ndarray:
    """`x` (floats in [-1, 1]) through G.711 mu-law: companded, quantized to 8 bits, expanded."""
    x = np.clip(x, -1.0, 1.0)
    coded = np.sign(x) * np.log1p(mu * np.abs(x)) / np.log1p(mu)
    q = np.round((coded + 1) / 2 * mu) / mu * 2 - 1
    return np.sign(q) * ((1 + mu) ** np.abs(q) - 1) / mu


def quiet_start(clean: np.ndarray) -> np.ndarray:
    """`clean` from its first sample above QUIET_START_FLOOR: no silence before the first
    word."""
    loud = np.flatnonzero(np.abs(clean.astype(np.int32)) > QUIET_START_FLOOR)
    return clean[int(loud[0]) :] if loud.size else clean
