"""A phone caller's narrowband speech heard by the bundled Whisper's phone-line tuning
(agent/adapters/stt/phone_band.py): espeak-ng speech through the bench's phone line (8 kHz,
300-3400 Hz, G.711 mu-law, back to 16 kHz), decoded by the real model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agent.adapters.stt.phone_band import for_phone_line
from agent.adapters.stt.whisper import WhisperSTT
from agent.adapters.stt.whisper_options import (
    PHONE_ENDPOINT_MARGIN_S,
    PHONE_NO_SPEECH_PROB,
    WhisperOptions,
)
from agent.engines import INPUT_RATE
from bench.corpus import trim
from bench.listen_corpus import phone_line, pink_noise
from bench.speech import espeak
from bench.wer import normalize

PRE_ROLL = np.zeros(round(0.3 * INPUT_RATE), np.int16)  # the listener's pre-roll before a word


class _NoTuning:
    """A test double of an STT without a phone-line tuning (a cloud STT's own model decides)."""

    def stream(self) -> Any:
        raise NotImplementedError

    async def transcribe(self, pcm: np.ndarray) -> str:
        return ""


def test_an_stt_without_a_phone_tuning_is_used_as_it_is() -> None:
    stt = _NoTuning()
    assert for_phone_line(stt) is stt


def test_the_phone_tuning_shares_the_loaded_model(whisper_stt: WhisperSTT) -> None:
    phone = for_phone_line(whisper_stt)
    assert isinstance(phone, WhisperSTT) and phone is not whisper_stt
    assert phone.options.no_speech_prob == PHONE_NO_SPEECH_PROB
    # A soft ending the line cut to noise is waited for; no prefix is forced from the early,
    # often misread, partials (docs/benchmarks.md, "Phone callers").
    assert phone.options.endpoint_margin_s == PHONE_ENDPOINT_MARGIN_S
    assert not phone.options.commit_agreed_prefix
    assert whisper_stt.options == WhisperOptions()  # the wideband users' tuning is unchanged
    assert phone._loaded()._whisper is whisper_stt._loaded()._whisper


def test_a_phone_tuning_never_lowers_a_stricter_setting(whisper_stt: WhisperSTT) -> None:
    stricter = WhisperSTT(options=WhisperOptions(no_speech_prob=0.95))
    stricter._decoder = whisper_stt._loaded().with_options(stricter.options)
    assert stricter.phone_band().options.no_speech_prob == 0.95
    patient = WhisperSTT(options=WhisperOptions(endpoint_margin_s=0.3))
    patient._decoder = whisper_stt._loaded().with_options(patient.options)
    assert patient.phone_band().options.endpoint_margin_s == 0.3


@pytest.mark.slow
async def test_phone_band_speech_the_wideband_tuning_drops_is_heard(
    whisper_stt: WhisperSTT,
) -> None:
    # Fast RP over the line scores a no-speech probability of ~0.7 (clean speech: under 0.5):
    # the wideband rule takes the question for no speech, the phone tuning writes it down.
    # At this speed tiny.en mishears "the Mona Lisa" whatever the CPU's kernels ("my Belisa",
    # "my mother Lisa", "them as a leader"); slower, the wideband rule keeps it too. What the
    # gate decides is whether the question's words are written at all: its opening is.
    said = "Who painted the Mona Lisa?"
    pcm = np.concatenate(
        [PRE_ROLL, phone_line(trim(espeak(said, voice="en-gb-x-rp", words_per_min=220)))]
    )
    assert await whisper_stt.transcribe(pcm) == ""
    heard = normalize(await for_phone_line(whisper_stt).transcribe(pcm)).split()
    assert heard[:2] == ["who", "painted"], heard


@pytest.mark.slow
@pytest.mark.parametrize("amplitude", [300, 1000])
async def test_noise_on_the_line_is_still_no_words(whisper_stt: WhisperSTT, amplitude: int) -> None:
    noise = pink_noise(INPUT_RATE, np.random.default_rng(amplitude)) * amplitude
    pcm = phone_line(np.clip(noise, -32768, 32767).astype(np.int16))
    assert await for_phone_line(whisper_stt).transcribe(pcm) == ""


def test_the_simulated_caller_says_every_utterance_over_the_line() -> None:
    from bench.corpus import BargeIn, Utterance
    from bench.sip_caller import over_phone_line

    pcm = trim(espeak("Hello there."))
    said = Utterance("q", "espeak-en-us", "Hello there.", "Hi.", pcm)
    item = BargeIn("b", said, said, 1.0)
    line = phone_line(pcm)
    assert np.array_equal(over_phone_line(said).pcm, line)
    over = over_phone_line(item)
    assert np.array_equal(over.question.pcm, line) and np.array_equal(over.interruption.pcm, line)
    assert over.after_s == 1.0 and over.question.text == "Hello there."


def test_the_phone_vad_hears_a_quiet_caller_the_wideband_gate_misses() -> None:
    from agent.adapters.stt.phone_band import phone_line_vad
    from agent.audio.vad import VoiceActivityDetector
    from bench.corpus import voiced_span
    from bench.phone_band import front_end
    from state_machine.options import TurnOptions

    # A caller 20 dB under the corpus's level (~ -40 dBFS active speech) over the line.
    said = trim(espeak("Could you remind me to call my mother tomorrow?", voice="en-029"))
    quiet = phone_line(np.round(said * 0.1).astype(np.int16))
    audio = np.concatenate(
        [np.zeros(INPUT_RATE // 2, np.int16), quiet, np.zeros(INPUT_RATE // 2, np.int16)]
    )
    first_word = 0.5 + voiced_span(said)[0] / INPUT_RATE
    pre_roll = TurnOptions().pre_roll_s
    wide, wide_onset = front_end(audio, VoiceActivityDetector())
    phone, phone_onset = front_end(audio, phone_line_vad())
    # The wideband gate opens the utterance too late for the pre-roll to hold the first word.
    assert wide_onset is None or wide_onset - pre_roll > first_word
    assert phone_onset is not None and phone_onset - pre_roll < first_word
    assert sum(phone) > sum(wide)
    silence = np.zeros(INPUT_RATE, np.int16)
    noise = pink_noise(5 * INPUT_RATE, np.random.default_rng(0)) * 100  # -50 dBFS on the line
    assert (
        front_end(np.concatenate([silence, phone_line(noise.astype(np.int16))]), phone_line_vad())[
            1
        ]
        is None
    )


def test_a_vad_gate_must_be_positive() -> None:
    from agent.audio.vad import VoiceActivityDetector

    with pytest.raises(ValueError, match="min_speech_rms"):
        VoiceActivityDetector(min_speech_rms=0)
