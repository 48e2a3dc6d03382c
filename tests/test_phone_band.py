"""A phone caller's narrowband speech heard by the bundled Whisper's phone-line tuning
(agent/stt/phone_band.py): espeak-ng speech through the bench's phone line (8 kHz, 300-3400 Hz,
G.711 mu-law, back to 16 kHz), decoded by the real model."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agent.engines import INPUT_RATE
from agent.stt.phone_band import for_phone_line
from agent.stt.whisper import PHONE_NO_SPEECH_PROB, WhisperOptions, WhisperSTT
from bench.corpus import trim
from bench.listen_corpus import phone_line, pink_noise
from bench.speech import espeak
from bench.stt_bench import normalize

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
    assert whisper_stt.options == WhisperOptions()  # the wideband users' tuning is unchanged
    assert phone._loaded()._whisper is whisper_stt._loaded()._whisper


def test_a_phone_tuning_never_lowers_a_stricter_setting(whisper_stt: WhisperSTT) -> None:
    stricter = WhisperSTT(options=WhisperOptions(no_speech_prob=0.95))
    stricter._decoder = whisper_stt._loaded().with_options(stricter.options)
    assert stricter.phone_band().options.no_speech_prob == 0.95


@pytest.mark.slow
async def test_phone_band_speech_the_wideband_tuning_drops_is_heard(
    whisper_stt: WhisperSTT,
) -> None:
    # Fast RP over the line scores a no-speech probability of ~0.7 (clean speech: under 0.5):
    # the wideband rule takes the question for no speech, the phone tuning writes it down.
    said = "Who painted the Mona Lisa?"
    pcm = np.concatenate([PRE_ROLL, phone_line(trim(espeak(said, voice="en-gb-x-rp",
                                                           words_per_min=220)))])
    assert await whisper_stt.transcribe(pcm) == ""
    heard = normalize(await for_phone_line(whisper_stt).transcribe(pcm)).split()
    assert {"who", "painted", "lisa"} <= set(heard), heard


@pytest.mark.slow
@pytest.mark.parametrize("amplitude", [300, 1000])
async def test_noise_on_the_line_is_still_no_words(whisper_stt: WhisperSTT,
                                                   amplitude: int) -> None:
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
