"""The engines are chosen by provider name. The STT by `stt.provider`: Deepgram when configured
(against the fake Deepgram server), the bundled Whisper by default."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from agent.adapters.providers import load_speech_engines, load_stt
from agent.adapters.stt.deepgram import DeepgramSTT
from agent.config import STTSettings
from agent.testing.deepgram_double_recognisers import silence, speech, word_code_recogniser
from agent.testing.deepgram_server_double import DeepgramServerDouble


async def test_deepgram_provider_is_chosen_and_transcribes() -> None:
    heard = word_code_recogniser(["what time is it in paris"])
    async with DeepgramServerDouble(heard, keep_audio=True) as fake:
        settings = STTSettings(provider="deepgram", api_key="test-key", base_url=fake.url)
        stt = load_stt(settings)
        assert isinstance(stt, DeepgramSTT)
        pcm = np.concatenate([speech(0, 6), silence(100)])
        assert await stt.transcribe(pcm) == "what time is it in paris"
    assert bytes(fake.connection().audio) == pcm.tobytes()


@pytest.mark.slow
def test_whisper_stays_the_default() -> None:
    from agent.adapters.stt.whisper import WhisperSTT
    from tts.piper_tts import PiperTTS

    stt, tts = load_speech_engines(16_000)
    assert isinstance(stt, WhisperSTT)
    assert isinstance(tts, PiperTTS) and tts.sample_rate == 16_000
    assert isinstance(load_stt(STTSettings()), WhisperSTT)


@pytest.mark.slow
def test_whisper_loads_the_configured_model_dir(tmp_path: Path) -> None:
    from agent.adapters.stt.whisper import WhisperSTT
    from agent.models import whisper_model_dir

    copy = tmp_path / "whisper"
    shutil.copytree(whisper_model_dir(), copy)
    assert isinstance(load_stt(STTSettings(model_dir=str(copy))), WhisperSTT)
    (copy / "model.bin").write_bytes(b"not a model")  # never the bundled one in its place
    with pytest.raises(RuntimeError):
        load_stt(STTSettings(model_dir=str(copy)))


def test_every_configurable_provider_has_a_factory() -> None:
    """agent.config validates the names; agent.adapters.providers builds the engines they name."""
    from agent import config
    from agent.adapters import providers

    assert set(providers.STT_PROVIDERS) == set(config.STT_PROVIDERS)
    assert set(providers.TTS_PROVIDERS) == set(config.TTS_PROVIDERS)
    assert set(providers.LLM_PROVIDERS) == set(config.LLM_PROVIDERS)
