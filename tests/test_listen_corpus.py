"""The listening corpus (bench/listen_corpus.py): its split, voices and conditions, each
condition checked on audio whose content is known; (slow) the synthesized corpus's shape."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from bench.corpus import QUESTIONS, voiced_span
from bench.listen_corpus import (
    CONDITIONS,
    HELD_OUT_QUESTIONS,
    NOISE_EDGE_S,
    PHONE_BAND_HZ,
    QUIET_START_FLOOR,
    SPLITS,
    TUNE_QUESTIONS,
    VOICES,
    ListenUtterance,
    active_level,
    check_conditions,
    check_split,
    load_listen_corpus,
    mu_law,
    phone_line,
    quiet_start,
    select,
    with_noise,
)
from tests.test_bench import RATE, quiet, tone


def speechlike(seconds: float = 1.0) -> np.ndarray:
    """Tones at 200, 1000 and 5000 Hz with a 4 Hz syllable envelope, 30 ms quiet at each
    end (as the corpus's trimmed speech)."""
    t = np.arange(int(seconds * RATE)) / RATE
    x = sum(np.sin(2 * np.pi * f * t) for f in (200, 1000, 5000)) / 3
    x *= 0.5 + 0.5 * np.abs(np.sin(2 * np.pi * 2 * t))
    return np.concatenate([quiet(0.03), (x * 8000).astype(np.int16), quiet(0.03)])


def band_db(pcm: np.ndarray, lo: float, hi: float) -> float:
    spectrum = np.abs(np.fft.rfft(pcm.astype(np.float64))) ** 2
    freqs = np.fft.rfftfreq(len(pcm), 1 / RATE)
    return 10 * np.log10(spectrum[(freqs >= lo) & (freqs < hi)].sum() + 1e-9)


def test_the_halves_share_no_question_and_every_voice_speaks_in_both() -> None:
    assert not set(TUNE_QUESTIONS) & set(HELD_OUT_QUESTIONS)
    assert len(TUNE_QUESTIONS) == len(HELD_OUT_QUESTIONS) == len(VOICES)
    assert all(0 <= q < len(QUESTIONS) for q in (*TUNE_QUESTIONS, *HELD_OUT_QUESTIONS))
    assert len(set(VOICES)) >= 6
    assert any("+f" in v for v in VOICES) and any("+f" not in v for v in VOICES)  # both sexes
    accents = {"en-us", "en-gb-scotland", "en-029", "en-gb-x-rp"}
    assert accents <= {v.removeprefix("espeak-").split("+")[0].split("@")[0] for v in VOICES}
    assert len({v.partition("@")[2] for v in VOICES}) >= 3  # default, slow and fast speech


def test_noise_is_at_the_asked_snr_and_the_span_finds_the_speech() -> None:
    clean = speechlike()
    for snr in (10.0, 20.0):
        mixed, (start, end) = with_noise(clean, snr, np.random.default_rng(1))
        edge = round(NOISE_EDGE_S * RATE)
        assert len(mixed) == len(clean) + 2 * edge
        assert (start, end) == (edge + voiced_span(clean)[0], edge + voiced_span(clean)[1])
        padded = np.concatenate([quiet(NOISE_EDGE_S), clean, quiet(NOISE_EDGE_S)])
        noise = mixed.astype(np.float64) - padded
        measured = 20 * np.log10(active_level(clean) / np.sqrt(np.mean(noise[edge:-edge] ** 2)))
        assert measured == pytest.approx(snr, abs=0.5)
        assert voiced_span(mixed)[0] < start  # why the span is needed: the noise is loud
    same, _ = with_noise(clean, 15.0, np.random.default_rng(7))
    again, _ = with_noise(clean, 15.0, np.random.default_rng(7))
    assert np.array_equal(same, again)


def test_the_phone_line_keeps_only_the_telephone_band() -> None:
    clean = speechlike()
    phone = phone_line(clean)
    assert phone.dtype == np.int16 and abs(len(phone) - len(clean)) <= 2
    lo, hi = PHONE_BAND_HZ
    # 1000 Hz passes; 5000 Hz (above the band and 8 kHz's Nyquist) and 200 Hz are cut
    assert band_db(phone, 900, 1100) == pytest.approx(band_db(clean, 900, 1100), abs=3)
    assert band_db(phone, 4900, 5100) < band_db(clean, 4900, 5100) - 40
    assert band_db(phone, 150, 250) < band_db(clean, 150, 250) - 10
    assert hi < 4000 and lo > 0


def test_mu_law_has_256_levels_and_small_relative_error() -> None:
    x = np.linspace(-1, 1, 10_001)
    y = mu_law(x)
    assert len(np.unique(np.round(y, 9))) <= 256
    loud = np.abs(x) > 0.01
    assert np.max(np.abs(y[loud] - x[loud]) / np.abs(x[loud])) < 0.05


def test_a_quiet_start_begins_with_the_speech() -> None:
    clean = speechlike()
    cut = quiet_start(clean)
    assert abs(int(cut[0])) > QUIET_START_FLOOR and len(cut) < len(clean)
    assert np.array_equal(cut, clean[len(clean) - len(cut) :])


def test_a_span_overrides_where_the_speech_is() -> None:
    pcm = np.concatenate([tone(0.5), quiet(0.2)])
    u = ListenUtterance("x", "v", "Q?", "A.", pcm, kind="noise", split="tune", span=(100, 200))
    assert (u.speech_start, u.speech_end) == (100, 200)
    plain = ListenUtterance("y", "v", "Q?", "A.", pcm, kind="clean")
    assert plain.speech_end == voiced_span(pcm)[1]


def test_unknown_splits_and_conditions_are_named() -> None:
    check_split(None)
    with pytest.raises(ValueError, match="tune, held-out"):
        check_split("test")
    with pytest.raises(ValueError, match="'echo'"):
        check_conditions(["noise", "echo"])
    items = [
        ListenUtterance(f"{k}-{i}", "v", "Q?", "A.", tone(0.1), kind=k)
        for i in range(3)
        for k in ("clean", "noise")
    ]
    assert [i.id for i in select(items, ["noise"], 2)] == ["noise-0", "noise-1"]


@pytest.mark.slow
def test_the_corpus_has_every_question_in_every_condition(tmp_path: Path) -> None:
    items = asyncio.run(load_listen_corpus(tmp_path))
    synthetic = [i for i in items if i.kind != "recording"]
    assert len(synthetic) == len(VOICES) * 2 * (len(CONDITIONS) - 1)
    for split, questions in zip(SPLITS, (TUNE_QUESTIONS, HELD_OUT_QUESTIONS), strict=True):
        half = [i for i in synthetic if i.split == split]
        assert {i.text for i in half} == {QUESTIONS[q][0] for q in questions}
        assert {i.voice for i in half} == set(VOICES)
        for text in {i.text for i in half}:
            assert sorted(i.kind for i in half if i.text == text) == sorted(CONDITIONS[:-1])
    for item in synthetic:
        assert item.pcm.dtype == np.int16 and 0.8 < item.duration_s < 6, item.id
        assert 0 <= item.speech_start < item.speech_end <= len(item.pcm), item.id
    recordings = [i for i in items if i.kind == "recording"]
    assert {i.split for i in recordings} <= set(SPLITS)
    assert all(i.text for i in recordings)
    assert [i.id for i in asyncio.run(load_listen_corpus(tmp_path, split="held-out"))] == [
        i.id for i in items if i.split == "held-out"
    ]
